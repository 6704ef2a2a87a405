# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""One attempt of a job as its supervisor watches it: output, progress, the time limit, the stall (docs/job-life.md).

``Watch(sup, proc, size).run()`` waits for the attempt's end a tick at a time; between ticks it notes new
log output (and, with ``stall_pattern``, progress lines), signals the job's process group at the time
limit and when the stall watchdog fires, and asks the supervisor (``_job_supervise.Supervisor``) to
record and notify each change. Staged into ``RUN_DIR/lib`` with the supervisor; Python 3.7 or later.
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
        self.limit_signalled = False
        self.kill_at: float | None = None

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
        if self.flags["stalled"] and self.sup.policy["stall_action"] == "record":
            self.flags["stalled"] = False
            self.sup.set_state("running")

    def limits(self) -> None:
        """The time limit (its signal ``time_limit_grace`` s before, KILL at it) and the stall watchdog."""
        sup, policy, now = self.sup, self.sup.policy, time.monotonic()
        limit = float(policy["time_limit"])
        if limit > 0 and not self.limit_signalled and now - sup.first_start >= limit - float(policy["time_limit_grace"]):
            self.limit_signalled = self.flags["timed_out"] = True
            self.signal(str(policy["time_limit_signal"]))
            self.kill_at = sup.first_start + limit
            sup.set_state("stopping", event="timeout")
        stall = float(policy["stall_timeout"])
        if stall > 0 and not self.flags["stalled"] and not self.flags["timed_out"] and now - self.progress >= stall:
            self.flags["stalled"] = True
            sup.set_state("stalled", event="stalled")
            if policy["stall_action"] in ("stop", "restart"):
                self.flags["stall_restart"] = policy["stall_action"] == "restart"
                self.signal("TERM")
                self.kill_at = now + STALL_KILL_AFTER
                sup.set_state("stopping")
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
                self.limits()
        finally:
            if pidfd >= 0:
                os.close(pidfd)
