# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The GPU idle watchdog of the supervisor (docs/job-life.md, ``gpu_idle_timeout``): one of the stall watchdog's sources.

While an attempt runs, ``GpuIdle.tick`` starts ``nvidia-smi --query-gpu=uuid,utilization.gpu --format=csv,noheader,nounits``
every ``interval`` seconds as a child it looks at on each tick and never waits for (``Query``: one at a time, killed
after ``QUERY_TIMEOUT`` s), and keeps, for each of the job's GPUs (job.json's ``gpus``, by UUID), since when its readings
are below ``gpu_idle_utilization`` (``Windows``). Any one of them below it for ``gpu_idle_timeout`` s is a stall
(``idle_words``; ``_job_watch`` decides the stall). A reading at or above the threshold ends that GPU's window; a query
that fails (nvidia-smi missing, failing, too slow) gives no verdict: the windows and the verdict stay as they were, and
the failure is noted once in the log (``notes``). Staged with the supervisor; standard library only, Python 3.7 or later.
"""

from __future__ import annotations

import os
import subprocess
import time
import typing as t

# How often nvidia-smi is asked (less with a short gpu_idle_timeout), and how long one answer may take.
INTERVAL = 5.0
QUERY_TIMEOUT = 5.0
QUERY = ("--query-gpu=uuid,utilization.gpu", "--format=csv,noheader,nounits")
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
Readings = t.Dict[str, t.Optional[int]]


def parse(text: str) -> Readings:
    """``GPU-..., 37`` lines as {uuid: percent}; None for a value the GPU does not report (``[N/A]``, ``[Not Supported]``)."""
    readings: Readings = {}
    for line in text.splitlines():
        uuid, comma, value = line.partition(",")
        uuid, value = uuid.strip(), value.strip()
        if not comma or not uuid or " " in uuid:  # not a row (a message)
            continue
        try:
            readings[uuid] = int(float(value.rstrip("%").strip()))
        except ValueError:
            readings[uuid] = None
    return readings


def short(uuid: str) -> str:
    """``GPU-1a2b3c4d``: enough of a UUID (its first 8 hex digits) to tell the GPUs apart in one line."""
    return uuid[:12]


def find_program(name: str) -> str | None:
    """``name`` itself when it is a path, else found in the supervisor's ``PATH`` and ``SEARCH_PATH``."""
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    for folder in (os.environ.get("PATH", "") + ":" + SEARCH_PATH).split(":"):
        candidate = os.path.join(folder, name)
        if folder and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class Windows:
    """For each of the job's GPUs, since when its readings are below ``threshold`` and the highest of them (the caller's clock)."""

    def __init__(self, uuids: t.Sequence[str], threshold: float, timeout: float) -> None:
        self.uuids, self.threshold, self.timeout = list(uuids), float(threshold), float(timeout)
        self.since: dict[str, float] = {}
        self.peak: dict[str, int] = {}
        self.at: float | None = None  # the time of the last reading: the verdict is as of then

    def reading(self, readings: Readings, now: float) -> None:
        """A reading of every GPU: a GPU at or above the threshold, or without a value, has no window."""
        self.at = now
        for uuid in self.uuids:
            value = readings.get(uuid)
            if value is None or value >= self.threshold:
                self.since.pop(uuid, None)
                self.peak.pop(uuid, None)
            else:
                self.since.setdefault(uuid, now)
                self.peak[uuid] = max(value, self.peak.get(uuid, value))

    def idle(self) -> list[tuple[str, int]]:
        """The GPUs below the threshold for ``timeout`` s as of the last reading, in the job's order, with their highest reading."""
        if self.at is None:
            return []
        return [(uuid, self.peak[uuid]) for uuid in self.uuids if uuid in self.since and self.at - self.since[uuid] >= self.timeout]

    def words(self, idle: t.Sequence[tuple[str, int]]) -> str:
        """``the job's GPUs idled below 5 % for 600 s (gpu_idle_timeout): GPU-1a2b3c4d 0 %, GPU-3c4d5e6f 1 %``, or
        ``1 of the job's 4 GPUs idled ...`` when some of them did."""
        count = len(self.uuids)
        whose = ("the job's GPU" if count == 1 else "the job's GPUs") if len(idle) == count else f"{len(idle)} of the job's {count} GPUs"
        each = ", ".join(f"{short(uuid)} {peak} %" for uuid, peak in idle)
        return f"{whose} idled below {_num(self.threshold)} % for {_num(self.timeout)} s (gpu_idle_timeout): {each}"


def _num(value: float) -> str:
    return f"{value:g}"


