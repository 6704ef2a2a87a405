# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The supervisor in the job's tmux pane: attempts, restarts, the time limit, the stall watchdog (docs/job-life.md).

This file is the supervisor itself; ``RUN_DIR/supervisor.py`` (``_supervisor_entry``) is only its entry point,
and ``_job_process`` what it does to the job's process. ``run(run_dir)`` starts the job (``_job_process.start_job``),
watches it every ``TICK`` seconds (``_job_watch.Watch``), restarts it as ``supervise`` in job.json says, keeps
``RUN_DIR/state.json`` current, sends the notifications (``_job_notify``), and at the end classifies it
(``_job_end``), writes the trailer and the exit record, and leaves the launch in the history
(``_job_history``). Before each restart of a job with GPUs it initialises CUDA on them as the job's user
(``cuda_refusal``, ``_cuda_probe``): a failure ends the job instead, with the CUDA error and its fix. Where the
launch kept a live record for the container's next boot (``job.json``'s ``live``, ``_job_live``), it notes each
state change there and removes it once the end is recorded; a start at boot (``job.json``'s ``resume``,
``_job_resume``) goes on with the launch's next attempt. It imports only the files staged next to it, and runs with
Python 3.7 or later.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_end, _job_gpu_idle, _job_history, _job_live, _job_memory, _job_notify
from ansible_collections.trainops.pct_launch.plugins.module_utils import _cuda_probe, _job_shutdown
from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_process as process
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import PGID_FILE, PROVEN_FILE, STATE_FILE, attempt_error_file
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_restart import DEFAULTS, Counted, decide, policy_of, refused_by_cuda
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_restart import restart_delay, wants_restart
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_watch import TICK, Watch, size_of

STATE_EVERY = 2.0
# In a container that shuts down, every process is killed soon after its SIGTERM: the last notifications get this long.
SHUTDOWN_NOTIFY_WAIT = 3.0
__all__ = ["DEFAULTS", "Supervisor", "policy_of", "restart_delay", "run", "wants_restart"]  # the policy's names, as before


