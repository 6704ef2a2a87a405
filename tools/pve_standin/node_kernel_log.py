# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A stand-in for the node's ``journalctl -k -o short-iso-precise --no-pager [--since=...]``: a kernel log from a file.

There is no NVIDIA driver here to log Xid errors, so tests write the lines it would log into a file, in the format
``journalctl -k -o short-iso-precise`` prints them (``entry`` makes one)::

    2024-03-05T14:22:07.123456+0000 pve-standin kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1234, name=python3, GPU has fallen off the bus.

and ``gpu_info`` reads them with ``node_kernel_log: [<dir>/node-kernel-log, -k, -o, short-iso-precise, --no-pager]``.
Installing it is as for ``nvidia_smi.py``: this program as ``<dir>/node-kernel-log`` (mode 0755, a
``#!/usr/bin/env python3`` line first) and the log as ``<dir>/kernel.log``, found next to the program's real path;
``--file PATH`` (the stand-in's own option) reads another file.

What it imitates of journalctl (systemd 252, Debian 12 / Proxmox VE 8; systemd 255 prints the offset as ``+00:00``,
systemd/systemd#29134): the lines as stored, in order; ``--since=`` as a time relative to now (``-24h``, ``-30min``,
``-90s``, ``-2d``) or ``@SECONDS`` since the epoch, lines before it left out (a line with no time at its start is
printed); ``-- No entries --`` when none is left; ``Failed to parse timestamp: X`` with exit status 1 for a ``--since``
it cannot read; ``-k``/``--dmesg``, ``-o``/``--output=short-iso-precise`` and ``--no-pager`` taken as given. Any other
option: ``journalctl: unrecognized option 'X'``, exit status 1. A missing file is an empty journal.
"""
from __future__ import annotations

import datetime
import os
import re
import sys
import time

LOG_NAME = "kernel.log"
NO_ENTRIES = "-- No entries --"
_TIME = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.[0-9]+)?([+-][0-9]{2}):?([0-9]{2})\s")
_RELATIVE = re.compile(r"-([0-9]+)(s|sec|min|m|h|d)")
_UNITS = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "d": 86400}


class Refused(Exception):
    """Stop with this message on stderr and exit status 1, as journalctl does."""


def entry(seconds: float, message: str, host: str = "pve-standin") -> str:
    """One line as ``journalctl -k -o short-iso-precise`` prints it (in UTC, systemd 252's ``+0000``)."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S.%f')}+0000 {host} kernel: {message}"


def line_time(line: str) -> float | None:
    """The time at the start of a line, in seconds since the epoch; None when it has none."""
    match = _TIME.match(line)
    if not match:
        return None
    sign = -1 if match.group(2).startswith("-") else 1
    offset = sign * (abs(int(match.group(2))) * 3600 + int(match.group(3)) * 60)
    moment = datetime.datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp() - offset


def since_time(spec: str, now: float) -> float:
    """``--since=`` as seconds since the epoch: ``-24h`` and the like, or ``@SECONDS``."""
    relative = _RELATIVE.fullmatch(spec)
    if relative:
        return now - int(relative.group(1)) * _UNITS[relative.group(2)]
    if spec.startswith("@"):
        try:
            return float(spec[1:])
        except ValueError:
            pass
    raise Refused(f"Failed to parse timestamp: {spec}")


def parse_args(argv: list[str]) -> tuple[str | None, str | None]:
    """(``--since`` value, ``--file`` path) of journalctl's arguments; the others are taken as given."""
    since = path = None
    i = 0
    while i < len(argv):
        item = argv[i]
        if item in ("-k", "--dmesg", "--no-pager", "--output=short-iso-precise"):
            i += 1
        elif item in ("-o", "--output", "--since", "--file") and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
            if item == "--since":
                since = value
            elif item == "--file":
                path = value
            elif value != "short-iso-precise":
                raise Refused(f"journalctl: output mode {value} is not imitated by this stand-in")
        elif item.startswith("--since="):
            since, i = item.split("=", 1)[1], i + 1
        else:
            raise Refused(f"journalctl: unrecognized option '{item}'")
    return since, path


def run(argv: list[str], now: float) -> str:
    """What journalctl would print for ``argv``."""
    since, path = parse_args(argv)
    start = since_time(since, now) if since is not None else None
    path = path or os.path.join(os.path.dirname(os.path.realpath(__file__)), LOG_NAME)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        lines = []
    kept = [line for line in lines if line.strip() and (start is None or (line_time(line) or start) >= start)]
    return "".join(line + "\n" for line in kept) if kept else NO_ENTRIES + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the log as journalctl would; exit status 1 when it refuses the arguments."""
    try:
        sys.stdout.write(run(list(sys.argv[1:] if argv is None else argv), time.time()))
    except Refused as refusal:
        sys.stderr.write(f"{refusal}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
