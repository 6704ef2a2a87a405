# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""One chunk of ``wait_for_log`` on the host the log is on: read the log from an offset until a verdict.

``poll(params)`` reads the log incrementally from ``offset``, matches whole lines only with Python
regular expressions, skips the protocol's own ``### trainops.pct_launch:`` lines and stops at the
first verdict or at the end of the chunk (``duration`` seconds): ``started`` (pattern seen, or any
output line without a pattern), ``fail_pattern``, ``died`` (the session ended or is gone, or an exit
record appeared), ``pending`` (the caller decides whether that is a timeout). It returns the facts
``_log_wait.result_from_facts`` reads, the session's state decided by ``_tmux_cli.session_state``.

With ``wait_until: finished`` the start (pattern, or the first output) is only noted (``proven_line``,
and recorded on a live session as with ``started``) and the chunk goes on until the job ends:
``finished`` (exit record with exit status 0) or ``failed`` (any other end), ``fail_pattern`` or ``pending``.
With ``show_lines`` the chunk also returns its new lines (``new_lines``: the last ``NEW_LINES_MAX`` of them,
at most ``NEW_LINES_BYTES``, protocol lines left out; ``lines_omitted`` counts the others), and ends
``LINES_FLUSH`` seconds after it first read one, so that they are shown soon (one module run per
``LINES_FLUSH`` seconds at most while output flows).

Recording a proof sets ``@trainops_proven`` on the session and writes ``RUN_DIR/proven`` (the time), which
the job's supervisor turns into its ``proven`` notification (docs/job-life.md). A session the container's boot
started again (``restart_on_boot``) has ``@trainops_log_from``, the log's size before that start: a chunk from offset 0
reads from there, so that only the new attempt's lines prove its start.

A container that shuts down ends the wait too (``shutdown`` in the facts: the evidence, ``_job_shutdown``): the chunk
survives the SIGTERM of the shutdown (``TermDuringShutdown``), waits up to ``SHUTDOWN_GRACE`` seconds for the job's
exit record, and answers ``died`` (``failed`` with ``wait_until: finished``) with the record if it came.
"""

from __future__ import annotations

import collections
import os
import re
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import LOG_PATH_FILE, OPT_LOG, OPT_LOG_FROM, OPT_PROVEN, PROVEN_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import run_root
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import PROTOCOL, now, read_exit_record, write_whole
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_shutdown import TermDuringShutdown, shutting_down
from ansible_collections.trainops.pct_launch.plugins.module_utils._proc_tree import pid_alive, show, tree
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Tmux, read_text, session_state

PROTO = PROTOCOL.encode("ascii")
READ_MAX = 4 << 20
MAX_LINE = 1 << 20
_SEP = "\037"
# show_lines: a chunk's new lines (the last ones), their size in bytes, and how soon after the first one it returns
NEW_LINES_MAX = 1000
NEW_LINES_BYTES = 256 << 10
LINES_FLUSH = 2.0
# A container shutting down: how long the wait still looks for the job's exit record (its supervisor writes it at once
# when the job ends; a job slow to end on SIGTERM leaves the wait without it).
SHUTDOWN_GRACE = 2.0


def find_pane(tmux: Tmux, session: str) -> tuple[str, int | None, str, int]:
    """(alive | ended | absent | tmux_missing, pane_pid of a live pane, @trainops_log, @trainops_log_from or 0)."""
    if not tmux.installed:
        return "tmux_missing", None, "", 0
    out = tmux.display(session, _SEP.join(("#{pane_pid}", "#{pane_dead}", f"#{{{OPT_LOG_FROM}}}", f"#{{{OPT_LOG}}}")))
    fields = (out or "").split(_SEP, 3)  # the log path, last, may hold the separator
    if len(fields) != 4 or not fields[0].isdigit():
        return "absent", None, "", 0
    log_from = int(fields[2]) if fields[2].isdigit() else 0
    if fields[1] == "1":
        return "ended", None, fields[3], log_from
    return "alive", int(fields[0]), fields[3], log_from


def read_new(path: str, offset: int) -> tuple[list[bytes], int, int | None, bool]:
    """Complete new lines from ``offset``: (lines, new offset, log size or None, more to read)."""
    try:
        handle = open(path, "rb")  # pylint: disable=consider-using-with
    except OSError:
        return [], offset, None, False
    with handle:
        size = os.fstat(handle.fileno()).st_size
        offset = 0 if size < offset else offset  # truncated or replaced: from the start
        handle.seek(offset)
        buf = handle.read(min(size - offset, READ_MAX))
    more = offset + len(buf) < size
    cut = buf.rfind(b"\n")
    if cut < 0 and len(buf) < MAX_LINE:
        return [], offset, size, more
    complete = buf[:cut + 1] if cut >= 0 else buf
    lines = complete.split(b"\n")
    if complete.endswith(b"\n"):
        lines.pop()
    return lines, offset + len(complete), size, more


def scan(lines: list[bytes], pattern: t.Optional[t.Pattern[str]], fail: t.Optional[t.Pattern[str]]) -> tuple[str | None, bytes | None]:
    """The first verdict the lines give: fail_pattern, started, or (None, None)."""
    for line in lines:
        if line.startswith(PROTO):
            continue
        text = line.decode("utf-8", "replace").rstrip("\r")
        if fail is not None and fail.search(text):
            return "fail_pattern", line
        if pattern is None or pattern.search(text):
            return "started", line
    return None, None


def scan_to_end(lines: list[bytes], pattern: t.Optional[t.Pattern[str]], fail: t.Optional[t.Pattern[str]],
                proven: bool) -> tuple[str | None, bytes | None, bytes | None]:
    """wait_until finished: (fail_pattern or None, its line, the first line that proves the start unless ``proven``)."""
    proof = None
    if proven and fail is None:
        return None, None, None  # nothing left to look for in the lines
    for line in lines:
        if line.startswith(PROTO):
            continue
        text = line.decode("utf-8", "replace").rstrip("\r")
        if fail is not None and fail.search(text):
            return "fail_pattern", line, proof
        if not proven and proof is None and (pattern is None or pattern.search(text)):
            proof = line
    return None, None, proof


def end_verdict(record: t.Optional[t.Mapping[str, str]]) -> str:
    """wait_until finished: ``finished`` for exit status 0 (and, when the record has one, end_state finished), else ``failed``."""
    if record is None or (record.get("exit_status") or "").strip() != "0":
        return "failed"
    return "finished" if (record.get("end_state") or "finished").strip() == "finished" else "failed"


class NewLines:
    """show_lines: the new lines of one chunk, protocol lines left out; the last ones within the limits."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque()
        self.size = 0
        self.omitted = 0
        self.first_at: float | None = None

    def add(self, lines: list[bytes], when: float) -> None:
        """Keep the lines (as results show them) and when the first one came."""
        for line in lines:
            if line.startswith(PROTO):
                continue
            text = show(line)
            self.lines.append(text)
            self.size += len(text.encode("utf-8", "surrogateescape"))
            if self.first_at is None:
                self.first_at = when
            while len(self.lines) > NEW_LINES_MAX or self.size > NEW_LINES_BYTES:
                self.size -= len(self.lines.popleft().encode("utf-8", "surrogateescape"))
                self.omitted += 1

    def due(self) -> float | None:
        """When the chunk returns to show them: ``LINES_FLUSH`` after the first one (None: no line yet)."""
        return None if self.first_at is None else self.first_at + LINES_FLUSH