class Supervisor:
    """A job's whole life in its pane."""

    def __init__(self, run_dir: str, job: dict[str, t.Any], log: t.BinaryIO, notify_url: str | None = None) -> None:
        """``notify_url``: the job's webhook, which job.json never holds (``process.read_notify_url``)."""
        self.run_dir, self.job, self.log = run_dir, job, log
        self.name, self.log_path = str(job["session_name"]), str(job["log_path"])
        self.policy = dict(policy_of(job), notify_url=notify_url)
        self.notifier = _job_notify.Notifier(self.policy, run_dir)
        self.first_start = time.monotonic()
        self.state: dict[str, t.Any] = {"state": "starting", "since": process.now(), "attempt": 0, "restarts": 0, "pid": None,
                                        "last_output_at": None, "last_progress_at": None, "next_restart_at": None,
                                        "stalled": False, "end_state": None, "reason": None}
        self.written = 0.0
        self.memory: dict[str, int] = {}  # the memory counters when the attempt started (_job_memory)
        self.attempt_start = time.monotonic()
        self.attempt_started_at = str(self.job.get("started_at") or "")  # the wall time, for the exit record (the Xid readers)
        # a start at the container's boot (_job_resume): the next attempt of the same launch, the time_limit partly used
        self.live, self.resume = job.get("live"), dict(job.get("resume") or {})
        if self.resume:
            self.state["attempt"] = self.state["restarts"] = max(0, int(self.resume.get("attempt") or 1) - 1)
            self.first_start -= float(self.resume.get("elapsed") or 0)
        self.proven_sent = False
        self.gpu_idle = _job_gpu_idle.from_job(job, self.policy)  # the GPU idle watchdog (gpu_idle_timeout), or None
        self.stall_words: str | None = None  # what stalled (_job_watch.Watch.stall): the log's or the GPUs' words
        self.children: list[int] = []
        self.received: list[int] = []
        process.forward_signals(self.children, self.received)

    def set_state(self, state: str, event: str | None = None, **values: t.Any) -> None:
        """A new state: state.json now, and its notification."""
        if state in ("stalled", "running"):  # the stall's words (a memory limit met meanwhile), gone once it ends
            values.setdefault("reason", self.stall_reason() if state == "stalled" else None)
        self.state.update(values, state=state, since=process.now(), stalled=state == "stalled")
        self.write_state()
        if self.live and state != "ended":  # what the container's next boot reads (_job_live)
            _job_live.note(self.live, self.job.get("started_at"), state=state, since=self.state["since"], attempt=self.state["attempt"])
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

    def attempt(self, env: t.Mapping[str, str], before: t.Mapping[str, t.Any] | None = None) -> tuple[int, dict[str, t.Any], dict[str, int]]:
        """Start the next attempt and watch it: (status, how it ended, how its memory counters grew). ``before``: the end
        of the attempt it restarts, its ``reason`` saying why, for the ``restarted`` event."""
        number = self.state["attempt"] + 1
        if number > 1:
            process.log_line(self.log, f"{process.PROTOCOL}session={self.name} attempt={number} started_at={process.now()}")
        error_file = os.path.join(self.run_dir, attempt_error_file(number))
        extra = {"TRAINOPS_ATTEMPT": str(number), "TRAINOPS_RESTARTS": str(number - 1), "TRAINOPS_SESSION_NAME": self.name,
                 "TORCHELASTIC_ERROR_FILE": env.get("TORCHELASTIC_ERROR_FILE", error_file)}
        self.memory, self.attempt_start, size = _job_memory.snapshot(), time.monotonic(), size_of(self.log_path)
        self.attempt_started_at = process.now()
        proc = process.start_job(self.job, self.log, dict(env, **extra))
        self.state.update(attempt=number, restarts=number - 1, next_restart_at=None)
        if isinstance(proc, int):
            self.set_state("running", pid=None)
            return proc, {"shutdown": self.shutdown(proc)}, {}
        self.children[:] = [proc.pid]
        process.write_pgid(self.run_dir, proc.pid)
        if number == 1:
            sys.stdout.write(f"trainops.pct_launch: session {self.name} runs pid {proc.pid}; output goes to {self.log_path}\n")
            sys.stdout.flush()
        self.set_state("running", pid=proc.pid)
        self.notify("started" if number == 1 else "restarted", before)
        status, flags = Watch(self, proc, size).run()
        return status, dict(flags, shutdown=self.shutdown(status)), self.memory_growth()

    def memory_growth(self) -> dict[str, int]:
        """How the memory counters grew since the attempt started."""
        return _job_memory.growth(self.memory, _job_memory.snapshot())

    def memory_note(self, grown: t.Mapping[str, int] | None = None) -> str | None:
        """What the memory counters say about the attempt so far, in words (``_job_memory.note``), or None."""
        grown = self.memory_growth() if grown is None else grown
        return _job_memory.note(grown, time.monotonic() - self.attempt_start)

    def shutdown(self, status: int) -> str | None:
        """The evidence that the container is shutting down (asking systemd only when a signal came), or None.

        Asked at every attempt's end, whatever ``received`` says: systemd-shutdown SIGTERMs the job and this process at
        once, and when the kernel gives this process's SIGTERM to the notifier's thread, Python's handler may run only
        after the main thread saw the job's end (measured: the job was restarted in the container that shut down).
        """
        signalled = bool(self.received) or _job_end.signal_name(status) is not None
        return _job_shutdown.shutting_down(ask_systemd=signalled)

    def pause(self, seconds: float, reason: str) -> bool:
        """Wait before a restart (``reason``: why, in state.json meanwhile); False when a stop or the time limit came meanwhile."""
        self.set_state("restarting", next_restart_at=_iso_in(seconds), pid=None, reason=reason)
        process.log_line(self.log, f"{process.PROTOCOL}session={self.name} attempt={self.state['attempt']} restart_in={seconds:g}s")
        deadline = time.monotonic() + seconds
        limit = float(self.policy["time_limit"])
        while time.monotonic() < deadline:
            if process.stop_signal_of(self.run_dir) is not None or (limit > 0 and time.monotonic() - self.first_start >= limit):
                return False
            if self.received:  # the pane was told to end, or the container shuts down: no restart
                return False
            time.sleep(min(TICK, max(0.0, deadline - time.monotonic())))
        return True

    def run(self, env: t.Mapping[str, str]) -> int:
        """Every attempt, then the end; the last attempt's status. Each attempt's end is classified as the exit record's
        (``classify``): whether it is started again depends on its cause (``restart_on``); both the ``restarted`` event
        and the end's reason say why it was or was not."""
        history = str(self.job.get("history_path") or _job_history.history_path())
        if not self.resume:  # a start at boot continues its launch: the boot recorder noted it (boot_restart)
            _job_history.append(history, {"event": "start", **self._launch()})
        counted = Counted(self.policy, self.state["restarts"], time.monotonic())
        status, flags, grown = self.attempt(env)
        while True:
            ended = time.monotonic()
            end = self.classify(status, flags, grown, env)
            decision = decide(self.policy, status, flags, end.get("cause"), counted.count(ended))
            note = decision.words
            if not decision.restart:
                break
            counted.add(ended)
            why = _job_end.one_line(f"attempt {self.state['attempt']}: {end.get('reason')}", f"; {note}")
            if not self.pause(decision.delay, why):  # a stop, a signal or the time limit during the delay: that is the end
                end, note = self.classify(status, flags, grown, env), None
                break
            refused = self.cuda_refusal(env)
            if refused:  # CUDA cannot initialise the job's GPUs: another attempt would fail the same way
                end, note = refused_by_cuda(end, refused), None
                end["reason"] = _job_end.one_line(end["reason"])
                break
            status, flags, grown = self.attempt(env, dict(end, end_state=None, reason=why))
        if note:  # why it was not started again
            end["reason"] = _job_end.one_line(str(end.get("reason")), f"; {note}")
        self.leave(history, status, end)
        return status

    def cuda_refusal(self, env: t.Mapping[str, str]) -> str | None:
        """The failed CUDA probe's message (``_cuda_probe.message``), also written to the log, or None: CUDA initialised
        on the job's GPUs as the job's user with the job's environment, or the job has no GPUs, or the target no libcuda."""
        gpus = [str(uuid) for uuid in self.job.get("gpus") or [] if uuid]
        if not gpus:
            return None
        user = self.job.get("user")
        try:
            home = pwd.getpwnam(user).pw_dir if user else pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:  # the probe says that the user does not exist
            home = "/"
        environ = dict(process.job_environment(self.job, home or "/", env), CUDA_VISIBLE_DEVICES=",".join(gpus))
        result = _cuda_probe.probe_as(user, environ)
        words = _cuda_probe.message(result, f"GPU {gpus[0][:12]}" if len(gpus) == 1 else f"{len(gpus)} GPUs")  # short: the reason has 300 characters
        if not words:
            return None
        process.log_line(self.log, f"trainops.pct_launch: attempt {self.state['attempt'] + 1} not started: {words}")
        return words

    def classify(self, status: int, flags: t.Mapping[str, t.Any], grown: t.Mapping[str, int], env: t.Mapping[str, str]) -> dict[str, t.Any]:
        """The end of an attempt (``_job_end.classify``), in the supervisor's own words where it caused it."""
        if self.received and not flags.get("shutdown"):  # a signal after the attempt's end (while it waited to restart)
            flags = dict(flags, shutdown=self.shutdown(status))
        limit = float(self.policy["time_limit"])
        timed_out = bool(flags.get("timed_out")) or (limit > 0 and time.monotonic() - self.first_start >= limit)
        # a job that ended by itself (exit status 0, no signal anywhere) is not one the shutdown ended
        shutdown = flags.get("shutdown") if self.received or status != 0 else None
        end = _job_end.classify(status, self.log_path, stopped=process.stop_signal_of(self.run_dir) is not None, timed_out=timed_out,
                                stalled=bool(flags.get("stalled")) and self.policy["stall_action"] != "record",
                                oom_kills_during=grown.get("oom_kill", 0), error_file=self._error_file(env), shutdown=shutdown,
                                memory=self.memory_note(grown))
        end = dict(end, attempts=str(self.state["attempt"]), exit_status=status, attempt_started_at=self.attempt_started_at,
                   gpu_bus_ids=",".join(str(bus) for bus in self.job.get("gpu_bus_ids") or ()))
        end["reason"] = self._own_reason(end, grown) or end.get("reason")
        return end

    def leave(self, history: str, status: int, end: t.Mapping[str, t.Any]) -> None:
        """The trailer, the exit record and the history first (a shutdown kills everything soon), then the end's event."""
        ended = process.now()
        stop = process.stop_signal_of(self.run_dir)
        process.log_line(self.log, f"{process.PROTOCOL}session={self.name} exit_status={status} ended_at={ended}")
        record = process.exit_record_text(self.name, status, str(self.job.get("started_at", "")), ended, stop, end)
        process.write_exit_record(self.run_dir, self.log_path, record)
        process.remove(os.path.join(self.run_dir, PGID_FILE))
        self.set_state("ended", end_state=end["end_state"], reason=end.get("reason"), pid=None)
        _job_history.append(history, {"event": "end", **self._launch(), "ended_at": ended, "end_state": end["end_state"],
                                      "exit_status": status, "cause": end.get("cause"), "reason": end.get("reason"),
                                      "attempts": self.state["attempt"], "attempt_started_at": end.get("attempt_started_at"),
                                      "gpu_bus_ids": end.get("gpu_bus_ids") or None})
        _job_live.ended(self.live, self.job.get("started_at"), self.state["attempt"],  # the next boot: nothing to do, or a restart
                        again=end.get("cause") == "shutdown" and bool(self.policy.get("restart_on_boot")))
        self.notify("finished" if end["end_state"] == "finished" else "failed", end)
        self.notifier.close(SHUTDOWN_NOTIFY_WAIT if end.get("cause") == "shutdown" else _job_notify.CLOSE_WAIT)

    def log_stall_words(self) -> str:
        """``no log output for 30 s (stall_timeout)``, ``no log line matching 'step' for ...``."""
        policy = self.policy
        what = f"no log line matching {policy['stall_pattern']!r}" if policy.get("stall_pattern") else "no log output"
        return f"{what} for {float(policy['stall_timeout']):g} s (stall_timeout)"

    def stall_reason(self) -> str:
        """``stalled: no log output for 30 s (stall_timeout)`` (the words of what stalled: ``stall_words``, the log's by
        default), or, when the memory counters grew meanwhile, ``the job stalled while its container was at its memory
        limit (memory.high reached 3 times): no log ...``."""
        words = self.stall_words or self.log_stall_words()
        note = self.memory_note()
        return f"the job stalled while {note}: {words}" if note else f"stalled: {words}"

    def _own_reason(self, end: t.Mapping[str, t.Any], grown: t.Mapping[str, int]) -> str | None:
        """The words of an end the supervisor caused itself: the time limit, the stall watchdog."""
        policy = self.policy
        if end.get("cause") == "time_limit":
            note = self.memory_note(grown)
            return (f"the time limit of {float(policy['time_limit']):g} s was reached ({policy['time_limit_signal']} "
                    f"{float(policy['time_limit_grace']):g} s before it, then KILL); exit status {end['exit_status']}"
                    + (f"; meanwhile {note}" if note else ""))
        if end.get("cause") == "stall":
            return f"{self.stall_reason()}, stopped by the watchdog"
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
    url = process.read_notify_url(run_dir)  # the same
    with open(job["log_path"], "ab", buffering=0) as log:
        return Supervisor(run_dir, job, log, url).run(env)
