# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Helpers for the end-to-end launches of the example job on the Proxmox VE stand-in.

Used by tests/compat/test_launch.py (the checkout's playbooks with the oldest
supported ansible-core) and tests/integration/test_release.py (the built
tarball, installed like a user would).  Each test brings up a container of its
own, recognised by its hostname: a VMID that another container holds is never
touched.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import subprocess
import time
import typing as t

import pytest

from tests.integration.conftest import require_standin

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A log line of the example job (examples/train/train.py).
STEP_LINE = re.compile(r"step \d+ loss")


def pct_program() -> str:
    """The pct the connection plugin would use (ANSIBLE_PCT_PATH, else pct on PATH)."""
    program = os.environ.get("ANSIBLE_PCT_PATH") or shutil.which("pct")
    if not program:
        pytest.fail("no pct on PATH: run tools/pve_standin/setup.sh")
    return program


def pct(*args: str | int, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run pct; stdin is /dev/null, never a terminal."""
    return subprocess.run([pct_program(), *map(str, args)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, check=False)


@contextlib.contextmanager
def owned_container(vmid: int, hostname: str, release: str = "bookworm") -> t.Iterator[int]:
    """A fresh running container VMID named HOSTNAME, destroyed afterwards.

    A container left at VMID by an earlier run of the same test (same hostname)
    is replaced; one with another hostname belongs to someone else: the test fails
    without touching it.
    """
    require_standin()
    config = pct("config", vmid)
    if config.returncode == 0:
        if f"hostname: {hostname}" not in config.stdout.splitlines():
            pytest.fail(f"VMID {vmid} is taken by another container (not {hostname}): left alone; choose another VMID")
        pct("destroy", vmid, "--force", "1", timeout=300)
    created = pct("create", vmid, "--release", release, "--hostname", hostname, "--start", "1", timeout=600)
    assert created.returncode == 0, f"pct create {vmid} failed: {created.stderr}"
    try:
        # On a loaded machine a container now and then stops while it boots
        # ("did not finish booting"): start it again, twice at most.
        deadline = time.monotonic() + 120
        restarts = 0
        while (probe := pct("exec", vmid, "--", "/bin/true")).returncode != 0:
            assert time.monotonic() < deadline, f"CT {vmid} does not run commands 120 s after its start: {probe.stderr}"
            if restarts < 2 and pct("status", vmid).stdout.strip() == "status: stopped":
                restarts += 1
                print(f"CT {vmid} stopped while it booted: pct start {vmid} (restart {restarts})")
                pct("start", vmid, timeout=300)
            time.sleep(0.5)
        yield vmid
    finally:
        config = pct("config", vmid)
        if config.returncode == 0 and f"hostname: {hostname}" in config.stdout.splitlines():
            pct("destroy", vmid, "--force", "1", timeout=300)


def write_inventory(path: pathlib.Path, vmid: int, host: str) -> pathlib.Path:
    """An inventory with one container in the group `training` of the example job."""
    path.write_text(
        "---\n"
        "training:\n"
        "  hosts:\n"
        f"    {host}:\n"
        f"      pct_vmid: {vmid}\n"
        "  vars:\n"
        "    ansible_connection: trainops.pct_launch.pct\n"
        "    ansible_python_interpreter: /usr/bin/python3\n",
        encoding="utf-8",
    )
    return path


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment for ansible-playbook: no colours, no terminal, nothing from ~/.ansible.cfg."""
    env = dict(os.environ)
    for key in ("ANSIBLE_CONFIG", "ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_CALLBACKS_ENABLED"):
        env.pop(key, None)
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="false", PY_COLORS="0")
    env.update(extra)
    return env


def run(argv: list[str], env: dict[str, str], cwd: pathlib.Path, timeout: float = 900,
        expect_rc: int | None = 0) -> subprocess.CompletedProcess[str]:
    """Run a command, show its output in the test log, and check its exit status."""
    started = time.monotonic()
    result = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=timeout, check=False)
    print(f"$ {' '.join(argv)}  # exit {result.returncode} after {time.monotonic() - started:.0f} s")
    print(result.stdout)
    print(result.stderr)
    if expect_rc is not None:
        assert result.returncode == expect_rc, (
            f"{' '.join(argv)} exited {result.returncode} (expected {expect_rc})\n"
            f"stdout:\n{result.stdout[-6000:]}\nstderr:\n{result.stderr[-3000:]}"
        )
    return result


def ansible_core_version(bin_dir: pathlib.Path | None = None) -> str:
    """The version of the ansible-core that runs `ansible-playbook` (from bin_dir, else PATH)."""
    program = str(bin_dir / "ansible-playbook") if bin_dir else "ansible-playbook"
    out = subprocess.run([program, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    found = re.search(r"\[core ([0-9][^\]]*)\]", out)
    assert found, out
    return found.group(1)
