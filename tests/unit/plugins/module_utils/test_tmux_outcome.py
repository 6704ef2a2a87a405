# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for module_utils/_tmux_outcome.py: messages, results, diff."""

from __future__ import annotations

import json
import typing as t

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_launch as L
from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_outcome as O

HOSTNAME = "ct-train-7"
RESULT_KEYS = {"changed", "session_name", "log_path", "rotated_log", "pane_pid", "started_at", "tmux_version", "state", "diff", "proven"}


@pytest.fixture(autouse=True)
def hostname(monkeypatch: pytest.MonkeyPatch) -> str:
    """The host name the messages give (the module runs on its target)."""
    monkeypatch.setattr(O, "hostname", lambda: HOSTNAME)
    return HOSTNAME


def spec(**kwargs: t.Any) -> L.LaunchSpec:
    """A start of session train, changed by ``kwargs``."""
    params = {"session_name": "train", "command": "python train.py", "log_path": "/srv/train.log"}
    params.update(kwargs)
    return L.spec_from_params(params)


def test_where_is_the_host_the_module_runs_on() -> None:
    assert O.where() == f"host {HOSTNAME}"
    assert O.what_failed(spec(state="stopped")) == "Cannot stop session train in"


def test_tmux_missing_message() -> None:
    error = O.failure(spec(), "tmux_missing", {"error": "tmux_missing"}, "tmux is not installed")
    assert str(error) == f"Cannot start session train in host {HOSTNAME}: tmux is not installed there: apply role trainops.pct_launch.tmux"
    assert error.code == "tmux_missing"


@pytest.mark.parametrize("code, cause, fix", [
    ("chdir_missing", "directory /x does not exist", "create it or fix chdir"),
    ("log_exists", "log file /srv/train.log already exists", "log_mode=fail_if_exists never replaces a log"),
    ("lock_timeout", "another launch of session train holds /run/trainops/train/launch.lock", "another launch of this session is still running"),
    ("start_failed", "tmux new-session failed: boom", "nothing was started"),
    ("no_such_code", "boom", "nothing was changed"),
])
def test_error_messages_say_what_and_how_to_fix(code: str, cause: str, fix: str) -> None:
    error = O.failure(spec(), code, {"error": code}, cause)
    assert str(error).startswith(f"Cannot start session train in host {HOSTNAME}: {cause}; {fix}"), str(error)
    assert error.code == code and isinstance(error, O.LaunchFailed)


def test_an_error_without_a_cause_names_its_code() -> None:
    error = O.failure(spec(state="restarted"), "user_missing", {}, "")
    assert str(error) == f"Cannot restart session train in host {HOSTNAME}: user_missing; create the user in the container or fix user"


def test_a_spec_conflict_is_the_conflict_message() -> None:
    running = L.spec_summary(spec(command="python old.py"))
    facts = {"error": "spec_conflict", "running_summary": json.dumps(running)}
    error = O.failure(spec(), "spec_conflict", facts, "session train is running with a different spec")
    assert str(error) == O.conflict_message(spec(), facts) and error.code == "spec_conflict"
    assert str(error).startswith(f"Cannot start session train in host {HOSTNAME}: session train is already running with a different spec: "
                                 'command differs (running: "python old.py", wanted: "python train.py")')


def test_conflict_names_differences_without_env_values() -> None:
    running = L.spec_summary(spec(env={"TOKEN": "old-secret", "KEEP": "same"}, chdir="/a"))
    wanted = spec(env={"TOKEN": "new-secret", "KEEP": "same", "ADDED": "x"}, chdir="/b")
    message = O.conflict_message(wanted, {"running_summary": json.dumps(running)})
    assert 'chdir differs (running: "/a", wanted: "/b")' in message
    assert "env differs (variables ADDED, TOKEN; values not shown)" in message
    assert "KEEP" not in message and "secret" not in message
    assert "state: restarted" in message


def test_conflict_with_a_foreign_session() -> None:
    message = O.conflict_message(spec(), {})
    assert "not started by trainops.pct_launch.tmux_session" in message


def test_result_started_and_unchanged() -> None:
    facts = {"result": "started", "state": "running", "pane_pid": "42", "started_at": "T", "tmux_version": "3.3a",
             "rotated_log": "/srv/train.log.1", "before_state": "finished"}
    out = O.result(spec(), facts, False)
    assert out["changed"] is True and out["pane_pid"] == 42 and out["rotated_log"] == "/srv/train.log.1"
    assert out["diff"]["before"] == "state: finished\n" and "command: python train.py" in out["diff"]["after"]
    assert "log_size" not in out
    facts = {"result": "unchanged", "pane_pid": "42", "started_at": "T", "state": "running", "before_state": "running",
             "log_size": "5210"}
    out = O.result(spec(), facts, False)
    assert out["changed"] is False and out["state"] == "running" and out["diff"]["before"] == out["diff"]["after"]
    assert out["log_size"] == 5210


def test_result_check_mode_and_stop() -> None:
    assert O.result(spec(), {"would": "start", "before_state": "absent"}, True)["changed"] is True
    assert O.result(spec(), {"would": "none", "before_state": "running"}, True)["changed"] is False
    stop = L.spec_from_params({"session_name": "train", "state": "stopped"})
    out = O.result(stop, {"result": "stopped", "exit_status": "137", "killed": "1", "stopped_log": "/l"}, False)
    assert out["changed"] and out["state"] == "finished" and out["exit_status"] == 137 and out["killed"] is True
    assert out["log_path"] == "/l"
    assert O.result(stop, {"result": "unchanged", "before_state": "absent"}, False)["changed"] is False


def test_result_says_whether_the_start_was_proven() -> None:
    running = {"result": "unchanged", "pane_pid": "42", "started_at": "T", "state": "running", "before_state": "running"}
    assert O.result(spec(), dict(running, proven="1"), False)["proven"] is True
    assert O.result(spec(), dict(running, proven="0"), False)["proven"] is False
    assert O.result(spec(), running, False)["proven"] is False, "a session without the flag was never proven"
    started = {"result": "started", "state": "running", "pane_pid": "43", "started_at": "T", "before_proven": "1"}
    assert O.result(spec(), started, False)["proven"] is False, "a job this task started is not proven yet"
    finished = {"result": "started", "state": "finished", "exit_status": "3"}
    assert O.result(spec(), finished, False)["proven"] is None
    assert O.result(spec(), {"would": "none", "before_state": "running", "before_proven": "1"}, True)["proven"] is None


@pytest.mark.parametrize("check_mode", [False, True])
def test_result_has_the_documented_keys_and_no_container(check_mode: bool) -> None:
    facts = {"result": "started", "state": "running", "pane_pid": "42", "started_at": "T", "would": "start"}
    out = O.result(spec(), facts, check_mode)
    assert set(out) == RESULT_KEYS, set(out) ^ RESULT_KEYS
    stopped = O.result(spec(state="stopped"), {"result": "stopped", "exit_status": "143", "killed": "1"}, False)
    assert set(stopped) == RESULT_KEYS | {"exit_status", "killed"}
