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
    WAIT_SPEC,
    check_options,
    message,
    poll_parameters,
    reason,
    show_lines,
    result_from_facts,
    subject,
    wait_option_errors,
    where,
)


def params(**kwargs: t.Any) -> dict[str, t.Any]:
    """Module options with their defaults (``pct_vmid`` and ``host`` are what the action plugin adds for the messages)."""
    values = {name: spec.get("default") for name, spec in ARGUMENT_SPEC.items()}
    values.update(kwargs)
    return values


def test_the_options_are_those_of_the_host_the_module_runs_on() -> None:
    assert set(ARGUMENT_SPEC) == {"session_name", "log_path", "pattern", "fail_pattern", "timeout", "sleep", "tail_lines", "offset",
                                  "wait_until", "show_lines", "fleet_id", "node_kernel_log"}
    assert ARGUMENT_SPEC["wait_until"] == {"type": "str", "default": "started", "choices": ["started", "finished"]}
    assert ARGUMENT_SPEC["show_lines"] == {"type": "bool"}, "no default: show_lines() resolves it from wait_until"
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
                                            "duration": 7.0, "sleep": 0.25, "tail_lines": 3, "offset": 99, "record_proof": True,
                                            "wait_until": "started", "show_lines": False}
    assert poll_parameters(dict(opts, record_proof=False), 1, 0)["record_proof"] is False, "check mode records no proof"


@pytest.mark.parametrize("wait_until, option, expected", [
    ("started", None, False), ("finished", None, True), ("started", True, True), ("finished", False, False), (None, None, False),
])
def test_show_lines_defaults_to_true_only_when_waiting_for_the_end(wait_until: str | None, option: bool | None, expected: bool) -> None:
    opts = params(session_name="t", wait_until=wait_until, show_lines=option)
    assert show_lines(opts) is expected
    parameters = poll_parameters(opts, 1, 0)
    assert parameters["show_lines"] is expected and parameters["wait_until"] == (wait_until or "started")


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
        "proof_recorded": True, "attempts": None, "end_state": None, "cause": None, "end_reason": None, "signal": None,
        "shutdown": None, "attempt_started_at": None, "gpu_bus_ids": [],
    }
    assert "engine" not in result_from_facts(facts, 1)
    assert not {"proven_line", "new_lines", "lines_omitted"} & set(result_from_facts(facts, 1)), "only with finished and show_lines"


def test_result_from_facts_carries_the_exit_records_keys_of_the_supervisor() -> None:
    record = {"exit_status": "137", "ended_at": "E", "attempts": "3", "end_state": "oom_killed", "cause": "oom_kill",
              "signal": "KILL", "reason": "killed by the kernel's OOM killer (1 OOM kill)"}
    result = result_from_facts(dict(BASE, verdict="failed", session="ended", state="finished", exit=record), 2)
    assert (result["attempts"], result["end_state"], result["cause"], result["signal"], result["end_reason"]) == (
        3, "oom_killed", "oom_kill", "KILL", "killed by the kernel's OOM killer (1 OOM kill)")
    assert result["session_alive"] is False and result["exit_status"] == 137
    bad = result_from_facts(dict(BASE, verdict="failed", session="ended", state="finished", exit={"attempts": "many"}), 2)
    assert bad["attempts"] is None and bad["end_state"] is None, "an unreadable or missing key is unknown"


def test_result_from_facts_of_a_chunk_that_waits_for_the_end_and_shows_lines() -> None:
    facts = dict(BASE, verdict="pending", session="alive", state="running", proven_line="step 1", proof_recorded="1",
                 new_lines=["step 1", "step 2"], lines_omitted="4")
    result = result_from_facts(facts, 2)
    assert result["verdict"] == "timeout" and result["session_alive"] is True and result["proof_recorded"] is True
    assert result["proven_line"] == "step 1" and result["new_lines"] == ["step 1", "step 2"] and result["lines_omitted"] == 4
    for verdict in ("finished", "failed"):
        assert result_from_facts(dict(facts, verdict=verdict), 1)["session_alive"] is False, "an end is never alive"
    assert result_from_facts(dict(facts, proven_line=None, lines_omitted=None), 1)["proven_line"] is None
    assert result_from_facts(dict(facts, lines_omitted=None), 1)["lines_omitted"] == 0


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


