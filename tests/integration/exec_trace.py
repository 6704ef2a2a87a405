# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The programs a command really runs on this host, and the Debian packages that provide them.

``traced_programs`` runs a command under ``strace -f`` and returns the paths of the programs that
it and its children executed on the host. Programs run inside a container or a chroot are left
out: a process that called ``chroot``, ``pivot_root`` or ``setns`` (lxc-attach, mmdebstrap's
maintainer scripts, lxc-start's container init) and its later children see another file system, and a
process whose fork from a host process the log does not show is not taken for one.
Children are matched to their parents by the pids strace sees (``--pidns-translation``: inside a
container, ``clone`` returns the pid of the container's namespace).

``owner`` asks dpkg which package ships a file; ``closure`` and ``base_system`` give the packages
that installing a list brings along, and the packages every Debian system has (priority required).
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

SYSCALLS = "execve,execveat,chroot,pivot_root,setns,clone,clone3,fork,vfork"
FORKS = {"clone", "clone3", "fork", "vfork"}
ELSEWHERE = {"chroot", "pivot_root", "setns"}
LINE_RE = re.compile(r"^(\d+)\s+(.*)$")
RESUMED_RE = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
CALL_RE = re.compile(r"^(\w+)\((.*)$")
RESULT_RE = re.compile(r"\)\s+=\s+(-?\d+|\?)(?:\s+/\* (\d+) in strace's PID NS \*/)?(?:\s.*)?$")
EXEC_PATH_RE = re.compile(r'^(?:\d+|AT_FDCWD), "((?:[^"\\]|\\.)*)"|^"((?:[^"\\]|\\.)*)"')


@dataclasses.dataclass
class Trace:
    """The paths a traced command executed: on the host, and inside containers or chroots."""

    programs: set[str] = dataclasses.field(default_factory=set)
    inside: set[str] = dataclasses.field(default_factory=set)


def _calls(lines: Iterable[str]) -> Iterable[tuple[str, str, str, str]]:
    """(pid, syscall, arguments, result) per finished call, joining ``<unfinished ...>`` and ``resumed``."""
    pending: dict[str, str] = {}
    for raw in lines:
        match = LINE_RE.match(raw.rstrip("\n"))
        if not match:
            continue
        pid, rest = match.groups()
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest[: -len("<unfinished ...>")]
            continue
        resumed = RESUMED_RE.match(rest)
        if resumed:
            rest = pending.pop(pid, resumed.group(1) + "(") + resumed.group(2)
        call = CALL_RE.match(rest)
        result = RESULT_RE.search(rest)
        if call and result:
            # --pidns-translation: a child's pid as the tracer (and the pid column) sees it
            yield pid, call.group(1), call.group(2), result.group(2) or result.group(1)


def parse(lines: Iterable[str]) -> Trace:
    """The host programs a strace -f log shows executed (successful execve), outside containers and chroots.

    Only the traced command (the log's first pid) and the processes it and they forked, as the log shows each
    fork, count as on the host, until one of them calls chroot, pivot_root or setns. A process whose fork the
    log does not show (a pid that strace could not translate from a container's namespace) does not count.
    """
    trace = Trace()
    host: set[str] = set()
    first = True
    for pid, syscall, args, result in _calls(lines):
        if first:
            host.add(pid)
            first = False
        if syscall in FORKS and result.isdigit():
            if pid in host:
                host.add(result)
        elif syscall in ELSEWHERE and result == "0":
            host.discard(pid)
        elif syscall in ("execve", "execveat") and result == "0":
            match = EXEC_PATH_RE.match(args)
            path = (match.group(1) or match.group(2) or "") if match else ""
            if not path:
                continue  # execveat(fd, "", AT_EMPTY_PATH): a program re-executing itself (lxc-attach from a memfd)
            (trace.programs if pid in host else trace.inside).add(path)
    return trace


def traced_programs(argv: Sequence[str], log: Path, env: Mapping[str, str], timeout: float) -> Trace:
    """Run ``argv`` under ``strace -f``; fail with its output when it fails."""
    proc = subprocess.run(["strace", "-f", "-qq", "--pidns-translation", "-e", f"trace={SYSCALLS}", "-o", str(log), "--", *argv],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=dict(env), timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode} under strace:\n{proc.stdout}\n{proc.stderr}")
    with log.open(encoding="utf-8", errors="replace") as handle:
        return parse(handle)


def owner(path: str) -> str | None:
    """The Debian package that ships ``path`` (following symlinks, and /bin ↔ /usr/bin of usrmerge), or None."""
    candidates = [path, os.path.realpath(path)]
    for one in list(candidates):
        for merged, plain in (("/usr/bin/", "/bin/"), ("/usr/sbin/", "/sbin/"), ("/usr/lib/", "/lib/")):
            if one.startswith(merged):
                candidates.append(plain + one[len(merged):])
            elif one.startswith(plain):
                candidates.append(merged + one[len(plain):])
    for candidate in candidates:
        proc = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True, check=False)
        for line in proc.stdout.splitlines():
            if line.startswith("diversion by") or ": " not in line:
                continue
            return line.split(": ", 1)[0].split(",")[0].split(":")[0].strip()
    return None


def closure(packages: Iterable[str]) -> set[str]:
    """The installed packages that installing ``packages`` brings along (Depends and Pre-Depends), with them."""
    names = sorted(set(packages))
    proc = subprocess.run(["apt-cache", "depends", "--recurse", "--installed", "--no-recommends", "--no-suggests",
                           "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *names],
                          capture_output=True, text=True, check=True)
    found = {line.strip().strip("<>").split(":")[0] for line in proc.stdout.splitlines() if not line.startswith(" ")}
    return found | set(names)


def base_system() -> set[str]:
    """The packages of priority required (and the essential ones): on every Debian system, debootstrap's minbase."""
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Essential} ${Priority}\\n"],
                          capture_output=True, text=True, check=True)
    required = [fields[0] for fields in (line.split() for line in proc.stdout.splitlines())
                if len(fields) == 3 and (fields[1] == "yes" or fields[2] == "required")]
    return closure(required)


def system_packages(script: Path, *groups: str) -> list[str]:
    """The packages of groups of tools/system-packages.sh (its --list)."""
    proc = subprocess.run([str(script), "--list", *groups], capture_output=True, text=True, check=True)
    return proc.stdout.split()
