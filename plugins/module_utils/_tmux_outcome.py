# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Turn what a launch found and did (its facts) into the module's result, its diff, or an error message."""

from __future__ import annotations

import json
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import hostname
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import (
    LaunchSpec,
    display_command,
    spec_summary,
)

_VERB = {"start": "start", "stop": "stop", "restart": "restart"}

# Why the fix for each error code of the program (docs/launch-protocol.md).
_FIX = {
    "chdir_missing": "create it or fix chdir",
    "venv_missing": "create it (role trainops.pct_launch.venv) or fix venv",
    "script_missing": "nothing was started; check command/argv and chdir",
    "log_dir_missing": "create it or choose another log_path",
    "log_dir_not_writable": "fix its permissions (or the read-only file system) or choose another log_path",
    "log_dir_full": "free space there, choose another log_path, or lower min_free_mb",
    "log_exists": "log_mode=fail_if_exists never replaces a log: move it away, or use log_mode rotate or append",
    "user_missing": "create the user in the container or fix user",
    "lock_timeout": "another launch of this session is still running; retry when it is done "
                    "(a lock left by a killed launch is removed automatically once its process is gone)",
    "start_failed": "nothing was started",
    "gpu_unavailable": "nothing was started",
    "stop_failed": "the processes may be stuck in the kernel (state D); check them with ps inside the container",
}


class LaunchFailed(Exception):
    """The program ran and reported a failure; ``str()`` is the message for the user."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def where() -> str:
    """``host HOSTNAME``: the module runs on its target (a container's host name is its CT's hostname)."""
    return f"host {hostname()}"


def what_failed(spec: LaunchSpec) -> str:
    """``Cannot start session NAME in`` (followed by ``host NAME: cause``)."""
    return f"Cannot {_VERB[spec.action]} session {spec.session_name} in"


def _differences(spec: LaunchSpec, running: dict[str, t.Any]) -> list[str]:
    """Human readable differences between the running session's summary and ``spec`` (no env values)."""
    wanted = spec_summary(spec, str(running.get("env_salt") or ""))
    diffs = []
    for key in ("command", "argv", "chdir", "venv", "user", "log_path", "gpus"):
        if running.get(key) != wanted.get(key):
            diffs.append(f"{key} differs (running: {json.dumps(running.get(key))}, wanted: {json.dumps(wanted.get(key))})")
    have, want = running.get("env") or {}, wanted["env"]
    changed = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
    if changed:
        diffs.append("env differs (variables " + ", ".join(changed) + "; values not shown)")
    return diffs


def conflict_message(spec: LaunchSpec, facts: dict[str, str]) -> str:
    """The message for a live session with another spec."""
    try:
        running = json.loads(facts.get("running_summary") or "")
    except ValueError:
        running = None
    if not isinstance(running, dict):
        detail = "it was not started by trainops.pct_launch.tmux_session, or its spec is unknown"
    else:
        detail = "; ".join(_differences(spec, running)) or "the spec hash differs"
    return (f"{what_failed(spec)} {where()}: session {spec.session_name} is already running with a different spec: "
            f"{detail}. Use state: restarted to replace the running job (or state: stopped first)")


def failure(spec: LaunchSpec, code: str, facts: dict[str, str], cause: str) -> LaunchFailed:
    """The error for a launch step that failed with error ``code`` (docs/launch-protocol.md) and message ``cause``."""
    prefix = f"{what_failed(spec)} {where()}: "
    if code == "tmux_missing":
        return LaunchFailed(prefix + "tmux is not installed there: apply role trainops.pct_launch.tmux", code)
    if code == "spec_conflict":
        return LaunchFailed(conflict_message(spec, facts), code)
    return LaunchFailed(prefix + f"{cause or code}; {_FIX.get(code, 'nothing was changed')}", code)


def _state_text(state: str, pane_pid: str | None = None, started_at: str | None = None, command: str | None = None) -> str:
    lines = [f"state: {state}"]
    if pane_pid:
        lines.append(f"pane_pid: {pane_pid}")
    if started_at:
        lines.append(f"started_at: {started_at}")
    if command is not None:
        lines.append(f"command: {command}")
    return "\n".join(lines) + "\n"


def _running_command(facts: dict[str, str]) -> str | None:
    try:
        running = json.loads(facts.get("running_summary") or "")
    except ValueError:
        return None
    if not isinstance(running, dict):
        return None
    probe = LaunchSpec(session_name="x", command=running.get("command"),
                       argv=tuple(running["argv"]) if running.get("argv") else None)
    return display_command(probe)


def diff(spec: LaunchSpec, facts: dict[str, str], after_state: str) -> dict[str, str]:
    """``before``/``after`` texts of the session state."""
    before_state = facts.get("before_state", "absent")
    before = _state_text(before_state, facts.get("before_pane_pid"), facts.get("before_started_at"),
                         _running_command(facts) if before_state == "running" else None)
    if after_state == "running" and facts.get("result") != "unchanged":
        after = _state_text("running", facts.get("pane_pid") or "(new)", facts.get("started_at") or "(new)", display_command(spec))
    elif after_state == before_state:
        after = before
    else:
        after = _state_text(after_state)
    return {"before": before, "after": after, "before_header": f"session {spec.session_name}", "after_header": f"session {spec.session_name}"}


def _changed_and_state(spec: LaunchSpec, facts: dict[str, str], check_mode: bool) -> tuple[bool, str]:
    if check_mode:
        would = facts.get("would", "none")
        if would in ("start", "restart"):
            return True, "running"
        if would == "stop":
            return True, "finished"
        return False, facts.get("before_state", "absent")
    result = facts.get("result", "unchanged")
    if result == "started":
        return True, facts.get("state", "running")
    if result == "stopped":
        return True, "finished"
    if spec.action == "start":
        return False, "running"
    return False, facts.get("before_state", "absent")


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def proven(facts: dict[str, str], state: str, changed: bool) -> bool | None:
    """Whether the start of the running job was proven (``@trainops_proven``, set by wait_for_log); None when none runs."""
    if state != "running":
        return None
    if changed:
        return False
    return (facts.get("proven") or facts.get("before_proven")) == "1"


def result(spec: LaunchSpec, facts: dict[str, str], check_mode: bool) -> dict[str, t.Any]:
    """The module's return values."""
    changed, state = _changed_and_state(spec, facts, check_mode)
    unchanged_running = not changed and state == "running"
    out: dict[str, t.Any] = {
        "changed": changed,
        "session_name": spec.session_name,
        "log_path": spec.log_path or facts.get("before_log") or facts.get("stopped_log") or None,
        "rotated_log": facts.get("rotated_log") or None,
        "pane_pid": _int(facts.get("pane_pid") or (facts.get("before_pane_pid") if unchanged_running else None)),
        "started_at": facts.get("started_at") or (facts.get("before_started_at") if unchanged_running else None) or None,
        "tmux_version": facts.get("tmux_version") or None,
        "state": state,
        "diff": diff(spec, facts, state),
    }
    out["proven"] = proven(facts, state, changed) if not check_mode else None
    if unchanged_running and facts.get("log_size"):
        out["log_size"] = _int(facts["log_size"])
    if facts.get("exit_status"):
        out["exit_status"] = _int(facts["exit_status"])
    if facts.get("killed") == "1":
        out["killed"] = True
    if facts.get("gpus") and state in ("running", "finished"):
        out["gpus"] = facts["gpus"].split(",")
    return out
