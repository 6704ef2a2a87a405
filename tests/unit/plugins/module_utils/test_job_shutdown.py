# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests of plugins/module_utils/_job_shutdown.py: the evidence of a shutdown (PID 1's name, utmp's run level,
OpenRC's soft level, systemd's state) and what a SIGTERM does while ``TermDuringShutdown`` is entered."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_shutdown
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_shutdown import TermDuringShutdown, shutting_down, utmp_runlevel


def utmp_record(kind: int, level: str = "", previous: str = "N", user: str = "runlevel") -> bytes:
    """One glibc struct utmp (384 bytes): a run-level record keeps the level in ut_pid (level + 256 * previous)."""
    pid = ord(level) + 256 * ord(previous) if level else 1234
    record = struct.pack("<hxxi32s4s32s256s", kind, pid, b"~", b"~~", user.encode(), b"6.1.0")
    return record + b"\0" * (384 - len(record))


def roots(tmp_path: Path, comm: str = "systemd", levels: tuple[str, ...] = (), softlevel: str | None = None) -> dict:
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "comm").write_text(comm + "\n", encoding="ascii")
    utmp = tmp_path / "run" / "utmp"
    utmp.parent.mkdir(parents=True)
    utmp.write_bytes(utmp_record(2, user="reboot") + b"".join(utmp_record(1, level) for level in levels) + utmp_record(7, user="root"))
    if softlevel is not None:
        (tmp_path / "run" / "openrc").mkdir()
        (tmp_path / "run" / "openrc" / "softlevel").write_text(softlevel + "\n", encoding="ascii")
    return {"proc_root": str(tmp_path / "proc"), "run_root": str(tmp_path / "run"), "utmp": [str(utmp)]}


@pytest.mark.parametrize(("comm", "levels", "softlevel", "expected"), [
    ("systemd-shutdow", (), None, "PID 1 was systemd-shutdown"),  # measured in a stand-in container
    ("systemd", (), None, None),
    ("init", ("2", "0"), None, "its init was in run level 0 (halt)"),
    ("init", ("2", "6"), None, "its init was in run level 6 (reboot)"),
    ("init", ("0", "2"), None, None),  # the last record counts: the system came up again
    ("init", ("3",), "shutdown", "OpenRC was in run level shutdown"),
    ("init", (), "reboot", "OpenRC was in run level reboot"),
    ("init", (), "default", None),
])
def test_evidence(tmp_path: Path, comm: str, levels: tuple[str, ...], softlevel: str | None, expected: str | None) -> None:
    assert shutting_down(**roots(tmp_path, comm, levels, softlevel)) == expected


def test_systemd_is_asked_only_when_told_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []
    monkeypatch.setattr(_job_shutdown, "_systemd_stopping", lambda: asked.append(True) or True)
    where = roots(tmp_path, "systemd")
    assert shutting_down(**where) is None and not asked
    assert shutting_down(**where, ask_systemd=True) == "systemd was stopping the system" and asked == [True]
    assert shutting_down(**roots(tmp_path / "other", "init"), ask_systemd=True) is None  # only systemd is asked


def test_utmp_without_a_run_level_or_unreadable(tmp_path: Path) -> None:
    assert utmp_runlevel([str(tmp_path / "missing")]) is None
    (tmp_path / "short").write_bytes(b"\1\0\0\0")
    assert utmp_runlevel([str(tmp_path / "short")]) is None


PROGRAM = textwrap.dedent("""
    import os, signal, sys, time
    sys.path[:0] = [{lib!r}]
    import _job_shutdown  # the standard library only: importable on its own, as in the target
    _job_shutdown.shutting_down = lambda **kw: {evidence!r}
    with _job_shutdown.TermDuringShutdown() as term:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print("survived", term.evidence, flush=True)
    print("restored", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
""")


@pytest.mark.parametrize(("evidence", "code", "output"), [
    ("PID 1 was systemd-shutdown", 0, "survived PID 1 was systemd-shutdown\nrestored True\n"),
    (None, -signal.SIGTERM, ""),  # no shutdown: the SIGTERM ends the process as it did before
])
def test_a_sigterm_during_a_shutdown_is_noted_any_other_ends_the_process(evidence: str | None, code: int, output: str) -> None:
    lib = str(Path(_job_shutdown.__file__).parent)
    run = subprocess.run([sys.executable, "-c", PROGRAM.format(lib=lib, evidence=evidence)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert (run.returncode, run.stdout) == (code, output), run.stderr


def test_outside_the_main_thread_nothing_changes() -> None:
    import threading  # pylint: disable=import-outside-toplevel

    seen = []

    def enter() -> None:
        with TermDuringShutdown() as term:
            seen.append(signal.getsignal(signal.SIGTERM) is not term._handle)  # pylint: disable=protected-access
    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert seen == [True] and os.getpid() > 0
