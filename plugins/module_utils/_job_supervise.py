# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The supervisor in the job's tmux pane: attempts, restarts, the time limit, the stall watchdog (docs/job-life.md).

This file is the supervisor itself; ``RUN_DIR/supervisor.py`` (``_supervisor_entry``) is only its entry point,
and ``_job_process`` what it does to the job's process. ``run(run_dir)`` starts the job (``_job_process.start_job``),
watches it every ``TICK`` seconds (``_job_watch.Watch``), restarts it as ``supervise`` in job.json says, keeps
``RUN_DIR/state.json`` current, sends the notifications (``_job_notify``), and at the end classifies it
(``_job_end``), writes the trailer and the exit record, and leaves the launch in the history
(``_job_history``). It imports only the files staged next to it, and runs with Python 3.7 or later.
"""

from __future__ import annotations

import json
import os
import sys
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_end, _job_history, _job_notify
from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_process as process
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import PGID_FILE, PROVEN_FILE, STATE_FILE, attempt_error_file
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_watch import TICK, Watch, size_of

STATE_EVERY = 2.0
DEFAULTS: dict[str, t.Any] = {
    "restart": "never", "restart_limit": 3, "restart_delay": 10.0, "restart_backoff": 2.0, "restart_max_delay": 300.0,
    "no_restart_exit_codes": [], "time_limit": 0, "time_limit_signal": "TERM", "time_limit_grace": 30,
    "stall_timeout": 0, "stall_pattern": None, "stall_action": "record",
    "notify_command": None, "notify_url": None, "notify_states": list(_job_notify.STATES), "notify_lines": 10,
}


def policy_of(job: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The job's ``supervise`` settings over the defaults."""
    return dict(DEFAULTS, **(job.get("supervise") or {}))


def restart_delay(policy: t.Mapping[str, t.Any], restart: int) -> float:
    """Seconds before restart number ``restart`` (1-based): the delay, times the backoff per earlier restart, capped."""
    delay = float(policy["restart_delay"]) * float(policy["restart_backoff"]) ** (restart - 1)
    return min(delay, float(policy["restart_max_delay"]))


def wants_restart(policy: t.Mapping[str, t.Any], status: int, ended: t.Mapping[str, bool], restarts: int) -> bool:
    """Whether an attempt that ended so is started again (``ended``: stopped, signalled, timed_out, stalled, stall_restart)."""
    if ended.get("stopped") or ended.get("signalled") or ended.get("timed_out") or restarts >= int(policy["restart_limit"]):
        return False
    if ended.get("stall_restart"):
        return True
    if ended.get("stalled") or status in policy["no_restart_exit_codes"]:
        return False
    return policy["restart"] == "always" or (policy["restart"] == "on_failure" and status != 0)