def tail(path: str, count: int) -> list[bytes]:
    """The last ``count`` lines of the file."""
    if count <= 0:
        return []
    try:
        handle = open(path, "rb")  # pylint: disable=consider-using-with
    except OSError:
        return []
    with handle:
        pos = handle.seek(0, 2)
        data = b""
        while pos > 0 and data.count(b"\n") <= count and len(data) < 4 * MAX_LINE:
            step = min(65536, pos)
            pos -= step
            handle.seek(pos)
            data = handle.read(step) + data
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if pos > 0 and lines:
        lines.pop(0)
    return lines[-count:]


class _Watch:
    """The session and log of one chunk."""

    def __init__(self, params: t.Mapping[str, t.Any]) -> None:
        self.params = params
        self.term: TermDuringShutdown | None = None  # poll's, while the chunk's loop runs
        self.shutdown: str | None = None  # the evidence that the container shuts down, once seen
        self.shutdown_seen = 0.0
        self.tmux = Tmux()
        self.session = params.get("session_name") or ""
        self.run_dir = os.path.join(run_root(), self.session) if self.session else None
        self.state, self.pid, opt_log, self.log_from = ("none", None, "", 0)
        if self.session:
            self.state, self.pid, opt_log, self.log_from = find_pane(self.tmux, self.session)
        self.log = params.get("log_path") or opt_log or (read_text(os.path.join(self.run_dir, LOG_PATH_FILE)) if self.run_dir else "") or ""
        # wait_until finished: the line that proved the start in this chunk, and whether the proof was recorded
        self.proof: bytes | None = None
        self.proof_recorded: bool | None = None

    def exit_record(self) -> dict[str, str] | None:
        return read_exit_record(self.log, self.run_dir) if self.log else None

    def ended(self, record: dict[str, str] | None) -> bool:
        if self.state == "alive" and self.pid is not None and not pid_alive(self.pid):
            self.state = "ended"
        down = self.shut_down()  # looked at even with a record: the wait names what it saw
        return record is not None or self.state not in ("alive", "none") or down

    def shut_down(self) -> bool:
        """Whether the container shuts down and the job's supervisor had ``SHUTDOWN_GRACE`` s to write the exit record."""
        if self.shutdown is None:
            self.shutdown = (self.term.evidence if self.term is not None else None) or shutting_down()
            self.shutdown_seen = time.monotonic()
        return self.shutdown is not None and time.monotonic() - self.shutdown_seen >= SHUTDOWN_GRACE

    def mark_proven(self) -> bool:
        """Record that the start is proven: ``@trainops_proven`` on the session, and ``RUN_DIR/proven`` for its supervisor."""
        stamp = now()
        recorded = self.tmux.set_option(self.session, OPT_PROVEN, stamp)
        if self.run_dir:
            write_whole(os.path.join(self.run_dir, PROVEN_FILE), stamp + "\n", 0o600)  # a failure changes nothing: no notification
        return recorded

    def prove(self, line: bytes) -> None:
        """wait_until finished: the start is seen (``line``); recorded at once while the session lives."""
        self.proof = line
        if self.state == "alive" and self.params.get("record_proof", True):
            self.proof_recorded = self.mark_proven()


