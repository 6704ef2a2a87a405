# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""One chunk of ``wait_for_log`` on the host the log is on: read the log from an offset until a verdict.

``poll(params)`` reads the log incrementally from ``offset``, matches whole lines only with Python
regular expressions, skips the protocol's own ``### trainops.pct_launch:`` lines and stops at the
first verdict or at the end of the chunk (``duration`` seconds): ``started`` (pattern seen, or any
output line without a pattern), ``fail_pattern``, ``died`` (the session ended or is gone, or an exit
record appeared), ``pending`` (the caller decides whether that is a timeout). It returns the facts
``_log_wait.result_from_facts`` reads, the session's state decided by ``_tmux_cli.session_state``.
"""

from __future__ import annotations

import os
import re
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_parent import PROTOCOL, now, read_exit_record
from ansible_collections.trainops.pct_launch.plugins.module_utils._proc_tree import pid_alive, show, tree
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Tmux, read_text, run_root, session_state

PROTO = PROTOCOL.encode("ascii")
READ_MAX = 4 << 20
MAX_LINE = 1 << 20
_SEP = "\037"


def find_pane(tmux: Tmux, session: str) -> tuple[str, int | None, str]:
    """(alive | ended | absent | tmux_missing, pane_pid of a live pane, @trainops_log)."""
    if not tmux.installed:
        return "tmux_missing", None, ""
    out = tmux.display(session, _SEP.join(("#{pane_pid}", "#{pane_dead}", "#{@trainops_log}")))
    fields = (out or "").split(_SEP, 2)  # the log path, last, may hold the separator
    if len(fields) != 3 or not fields[0].isdigit():
        return "absent", None, ""
    if fields[1] == "1":
        return "ended", None, fields[2]
    return "alive", int(fields[0]), fields[2]


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
        self.tmux = Tmux()
        self.session = params.get("session_name") or ""
        self.run_dir = os.path.join(run_root(), self.session) if self.session else None
        self.state, self.pid, opt_log = ("none", None, "")
        if self.session:
            self.state, self.pid, opt_log = find_pane(self.tmux, self.session)
        self.log = params.get("log_path") or opt_log or (read_text(os.path.join(self.run_dir, "log_path")) if self.run_dir else "") or ""

    def exit_record(self) -> dict[str, str] | None:
        return read_exit_record(self.log, self.run_dir) if self.log else None

    def ended(self, record: dict[str, str] | None) -> bool:
        if self.state == "alive" and self.pid is not None and not pid_alive(self.pid):
            self.state = "ended"
        return record is not None or self.state not in ("alive", "none")

    def mark_proven(self) -> bool:
        """Record on the session that its start is proven (``@trainops_proven``)."""
        return self.tmux.set_option(self.session, "@trainops_proven", now())


def _loop(watch: _Watch, started: float) -> tuple[str, bytes | None, int, int | None, dict[str, str] | None]:
    params = watch.params
    pattern = re.compile(params["pattern"]) if params.get("pattern") is not None else None
    fail = re.compile(params["fail_pattern"]) if params.get("fail_pattern") is not None else None
    offset, deadline = int(params["offset"]), started + float(params["duration"])
    while True:
        record = watch.exit_record()
        ended = watch.ended(record)
        lines, offset, size, more = read_new(watch.log, offset)
        verdict, line = scan(lines, pattern, fail)
        if verdict is None and ended and not more:
            verdict, record = "died", record or watch.exit_record()
        if verdict is None and time.monotonic() >= deadline:
            verdict = "pending"
        if verdict is not None:
            return verdict, line, offset, size, record
        if not more:
            time.sleep(max(0.0, min(float(params["sleep"]), deadline - time.monotonic())))


def poll(params: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """One chunk of waiting; the facts (see the module docstring)."""
    started = time.monotonic()
    watch = _Watch(params)
    facts: dict[str, t.Any] = {"offset": str(params["offset"]), "log_path": watch.log, "tail": [], "ps": [], "exit": {}}
    size: int | None = os.path.getsize(watch.log) if watch.log and os.path.isfile(watch.log) else None
    if not watch.log or watch.state == "tmux_missing":  # no tmux session can have written this log: its lines prove nothing
        verdict, line, record = "died", None, (read_exit_record(watch.log, None) if watch.log else None)
    else:
        verdict, line, offset, size, record = _loop(watch, started)
        facts["offset"] = str(offset)
    if verdict == "started" and watch.state == "alive" and params.get("record_proof", True):
        facts["proof_recorded"] = "1" if watch.mark_proven() else "0"
    facts.update(verdict=verdict, session=watch.state, log_exists="0" if size is None else "1", exit=record or {})
    running = watch.state == "alive" and verdict != "died"
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
