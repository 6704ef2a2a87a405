# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Stop a job on the target: its signal to the job's process group, then KILL after the timeout.

``RUN_DIR/stop_requested`` is written before the signal, so the supervisor records ``stopped_by=trainops``.
When the session outlives its job's group (a supervisor that was itself killed), the session is killed and
the exit record written here (``exit_status=137``) unless one exists.
"""

from __future__ import annotations

import os
import signal
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import PGID_FILE, STOP_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import (
    exit_record_path,
    exit_record_text,
    now,
    read_exit_record,
    write_exit_record,
    write_whole,
)
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_target import JobError, Target
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Before
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import LaunchSpec

TICK = 0.1
KILL_WAIT = 5.0
SESSION_WAIT = 5.0


def group_alive(pgid: int | None) -> bool:
    """Whether a process of group ``pgid`` exists (a group we may not signal counts as alive)."""
    if not pgid:
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait(condition: t.Callable[[], bool], seconds: float) -> bool:
    """Poll until ``condition()`` is false or ``seconds`` passed; whether it became false."""
    deadline = time.monotonic() + seconds
    while condition() and time.monotonic() < deadline:
        time.sleep(TICK)
    return not condition()


def _signal(pgid: int, name: str) -> None:
    try:
        os.killpg(pgid, getattr(signal, "SIG" + name))
    except OSError:
        pass


def _pgid(run_dir: str) -> int | None:
    try:
        with open(os.path.join(run_dir, PGID_FILE), encoding="ascii", errors="replace") as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 1 else None


def _record_killed(spec: LaunchSpec, log_path: str, started_at: str) -> None:
    if log_path and exit_record_path(log_path, spec.run_dir) is None:
        write_exit_record(spec.run_dir, log_path, exit_record_text(spec.session_name, 137, started_at, now(), spec.stop_signal))


def stop(spec: LaunchSpec, target: Target, before: Before) -> dict[str, str]:
    """Stop the running session of ``spec``; facts ``killed``, ``exit_status``, ``stopped_log``. Raises JobError."""
    pgid = _pgid(spec.run_dir)
    write_whole(os.path.join(spec.run_dir, STOP_FILE), spec.stop_signal + "\n", 0o600)
    killed = False
    if pgid is not None:
        _signal(pgid, spec.stop_signal)
        if not _wait(lambda: group_alive(pgid), spec.stop_timeout):
            _signal(pgid, "KILL")
            killed = True
            if not _wait(lambda: group_alive(pgid), KILL_WAIT):
                raise JobError("stop_failed", f"process group {pgid} survived SIGKILL")
    name = spec.session_name
    _wait(lambda: target.tmux.has_session(name), SESSION_WAIT)
    log_path = before.log_path or spec.log_path or ""
    if target.tmux.has_session(name):
        target.tmux.kill_session(name)
        _record_killed(spec, log_path, before.started_at)
    facts = {"killed": "1" if killed else "0", "stopped_log": log_path}
    record = read_exit_record(log_path, spec.run_dir) if log_path else None
    if record is not None:
        facts["exit_status"] = record.get("exit_status", "")
    return facts
