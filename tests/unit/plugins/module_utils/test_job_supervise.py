# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The supervisor (``_job_supervise``) as the pane runs it: staged by ``_job_stage`` into a run dir, run as
``python -I RUN_DIR/supervisor.py RUN_DIR``, real jobs (sh), no tmux. Notifications go to a command that
appends each event to a file, the history to a file in the test's folder."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
import types
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_live, _job_stage
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_supervise import DEFAULTS, restart_delay, wants_restart
from tests.integration.fake_libcuda import build, values
from tests.integration.notify_receivers import receiver

STARTED_AT = "2026-01-01T00:00:00Z"


class Job:
    """A staged run dir with a job; its log, exit record, events, state and history."""

    def __init__(self, tmp_path: Path, command: str, env: dict[str, str] | None = None, gpus: list[str] | None = None,
                 **supervise: t.Any) -> None:
        """``gpus``: job.json's, the UUIDs of the GPUs tmux_session chose (none by default)."""
        self.run_dir = tmp_path / "run" / "job"
        self.run_dir.mkdir(parents=True)
        assert _job_stage.stage(str(self.run_dir)) is None
        self.log = tmp_path / "job.log"
        self.events_file = tmp_path / "events.jsonl"
        self.history = tmp_path / "history.jsonl"
        recorder = tmp_path / "notify.sh"
        recorder.write_text(f'#!/bin/sh\ncat >> "{self.events_file}"\n', encoding="utf-8")
        recorder.chmod(0o755)
        supervise.setdefault("notify_command", [str(recorder)])
        job = {"session_name": "job", "log_path": str(self.log), "argv": ["sh", "-c", command], "chdir": str(tmp_path),
               "venv": None, "user": None, "started_at": STARTED_AT, "host": "testhost", "supervise": supervise,
               "history_path": str(self.history), "gpus": gpus or []}
        (self.run_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
        if env is not None:
            (self.run_dir / "env").write_text(json.dumps(env), encoding="utf-8")

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-I", str(self.run_dir / "supervisor.py"), str(self.run_dir)]

    def run(self, timeout: float = 60) -> int:
        return subprocess.run(self.argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False).returncode

    @contextlib.contextmanager
    def start(self) -> t.Iterator[subprocess.Popen[bytes]]:
        proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                with contextlib.suppress(OSError, ValueError):
                    os.killpg(int((self.run_dir / "pgid").read_text(encoding="ascii")), signal.SIGKILL)
                proc.kill()
            proc.wait()

    def record(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in Path(f"{self.log}.exit").read_text(encoding="utf-8").splitlines())

    def events(self) -> list[dict[str, t.Any]]:
        """The events the notifier delivered (it may still be delivering the last one for a moment)."""
        deadline = time.monotonic() + 5
        while True:
            text = self.events_file.read_text(encoding="utf-8") if self.events_file.exists() else ""
            events = [json.loads(line) for line in text.splitlines() if line.strip()]
            if any(e["event"] in ("finished", "failed") for e in events) or time.monotonic() > deadline:
                return events
            time.sleep(0.05)

    def state(self) -> dict[str, t.Any]:
        return json.loads((self.run_dir / "state.json").read_text(encoding="utf-8"))

    def history_lines(self) -> list[dict[str, t.Any]]:
        return [json.loads(line) for line in self.history.read_text(encoding="utf-8").splitlines()]

    def log_lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines()


def _wait_for(predicate: t.Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


FAIL_TWICE = 'echo "attempt $TRAINOPS_ATTEMPT restarts $TRAINOPS_RESTARTS"; [ "$TRAINOPS_ATTEMPT" -ge 3 ] && exit 0; exit 3'


def test_a_job_failing_twice_is_restarted_twice_and_recorded_with_three_attempts(tmp_path: Path) -> None:
    job = Job(tmp_path, FAIL_TWICE, restart="on_failure", restart_delay=0.1)
    assert job.run() == 0
    record = job.record()
    assert (record["exit_status"], record["attempts"], record["end_state"]) == ("0", "3", "finished")
    lines = job.log_lines()
    assert [line for line in lines if line.startswith("attempt")] == ["attempt 1 restarts 0", "attempt 2 restarts 1", "attempt 3 restarts 2"]
    assert sum("attempt=2 started_at=" in line for line in lines) == 1 and sum("attempt=3 started_at=" in line for line in lines) == 1
    assert [e["event"] for e in job.events()] == ["started", "restarted", "restarted", "finished"]
    assert job.state()["state"] == "ended" and job.state()["attempt"] == 3


def test_without_a_restart_policy_a_failure_ends_the_job(tmp_path: Path) -> None:
    job = Job(tmp_path, FAIL_TWICE)
    assert job.run() == 3
    assert (job.record()["attempts"], job.record()["end_state"]) == ("1", "failed")
    assert [e["event"] for e in job.events()] == ["started", "failed"]
    failed = job.events()[-1]
    assert failed["exit_status"] == 3 and failed["session_name"] == "job" and failed["host"] == "testhost"
    assert failed["log_tail"] == ["attempt 1 restarts 0"]  # the collection's own lines are not in it


@pytest.mark.parametrize(("policy", "command", "attempts", "status"), [
    ({"restart": "on_failure", "restart_limit": 2}, "exit 3", "3", 3),
    ({"restart": "on_failure", "no_restart_exit_codes": [3]}, "exit 3", "1", 3),
    ({"restart": "on_failure"}, "exit 0", "1", 0),
    ({"restart": "always", "restart_limit": 2}, "exit 0", "3", 0),
    ({"restart": "on_failure", "restart_limit": 0}, "exit 3", "1", 3),
])
def test_restart_policy_limit_and_codes(tmp_path: Path, policy: dict[str, t.Any], command: str, attempts: str, status: int) -> None:
    job = Job(tmp_path, command, restart_delay=0.05, **policy)
    assert job.run() == status
    assert job.record()["attempts"] == attempts


def test_restart_delay_backs_off_up_to_its_maximum() -> None:
    policy = dict(DEFAULTS, restart_delay=10.0, restart_backoff=2.0, restart_max_delay=35.0)
    assert [restart_delay(policy, k) for k in (1, 2, 3, 4)] == [10.0, 20.0, 35.0, 35.0]


@pytest.mark.parametrize(("ended", "status", "expected"), [
    ({"stopped": True}, 1, False), ({"signalled": True}, 1, False), ({"timed_out": True}, 1, False),
    ({"shutdown": "PID 1 was systemd-shutdown"}, 143, False), ({"shutdown": None}, 143, True),
    ({"stall_restart": True}, 143, True), ({"stalled": True}, 143, True), ({}, 1, True), ({}, 0, False),
])
def test_what_is_restarted_under_on_failure(ended: dict[str, bool], status: int, expected: bool) -> None:
    """A stall only recorded (stall_action record) is no reason not to restart the failure that follows it."""
    assert wants_restart(dict(DEFAULTS, restart="on_failure"), status, ended, 0) is expected
    assert wants_restart(dict(DEFAULTS, restart="on_failure", stall_action="stop"), 143, {"stalled": True}, 0) is False


RAISES = f'"{sys.executable}" -c "raise ValueError(\'bad learning rate\')"'


def test_a_cause_not_in_restart_on_ends_the_job_at_once_and_the_end_says_why(tmp_path: Path) -> None:
    job = Job(tmp_path, RAISES, restart="on_failure", restart_on=["nccl", "oom_kill"], restart_delay=0.05)
    assert job.run() == 1
    record = job.record()
    assert (record["attempts"], record["end_state"], record["cause"]) == ("1", "failed", "python_exception")
    assert record["reason"] == ("ValueError: bad learning rate (the last Python exception in the log; exit status 1)"
                                "; not restarted: cause python_exception is not in restart_on")
    assert job.history_lines()[-1]["reason"] == record["reason"]
    assert [(e["event"], e["reason"]) for e in job.events()] == [("started", None), ("failed", record["reason"])]


def test_a_cause_in_restart_on_is_restarted_and_the_restarted_event_says_why(tmp_path: Path) -> None:
    job = Job(tmp_path, "echo attempt $TRAINOPS_ATTEMPT; kill -KILL $$", restart="on_failure", restart_on=["signal"], restart_limit=1,
              restart_delay=0.05)
    assert job.run() == 137
    record = job.record()
    assert (record["attempts"], record["cause"], record["signal"]) == ("2", "signal", "KILL")
    assert record["reason"] == "killed by signal KILL; not restarted: restart_limit 1 reached"
    events = job.events()
    assert [e["event"] for e in events] == ["started", "restarted", "failed"]
    restarted = events[1]
    assert restarted["reason"] == "attempt 1: killed by signal KILL; restart 1 of 1: cause signal is in restart_on"
    assert (restarted["attempt"], restarted["cause"], restarted["exit_status"], restarted["end_state"]) == (2, "signal", 137, None)


def test_a_crash_loop_ends_at_the_limit_within_the_window(tmp_path: Path) -> None:
    job = Job(tmp_path, "exit 3", restart="on_failure", restart_limit=2, restart_limit_window=3600, restart_delay=0.05)
    assert job.run() == 3
    record = job.record()
    assert (record["attempts"], record["end_state"]) == ("3", "failed")
    assert record["reason"] == "exit status 3; not restarted: restart_limit 2 reached within restart_limit_window 3600 s"


def test_failures_further_apart_than_the_window_are_restarted_past_the_limit_without_backoff(tmp_path: Path) -> None:
    job = Job(tmp_path, '[ "$TRAINOPS_ATTEMPT" -ge 5 ] && exit 0; exit 3', restart="on_failure", restart_limit=2,
              restart_limit_window=0.5, restart_delay=0.6, restart_backoff=2)
    assert job.run() == 0
    assert (job.record()["attempts"], job.record()["end_state"]) == ("5", "finished")
    assert [line.rsplit(" ", 1)[-1] for line in job.log_lines() if "restart_in=" in line] == ["restart_in=0.6s"] * 4
    reasons = [e["reason"] for e in job.events() if e["event"] == "restarted"]
    assert reasons == ["attempt 1: exit status 3; restart 1 of 2 within 0.5 s: restart on_failure",
                       "attempt 2: exit status 3; restart 1 of 2 within 0.5 s: restart on_failure",
                       "attempt 3: exit status 3; restart 1 of 2 within 0.5 s: restart on_failure",
                       "attempt 4: exit status 3; restart 1 of 2 within 0.5 s: restart on_failure"]


def test_the_env_values_reach_every_attempt_and_their_file_is_gone_before_the_first(tmp_path: Path) -> None:
    job = Job(tmp_path, 'echo "v=$SECRET_V attempt=$TRAINOPS_ATTEMPT file=$(ls "$RUN" 2>/dev/null | grep -c "^env$")"; exit 1',
              env={"SECRET_V": "it's $x", "RUN": ""}, restart="on_failure", restart_limit=1, restart_delay=0.05)
    (job.run_dir / "env").write_text(json.dumps({"SECRET_V": "it's $x", "RUN": str(job.run_dir)}), encoding="utf-8")
    assert job.run() == 1
    assert [line for line in job.log_lines() if line.startswith("v=")] == ["v=it's $x attempt=1 file=0", "v=it's $x attempt=2 file=0"]


def test_the_notify_url_reaches_the_notifier_and_its_file_is_gone_before_the_job_starts(tmp_path: Path) -> None:
    """``notify_url`` is in ``RUN_DIR/notify_url`` (job.json has none) until the supervisor reads it: no file holds it
    while the job runs; every attempt's events reach it (a receiver on loopback)."""
    with receiver("slack") as (url, received):
        job = Job(tmp_path, 'ls "$RUN"; grep -rlF "$NEEDLE" "$RUN" || echo "no file holds it"; exit 1', env={"RUN": ""},
                  restart="on_failure", restart_limit=1, restart_delay=0.05, notify_url=None, notify_format="slack")
        (job.run_dir / "env").write_text(json.dumps({"RUN": str(job.run_dir), "NEEDLE": url}), encoding="utf-8")
        (job.run_dir / "notify_url").write_text(url, encoding="utf-8")
        assert job.run() == 1
        _wait_for(lambda: len(received) >= 3)
    lines = job.log_lines()
    assert "notify_url" not in lines and lines.count("no file holds it") == 2, lines
    texts = [json.loads(item["body"])["text"] for item in received]
    assert texts == ["testhost job: started (attempt 1)",
                     "testhost job: restarted (attempt 2): attempt 1: exit status 1; restart 1 of 1: restart on_failure",
                     "testhost job: failed (attempt 2): exit status 1; not restarted: restart_limit 1 reached"], texts
    assert url not in (job.run_dir / "job.json").read_text(encoding="utf-8")


def test_the_time_limit_signals_then_kills_and_is_never_restarted(tmp_path: Path) -> None:
    job = Job(tmp_path, "trap 'echo got TERM' TERM; while :; do sleep 0.1; done", restart="always",
              time_limit=2, time_limit_grace=1)
    assert job.run() == 137
    record = job.record()
    assert (record["end_state"], record["cause"], record["attempts"], record["signal"]) == ("timeout", "time_limit", "1", "KILL")
    assert "time limit of 2 s" in record["reason"]
    assert "got TERM" in job.log_lines()
    assert [e["event"] for e in job.events()] == ["started", "timeout", "failed"]


def test_a_job_that_goes_silent_is_stopped_as_stalled(tmp_path: Path) -> None:
    job = Job(tmp_path, "echo step 1; sleep 100", stall_timeout=1.0, stall_action="stop")
    started = time.monotonic()
    assert job.run() == 143
    assert time.monotonic() - started < 30  # stopped by the watchdog, not by the end of sleep 100
    record = job.record()
    assert (record["end_state"], record["cause"]) == ("stalled", "stall")
    assert [e["event"] for e in job.events()] == ["started", "stalled", "failed"]


def test_a_stall_recorded_only_ends_with_the_next_progress_line(tmp_path: Path) -> None:
    job = Job(tmp_path, "echo noise; sleep 1.5; echo step 2; sleep 0.5; exit 0", stall_timeout=0.8, stall_pattern=r"^step \d")
    with job.start() as proc:
        _wait_for(lambda: (job.run_dir / "state.json").exists() and job.state()["state"] == "stalled")
        _wait_for(lambda: job.state()["state"] in ("running", "ended"))
        proc.wait(timeout=30)
    assert job.record()["end_state"] == "finished"
    assert [e["event"] for e in job.events()] == ["started", "stalled", "finished"]
    assert job.state()["last_progress_at"] is not None


def test_a_stall_restart_counts_against_the_restart_limit(tmp_path: Path) -> None:
    job = Job(tmp_path, "while :; do echo noise; sleep 0.1; done", stall_timeout=0.8, stall_pattern="step",
              stall_action="restart", restart_limit=1, restart_delay=0.05)
    assert job.run() == 143
    assert (job.record()["attempts"], job.record()["end_state"]) == ("2", "stalled")
    assert job.record()["reason"].endswith("(stall_timeout), stopped by the watchdog; not restarted: restart_limit 1 reached")
    assert [e["event"] for e in job.events()] == ["started", "stalled", "restarted", "stalled", "failed"]
    assert job.events()[2]["reason"].endswith("stopped by the watchdog; restart 1 of 1: stall_action restart")


def test_a_stop_during_the_restart_delay_ends_the_job_at_once(tmp_path: Path) -> None:
    job = Job(tmp_path, "exit 4", restart="on_failure", restart_delay=60)
    with job.start() as proc:
        _wait_for(lambda: (job.run_dir / "state.json").exists() and job.state()["state"] == "restarting")
        assert job.state()["next_restart_at"] is not None
        assert job.state()["reason"] == "attempt 1: exit status 4; restart 1 of 3: restart on_failure", "why it waits to restart"
        (job.run_dir / "stop_requested").write_text("TERM\n", encoding="ascii")
        assert proc.wait(timeout=5) == 4
    record = job.record()
    assert (record["end_state"], record["stopped_by"], record["attempts"]) == ("stopped", "trainops", "1")
    assert record["reason"] == "stopped by trainops (exit status 4)", "the stop's words, no restart's"


def test_a_hangup_of_the_pane_is_not_restarted(tmp_path: Path) -> None:
    job = Job(tmp_path, "sleep 100", restart="always", restart_delay=0.05)
    with job.start() as proc:
        _wait_for((job.run_dir / "pgid").exists)
        proc.send_signal(signal.SIGHUP)  # what tmux kill-session does to the pane's process
        assert proc.wait(timeout=10) == 129
    assert job.record()["attempts"] == "1"


def test_state_json_follows_a_running_attempt_and_the_proof_is_notified(tmp_path: Path) -> None:
    job = Job(tmp_path, "echo one; sleep 0.5; echo two; sleep 30")
    with job.start():
        _wait_for(lambda: (job.run_dir / "state.json").exists() and job.state()["last_output_at"] is not None)
        state = job.state()
        assert (state["state"], state["attempt"]) == ("running", 1)
        assert state["pid"] == int((job.run_dir / "pgid").read_text(encoding="ascii"))
        (job.run_dir / "proven").write_text("2026-01-01T00:00:01Z\n", encoding="ascii")
        _wait_for(lambda: job.events_file.exists() and '"proven"' in job.events_file.read_text(encoding="utf-8"))
    events = [json.loads(line)["event"] for line in job.events_file.read_text(encoding="utf-8").splitlines()]
    assert events.count("proven") == 1 and events[0] == "started"


def test_history_gets_the_start_and_the_end(tmp_path: Path) -> None:
    job = Job(tmp_path, "exit 5", restart="on_failure", restart_limit=1, restart_delay=0.05)
    assert job.run() == 5
    start, end = job.history_lines()
    assert start["event"] == "start" and end["event"] == "end"
    assert start["started_at"] == end["started_at"] == STARTED_AT and end["session_name"] == "job"
    assert (end["end_state"], end["exit_status"], end["attempts"]) == ("failed", 5, 2)


def test_a_signal_during_the_restart_delay_ends_the_job_without_a_restart(tmp_path: Path) -> None:
    job = Job(tmp_path, "exit 4", restart="on_failure", restart_delay=60)
    with job.start() as proc:
        _wait_for(lambda: (job.run_dir / "state.json").exists() and job.state()["state"] == "restarting")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 4
    record = job.record()
    assert (record["end_state"], record["attempts"]) == ("failed", "1")


# systemd-shutdown's killing spree (systemd src/shared/killall.c), in a PID namespace of the test's own whose PID 1 is a
# shell started through a link named systemd-shutdown (so /proc/1/comm reads systemd-shutdow, as measured in a
# container that shuts down): SIGSTOP to every process, SIGTERM to each, SIGCONT to every process.
SPREE = """
sup="$1"; shift
"$@" & pid=$!
while [ ! -s "$sup/pgid" ]; do sleep 0.05; done
sleep 0.3
kill -STOP -1; kill -TERM "$pid"; kill -TERM -- "-$(cat "$sup/pgid")"; kill -CONT -1
wait "$pid"
"""


def _shut_down_under(job: Job, tmp_path: Path) -> None:
    """Run the job's supervisor in a PID namespace whose init is named systemd-shutdown, which SIGTERMs everything
    (SPREE), as a container that shuts down; skips where there are no user and PID namespaces."""
    init = tmp_path / "systemd-shutdown"
    init.symlink_to("/bin/sh")
    argv = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", str(init), "-c", SPREE, "spree",
            str(job.run_dir), *job.argv]
    try:
        run = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False)
    except FileNotFoundError:
        pytest.skip("needs unshare (util-linux)")
    if b"unshare:" in run.stderr:
        pytest.skip(f"no user and PID namespaces here: {run.stderr.decode(errors='replace').strip()}")


