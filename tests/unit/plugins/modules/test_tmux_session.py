# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the tmux_session module's main(), with run_in_container replaced."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.trainops.pct_launch.plugins.module_utils import _pct
from ansible_collections.trainops.pct_launch.plugins.modules import tmux_session

ARGS = {"vmid": 201, "session_name": "train", "command": "python train.py", "log_path": "/srv/train.log"}


class Calls:
    """Records run_in_container calls and answers with canned output."""

    def __init__(self, rc: int = 0, out: str = "", err: str = "", exc: Exception | None = None) -> None:
        self.rc, self.out, self.err, self.exc = rc, out, err, exc
        self.programs: list[str] = []

    def __call__(self, module, vmid, program, stdin_data=b"", pct_path="pct", timeout=None):
        self.programs.append(program)
        self.timeout = timeout
        if self.exc:
            raise self.exc
        return self.rc, self.out, self.err


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: dict, calls: Calls) -> dict:
    monkeypatch.setattr(tmux_session, "run_in_container", calls)
    with patch_module_args(args), pytest.raises(SystemExit):
        tmux_session.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("change, option", [
    ({"session_name": "bad.name"}, "session_name"),
    ({"log_path": "rel.log"}, "log_path"),
    ({"vmid": 5}, "vmid"),
    ({"argv": ["x"]}, "mutually exclusive"),
    ({"command": None}, "command, argv"),
    ({"log_path": None}, "log_path"),
    ({"timeout": 0}, "timeout"),
])
def test_bad_input_fails_before_any_pct_call(monkeypatch, capsys, change: dict, option: str) -> None:
    calls = Calls()
    args = {k: v for k, v in {**ARGS, **change}.items() if v is not None}
    result = run(monkeypatch, capsys, args, calls)
    assert result["failed"] and option in result["msg"]
    assert calls.programs == []


def test_started(monkeypatch, capsys) -> None:
    calls = Calls(out="trainops:tmux_version=3.3a\ntrainops:before_state=absent\ntrainops:result=started\n"
                      "trainops:pane_pid=42\ntrainops:started_at=T\ntrainops:state=running\ntrainops:rotated_log=\n")
    result = run(monkeypatch, capsys, {**ARGS, "env": {"SECRET": "s3cr3t-v"}}, calls)
    assert result["changed"] and result["pane_pid"] == 42 and result["state"] == "running"
    assert result["tmux_version"] == "3.3a" and result["rotated_log"] is None and "diff" not in result
    assert "t_check=0" in calls.programs[0] and calls.timeout == 120 + 60


def test_check_mode_and_diff(monkeypatch, capsys) -> None:
    calls = Calls(out="trainops:before_state=absent\ntrainops:would=start\n")
    result = run(monkeypatch, capsys, {**ARGS, "_ansible_check_mode": True, "_ansible_diff": True}, calls)
    assert result["changed"] and "t_check=1" in calls.programs[0]
    assert result["diff"]["before"] == "state: absent\n" and "state: running" in result["diff"]["after"]


def test_program_failure_is_explained(monkeypatch, capsys) -> None:
    calls = Calls(rc=20, out="trainops:error=tmux_missing\ntrainops:message=tmux is not installed\n")
    result = run(monkeypatch, capsys, ARGS, calls)
    assert result["failed"] and result["error"] == "tmux_missing"
    assert "tmux is not installed in CT 201: apply role trainops.pct_launch.tmux" in result["msg"]


def test_pct_failure_is_explained(monkeypatch, capsys) -> None:
    calls = Calls(exc=_pct.ContainerNotRunning(201, "the container is not running; start it with 'pct start 201'", 2, ""))
    result = run(monkeypatch, capsys, ARGS, calls)
    assert result["msg"] == "Cannot start session train in container 201: the container is not running; start it with 'pct start 201'"