class Query:
    """One nvidia-smi at a time: started when due, looked at on each tick, killed after ``QUERY_TIMEOUT`` s."""

    def __init__(self, argv: t.Sequence[str], interval: float) -> None:
        self.argv, self.interval = list(argv), interval
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = self.due = 0.0

    def poll(self, now: float) -> tuple[bool, str] | None:
        """(True, its output) or (False, why) when a query ended by now; None meanwhile. Starts the next one when due."""
        if self.proc is None:
            if now < self.due:
                return None
            self.due, self.started = now + self.interval, now
            try:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             close_fds=True)
            except OSError as exc:
                return False, f"cannot run {self.argv[0]}: {exc.strerror or exc}"
        status = self.proc.poll()
        if status is None:
            if now - self.started < QUERY_TIMEOUT:
                return None
            self.close()
            return False, f"{self.argv[0]} did not answer within {QUERY_TIMEOUT:g} s"
        proc, self.proc = self.proc, None
        try:
            out = proc.communicate(timeout=1)[0].decode("utf-8", "replace")
        except subprocess.TimeoutExpired:  # a child of it keeps the pipe open
            proc.kill()
            return False, f"{self.argv[0]} did not close its output"
        if status != 0:
            return False, f"{self.argv[0]} exited {status}: {' '.join(out.split())[:200]}"
        return True, out

    def close(self) -> None:
        """Kill a query still running (its status is collected by a later look, or by Python's own cleanup)."""
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(0.2)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.proc = None


class GpuIdle:
    """The watchdog for one supervisor: ``begin`` at each attempt's start, ``tick`` on each of its ticks, ``end`` after it."""

    def __init__(self, uuids: t.Sequence[str], threshold: float, timeout: float, nvidia_smi: str = "nvidia-smi") -> None:
        self.uuids, self.threshold, self.timeout, self.nvidia_smi = list(uuids), threshold, timeout, nvidia_smi
        self.interval = min(INTERVAL, max(0.25, timeout / 4))
        self.windows = Windows(uuids, threshold, timeout)
        self.query: Query | None = None
        self.noted: set[str] = set()
        self.pending: list[str] = []

    def note(self, kind: str, words: str) -> None:
        """A note for the log, once per kind for the supervisor's whole life."""
        if kind not in self.noted:
            self.noted.add(kind)
            self.pending.append(words)

    def notes(self) -> list[str]:
        """The notes not yet written to the log."""
        pending, self.pending = self.pending, []
        return pending

    def begin(self) -> None:
        """A new attempt: windows from scratch, the first query at once."""
        self.end()
        self.windows = Windows(self.uuids, self.threshold, self.timeout)
        program = find_program(self.nvidia_smi)
        if program is None:
            self.note("missing", f"gpu_idle_timeout: {self.nvidia_smi} is not found (PATH, {SEARCH_PATH}); the GPU idle watchdog has no verdict")
        else:
            self.query = Query([program, *QUERY], self.interval)

    def tick(self, now: float | None = None) -> None:
        """Look at the query; a reading updates the windows."""
        if self.query is None:
            return
        now = time.monotonic() if now is None else now
        answer = self.query.poll(now)
        if answer is None:
            return
        ok, text = answer
        if not ok:
            self.note("failed", f"gpu_idle_timeout: no reading of the GPUs' utilisation ({text}); no verdict until one comes")
            return
        readings = parse(text)
        for uuid in self.uuids:
            if uuid not in readings:
                self.note("absent " + uuid, f"gpu_idle_timeout: {uuid} is not in {self.nvidia_smi}'s list; it is not watched")
            elif readings[uuid] is None:
                self.note("unknown " + uuid, f"gpu_idle_timeout: {uuid} does not report its utilisation; it is not watched")
        self.windows.reading(readings, now)

    def idle_words(self) -> str | None:
        """What idled for the whole window, in words (``Windows.words``), or None."""
        idle = self.windows.idle()
        return self.windows.words(idle) if idle else None

    def end(self) -> None:
        """The attempt ended: no query left running."""
        if self.query is not None:
            self.query.close()
            self.query = None


def from_job(job: t.Mapping[str, t.Any], policy: t.Mapping[str, t.Any]) -> GpuIdle | None:
    """The watchdog of a job whose ``gpu_idle_timeout`` is set and that has GPUs, or None."""
    timeout = float(policy.get("gpu_idle_timeout") or 0)
    uuids = [str(uuid) for uuid in job.get("gpus") or [] if uuid]
    if timeout <= 0 or not uuids:
        return None
    return GpuIdle(uuids, float(policy.get("gpu_idle_utilization", 5)), timeout, str(job.get("nvidia_smi") or "nvidia-smi"))