def test_a_container_shutting_down_ends_the_job_as_stopped_by_the_shutdown_and_never_restarts_it(tmp_path: Path) -> None:
    job = Job(tmp_path, "echo Epoch 1; sleep 100", restart="on_failure", restart_delay=0.05)
    _shut_down_under(job, tmp_path)
    record = job.record()
    assert (record["end_state"], record["cause"], record["attempts"], record["exit_status"]) == ("stopped", "shutdown", "1", "143"), record
    assert record["reason"] == "the container shut down (its init stopped every process; PID 1 was systemd-shutdown): signal TERM"
    end = job.history_lines()[-1]
    assert (end["end_state"], end["cause"], end["reason"]) == ("stopped", "shutdown", record["reason"])
    assert [e["event"] for e in job.events()] == ["started", "failed"] and job.events()[-1]["cause"] == "shutdown"
    assert "attempt=2" not in job.log.read_text(encoding="utf-8")


def test_the_stall_names_the_memory_limit_met_meanwhile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stalled job whose container hit memory.high: the stall's words (in state.json, the stalled event, the end)."""
    from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_memory, _job_supervise  # pylint: disable=import-outside-toplevel

    counters = iter([{"high": 10, "oom_kill": 0}, {"high": 162, "oom_kill": 0}])
    monkeypatch.setattr(_job_memory, "snapshot", lambda: next(counters))
    monkeypatch.setattr(_job_supervise.process, "forward_signals", lambda *args: None)
    job = Job(tmp_path, "true", stall_timeout=30)
    with open(job.log, "ab") as log:
        sup = _job_supervise.Supervisor(str(job.run_dir), json.loads((job.run_dir / "job.json").read_text()), log)
        sup.memory = _job_memory.snapshot()
        assert sup.stall_reason() == ("the job stalled while its container was at its memory limit (memory.high reached 152 times): "
                                      "no log output for 30 s (stall_timeout)")
    monkeypatch.setattr(_job_memory, "snapshot", lambda: {"high": 10, "oom_kill": 0})
    assert sup.stall_reason() == "stalled: no log output for 30 s (stall_timeout)"


