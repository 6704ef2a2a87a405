# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for wait_for_log's shared code: options, the poll parameters, results and messages.

One chunk of waiting (``_log_poll.poll``) is tested in test_log_poll.py, against real logs and sessions.
"""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import (
    ARGUMENT_SPEC,
    REQUIRED_ONE_OF,
    check_options,
    message,
    poll_parameters,
    reason,
    result_from_facts,
    subject,
    where,
)


def params(**kwargs: t.Any) -> dict[str, t.Any]:
    """Module options with their defaults (``pct_vmid`` and ``host`` are what the action plugin adds for the messages)."""
    values = {name: spec.get("default") for name, spec in ARGUMENT_SPEC.items()}
    values.update(kwargs)
    return values


def test_the_options_are_those_of_the_host_the_module_runs_on() -> None:
    assert set(ARGUMENT_SPEC) == {"session_name", "log_path", "pattern", "fail_pattern", "timeout", "sleep", "tail_lines", "offset", "fleet_id"}
    assert not {"vmid", "pct_path"} & set(ARGUMENT_SPEC)
    assert REQUIRED_ONE_OF == [["session_name", "log_path"]]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"pattern": "Epoch ("}, "Cannot use option pattern 'Epoch ('"),
    ({"fail_pattern": "[Trace"}, "Cannot use option fail_pattern '[Trace'"),
    ({"sleep": 1.5}, "Cannot use option sleep 1.5"),
    ({"sleep": 0}, "Cannot use option sleep 0"),
    ({"timeout": 0}, "Cannot use option timeout 0"),
    ({"timeout": -1}, "Cannot use option timeout -1"),
    ({"tail_lines": -1}, "Cannot use option tail_lines -1"),
    ({"tail_lines": 10001}, "Cannot use option tail_lines 10001"),
    ({"offset": -1}, "Cannot use option offset -1"),
    ({"session_name": "a:b"}, "Invalid session_name 'a:b': use 1 to 64 characters"),
    ({"log_path": "train.log"}, "Invalid log_path 'train.log': use an absolute path on the target"),
    ({"log_path": "/w/"}, "Invalid log_path '/w/': use the absolute path of a file"),
    ({"log_path": "/w/a\nb"}, "Invalid log_path '/w/a\\nb': it contains a newline"),
])
def test_check_options(kwargs: dict[str, t.Any], fragment: str) -> None:
    errors = check_options(params(**{"session_name": "train", "log_path": "/w/t.log", **kwargs}))
    assert len(errors) == 1 and errors[0].startswith(fragment), errors


def test_check_options_names_every_problem() -> None:
    errors = check_options(params(session_name="a b", log_path="rel", pattern="(", fail_pattern="[", sleep=5))
    assert [error.split(" ")[:3] for error in errors] == [["Cannot", "use", "option"], ["Invalid", "session_name", "'a"],
                                                          ["Invalid", "log_path", "'rel':"], ["Cannot", "use", "option"],
                                                          ["Cannot", "use", "option"]]
    assert "option sleep 5" in errors[0] and "option pattern '('" in errors[3] and "option fail_pattern '['" in errors[4]


def test_check_options_regex_message_names_cause_and_fix() -> None:
    error = check_options(params(session_name="t", pattern="a)"))[0]
    assert "not a valid Python regular expression (unbalanced parenthesis at position 1)" in error and "fix the expression" in error


def test_check_options_ok() -> None:
    assert not check_options(params(session_name="train", log_path="/w/t.log", pattern=r"Epoch \d+/", fail_pattern="Traceback", sleep=1))
    assert not check_options(params(log_path="/w/t.log")) and not check_options(params(session_name="t"))


def test_poll_parameters() -> None:
    opts = params(session_name="t", log_path="/w/t.log", pattern="P", fail_pattern="F", sleep=0.25, tail_lines=3, fleet_id="f", host="h",
                  pct_vmid=250)
    assert poll_parameters(opts, 7, 99) == {"session_name": "t", "log_path": "/w/t.log", "pattern": "P", "fail_pattern": "F",
                                            "duration": 7.0, "sleep": 0.25, "tail_lines": 3, "offset": 99, "record_proof": True}
    assert poll_parameters(dict(opts, record_proof=False), 1, 0)["record_proof"] is False, "check mode records no proof"


@pytest.mark.parametrize("extra, expected_where, expected_subject", [
    ({"pct_vmid": 250, "host": "ct250"}, " in container 250", "session train in container 250"),
    ({"pct_vmid": None, "host": "gpu-box"}, " on gpu-box", "session train on gpu-box"),
    ({}, "", "session train"),
])
def test_where_and_subject_name_the_container_or_the_host(extra: dict[str, t.Any], expected_where: str, expected_subject: str) -> None:
    opts = params(session_name="train", **extra)
    assert where(opts) == expected_where and subject(opts) == expected_subject
    assert subject(params(log_path="/w/t.log", **extra)) == "log /w/t.log" + expected_where


def test_where_ignores_an_old_vmid_option() -> None:
    """Only the host variable pct_vmid names a container: a vmid key (the removed option) is never read."""
    assert where({"vmid": 250, "host": "h"}) == " on h"


BASE = {"log_path": "/w/t.log", "log_exists": "1", "log_size": "99", "offset": "99", "tail": ["a\r", "b"], "ps": [], "exit": {}}
OPTS = params(session_name="train", log_path="/w/t.log", pattern="Epoch", fail_pattern="Traceback", timeout=30, pct_vmid=250, host="ct250")


def test_result_from_facts() -> None:
    facts = dict(BASE, verdict="started", session="alive", state="running", pane_pid="5", matched_line="Epoch 1", proof_recorded="1",
                 exit={"exit_status": "3", "ended_at": "E", "stopped_by": "trainops"})
    assert result_from_facts(facts, 1.2345, 4) == {
        "verdict": "started", "elapsed": 1.234, "matched_line": "Epoch 1", "log_tail": ["a", "b"], "log_path": "/w/t.log",
        "log_exists": True, "log_size": 99, "offset": 99, "session_state": "running", "session_alive": True, "tmux_missing": False,
        "pane_pid": 5, "exit_status": 3, "ended_at": "E", "stopped_by": "trainops", "process_tree": [], "pct_calls": 4,
        "proof_recorded": True,
    }
    assert "engine" not in result_from_facts(facts, 1)


def test_result_from_facts_of_a_chunk_without_a_verdict() -> None:
    result = result_from_facts({}, 0.5)
    assert result["verdict"] == "died" and result["session_state"] == "unknown" and result["offset"] == 0
    assert result["log_path"] is None and result["log_exists"] is False and result["log_size"] is None and result["log_tail"] == []
    pending = result_from_facts(dict(BASE, verdict="pending", session="alive", state="running"), 10)
    assert pending["verdict"] == "timeout" and pending["session_alive"] is True
    died = result_from_facts(dict(BASE, verdict="died", session="alive", state="finished"), 1)
    assert died["session_alive"] is False, "a died verdict is never alive"
    missing = result_from_facts(dict(BASE, verdict="died", session="tmux_missing", state="vanished"), 1)
    assert missing["tmux_missing"] is True and missing["session_alive"] is False


def test_result_and_messages() -> None:
    started = result_from_facts(dict(BASE, verdict="started", session="alive", state="running", pane_pid="5", matched_line="Epoch 1"), 1.25)
    assert message(started, OPTS) == "Job started in session train in container 250: pattern 'Epoch' matched after 1.2 s: 'Epoch 1'"
    died = result_from_facts(dict(BASE, verdict="died", session="ended", state="finished", exit={"exit_status": "7"}), 0.8)
    assert died["session_state"] == "finished" and died["exit_status"] == 7 and not died["session_alive"]
    assert message(died, OPTS).startswith("Job did not start in session train in container 250: the job ended with exit status 7 after 0.8 s")
    failed = result_from_facts(dict(BASE, verdict="fail_pattern", session="alive", state="running", matched_line="Traceback (x)"), 2)
    assert message(failed, OPTS).startswith("Job failed in session train in container 250: a log line matches fail_pattern 'Traceback' "
                                            "after 2.0 s: 'Traceback (x)'; last log lines: a | b")
    pending = dict(BASE, verdict="pending", session="alive", state="running", pane_pid="5", ps=["PID PPID", "5 1 S python   train.py"])
    timeout = result_from_facts(pending, 30)
    assert timeout["verdict"] == "timeout"
    text = message(timeout, OPTS)
    assert text.startswith("Timed out after 30 s waiting for a log line matching 'Epoch' in session train in container 250")
    assert "log /w/t.log exists (99 bytes)" in text and "alive (pane_pid 5, 1 processes: 5 1 S python train.py)" in text
    gone = result_from_facts(dict(BASE, verdict="died", session="absent", state="absent", log_exists="0", tail=[]), 0.1)
    assert gone["session_state"] == "absent" and message(gone, OPTS).startswith("Cannot find session train in container 250")
    vanished = result_from_facts(dict(BASE, verdict="died", session="absent", state="vanished"), 3)
    assert message(vanished, OPTS).startswith("Job did not start in session train in container 250: the session is gone without an exit "
                                              "status after 3.0 s")
    missing = result_from_facts(dict(BASE, verdict="died", session="tmux_missing", state="vanished"), 0.1)
    assert message(missing, OPTS).startswith("Cannot watch session train in container 250: tmux is not installed there")


def test_messages_on_a_host_that_is_no_container() -> None:
    opts = dict(OPTS, pct_vmid=None, host="gpu-box")
    died = result_from_facts(dict(BASE, verdict="died", session="ended", state="finished", exit={"exit_status": "7", "stopped_by": "trainops"}), 1)
    assert message(died, opts).startswith("Job did not start in session train on gpu-box: the job ended with exit status 7 (stopped by trainops)")
    pending = result_from_facts(dict(BASE, verdict="pending", session="none", state="unknown"), 30)
    assert "no session_name was given" in message(pending, dict(opts, session_name=None))


def test_reason_is_the_message_without_the_log_lines() -> None:
    """launch.yml's summary reads ``reason``: the cause and the fix, never the job's log lines (no message parsing)."""
    base = dict(BASE, tail=["loading data; last log lines: fake", "CUDA error"], exit={"exit_status": "3"})
    for facts in (dict(base, verdict="died", session="ended", state="finished"),
                  dict(base, verdict="fail_pattern", session="alive", state="running", matched_line="Traceback"),
                  dict(base, verdict="pending", session="alive", state="running", pane_pid="5")):
        result = result_from_facts(facts, 1.0)
        full, short = message(result, OPTS), reason(result, OPTS)
        assert "last log lines: loading data" in full and "CUDA error" in full, full
        assert "CUDA error" not in short and "loading data" not in short, short
        assert short.split(";")[0] == full.split(";")[0] and short.endswith(full.rsplit("; ", 1)[1]), (short, full)