FINISHED = dict(OPTS, wait_until="finished", pattern=None, fail_pattern=None, timeout=3600)
ENDED = dict(BASE, session="ended", state="finished", tail=["step 4", "ValueError: loss is NaN"])


def test_finished_message_is_a_success_with_the_time_and_attempts() -> None:
    finished = result_from_facts(dict(ENDED, verdict="finished", exit={"exit_status": "0", "reason": "exit status 0"}), 12.34)
    assert message(finished, FINISHED) == "Job finished in session train in container 250: exit status 0 after 12.3 s"
    again = result_from_facts(dict(ENDED, verdict="finished", exit={"exit_status": "0", "attempts": "2"}), 12.34)
    assert message(again, FINISHED) == "Job finished in session train in container 250: exit status 0 after 12.3 s (2 attempts)"


def test_failed_message_names_the_exit_status_and_the_records_reason() -> None:
    record = {"exit_status": "3", "attempts": "1", "end_state": "failed", "cause": "python_exception", "reason": "ValueError: loss is NaN"}
    failed = result_from_facts(dict(ENDED, verdict="failed", exit=record), 12.34)
    assert message(failed, FINISHED) == ("Job failed in session train in container 250: exit status 3 after 12.3 s (reason: ValueError: "
                                         "loss is NaN); last log lines: step 4 | ValueError: loss is NaN; fix the job and launch it again")
    assert reason(failed, FINISHED) == ("Job failed in session train in container 250: exit status 3 after 12.3 s (reason: ValueError: "
                                        "loss is NaN); fix the job and launch it again")


@pytest.mark.parametrize("record, fragment", [
    ({"exit_status": "3"}, ": exit status 3 after 1.0 s; last log lines: "),
    ({"exit_status": "137", "signal": "KILL", "attempts": "4"}, ": exit status 137 after 1.0 s (signal KILL, 4 attempts); last log lines"),
    ({"exit_status": "143", "stopped_by": "trainops", "reason": "stopped by trainops (TERM)"},
     ": exit status 143 after 1.0 s (reason: stopped by trainops (TERM), stopped by trainops); last log lines"),
    ({"exit_status": "0", "end_state": "timeout", "reason": "the time limit of 60 s was reached"},
     ": exit status 0 after 1.0 s (reason: the time limit of 60 s was reached); last log lines"),
    ({"ended_at": "E"}, ": the job ended without an exit status after 1.0 s; last log lines"),
])
def test_failed_messages_of_ends_with_an_exit_record(record: dict[str, str], fragment: str) -> None:
    text = message(result_from_facts(dict(ENDED, verdict="failed", exit=record), 1), FINISHED)
    assert text.startswith("Job failed in session train in container 250") and fragment in text, text
    assert text.endswith("; launch it again" if "stopped_by" in record else "; fix the job and launch it again"), text


def test_failed_messages_without_an_exit_record() -> None:
    vanished = result_from_facts(dict(ENDED, verdict="failed", state="vanished", exit={}), 3)
    assert message(vanished, FINISHED).startswith("Job failed in session train in container 250: the session is gone without an exit "
                                                  "status after 3.0 s (tmux killed, SIGKILL, or the container restarted without the boot unit of "
                                                  "role trainops.pct_launch.boot_recorder); last log lines")
    absent = result_from_facts(dict(ENDED, verdict="failed", session="absent", state="absent", log_exists="0", tail=[]), 0.1)
    assert message(absent, FINISHED).startswith("Cannot find session train in container 250: no tmux session of that name is running "
                                                "and log /w/t.log does not exist")
    missing = result_from_facts(dict(ENDED, verdict="failed", session="tmux_missing", state="vanished"), 0.1)
    assert message(missing, FINISHED).startswith("Cannot watch session train in container 250: tmux is not installed there")