def _job_json(job: Job, **values: t.Any) -> None:
    """``job.json`` with ``values``: ``resume`` as a start at the container's boot writes it (``_job_resume``), ``live``
    as a launch by root writes it (``_boot_stage``)."""
    path = job.run_dir / "job.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text(encoding="utf-8")), **values)), encoding="utf-8")


def _resumed(job: Job, attempt: int, elapsed: float) -> None:
    _job_json(job, resume={"attempt": attempt, "elapsed": elapsed})


def test_a_start_at_boot_goes_on_with_the_launchs_next_attempt(tmp_path: Path) -> None:
    job = Job(tmp_path, FAIL_TWICE, restart="on_failure", restart_limit=2, restart_delay=0.05)
    _resumed(job, 3, 5.0)
    assert job.run() == 0
    assert [line for line in job.log_lines() if line.startswith("attempt")] == ["attempt 3 restarts 2"]
    assert sum("attempt=3 started_at=" in line for line in job.log_lines()) == 1, "the attempt is marked in the log"
    assert (job.record()["attempts"], job.record()["end_state"]) == ("3", "finished")
    assert [line["event"] for line in job.history_lines()] == ["end"], "the launch's start was written before the boot"
    assert [e["event"] for e in job.events()] == ["restarted", "finished"]