class Supervisor:
    """A job's whole life in its pane."""

    def __init__(self, run_dir: str, job: dict[str, t.Any], log: t.BinaryIO) -> None:
        self.run_dir, self.job, self.log = run_dir, job, log
        self.name, self.log_path = str(job["session_name"]), str(job["log_path"])
        self.policy = policy_of(job)
        self.notifier = _job_notify.Notifier(self.policy, run_dir)
        self.first_start = time.monotonic()
        self.state: dict[str, t.Any] = {"state": "starting", "since": process.now(), "attempt": 0, "restarts": 0, "pid": None,
                                        "last_output_at": None, "last_progress_at": None, "next_restart_at": None,
                                        "stalled": False, "end_state": None, "reason": None}
        self.written = 0.0
        self.proven_sent = False
        self.children: list[int] = []
        self.received: list[int] = []
        process.forward_signals(self.children, self.received)

    def set_state(self, state: str, event: str | None = None, **values: t.Any) -> None:
        """A new state: state.json now, and its notification."""
        self.state.update(values, state=state, since=process.now(), stalled=state == "stalled")
        self.write_state()
        if event:
            self.notify(event)

    def write_state(self) -> None:
        """``RUN_DIR/state.json``."""
        self.written = time.monotonic()
        process.write_whole(os.path.join(self.run_dir, STATE_FILE), json.dumps(self.state, ensure_ascii=False), 0o644)

    def tick(self) -> None:
        """Between ticks: the proof's notification, state.json at most every ``STATE_EVERY`` s."""
        if not self.proven_sent and os.path.exists(os.path.join(self.run_dir, PROVEN_FILE)):
            self.proven_sent = True
            self.notify("proven")
        if time.monotonic() - self.written >= STATE_EVERY:
            self.write_state()

    def notify(self, event: str, end: t.Mapping[str, t.Any] | None = None) -> None:
        """Send the event (the notifier filters by ``notify_states`` and never raises)."""
        end = end or {}
        self.notifier.send({
            "event": event, "session_name": self.name, "host": self.job.get("host") or process.hostname(),
            "attempt": self.state["attempt"], "attempts": self.state["attempt"], "time": process.now(),
            "started_at": self.job.get("started_at"), "exit_status": end.get("exit_status"), "end_state": end.get("end_state"),
            "cause": end.get("cause"), "reason": end.get("reason") or self.state.get("reason"), "log_path": self.log_path,
            "log_tail": self.log_tail()})

    def log_tail(self) -> list[str]:
        """The log's last ``notify_lines`` lines of output."""
        return _job_end.last_lines(self.log_path, int(self.policy["notify_lines"]))

    def attempt(self, env: t.Mapping[str, str]) -> tuple[int, dict[str, bool], int]:
        """Start the next attempt and watch it: (status, how it ended, OOM kills during it)."""
        number = self.state["attempt"] + 1
        if number > 1:
            process.log_line(self.log, f"{process.PROTOCOL}session={self.name} attempt={number} started_at={process.now()}")
        error_file = os.path.join(self.run_dir, attempt_error_file(number))
        extra = {"TRAINOPS_ATTEMPT": str(number), "TRAINOPS_RESTARTS": str(number - 1), "TRAINOPS_SESSION_NAME": self.name,
                 "TORCHELASTIC_ERROR_FILE": env.get("TORCHELASTIC_ERROR_FILE", error_file)}
        oom_before, size = _job_end.oom_kills(), size_of(self.log_path)
        proc = process.start_job(self.job, self.log, dict(env, **extra))
        self.state.update(attempt=number, restarts=number - 1, next_restart_at=None)
        if isinstance(proc, int):
            self.set_state("running", pid=None)
            return proc, {}, 0
        self.children[:] = [proc.pid]
        process.write_pgid(self.run_dir, proc.pid)
        if number == 1:
            sys.stdout.write(f"trainops.pct_launch: session {self.name} runs pid {proc.pid}; output goes to {self.log_path}\n")
            sys.stdout.flush()
        self.set_state("running", event="started" if number == 1 else "restarted", pid=proc.pid)
        status, flags = Watch(self, proc, size).run()
        oom_after = _job_end.oom_kills()
        during = oom_after - oom_before if oom_after is not None and oom_before is not None else 0
        return status, flags, max(during, 0)

    def pause(self, seconds: float) -> bool:
        """Wait before a restart; False when a stop or the time limit came meanwhile."""
        self.set_state("restarting", next_restart_at=_iso_in(seconds), pid=None)
        process.log_line(self.log, f"{process.PROTOCOL}session={self.name} attempt={self.state['attempt']} restart_in={seconds:g}s")
        deadline = time.monotonic() + seconds
        limit = float(self.policy["time_limit"])
        while time.monotonic() < deadline:
            if process.stop_signal_of(self.run_dir) is not None or (limit > 0 and time.monotonic() - self.first_start >= limit):
                return False
            time.sleep(min(TICK, max(0.0, deadline - time.monotonic())))
        return True

    def run(self, env: t.Mapping[str, str]) -> int:
        """Every attempt, then the end; the last attempt's status."""
        history = str(self.job.get("history_path") or _job_history.history_path())
        _job_history.append(history, {"event": "start", **self._launch()})
        status, flags, oom = self.attempt(env)
        while wants_restart(self.policy, status, flags, self.state["restarts"]) and self.pause(restart_delay(self.policy, self.state["restarts"] + 1)):
            status, flags, oom = self.attempt(env)
        stop = process.stop_signal_of(self.run_dir)
        limit = float(self.policy["time_limit"])
        timed_out = bool(flags.get("timed_out")) or (limit > 0 and time.monotonic() - self.first_start >= limit)
        end = _job_end.classify(status, self.log_path, stopped=stop is not None, timed_out=timed_out,
                                stalled=bool(flags.get("stalled")) and self.policy["stall_action"] != "record",
                                oom_kills_during=oom, error_file=self._error_file(env))
        end = dict(end, attempts=str(self.state["attempt"]), exit_status=status)
        end["reason"] = self._own_reason(end) or end.get("reason")
        ended = process.now()
        process.log_line(self.log, f"{process.PROTOCOL}session={self.name} exit_status={status} ended_at={ended}")
        record = process.exit_record_text(self.name, status, str(self.job.get("started_at", "")), ended, stop, end)
        process.write_exit_record(self.run_dir, self.log_path, record)
        process.remove(os.path.join(self.run_dir, PGID_FILE))
        self.set_state("ended", end_state=end["end_state"], reason=end.get("reason"), pid=None)
        _job_history.append(history, {"event": "end", **self._launch(), "ended_at": ended, "end_state": end["end_state"],
                                      "exit_status": status, "cause": end.get("cause"), "reason": end.get("reason"),
                                      "attempts": self.state["attempt"]})
        self.notify("finished" if end["end_state"] == "finished" else "failed", end)
        self.notifier.close()
        return status

    def _own_reason(self, end: t.Mapping[str, t.Any]) -> str | None:
        """The words of an end the supervisor caused itself: the time limit, the stall watchdog."""
        policy = self.policy
        if end.get("cause") == "time_limit":
            return (f"the time limit of {float(policy['time_limit']):g} s was reached ({policy['time_limit_signal']} "
                    f"{float(policy['time_limit_grace']):g} s before it, then KILL); exit status {end['exit_status']}")
        if end.get("cause") == "stall":
            what = f"no log line matching {policy['stall_pattern']!r}" if policy.get("stall_pattern") else "no log output"
            return f"stalled: {what} for {float(policy['stall_timeout']):g} s (stall_timeout), stopped by the watchdog"
        return None

    def _launch(self) -> dict[str, t.Any]:
        return {"session_name": self.name, "host": self.job.get("host") or process.hostname(),
                "started_at": self.job.get("started_at"), "log_path": self.log_path}

    def _error_file(self, env: t.Mapping[str, str]) -> str:
        return env.get("TORCHELASTIC_ERROR_FILE") or os.path.join(self.run_dir, attempt_error_file(self.state["attempt"]))


def _iso_in(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))


def run(run_dir: str) -> int:
    """Supervise the job of ``run_dir`` for its whole life; its last exit status."""
    job = process.load_job(run_dir)
    env = process.read_env(run_dir)  # deleted now, kept in memory for the restarts
    with open(job["log_path"], "ab", buffering=0) as log:
        return Supervisor(run_dir, job, log).run(env)
