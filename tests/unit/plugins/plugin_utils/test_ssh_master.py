# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""One master per node and run (``_ssh_master.py``): forked processes at once, a real flock in the run's folder.

The opener here stands for ssh (the integration test ``test_remote_nodes.py::test_a_cold_fleet_makes_one_handshake_per_node``
runs the real one against a real sshd); it records each call in a file, so that the count is across processes.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from ansible import constants as C

from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _ssh_master as M
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import PctTarget, ssh_control_args, ssh_master_argv

FORK = multiprocessing.get_context("fork")
SHARED = PctTarget(vmid=200, node="pve-a", ssh_args=("-F", "/etc/ssh/cfg"), ssh_control=ssh_control_args("60s", "/tmp/cp"))


@pytest.fixture()
def run_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh DEFAULT_LOCAL_TMP, as ansible-playbook makes one per run."""
    folder = tmp_path / "ansible-local-1"
    folder.mkdir()
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(folder))
    return folder


def _worker(target: PctTarget, log: str, ok: bool) -> None:
    def opener(_target: PctTarget) -> bool:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{_target.node}\n")
        time.sleep(0.3)  # a handshake's time: the others wait for the lock meanwhile
        return ok

    M.ensure_master(target, opener)
    with open(log + ".done", "a", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()}\n")


def _at_once(targets: list[PctTarget], log: Path, ok: bool = True) -> list[str]:
    procs = [FORK.Process(target=_worker, args=(target, str(log), ok)) for target in targets]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    assert len(Path(f"{log}.done").read_text(encoding="utf-8").splitlines()) == len(targets)
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_eight_workers_to_a_node_open_one_master_and_two_nodes_two(run_tmp: Path, tmp_path: Path) -> None:
    other = dataclasses.replace(SHARED, node="pve-b")
    opened = _at_once([SHARED] * 8 + [other] * 8, tmp_path / "opened")
    assert sorted(opened) == ["pve-a", "pve-b"]
    assert sorted(_at_once([SHARED] * 4, tmp_path / "again")) == []  # later calls of the run find the mark
    assert len(list(run_tmp.rglob("*.master"))) == 2


def test_a_master_that_cannot_be_opened_is_tried_once_per_run(run_tmp: Path, tmp_path: Path) -> None:
    assert _at_once([SHARED] * 6, tmp_path / "opened", ok=False) == ["pve-a"]
    assert _at_once([SHARED] * 3, tmp_path / "again", ok=False) == []


@pytest.mark.parametrize("args, managed", [
    ((), True),
    (("-F", "/etc/ssh/cfg", "-o", "ServerAliveInterval=5"), True),
    (("-o", "ControlMaster=no"), False),
    (("-oControlPath=/tmp/mine-%C",), False),
    (("-o", "controlpersist=10m"), False),
    (("-M",), False),
    (("-S", "/tmp/sock"), False),
    (("-S/tmp/sock",), False),
    (("-m", "hmac-sha2-256"), True),  # -m is ssh's MAC list, not -M
])
def test_the_users_own_sharing_options_leave_it_to_ssh(args: tuple[str, ...], managed: bool) -> None:
    assert M.managed(dataclasses.replace(SHARED, ssh_args=args)) is managed


def test_no_sharing_and_a_local_node_are_left_alone(run_tmp: Path) -> None:
    for target in (dataclasses.replace(SHARED, ssh_control=()), PctTarget(vmid=200)):
        assert M.managed(target) is False
        M.ensure_master(target, lambda _target: pytest.fail("no master to open"))
    assert list(run_tmp.iterdir()) == []


def test_the_master_argv_keeps_the_options_that_name_the_control_path() -> None:
    check, opened = ssh_master_argv(SHARED, "check"), ssh_master_argv(SHARED, "open")
    common = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-F", "/etc/ssh/cfg", *SHARED.ssh_control]
    assert check == [*common, "-O", "check", "pve-a"]
    assert opened == [*common, "-f", "-N", "pve-a"]
    with pytest.raises(ValueError):
        ssh_master_argv(SHARED, "exit")