def test_a_start_at_boot_counts_against_the_restart_limit_and_the_time_limit(tmp_path: Path) -> None:
    limited = Job(tmp_path / "a", "exit 3", restart="on_failure", restart_limit=2, restart_delay=0.05)
    _resumed(limited, 3, 0.0)
    assert limited.run() == 3 and limited.record()["attempts"] == "3", "attempt 3 of 3: no more restarts"
    timed = Job(tmp_path / "b", "sleep 30", time_limit=100, time_limit_grace=1)
    _resumed(timed, 2, 99.0)
    started = time.monotonic()
    assert timed.run() in (143, 137) and time.monotonic() - started < 10
    assert timed.record()["end_state"] == "timeout"


def test_the_supervisor_notes_its_life_in_the_live_record_and_drops_it_at_the_end(tmp_path: Path) -> None:
    live = tmp_path / "jobs" / "job.json"
    job = Job(tmp_path, "sleep 1; exit 0")
    _job_json(job, live=str(live))
    assert _job_live.write(str(live), {"session_name": "job", "started_at": STARTED_AT, "state": "starting", "attempt": 0})
    seen: list[dict[str, t.Any]] = []
    with job.start() as proc:
        _wait_for(lambda: (_job_live.read(str(live)) or {}).get("state") == "running" or proc.poll() is not None)
        seen.append(_job_live.read(str(live)) or {})
        proc.wait(20)
    assert (seen[0]["state"], seen[0]["attempt"]) == ("running", 1)
    assert not live.exists(), "the end is recorded: nothing left for the next boot"


