# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The processes of a job as ``ps`` would show them, read from ``/proc`` (a wait's timeout message shows them)."""

from __future__ import annotations

import os
import typing as t

SHOW = 2000


def show(data: bytes) -> str:
    """A log or command line for a result: without its line end, at most SHOW characters."""
    return data.rstrip(b"\r\n")[:SHOW * 2].decode("utf-8", "replace")[:SHOW]


def _state(pid: int) -> bytes | None:
    """The state letter of ``pid`` in ``/proc/PID/stat`` (R, S, Z...); None when there is none to read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:][:1]


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    return _state(pid) not in (None, b"Z", b"X")


def zombie(pid: int) -> bool:
    """Whether ``pid`` has ended and waits for its parent to reap it (False when ``/proc`` cannot tell)."""
    return _state(pid) in (b"Z", b"X")


def _entry(name: str) -> t.Optional[t.Tuple[int, str, int, int, bytes]]:
    try:
        with open(f"/proc/{name}/stat", "rb") as handle:
            stat = handle.read()
        with open(f"/proc/{name}/cmdline", "rb") as handle:
            cmd = handle.read(4096)
    except OSError:
        return None
    close = stat.rindex(b")")
    fields = stat[close + 2:].split()
    args = cmd.replace(b"\0", b" ").strip() or b"[" + stat[stat.index(b"(") + 1:close] + b"]"
    cpu = (int(fields[11]) + int(fields[12])) // os.sysconf("SC_CLK_TCK")
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
    return int(fields[1]), fields[0].decode(), cpu, rss, args


def process_table() -> dict[int, t.Tuple[int, str, int, int, bytes]]:
    """pid → (ppid, state, cpu seconds, rss KiB, command line)."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            entry = _entry(name)
            if entry is not None:
                table[int(name)] = entry
    return table


def tree(root: int) -> list[str]:
    """``ps``-like lines of ``root`` and its descendants, a header first; empty when ``root`` is gone."""
    table = process_table()
    out = ["    PID    PPID STAT     TIME   RSS_KB COMMAND"]
    todo = [(root, 0)]
    while todo:
        pid, depth = todo.pop()
        if pid not in table:
            continue
        ppid, state, cpu, rss, args = table[pid]
        out.append(f"{pid:7d} {ppid:7d} {state:<4} {cpu // 60:3d}:{cpu % 60:02d} {rss:8d} {'  ' * depth}{show(args)}")
        todo.extend((child, depth + 1) for child in sorted(table, reverse=True) if table[child][0] == pid)
    return out if len(out) > 1 else []
