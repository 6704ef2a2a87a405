# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""One attempt of a job as its supervisor watches it: output, progress, the time limit, the stall (docs/job-life.md).

``Watch(sup, proc, size).run()`` waits for the attempt's end a tick at a time; between ticks it notes new
log output (and, with ``stall_pattern``, progress lines), looks at the GPU idle watchdog (``_job_gpu_idle``, the
supervisor's ``gpu_idle``), signals the job's process group at the time limit and when the stall watchdog fires, and
asks the supervisor (``_job_supervise.Supervisor``) to record and notify each change. A stall has two sources, the log
(no progress for ``stall_timeout``) and the GPUs (idle for ``gpu_idle_timeout``); ``stall`` alone decides it.
Staged into ``RUN_DIR/lib`` with the supervisor; Python 3.7 or later.
"""

from __future__ import annotations

import os
import re
import signal
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_process as process

# How often the supervisor looks (a stall is seen within its window plus one tick).
TICK = 0.25
# A stall stopped by the watchdog: KILL this long after TERM.
STALL_KILL_AFTER = 30.0


def size_of(path: str) -> int:
    """The size of a file, 0 when it cannot be read."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class Watch:
    """One attempt as the supervisor sees it between two ticks: output, progress, the limit and the stall."""

    def __init__(self, sup: t.Any, proc: t.Any, size: int) -> None:
        """``size``: the log's size before the attempt started."""
        self.sup, self.proc, self.pgid = sup, proc, proc.pid
        policy = sup.policy
        self.pattern = re.compile(policy["stall_pattern"]) if policy.get("stall_pattern") else None
        self.size = size
        self.offset, self.partial = size, b""
        self.progress = time.monotonic()
        self.flags = {"stopped": False, "timed_out": False, "stalled": False, "stall_restart": False}
        self.stalls: dict[str, str] = {}  # while stalled: its sources (log, gpu) and their words
        self.limit_signalled = False
        self.kill_at: float | None = None
        self.gpu = getattr(sup, "gpu_idle", None)
        if self.gpu is not None:
            self.gpu.begin()

    def signal(self, name: str) -> None:
        """Signal the attempt's process group (it may be gone already)."""
        try:
            os.killpg(self.pgid, getattr(signal, "SIG" + name))
        except OSError:
            pass

    def output(self) -> None:
        """New log bytes: the time of the last output, and of the last progress line (``stall_pattern``)."""
        size = size_of(self.sup.log_path)
        if size == self.size:
            return
        self.size = size
        self.sup.state["last_output_at"] = process.now()
        if self.pattern is None:
            self._progress()
            return
        if size < self.offset:  # truncated or replaced
            self.offset, self.partial = 0, b""
        for line in self._new_lines():
            if not line.startswith(process.PROTOCOL.encode("ascii")) and self.pattern.search(line.decode("utf-8", "replace")):
                self._progress()

    def _new_lines(self) -> list[bytes]:
        try:
            with open(self.sup.log_path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read(4 << 20)
        except OSError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()[-(1 << 20):]
        return lines

    def _progress(self) -> None:
        self.progress = time.monotonic()
        self.sup.state["last_progress_at"] = process.now()

    def gpus(self) -> None:
        """The GPU idle watchdog's query and readings; its notes (nvidia-smi missing or failing) as protocol lines."""
        if self.gpu is None:
            return
        self.gpu.tick()
        notes = self.gpu.notes()
        quiet = bool(notes) and size_of(self.sup.log_path) == self.size  # no output of the job's since the last look
        for note in notes:
            process.log_line(self.sup.log, f"{process.PROTOCOL}session={self.sup.name} attempt={self.sup.state['attempt']} {note}")
        if quiet:  # the collection's own lines are no output of the job's (the log watchdog); else the job's output counts
            self.size = size_of(self.sup.log_path)

    def sources(self, now: float) -> dict[str, str]:
        """What stalls now, in words: ``log`` (no progress for ``stall_timeout``), ``gpu`` (idle for ``gpu_idle_timeout``)."""
        found = {}
        stall = float(self.sup.policy["stall_timeout"])
        if stall > 0 and now - self.progress >= stall:
            found["log"] = self.sup.log_stall_words()
        idle = self.gpu.idle_words() if self.gpu is not None else None
        if idle:
            found["gpu"] = idle
        return found

    def stall(self, now: float) -> None:
        """The stall watchdog, the one place that decides a stall: it begins when a source stalls (state ``stalled``, its
        event; ``stall_action`` stop or restart signals the job), and a stall only recorded ends once no source stalls."""
        sup, policy = self.sup, self.sup.policy
        if self.flags["stalled"] and policy["stall_action"] != "record":
            return  # stopped by the watchdog: decided
        found = self.sources(now)
        if set(found) == set(self.stalls) or (not self.stalls and self.flags["timed_out"]):
            return
        began, self.stalls = not self.stalls, found
        sup.stall_words = "; ".join(found.values()) or None
        self.flags["stalled"] = bool(found)
        if not found:
            sup.set_state("running")
        elif not began:  # the other source now: the same stall, in its words
            sup.state["reason"] = sup.stall_reason()
            sup.write_state()
        else:
            sup.set_state("stalled", event="stalled")
            if policy["stall_action"] in ("stop", "restart"):
                self.flags["stall_restart"] = policy["stall_action"] == "restart"
                self.signal("TERM")
                self.kill_at = now + STALL_KILL_AFTER
                sup.set_state("stopping")

    def limits(self) -> None:
        """The time limit (its signal ``time_limit_grace`` s before, KILL at it) and the stall watchdog."""
        sup, policy, now = self.sup, self.sup.policy, time.monotonic()
        limit = float(policy["time_limit"])
        if limit > 0 and not self.limit_signalled and now - sup.first_start >= limit - float(policy["time_limit_grace"]):
            self.limit_signalled = self.flags["timed_out"] = True
            self.signal(str(policy["time_limit_signal"]))
            self.kill_at = sup.first_start + limit
            sup.set_state("stopping", event="timeout")
        self.stall(now)
        if self.kill_at is not None and now >= self.kill_at:
            self.signal("KILL")
            self.kill_at = None

    def run(self) -> tuple[int, dict[str, bool]]:
        """Watch until the attempt ends; its status and how it ended."""
        pidfd = process.pidfd_of(self.proc)  # sleep between ticks rather than poll: the job's end wakes the wait
        try:
            while True:
                status = process.wait_job(self.proc, TICK, pidfd)
                self.output()
                self.sup.tick()
                if status is not None:
                    self.flags["stopped"] = process.stop_signal_of(self.sup.run_dir) is not None
                    self.flags["signalled"] = bool(self.sup.received)  # the pane was told to end (tmux kill-session: HUP)
                    return status, self.flags
                self.gpus()
                self.limits()
        finally:
            if pidfd >= 0:
                os.close(pidfd)
            if self.gpu is not None:
                self.gpu.end()