@pytest.mark.parametrize("restart_on_boot", [True, False])
def test_a_clean_shutdown_keeps_the_live_record_only_for_restart_on_boot(tmp_path: Path, restart_on_boot: bool) -> None:
    live = tmp_path / "jobs" / "job.json"
    job = Job(tmp_path, "echo Epoch 1; sleep 100", restart_on_boot=restart_on_boot)
    _job_json(job, live=str(live))
    assert _job_live.write(str(live), {"session_name": "job", "started_at": STARTED_AT, "state": "starting", "attempt": 0})
    _shut_down_under(job, tmp_path)
    assert job.record()["cause"] == "shutdown"
    if restart_on_boot:  # the next boot starts it again: its record stays, its end noted
        assert ((_job_live.read(str(live)) or {}).get("state"), (_job_live.read(str(live)) or {}).get("attempt")) == ("ended", 1)
    else:
        assert not live.exists()


# The GPU idle watchdog (gpu_idle_timeout): a fake nvidia-smi prints the lines of a file the test writes.
GPU_A = "GPU-1a2b3c4d-0000-1111-2222-333344445555"
GPU_B = "GPU-3c4d5e6f-6666-7777-8888-999900001111"


def _fake_nvidia_smi(tmp_path: Path, **utilization: int) -> tuple[Path, Path]:
    """``nvidia-smi`` in ``tmp_path/bin``, printing ``--query-gpu=uuid,utilization.gpu`` lines from ``tmp_path/gpus.csv``."""
    folder, readings = tmp_path / "bin", tmp_path / "gpus.csv"
    folder.mkdir()
    program = folder / "nvidia-smi"
    program.write_text(f'#!/bin/sh\n[ "$1" = --query-gpu=uuid,utilization.gpu ] || exit 2\nexec cat "{readings}"\n', encoding="utf-8")
    program.chmod(0o755)
    _utilization(readings, **utilization)
    return folder, readings


