# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""When the supervisor starts a job again (``_job_restart``): the decision by the cause of the attempt's end
(``restart_on``), its words, and the restarts that count (``restart_limit_window``)."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_restart import (
    CAUSES,
    DEFAULTS,
    Counted,
    Decision,
    decide,
    policy_of,
    refused_by_cuda,
    restart_delay,
    wants_restart,
)

TRAINING = dict(DEFAULTS, restart="on_failure", restart_on=["nccl", "oom_kill", "signal", "torchelastic"])


def test_a_job_json_of_an_earlier_release_gets_the_defaults_of_the_new_settings() -> None:
    policy = policy_of({"supervise": {"restart": "on_failure", "restart_limit": 2}})
    assert (policy["restart_on"], policy["restart_limit_window"], policy["restart_limit"]) == (["any"], 0, 2)
    assert decide(policy, 1, {}, "python_exception", 0) == Decision(True, "restart 1 of 2: restart on_failure", 10.0)


@pytest.mark.parametrize("cause", ["nccl", "oom_kill", "signal", "torchelastic"])
def test_a_cause_in_restart_on_is_restarted_and_says_so(cause: str) -> None:
    assert decide(TRAINING, 137, {}, cause, 1) == Decision(True, f"restart 2 of 3: cause {cause} is in restart_on", 20.0)


@pytest.mark.parametrize("cause", ["python_exception", "exit_status", "cuda_oom", None])
def test_a_cause_not_in_restart_on_ends_the_job_at_once_and_says_why(cause: str | None) -> None:
    decision = decide(TRAINING, 1, {}, cause, 0)
    assert decision == Decision(False, f"not restarted: cause {cause or 'unknown'} is not in restart_on")


def test_no_restart_exit_codes_still_win_over_restart_on() -> None:
    policy = dict(TRAINING, no_restart_exit_codes=[137])
    assert decide(policy, 137, {}, "signal", 0) == Decision(False, "not restarted: exit status 137 is in no_restart_exit_codes")


def test_the_limit_is_named_with_its_window() -> None:
    assert decide(TRAINING, 1, {}, "nccl", 3) == Decision(False, "not restarted: restart_limit 3 reached")
    windowed = dict(TRAINING, restart_limit_window=3600)
    assert decide(windowed, 1, {}, "nccl", 3) == Decision(False, "not restarted: restart_limit 3 reached within restart_limit_window 3600 s")
    assert decide(windowed, 1, {}, "nccl", 0) == Decision(True, "restart 1 of 3 within 3600 s: cause nccl is in restart_on", 10.0)


@pytest.mark.parametrize(("ended", "policy", "expected"), [
    ({"stopped": True}, {}, Decision(False)), ({"signalled": True}, {}, Decision(False)), ({"timed_out": True}, {}, Decision(False)),
    ({"shutdown": "PID 1 was systemd-shutdown"}, {}, Decision(False)),
    ({"stalled": True}, {"stall_action": "stop"}, Decision(False)),
    ({"stalled": True}, {"stall_action": "record"}, Decision(True, "restart 1 of 3: cause nccl is in restart_on", 10.0)),
    ({"stalled": True, "stall_restart": True}, {"restart": "never", "restart_on": ["stall"], "stall_action": "restart"},
     Decision(True, "restart 1 of 3: cause stall is in restart_on", 10.0)),
    ({}, {"restart": "never"}, Decision(False)),
])
def test_what_is_never_asked_for_has_no_words(ended: dict[str, t.Any], policy: dict[str, t.Any], expected: Decision) -> None:
    cause = "stall" if ended.get("stall_restart") else "nccl"
    assert decide(dict(TRAINING, **policy), 143, ended, cause, 0) == expected


def test_an_exit_status_0_under_always_is_restarted_whatever_restart_on_says() -> None:
    policy = dict(TRAINING, restart="always")
    assert decide(policy, 0, {}, "exit_status", 0) == Decision(True, "restart 1 of 3: restart always", 10.0)
    assert decide(dict(policy, restart="on_failure"), 0, {}, "exit_status", 0) == Decision(False)


