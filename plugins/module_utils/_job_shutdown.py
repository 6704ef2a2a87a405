# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Whether the target is shutting down: what the job's supervisor and wait_for_log ask when a signal comes.

A clean shutdown of a Proxmox VE container (``pct shutdown``, ``pct reboot``, ``vzdump --mode stop``) is
``lxc-stop`` without ``--kill``: LXC sends the container's init its halt signal (SIGRTMIN+3 to systemd, which
blocks it; SIGPWR to another init; ``lxc.signal.halt`` when set). The job, its supervisor and the tmux server were
attached by ``lxc-attach``: they belong to no systemd unit, so systemd stops its services first and leaves them
alone; then PID 1 becomes ``systemd-shutdown``, which SIGSTOPs every process, sends each SIGTERM (and SIGHUP to
those with a controlling terminal), SIGCONTs them, waits up to 90 s (DefaultTimeoutStopSec) and SIGKILLs what is
left (systemd src/shared/killall.c). Measured in a stand-in container (Debian 12, systemd 252, LXC 5.0.2): the
SIGTERM came 0.15 s after the halt signal, ``/proc/1/comm`` then read ``systemd-shutdow`` (15 characters), and
``systemctl is-system-running`` printed nothing (no manager to ask).

``shutting_down()`` returns the evidence in words, or None. It reads, in order:

1. ``/proc/1/comm``: ``systemd-shutdow`` is systemd's last stage (only during a shutdown);
2. the last run-level record of utmp (``/run/utmp``): ``0`` (halt) or ``6`` (reboot), written by sysvinit and
   other SysV-style inits when they switch (systemd writes no such level; musl has no utmp);
3. OpenRC's ``/run/openrc/softlevel``: ``shutdown`` or ``reboot``;
4. with ``ask_systemd`` and systemd as PID 1: ``systemctl is-system-running`` says ``stopping`` (a job in a unit
   or a login session gets its SIGTERM while systemd still runs). A subprocess: only when a signal came.

Limits: an init without run levels (busybox init without OpenRC, a container whose init is the job) leaves no
trace, so its shutdown is a signal like any other.

``TermDuringShutdown`` is what wait_for_log's chunk (a module run in the container, so in systemd-shutdown's killing
spree too) does with a SIGTERM: during a shutdown it notes the evidence and goes on a moment, long enough to read the
job's exit record and answer; any other SIGTERM ends it as before. Imports only the standard library; Python 3.7+.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import typing as t

SYSTEMD_SHUTDOWN = "systemd-shutdow"  # /proc/1/comm holds 15 characters of systemd-shutdown
UTMP_FILES = ("/run/utmp", "/var/run/utmp")
OPENRC_SOFTLEVEL = "openrc/softlevel"  # in /run
SYSTEMCTL_TIMEOUT = 2.0
# struct utmp of glibc on Linux: ut_type (short, padded to 4), ut_pid (int32), ...: 384 bytes a record
UTMP_RECORD = 384
RUN_LVL = 1
LEVEL_WORDS = {"0": "halt", "6": "reboot"}


def _read(path: str, limit: int = 4096) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return None


def init_name(proc_root: str = "/proc") -> str:
    """PID 1's command name (``systemd``, ``systemd-shutdow``, ``init``), empty when unreadable."""
    data = _read(os.path.join(proc_root, "1", "comm"))
    return data.decode("utf-8", "replace").strip() if data else ""


def utmp_runlevel(paths: t.Sequence[str] = UTMP_FILES) -> str | None:
    """The level of the last run-level record of utmp (``5``, ``0``, ``6``), or None."""
    for path in paths:
        data = _read(path, 1 << 20)
        if not data:
            continue
        level = None
        for start in range(0, len(data) - UTMP_RECORD + 1, UTMP_RECORD):
            kind, pid = struct.unpack_from("<hxxi", data, start)
            if kind == RUN_LVL and 32 < (pid & 0xFF) < 127:
                level = chr(pid & 0xFF)
        return level
    return None


def _systemd_stopping() -> bool:
    try:
        out = subprocess.run(["systemctl", "is-system-running"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=SYSTEMCTL_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.decode("ascii", "replace").strip() == "stopping"


def shutting_down(proc_root: str = "/proc", run_root: str = "/run", utmp: t.Sequence[str] = UTMP_FILES,
                  ask_systemd: bool = False) -> str | None:
    """The evidence that this system (container) is shutting down, in words; None when nothing shows it."""
    init = init_name(proc_root)
    if init == SYSTEMD_SHUTDOWN:
        return "PID 1 was systemd-shutdown"
    level = utmp_runlevel(utmp)
    if level in LEVEL_WORDS:
        return f"its init was in run level {level} ({LEVEL_WORDS[level]})"
    soft = _read(os.path.join(run_root, OPENRC_SOFTLEVEL), 64)
    if soft is not None and soft.decode("ascii", "replace").strip() in ("shutdown", "reboot"):
        return f"OpenRC was in run level {soft.decode('ascii', 'replace').strip()}"
    if ask_systemd and init == "systemd" and _systemd_stopping():
        return "systemd was stopping the system"
    return None


class TermDuringShutdown:
    """While entered (in the main thread): a SIGTERM that comes while the system shuts down sets ``evidence``
    instead of ending the process; any other SIGTERM gets the handler it had before (by default: the process ends)."""

    def __init__(self) -> None:
        self.evidence: str | None = None
        self._previous: t.Any = None

    def __enter__(self) -> TermDuringShutdown:
        try:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        except ValueError:  # not the main thread: signals stay as they are
            self._previous = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _handle(self, signum: int, _frame: t.Any) -> None:
        evidence = shutting_down(ask_systemd=True)
        if evidence is not None:
            self.evidence = evidence
            return
        previous = signal.SIG_DFL if self._previous is None else self._previous
        self._previous = None
        signal.signal(signum, previous)
        os.kill(os.getpid(), signum)  # as if this handler had never been there