def _utilization(readings: Path, **values: int) -> None:
    """``A=0, B=1``: each GPU's utilisation in the fake's next answers."""
    uuids = {"A": GPU_A, "B": GPU_B}
    tmp = readings.with_suffix(".tmp")
    tmp.write_text("".join(f"{uuids[key]}, {value}\n" for key, value in values.items()), encoding="utf-8")
    tmp.replace(readings)


def test_gpus_idle_past_the_window_stop_the_job_as_stalled_naming_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _readings = _fake_nvidia_smi(tmp_path, A=0, B=1)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")  # the supervisor's PATH: job.json names no nvidia_smi
    job = Job(tmp_path, "echo step 1; sleep 100", gpus=[GPU_A, GPU_B], gpu_idle_timeout=1.0, stall_action="stop")
    started = time.monotonic()
    assert job.run() == 143
    assert time.monotonic() - started < 30  # stopped by the watchdog, not by the end of sleep 100
    record = job.record()
    words = "the job's GPUs idled below 5 % for 1 s (gpu_idle_timeout): GPU-1a2b3c4d 0 %, GPU-3c4d5e6f 1 %"
    assert (record["end_state"], record["cause"], record["reason"]) == ("stalled", "stall", f"stalled: {words}, stopped by the watchdog")
    events = job.events()
    assert [e["event"] for e in events] == ["started", "stalled", "failed"]
    assert events[1]["reason"] == f"stalled: {words}"
    end = job.history_lines()[-1]
    assert (end["end_state"], end["cause"], end["reason"]) == ("stalled", "stall", record["reason"])