def test_timeout_while_waiting_for_the_end_says_the_job_was_not_stopped() -> None:
    pending = dict(BASE, verdict="pending", session="alive", state="running", pane_pid="5", ps=["PID PPID", "5 1 S python   train.py"],
                   proven_line="step 1")
    text = message(result_from_facts(pending, 3600), FINISHED)
    assert text.startswith("Timed out after 3600 s waiting for the job in session train in container 250 to end: the job still runs "
                           "(pane_pid 5, 1 processes: 5 1 S python train.py), and it was not stopped; its start was proven by 'step 1'; "
                           "log /w/t.log (99 bytes); last log lines: a | b; "), text
    assert text.endswith("wait longer (raise timeout), or stop the job (playbooks/stop.yml)")
    unseen = message(result_from_facts(dict(pending, proven_line=None), 3600), dict(FINISHED, pattern="Epoch"))
    assert "; a log line matching 'Epoch' was not seen in the log during the wait;" in unseen, unseen
    no_session = message(result_from_facts(dict(pending, session="none", state="unknown", log_exists="0"), 3600),
                         dict(FINISHED, session_name=None))
    assert "whether the job still runs is unknown (no session_name was given), and it was not stopped" in no_session
    assert "log /w/t.log does not exist" in no_session
    assert "the log path is unknown" in message(result_from_facts(dict(pending, log_path=""), 1), FINISHED)


def test_fail_pattern_while_waiting_for_the_end_is_todays_message() -> None:
    failed = result_from_facts(dict(BASE, verdict="fail_pattern", session="alive", state="running", matched_line="Traceback (x)"), 2)
    opts = dict(FINISHED, fail_pattern="Traceback")
    assert message(failed, opts) == message(failed, dict(opts, wait_until="started"))
    assert message(failed, opts).startswith("Job failed in session train in container 250: a log line matches fail_pattern 'Traceback'")


def test_tmux_session_wait_takes_the_options_but_the_job_s_own_and_the_fleet() -> None:
    assert set(ARGUMENT_SPEC) - set(WAIT_SPEC) == {"session_name", "log_path", "offset", "fleet_id", "node_kernel_log"}
    assert all(WAIT_SPEC[name] == ARGUMENT_SPEC[name] for name in WAIT_SPEC)


def test_wait_option_errors_name_the_suboption() -> None:
    wait = {name: spec.get("default") for name, spec in WAIT_SPEC.items()}
    assert wait_option_errors(wait) == []
    errors = wait_option_errors(dict(wait, timeout=0, pattern="(", fail_pattern="ok"))
    assert [error.split(" ")[3] for error in errors] == ["wait.timeout", "wait.pattern"], errors


SHUT_DOWN = "the container shut down (its init stopped every process; PID 1 was systemd-shutdown): signal TERM"


@pytest.mark.parametrize(("verdict", "opts", "head", "before"), [
    ("failed", FINISHED, "Job failed", ""), ("died", OPTS, "Job did not start", ", before a log line matching 'Epoch'")])
def test_a_shutdown_seen_during_the_wait_is_named(verdict: str, opts: dict[str, t.Any], head: str, before: str) -> None:
    record = {"exit_status": "143", "end_state": "stopped", "cause": "shutdown", "reason": SHUT_DOWN, "signal": "TERM"}
    seen = result_from_facts(dict(ENDED, verdict=verdict, exit=record, shutdown="PID 1 was systemd-shutdown"), 3.21)
    assert seen["shutdown"] == "PID 1 was systemd-shutdown"
    assert message(seen, opts) == (f"{head} in session train in container 250: the container shut down after 3.2 s (PID 1 was "
                                   f"systemd-shutdown), and the job with it (exit status 143){before}; last log lines: step 4 | "
                                   "ValueError: loss is NaN; launch the job again once the container runs")
    early = result_from_facts(dict(ENDED, verdict=verdict, state="running", exit={}, shutdown="PID 1 was systemd-shutdown"), 2)
    assert "(PID 1 was systemd-shutdown), and the job with it (no exit record yet)" in message(early, opts)


def test_a_shutdown_told_by_the_exit_record_is_named() -> None:
    record = {"exit_status": "143", "end_state": "stopped", "cause": "shutdown", "reason": SHUT_DOWN}
    later = result_from_facts(dict(ENDED, verdict="failed", exit=record), 0.2)
    assert later["shutdown"] == SHUT_DOWN
    assert reason(later, FINISHED) == (f"Job failed in session train in container 250: {SHUT_DOWN} (exit status 143, after 0.2 s); "
                                       "launch the job again once the container runs")
