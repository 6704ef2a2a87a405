# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the module half of trainops.pct_launch.wait_for_log (one chunk), with pct replaced.

``run_in_container`` is replaced by a function that runs the program here with ``sh -c``, standing in
for the container, and records each call (the module must make exactly one per chunk).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import typing as t
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.trainops.pct_launch.plugins.module_utils._pct import ContainerNotRunning
from ansible_collections.trainops.pct_launch.plugins.modules import wait_for_log

HEADER = b"### trainops.pct_launch: session=train started_at=2025-01-01T00:00:00Z host=ct command=python train.py\n"


def private_tmux(program: str) -> str:
    """The program with tmux talking to the test's private server (TMUX_TMPDIR) instead of root's default one."""
    patched = (program.replace('tm() { env -i PATH="$PATH" HOME=/root tmux -u "$@"; }', 'tm() { tmux -u "$@"; }')
               .replace('TMUX_ENV = {"PATH": PATH, "HOME": "/root"}', 'TMUX_ENV = None'))
    assert 'env -i PATH="$PATH" HOME=/root tmux' not in patched and '"HOME": "/root"}' not in patched
    return patched


class LocalContainer:
    """Runs programs here instead of in a container; counts the calls."""

    def __init__(self, error: Exception | None = None, hide_python: bool = False) -> None:
        self.calls: list[dict[str, t.Any]] = []
        self.error = error
        self.hide_python = hide_python

    def __call__(self, module: t.Any, vmid: int, program: str, stdin_data: bytes = b"", pct_path: str = "pct",
                 timeout: float | None = None) -> tuple[int, str, str]:
        self.calls.append({"vmid": vmid, "pct_path": pct_path, "timeout": timeout})
        if self.error is not None:
            raise self.error
        if self.hide_python:
            program = program.replace("command -v python3", "command -v no-such-python3")
        proc = subprocess.run(["/bin/sh", "-c", private_tmux(program)], capture_output=True, encoding="utf-8", errors="surrogateescape",
                              stdin=subprocess.DEVNULL, timeout=60, check=False)
        return proc.returncode, proc.stdout, proc.stderr


def run_module(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], container: LocalContainer,
               **args: t.Any) -> dict[str, t.Any]:
    """Run the module's main() with these arguments; return its JSON result."""
    monkeypatch.setattr(wait_for_log, "run_in_container", container)
    with patch_module_args(args), pytest.raises(SystemExit):
        wait_for_log.main()
    return json.loads(capsys.readouterr().out)


def test_started_in_one_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1/3\n")
    container = LocalContainer()
    result = run_module(monkeypatch, capsys, container, vmid=250, log_path=str(log), pattern=r"Epoch \d", timeout=5)
    assert not result.get("failed") and result["changed"] is False and result["verdict"] == "started"
    assert result["matched_line"] == "Epoch 1/3" and result["log_tail"][-1] == "Epoch 1/3" and result["engine"] == "python3"
    assert len(container.calls) == 1 and container.calls[0]["vmid"] == 250 and container.calls[0]["timeout"] > 5


def test_timeout_chunk_fails_with_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"warming up\n")
    result = run_module(monkeypatch, capsys, LocalContainer(), vmid=250, log_path=str(log), pattern="Epoch", timeout=0.5)
    assert result["failed"] and result["verdict"] == "timeout" and result["offset"] == log.stat().st_size
    assert "exists (%d bytes) and has no such line" % log.stat().st_size in result["msg"]


def test_sh_fallback_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 12\n")
    warned: list[str] = []
    # AnsibleModule.warn reports to the controller's display when controller code was imported in this process
    monkeypatch.setattr(wait_for_log.AnsibleModule, "warn", lambda self, text: warned.append(text))
    result = run_module(monkeypatch, capsys, LocalContainer(hide_python=True), vmid=250, log_path=str(log), pattern=r"Epoch \d+$")
    assert result["verdict"] == "started" and result["engine"] == "sh"
    assert len(warned) == 1 and warned[0].startswith("Container 250 has no python3: patterns were matched with grep -E")