def test_a_rise_of_the_utilisation_ends_a_recorded_stall(tmp_path: Path) -> None:
    folder, readings = _fake_nvidia_smi(tmp_path, A=90, B=3)
    done = tmp_path / "done"
    job = Job(tmp_path, f'while [ ! -e "{done}" ]; do sleep 0.2; done; exit 0', gpus=[GPU_A, GPU_B], gpu_idle_timeout=0.8,
              gpu_idle_utilization=10)
    _job_json(job, nvidia_smi=str(folder / "nvidia-smi"))
    with job.start() as proc:
        _wait_for(lambda: (job.run_dir / "state.json").exists() and job.state()["state"] == "stalled")
        assert job.state()["reason"] == "stalled: 1 of the job's 2 GPUs idled below 10 % for 0.8 s (gpu_idle_timeout): GPU-3c4d5e6f 3 %"
        _utilization(readings, A=90, B=40)
        _wait_for(lambda: job.state()["state"] == "running")
        assert job.state()["reason"] is None and job.state()["stalled"] is False
        done.touch()
        assert proc.wait(timeout=30) == 0
    assert job.record()["end_state"] == "finished"
    assert [e["event"] for e in job.events()] == ["started", "stalled", "finished"]


def test_a_missing_nvidia_smi_never_stalls_and_is_noted_once(tmp_path: Path) -> None:
    job = Job(tmp_path, "sleep 1.5; exit 0", gpus=[GPU_A], gpu_idle_timeout=0.5, stall_action="stop")
    _job_json(job, nvidia_smi=str(tmp_path / "none" / "nvidia-smi"))
    assert job.run() == 0
    assert job.record()["end_state"] == "finished"
    assert [e["event"] for e in job.events()] == ["started", "finished"]
    notes = [line for line in job.log_lines() if "gpu_idle_timeout" in line]
    assert notes == [f"### trainops.pct_launch: session=job attempt=1 gpu_idle_timeout: {tmp_path}/none/nvidia-smi is not found "
                     "(PATH, /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin); the GPU idle watchdog has no verdict"]


class _Idle:
    """Stands in for the GPU idle watchdog (``_job_gpu_idle.GpuIdle``): its words while the GPUs idle, else None."""

    words: str | None = None

    def begin(self) -> None:
        """A new attempt."""

    def idle_words(self) -> str | None:
        return self.words


def test_one_place_decides_the_stall_from_the_log_and_the_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorded stall begins when either source stalls, names those that do, and ends only when neither does."""
    from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_supervise, _job_watch  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(_job_supervise.process, "forward_signals", lambda *args: None)
    job = Job(tmp_path, "true", gpus=[GPU_A], stall_timeout=10, notify_states=[])
    with open(job.log, "ab") as log:
        sup = _job_supervise.Supervisor(str(job.run_dir), json.loads((job.run_dir / "job.json").read_text()), log)
        sup.gpu_idle = idle = _Idle()
        watch = _job_watch.Watch(sup, types.SimpleNamespace(pid=-1), 0)
        watch.progress = 0.0
        gpus = "the job's GPU idled below 5 % for 60 s (gpu_idle_timeout): GPU-1a2b3c4d 0 %"
        steps = [(5.0, None, None), (6.0, gpus, f"stalled: {gpus}"),
                 (11.0, gpus, f"stalled: no log output for 10 s (stall_timeout); {gpus}")]
        for now, idle.words, reason in steps:
            watch.stall(now)
            assert (sup.state["state"] == "stalled", sup.state["reason"]) == (reason is not None, reason), now
        watch.progress = 11.5  # a progress line: the GPUs still idle
        watch.stall(12.0)
        assert (sup.state["state"], sup.state["reason"]) == ("stalled", f"stalled: {gpus}")
        idle.words = None
        watch.stall(13.0)
        assert (sup.state["state"], sup.state["reason"], watch.flags["stalled"]) == ("running", None, False)


# The CUDA probe before each restart of a job with GPUs (issue 35): the stand-in libcuda (tests/integration/fake_libcuda.py)
# on the job's LD_LIBRARY_PATH, scripted by the job's environment.
CUDA_GPU = "GPU-5a5a0000-1111-2222-3333-000000000000"  # the stand-in's first GPU


def _cuda_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The job's env values: the stand-in libcuda found on its LD_LIBRARY_PATH, recording each cuInit in ``tmp_path/cuda``."""
    folder = tmp_path / "libcuda"
    folder.mkdir(exist_ok=True)
    build(folder)
    return dict({"LD_LIBRARY_PATH": str(folder), "FAKE_CUDA_RECORD": str(tmp_path / "cuda")}, **settings)


