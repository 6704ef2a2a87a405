# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for module_utils/_tmux_outcome.py: messages, results, diff."""

from __future__ import annotations

import json

from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_launch as L
from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_outcome as O


def spec(**kwargs) -> L.LaunchSpec:
    params = {"vmid": 201, "session_name": "train", "command": "python train.py", "log_path": "/srv/train.log"}
    params.update(kwargs)
    return L.spec_from_params(params)


def test_tmux_missing_message() -> None:
    error = O.failure(spec(), 20, {"error": "tmux_missing", "message": "tmux is not installed"}, "", "")
    assert str(error) == ("Cannot start session train in container 201: tmux is not installed in CT 201: "
                          "apply role trainops.pct_launch.tmux")


def test_error_messages_say_what_and_how_to_fix() -> None:
    error = O.failure(spec(), 21, {"error": "chdir_missing", "message": "directory /x does not exist"}, "", "")
    assert str(error) == "Cannot start session train in container 201: directory /x does not exist; create it or fix chdir"
    error = O.failure(spec(state="restarted"), 9, {}, "boom", "boom")
    assert str(error).startswith("Cannot restart session train in container 201: the launch program failed with exit status 9: boom")


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
    facts = {"result": "unchanged", "pane_pid": "42", "started_at": "T", "state": "running", "before_state": "running"}
    out = O.result(spec(), facts, False)
    assert out["changed"] is False and out["state"] == "running" and out["diff"]["before"] == out["diff"]["after"]


def test_result_check_mode_and_stop() -> None:
    assert O.result(spec(), {"would": "start", "before_state": "absent"}, True)["changed"] is True
    assert O.result(spec(), {"would": "none", "before_state": "running"}, True)["changed"] is False
    stop = L.spec_from_params({"vmid": 201, "session_name": "train", "state": "stopped"})
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