# The first look after the first comes this soon; each gap doubles up to the option sleep: a job's first lines
# (and an early crash) come soon after its start, and a look costs a stat and a read.
FIRST_LOOK = 0.05


def _loop(watch: _Watch, started: float, shown: NewLines | None) -> tuple[str, bytes | None, int, int | None, dict[str, str] | None]:
    params = watch.params
    to_end = params.get("wait_until") == "finished"
    pattern = re.compile(params["pattern"]) if params.get("pattern") is not None else None
    fail = re.compile(params["fail_pattern"]) if params.get("fail_pattern") is not None else None
    offset, deadline = int(params["offset"]), started + float(params["duration"])
    if offset == 0 and watch.state == "alive":  # a start at boot: the lines of the attempts before it prove nothing
        offset = watch.log_from
    gap = min(FIRST_LOOK, float(params["sleep"]))
    while True:
        record = watch.exit_record()
        ended = watch.ended(record)
        lines, offset, size, more = read_new(watch.log, offset)
        if shown is not None:
            shown.add(lines, time.monotonic())
        if to_end:
            verdict, line, proof = scan_to_end(lines, pattern, fail, watch.proof is not None)
            if proof is not None:
                watch.prove(proof)
        else:
            verdict, line = scan(lines, pattern, fail)
        if verdict is None and ended and not more:
            record = record or watch.exit_record()
            verdict = end_verdict(record) if to_end else "died"
        due = shown.due() if shown is not None else None  # show_lines: return soon after the first new line
        until = deadline if due is None else min(deadline, due)
        if verdict is None and time.monotonic() >= until:
            verdict = "pending"
        if verdict is not None:
            return verdict, line, offset, size, record
        if not more:
            time.sleep(max(0.0, min(gap, until - time.monotonic())))
            gap = min(gap * 2, float(params["sleep"]))


def poll(params: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """One chunk of waiting; the facts (see the module docstring)."""
    started = time.monotonic()
    watch = _Watch(params)
    facts: dict[str, t.Any] = {"offset": str(params["offset"]), "log_path": watch.log, "tail": [], "ps": [], "exit": {}}
    size: int | None = os.path.getsize(watch.log) if watch.log and os.path.isfile(watch.log) else None
    to_end = params.get("wait_until") == "finished"
    shown = NewLines() if params.get("show_lines") else None
    if not watch.log or watch.state == "tmux_missing":  # no tmux session can have written this log: its lines prove nothing
        verdict, line, record = "died", None, (read_exit_record(watch.log, None) if watch.log else None)
        if to_end:
            verdict = end_verdict(record)
    else:
        with TermDuringShutdown() as term:
            watch.term = term
            verdict, line, offset, size, record = _loop(watch, started, shown)
        facts["offset"] = str(offset)
    if verdict == "started" and watch.state == "alive" and params.get("record_proof", True):
        facts["proof_recorded"] = "1" if watch.mark_proven() else "0"
    if to_end:
        facts["proven_line"] = show(watch.proof) if watch.proof is not None else None
        if watch.proof_recorded is not None:
            facts["proof_recorded"] = "1" if watch.proof_recorded else "0"
    if shown is not None:
        facts.update(new_lines=list(shown.lines), lines_omitted=str(shown.omitted))
    facts.update(verdict=verdict, session=watch.state, log_exists="0" if size is None else "1", exit=record or {})
    if watch.shutdown is not None:
        facts["shutdown"] = watch.shutdown
    running = watch.state == "alive" and verdict not in ("died", "finished", "failed")
    if watch.session:
        facts["state"] = session_state(running, watch.log, watch.run_dir, in_tmux=watch.state == "ended")
    else:  # a log without a session: only its exit record can tell
        facts["state"] = "finished" if record else "unknown"
    if size is not None:
        facts["log_size"] = str(size)
    if watch.state == "alive" and watch.pid is not None:
        facts["pane_pid"] = str(watch.pid)
        if verdict == "pending":
            facts["ps"] = tree(watch.pid)
    if line is not None:
        facts["matched_line"] = show(line)
    facts["tail"] = [show(text) for text in tail(watch.log, int(params["tail_lines"]))] if watch.log else []
    facts["chunk_elapsed"] = f"{time.monotonic() - started:.3f}"
    return facts