def test_a_failing_cuda_probe_ends_the_restarts_with_the_cuda_error_and_its_fix(tmp_path: Path) -> None:
    job = Job(tmp_path, "echo attempt $TRAINOPS_ATTEMPT; exit 1", env=_cuda_env(tmp_path, FAKE_CUDA_FAIL="cuInit:999"), gpus=[CUDA_GPU],
              restart="on_failure", restart_limit=3, restart_delay=0.05)
    assert job.run() == 1
    record = job.record()
    assert (record["attempts"], record["end_state"], record["cause"], record["exit_status"]) == ("1", "failed", "cuda_probe", "1"), record
    assert record["reason"].startswith(f"exit status 1; not restarted: CUDA cannot initialise GPU {CUDA_GPU[:12]} for the job: "
                                       "cuInit failed with CUDA_ERROR_UNKNOWN (999, unknown error); fix: "), record["reason"]
    assert "`nvidia-modprobe -u -c=0`" in record["reason"] and len(record["reason"]) <= 300, record["reason"]
    lines = job.log_lines()
    assert [line for line in lines if line.startswith("attempt")] == ["attempt 1"], "no second attempt"
    assert any(line.startswith("trainops.pct_launch: attempt 2 not started: CUDA cannot initialise") and line.endswith("`nvidia-modprobe -u -c=0` "
               "(or `modprobe nvidia-uvm`), then restart the container") for line in lines), "the whole fix is in the log"
    assert values(tmp_path / "cuda", "CUDA_VISIBLE_DEVICES") == [CUDA_GPU], "the probe ran once, on the job's GPU"
    assert values(tmp_path / "cuda", "uid") == [str(os.getuid())]
    assert [(e["event"], e["cause"]) for e in job.events()] == [("started", None), ("failed", "cuda_probe")]
    assert job.history_lines()[-1]["cause"] == "cuda_probe" and job.state()["reason"] == record["reason"]


@pytest.mark.parametrize("kind", ["probe passes", "no GPUs", "no libcuda"])
def test_restarts_go_on_when_cuda_initialises_or_there_is_nothing_to_probe(tmp_path: Path, kind: str) -> None:
    env = _cuda_env(tmp_path, FAKE_CUDA_FAIL="cuInit:999" if kind == "no GPUs" else "")
    if kind == "no libcuda":
        env["LD_LIBRARY_PATH"] = str(tmp_path / "nothing")
    job = Job(tmp_path, FAIL_TWICE, env=env, gpus=[] if kind == "no GPUs" else [CUDA_GPU], restart="on_failure", restart_delay=0.05)
    assert job.run() == 0
    assert (job.record()["attempts"], job.record()["end_state"], job.record()["cause"]) == ("3", "finished", "exit_status")
    probed = values(tmp_path / "cuda", "CUDA_VISIBLE_DEVICES")
    assert probed == ([CUDA_GPU, CUDA_GPU] if kind == "probe passes" else []), "one probe before each restart, none before the first attempt"


def test_the_probe_runs_as_the_jobs_user_with_the_jobs_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """probe_as gets the job's user, its clean environment (PATH, HOME, its env values) and CUDA_VISIBLE_DEVICES of its GPUs."""
    from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_supervise  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(_job_supervise.process, "forward_signals", lambda *args: None)
    calls: list[tuple[str | None, dict[str, str]]] = []
    answer = {"ran": True, "ok": False, "call": "cuCtxCreate_v2", "code": 46, "name": "CUDA_ERROR_DEVICE_UNAVAILABLE", "text": "busy",
              "device": None, "fix": "wait"}
    monkeypatch.setattr(_job_supervise._cuda_probe, "probe_as", lambda user, env: calls.append((user, dict(env))) or answer)
    job = Job(tmp_path, "true", gpus=[GPU_A, GPU_B])
    data = dict(json.loads((job.run_dir / "job.json").read_text()), user="root")
    with open(job.log, "ab") as log:
        sup = _job_supervise.Supervisor(str(job.run_dir), data, log)
        words = sup.cuda_refusal({"TOKEN": "x"})
    assert words == "CUDA cannot initialise 2 GPUs for the job: cuCtxCreate failed with CUDA_ERROR_DEVICE_UNAVAILABLE (46, busy); fix: wait"
    (user, env), = calls
    assert user == "root" and env["CUDA_VISIBLE_DEVICES"] == f"{GPU_A},{GPU_B}" and env["TOKEN"] == "x" and env["USER"] == "root", env
    assert env["HOME"] == pwd.getpwnam("root").pw_dir
