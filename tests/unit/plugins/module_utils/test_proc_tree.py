# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""_proc_tree on real processes: a running one, an unreaped zombie, one that is gone."""

from __future__ import annotations

import os
import subprocess
import time

from ansible_collections.trainops.pct_launch.plugins.module_utils._proc_tree import pid_alive, zombie


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        stat = handle.read()
    return stat[stat.rindex(b")") + 2:][:1]


def _until_zombie(proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while _state(proc.pid) != b"Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _state(proc.pid) == b"Z"


def test_a_running_process_is_alive_and_no_zombie() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_alive(proc.pid) and not zombie(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_an_ended_process_not_yet_reaped_is_a_zombie_and_not_alive() -> None:
    proc = subprocess.Popen(["sh", "-c", "exit 3"])
    _until_zombie(proc)
    assert zombie(proc.pid) and not pid_alive(proc.pid)
    assert proc.wait() == 3
    assert not zombie(proc.pid) and not pid_alive(proc.pid), "reaped: gone, and /proc cannot tell"


def test_a_pid_that_never_was_is_neither() -> None:
    with open("/proc/sys/kernel/pid_max", encoding="ascii") as handle:
        beyond = int(handle.read()) + 1
    assert not zombie(beyond) and not pid_alive(beyond)
    assert os.path.exists(f"/proc/{os.getpid()}/stat") and not zombie(os.getpid())