def test_bad_regex_makes_no_call(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    container = LocalContainer()
    result = run_module(monkeypatch, capsys, container, vmid=250, session_name="t", fail_pattern="(unclosed")
    assert result["failed"] and result["msg"].startswith("Cannot use option fail_pattern '(unclosed'") and not container.calls


def test_pct_error_message(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    error = ContainerNotRunning(250, "the container is not running (container '250' not running!); start it with 'pct start 250'", 2)
    result = run_module(monkeypatch, capsys, LocalContainer(error=error), vmid=250, session_name="train")
    assert result["failed"]
    assert result["msg"] == ("Cannot wait for train in container 250: the container is not running "
                             "(container '250' not running!); start it with 'pct start 250'")


def test_needs_session_or_log(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_module(monkeypatch, capsys, LocalContainer(), vmid=250)
    assert result["failed"] and "one of the following is required: session_name, log_path" in result["msg"]


class KilledContainer(LocalContainer):
    """The poll program is killed with its container (lxc-attach exits 137, nothing on stderr)."""

    def __call__(self, module: t.Any, vmid: int, program: str, stdin_data: bytes = b"", pct_path: str = "pct",
                 timeout: float | None = None) -> tuple[int, str, str]:
        self.calls.append({"vmid": vmid})
        return 137, "trainops:engine=python3\n", ""


@pytest.mark.parametrize("status", ["stopped", "running", None])
def test_container_stopped_during_the_wait(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], status: str | None) -> None:
    asked: list[tuple[int, str]] = []
    monkeypatch.setattr(wait_for_log, "container_status", lambda module, vmid, pct_path: asked.append((vmid, pct_path)) or status)
    monkeypatch.setattr(wait_for_log.time, "sleep", lambda seconds: None)
    result = run_module(monkeypatch, capsys, KilledContainer(), vmid=250, session_name="train", pattern="Epoch")
    assert result["failed"] and result.get("verdict") is None
    assert asked == [(250, "pct")] * (1 if status == "stopped" else wait_for_log.STATUS_TRIES)
    if status == "stopped":
        assert result["msg"] == ("Cannot wait for session train in container 250: the container is not running any more (it stopped "
                                 "during the wait, and the job with it); start it with 'pct start 250' and launch the job again")
    else:
        assert result["msg"].startswith("Cannot wait for session train in container 250: the poll program in the container failed (exit status 137)")


@pytest.mark.parametrize("hide_python", [False, True])
def test_tmux_missing_never_proves_a_start_with_an_old_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], hide_python: bool) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1/3\n")

    class NoTmux(LocalContainer):
        def __call__(self, module: t.Any, vmid: int, program: str, *args: t.Any, **kwargs: t.Any) -> tuple[int, str, str]:
            program = program.replace('("tmux", "-u")', '("no-such-tmux", "-u")').replace("command -v tmux", "command -v no-such-tmux")
            return super().__call__(module, vmid, program, *args, **kwargs)

    monkeypatch.setattr(wait_for_log.AnsibleModule, "warn", lambda self, text: None)
    result = run_module(monkeypatch, capsys, NoTmux(hide_python=hide_python), vmid=250, session_name="train", log_path=str(log),
                        pattern="Epoch", timeout=5)
    assert result["failed"] and result["verdict"] == "died" and result["tmux_missing"] is True
    assert result["engine"] == ("sh" if hide_python else "python3") and result["log_size"] == log.stat().st_size
    assert result["msg"].startswith("Cannot watch session train in container 250: tmux is not installed in the container")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (tools/system-packages.sh tests installs it)")
@pytest.mark.parametrize("hide_python", [False, True], ids=["python3", "sh"])
@pytest.mark.parametrize("check_mode", [False, True], ids=["normal", "check"])
def test_the_proof_is_recorded_on_the_session_except_in_check_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str], hide_python: bool,
                                                                   check_mode: bool) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1/3\n")
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))  # a tmux server of the test's own
    monkeypatch.setattr(wait_for_log.AnsibleModule, "warn", lambda self, text: None)
    subprocess.run(["tmux", "new-session", "-d", "-s", "proofcheck", "sleep 60"], check=True, timeout=30)
    try:
        result = run_module(monkeypatch, capsys, LocalContainer(hide_python=hide_python), vmid=250, session_name="proofcheck",
                            log_path=str(log), pattern="Epoch", timeout=5, _ansible_check_mode=check_mode)
        shown = subprocess.run(["tmux", "show-options", "-v", "-t", "=proofcheck:", "@trainops_proven"],
                               capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    finally:
        subprocess.run(["tmux", "kill-server"], capture_output=True, timeout=30, check=False)
    assert result["verdict"] == "started" and result["engine"] == ("sh" if hide_python else "python3"), result
    assert result["proof_recorded"] is (not check_mode), result
    assert bool(shown) is (not check_mode), f"@trainops_proven is {shown!r} after a wait with check mode {check_mode}"