def test_a_stall_restart_ignores_the_exit_codes_but_not_restart_on() -> None:
    policy = dict(DEFAULTS, stall_action="restart", no_restart_exit_codes=[143])
    assert decide(policy, 143, {"stalled": True, "stall_restart": True}, "stall", 0).restart
    narrowed = dict(policy, restart="on_failure", restart_on=["nccl"])
    assert decide(narrowed, 143, {"stalled": True, "stall_restart": True}, "stall", 0) == Decision(
        False, "not restarted: cause stall is not in restart_on")


def test_every_cause_of_the_classification_may_be_named() -> None:
    assert set(CAUSES) == {"exit_status", "signal", "oom_kill", "cuda_oom", "nccl", "python_exception", "torchelastic", "stall"}
    assert wants_restart(dict(DEFAULTS, restart="on_failure"), 1, {}, 0), "without a cause: restart_on any"


def test_without_a_window_every_restart_counts() -> None:
    counted = Counted(DEFAULTS, 2, 100.0)
    counted.add(200.0)
    assert counted.count(10_000.0) == 3


def test_a_window_counts_only_the_restarts_of_attempts_that_ended_within_it() -> None:
    counted = Counted(dict(DEFAULTS, restart_limit_window=3600), 1, 0.0)  # a start at boot: its earlier restart as of now
    assert counted.count(0.0) == 1
    counted.add(1000.0)
    assert counted.count(3600.0) == 2 and counted.count(3601.0) == 1 and counted.count(5000.0) == 0
    assert counted.ends == [], "the restarts out of the window are forgotten"


def test_one_failure_a_day_restarts_forever_while_a_crash_loop_stops_after_the_limit() -> None:
    policy = dict(DEFAULTS, restart="on_failure", restart_limit=3, restart_limit_window=3600)
    daily, loop = Counted(policy, 0, 0.0), Counted(policy, 0, 0.0)
    for day in range(10):
        decision = decide(policy, 1, {}, "exit_status", daily.count(day * 86400.0))
        assert decision == Decision(True, "restart 1 of 3 within 3600 s: restart on_failure", 10.0), day
        daily.add(day * 86400.0)
    for minute in range(3):
        assert decide(policy, 1, {}, "exit_status", loop.count(minute * 60.0)).restart
        loop.add(minute * 60.0)
    assert not decide(policy, 1, {}, "exit_status", loop.count(180.0)).restart, "the 4th failure within an hour ends it"


def test_the_backoff_counts_the_restarts_that_count() -> None:
    policy = dict(DEFAULTS, restart="on_failure", restart_delay=10.0, restart_backoff=2.0, restart_max_delay=35.0)
    assert [decide(policy, 1, {}, "exit_status", counted).delay for counted in (0, 1, 2)] == [10.0, 20.0, 35.0]
    assert [restart_delay(policy, k) for k in (1, 2, 3, 4)] == [10.0, 20.0, 35.0, 35.0]


def test_a_restart_the_cuda_probe_refused_ends_with_its_cause_and_the_attempts_reason_cut() -> None:
    end = {"end_state": "failed", "cause": "python_exception", "exit_status": 1, "attempts": "1",
           "reason": "ValueError: " + "x" * 100 + " (the last Python exception in the log; exit status 1)"}
    refused = refused_by_cuda(end, "CUDA cannot initialise GPU 0 for the job: cuInit failed with CUDA_ERROR_UNKNOWN (999)")
    assert (refused["end_state"], refused["cause"], refused["exit_status"], refused["attempts"]) == ("failed", "cuda_probe", 1, "1")
    before, words = refused["reason"].split("; not restarted: ")
    assert len(before) == 40 and before.startswith("ValueError: xxx") and before.endswith("\u2026")
    assert words == "CUDA cannot initialise GPU 0 for the job: cuInit failed with CUDA_ERROR_UNKNOWN (999)"
    assert end["cause"] == "python_exception", "the attempt's end is left as it was"
    assert refused_by_cuda({"exit_status": 3}, "w")["reason"] == "exit status 3; not restarted: w"
