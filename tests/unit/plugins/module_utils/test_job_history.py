# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""``_job_history``: the target's history of launches, appended by the supervisor, read by ``tmux_session_info``.

Everything runs against real files in the test's temp dir: appends, the merge of a launch's two lines,
the trim past ``MAX_LINES``, the lock (threads and processes), broken lines, bytes that are not UTF-8,
paths that cannot be written and a full file system (a small tmpfs, root only).
"""

from __future__ import annotations

import ast
import fcntl
import json
import multiprocessing
import os
import pwd
import threading
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_history
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_history import (
    ENTRY_KEYS,
    KEEP_LAUNCHES,
    MAX_LINES,
    ROOT_HISTORY,
    append,
    as_int,
    history_path,
    read,
)

SOURCE = Path(_job_history.__file__)


def start(name: str, started: str, **extra: t.Any) -> dict[str, t.Any]:
    """A start line as the supervisor writes it."""
    return dict({"event": "start", "session_name": name, "host": "ct200", "started_at": started, "log_path": f"/w/{name}.log"}, **extra)


def end(name: str, started: str, status: int = 0, **extra: t.Any) -> dict[str, t.Any]:
    """An end line as the supervisor writes it."""
    values = {"ended_at": started + "+9", "end_state": "finished" if status == 0 else "failed", "exit_status": status,
              "cause": "exit_status", "reason": f"exit status {status}", "attempts": 1}
    values.update(extra)
    return dict(start(name, started), event="end", **values)


def lines_of(path: Path) -> list[bytes]:
    """The file's lines (without their newline)."""
    return path.read_bytes().split(b"\n")[:-1]


@pytest.fixture()
def history(tmp_path: Path) -> Path:
    """The history file's path (not created)."""
    return tmp_path / "state" / "trainops" / "history.jsonl"


# ---- the file itself: imports, Python 3.7 ----


def test_it_imports_only_the_standard_library_and_the_layout() -> None:
    """The supervisor runs it in the target without the collection: only ``_job_layout`` is staged with it."""
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"), feature_version=(3, 7))
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    layout = "ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout"
    assert modules <= {"__future__", "errno", "fcntl", "json", "os", "pwd", "time", "typing", layout}, modules


# ---- history_path ----


def test_history_path_of_root_and_of_users(monkeypatch: pytest.MonkeyPatch) -> None:
    assert history_path(0) == ROOT_HISTORY == "/var/lib/trainops/history.jsonl"
    assert history_path(0, "/home/x") == ROOT_HISTORY, "root's is the system's, whatever its home"
    assert history_path(1000, "/home/x") == "/home/x/.local/state/trainops/history.jsonl"
    user = next(entry for entry in pwd.getpwall() if entry.pw_uid != 0)
    assert history_path(user.pw_uid) == os.path.join(user.pw_dir, ".local/state/trainops/history.jsonl")
    known = {entry.pw_uid for entry in pwd.getpwall()}
    unknown = next(uid for uid in range(40000, 60000) if uid not in known)
    monkeypatch.setenv("HOME", "/home/env")
    assert history_path(unknown) == "/home/env/.local/state/trainops/history.jsonl", "a uid without a passwd entry: HOME"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert history_path() == ROOT_HISTORY
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert history_path(home="/h") == "/h/.local/state/trainops/history.jsonl"


# ---- append and read ----


def test_append_creates_the_folders_and_the_file_with_their_modes(history: Path) -> None:
    umask = os.umask(0o077)
    try:
        assert append(str(history), start("a", "S1"))
    finally:
        os.umask(umask)
    assert history.stat().st_mode & 0o777 == 0o644
    assert history.parent.stat().st_mode & 0o777 == 0o755 and history.parent.parent.stat().st_mode & 0o777 == 0o755
    assert [json.loads(line) for line in lines_of(history)] == [start("a", "S1")]
    assert not [p for p in history.parent.iterdir() if p != history], "no temporary file is left"


def test_a_launch_is_one_entry_of_its_two_lines(history: Path) -> None:
    assert append(str(history), start("a", "S1"))
    assert read(str(history)) == [dict(dict.fromkeys(ENTRY_KEYS), session_name="a", host="ct200", started_at="S1", log_path="/w/a.log",
                                       end_state="running")]
    assert append(str(history), end("a", "S1", 3, cause="python_exception", reason="ValueError: x", attempts=2))
    assert read(str(history)) == [{"session_name": "a", "host": "ct200", "started_at": "S1", "ended_at": "S1+9", "end_state": "failed",
                                   "exit_status": 3, "cause": "python_exception", "reason": "ValueError: x", "attempts": 2,
                                   "log_path": "/w/a.log", "boot_restarts": None,
                                   "attempt_started_at": None, "gpu_bus_ids": None}]
    assert len(lines_of(history)) == 2


def test_running_lost_order_filter_and_limit(history: Path) -> None:
    for record in (start("a", "S1"), start("b", "S2"), end("a", "S1"), start("a", "S3"), start("b", "S4"), start("a", "S5"),
                   end("a", "S5", 1), start("c", "S6")):
        assert append(str(history), record)
    got = [(entry["session_name"], entry["started_at"], entry["end_state"]) for entry in read(str(history))]
    assert got == [("a", "S1", "finished"), ("b", "S2", "lost"), ("a", "S3", "lost"), ("b", "S4", "running"),
                   ("a", "S5", "failed"), ("c", "S6", "running")], "oldest first; an end-less launch followed by another is lost"
    assert [entry["started_at"] for entry in read(str(history), limit=2)] == ["S5", "S6"], "the last ones"
    assert [entry["started_at"] for entry in read(str(history), "a")] == ["S1", "S3", "S5"]
    assert [entry["started_at"] for entry in read(str(history), "a", limit=1)] == ["S5"]
    assert read(str(history), "zzz") == [] and read(str(history), limit=0) == []


def test_an_end_without_its_start_is_still_a_launch(history: Path) -> None:
    """The start could not be written (a full disk then): the end alone says it all."""
    assert append(str(history), end("a", "S1", 137, end_state="oom_killed", signal="KILL"))
    entry = read(str(history))[0]
    assert (entry["end_state"], entry["exit_status"], entry["host"], entry["log_path"]) == ("oom_killed", 137, "ct200", "/w/a.log")


def test_types_of_the_entries(history: Path) -> None:
    history.parent.mkdir(parents=True)
    records = [{"event": "end", "session_name": "a", "started_at": "S1", "exit_status": "3", "attempts": " 2\n", "reason": 7},
               {"event": "end", "session_name": "b", "started_at": "S2", "exit_status": True, "attempts": "x", "reason": ["no"]},
               {"event": "end", "session_name": "c", "started_at": "S3", "exit_status": 1.5, "attempts": "--5", "host": ""},
               {"event": "end", "session_name": "d", "started_at": "S4", "exit_status": -1, "attempts": "\u00b2"}]
    history.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    got = {entry["session_name"]: entry for entry in read(str(history))}
    assert (got["a"]["exit_status"], got["a"]["attempts"], got["a"]["reason"]) == (3, 2, "7")
    assert (got["b"]["exit_status"], got["b"]["attempts"], got["b"]["reason"]) == (None, None, None)
    assert (got["c"]["exit_status"], got["c"]["attempts"], got["c"]["host"]) == (None, None, None)
    assert (got["d"]["exit_status"], got["d"]["attempts"]) == (-1, None)
    assert all(set(entry) == set(ENTRY_KEYS) for entry in got.values())


@pytest.mark.parametrize("value, expected", [(0, 0), (3, 3), ("4", 4), ("-2", -2), (" 5 ", 5), (True, None), (False, None),
                                             (1.0, None), ("", None), ("-", None), ("--5", None), ("1e3", None), (None, None)])
def test_as_int(value: t.Any, expected: int | None) -> None:
    assert as_int(value) == expected


def test_broken_lines_are_skipped(history: Path) -> None:
    history.parent.mkdir(parents=True)
    good = [json.dumps(start("a", "S1")), json.dumps(end("a", "S1"))]
    junk = ["not json", "[1, 2]", "42", "null", '"text"', '{"session_name": ', "{}", '{"session_name": 5}', "\xff\xfe"]
    history.write_bytes("\n".join([junk[0], good[0], *junk[1:], good[1], ""]).encode("utf-8", "surrogateescape") + b"\n\n")
    assert [(entry["session_name"], entry["end_state"]) for entry in read(str(history))] == [("a", "finished")]


def test_an_append_after_a_cut_line_starts_a_line_of_its_own(history: Path) -> None:
    history.parent.mkdir(parents=True)
    history.write_text(json.dumps(start("a", "S1")) + "\n" + '{"event": "end", "session_na', encoding="utf-8")
    assert append(str(history), start("b", "S2"))
    assert lines_of(history)[-1] == json.dumps(start("b", "S2"), ensure_ascii=False).encode()
    assert [entry["session_name"] for entry in read(str(history))] == ["a", "b"]


def test_text_that_is_not_utf8_keeps_its_bytes(history: Path) -> None:
    """Paths and reasons read with surrogateescape are written back as their bytes, and read back as the same text."""
    log = b"/w/caf\xe9 \xff.log".decode("utf-8", "surrogateescape")
    assert append(str(history), start("a", "S1", log_path=log, reason="é ✓ \u2028 line\nbreak"))
    data = history.read_bytes()
    assert b"/w/caf\xe9 \xff.log" in data and "é ✓".encode() in data and data.count(b"\n") == 1
    entry = read(str(history))[0]
    assert entry["log_path"] == log and entry["reason"] == "é ✓ \u2028 line\nbreak"


def test_a_lone_surrogate_is_replaced_not_refused(history: Path) -> None:
    assert append(str(history), start("a", "S1", reason="bad \ud800 half"))
    assert read(str(history))[0]["reason"] == "bad ? half"


def circular() -> dict[str, t.Any]:
    """A dict that holds itself."""
    record: dict[str, t.Any] = {"session_name": "a"}
    record["self"] = record
    return record


@pytest.mark.parametrize("record", [{("tuple", "key"): 1}, circular()], ids=["tuple-key", "circular"])
def test_a_record_that_is_no_json_object_is_refused(history: Path, record: dict[t.Any, t.Any]) -> None:
    assert append(str(history), record) is False
    assert not history.exists()


def test_values_json_cannot_write_become_text(history: Path) -> None:
    assert append(str(history), start("a", "S1", extra={1, 2}, when=Path("/x")))
    assert json.loads(lines_of(history)[0])["when"] == "/x"


# ---- trim ----


def test_the_file_is_trimmed_to_the_last_launches_keeping_pairs_together(history: Path) -> None:
    """Launch A starts first and ends last: trimming it drops both its lines, not only the oldest line."""
    history.parent.mkdir(parents=True)
    records = [start("A", "S0")]
    launches = MAX_LINES // 2 - 1
    for number in range(1, launches + 1):
        records += [start(f"L{number}", f"S{number}"), end(f"L{number}", f"S{number}")]
    records.append(end("A", "S0"))
    assert len(records) == MAX_LINES
    history.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    before = history.stat().st_ino
    assert append(str(history), start("B", "SB")), f"{MAX_LINES} lines: not trimmed yet"
    entries = read(str(history), limit=KEEP_LAUNCHES + 10)
    assert len(lines_of(history)) == 2 * KEEP_LAUNCHES - 1 and len(entries) == KEEP_LAUNCHES
    assert entries[0]["session_name"] == f"L{launches - KEEP_LAUNCHES + 2}" and entries[-1]["session_name"] == "B"
    assert "A" not in {e["session_name"] for e in entries}
    assert history.stat().st_ino != before, "replaced by a new file (written aside, then renamed)"
    assert history.stat().st_mode & 0o777 == 0o644 and sorted(p.name for p in history.parent.iterdir()) == ["history.jsonl"]


def test_under_max_lines_nothing_is_trimmed(history: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_job_history, "MAX_LINES", 6)
    monkeypatch.setattr(_job_history, "KEEP_LAUNCHES", 2)
    for number in range(3):
        assert append(str(history), start("a", f"S{number}")) and append(str(history), end("a", f"S{number}"))
    inode = history.stat().st_ino
    assert len(lines_of(history)) == 6 and history.stat().st_ino == inode
    assert append(str(history), start("a", "S3"))
    assert [entry["started_at"] for entry in read(str(history))] == ["S2", "S3"]
    assert len(lines_of(history)) == 3


def test_a_trim_drops_broken_lines(history: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_job_history, "MAX_LINES", 4)
    monkeypatch.setattr(_job_history, "KEEP_LAUNCHES", 3)
    history.parent.mkdir(parents=True)
    history.write_text("junk\n" + json.dumps(start("a", "S1")) + "\n[]\n" + json.dumps(start("a", "S2")) + "\n", encoding="utf-8")
    assert append(str(history), start("a", "S3"))
    assert lines_of(history) == [json.dumps(start("a", f"S{n}"), ensure_ascii=False).encode() for n in (1, 2, 3)]


def test_a_trim_that_fails_keeps_the_append(history: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_job_history, "MAX_LINES", 2)
    monkeypatch.setattr(_job_history, "KEEP_LAUNCHES", 1)
    assert append(str(history), start("a", "S1")) and append(str(history), start("a", "S2"))

    def no_replace(*_args: t.Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_replace)
    assert append(str(history), start("a", "S3")), "the line is written; the trim waits for the next append"
    monkeypatch.undo()
    assert len(lines_of(history)) == 3 and sorted(p.name for p in history.parent.iterdir()) == ["history.jsonl"]


# ---- the lock ----


def hold_lock(path: Path) -> int:
    """The file, opened and locked by the test (close the descriptor to release)."""
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_an_append_waits_for_the_lock(history: Path) -> None:
    assert append(str(history), start("a", "S1"))
    fd = hold_lock(history)
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(append(str(history), start("a", "S2"))))
    thread.start()
    time.sleep(0.3)
    assert thread.is_alive() and len(lines_of(history)) == 1, "nothing is written while another holds the lock"
    os.close(fd)
    thread.join(10)
    assert results == [True] and len(lines_of(history)) == 2


def test_an_append_gives_up_on_a_lock_never_released(history: Path) -> None:
    assert append(str(history), start("a", "S1"))
    fd = hold_lock(history)
    try:
        began = time.monotonic()
        assert append(str(history), start("a", "S2"), timeout=0.3) is False
        assert 0.3 <= time.monotonic() - began < 5
    finally:
        os.close(fd)
    assert len(lines_of(history)) == 1


def test_an_append_waiting_while_the_file_is_replaced_writes_to_the_new_file(history: Path) -> None:
    """Another append trimmed the file (a new file renamed over it) while this one waited for the old file's lock."""
    assert append(str(history), start("a", "S1"))
    fd = hold_lock(history)
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(append(str(history), start("a", "S3"))))
    thread.start()
    time.sleep(0.2)
    replacement = history.with_name("new")
    replacement.write_text(json.dumps(start("a", "S2")) + "\n", encoding="utf-8")
    os.replace(replacement, history)
    os.close(fd)
    thread.join(10)
    assert results == [True] and [entry["started_at"] for entry in read(str(history))] == ["S2", "S3"]


def _writer(path: str, worker: int, count: int) -> None:
    for number in range(count):
        record = start(f"w{worker}", f"S{number}", reason="x" * (number * 37 % 3000))
        if not append(path, record) or not append(path, end(f"w{worker}", f"S{number}")):
            os._exit(1)  # pylint: disable=protected-access
    os._exit(0)  # pylint: disable=protected-access


def run_writers(path: Path, workers: int, count: int) -> None:
    """``workers`` processes appending ``count`` launches each, all at once."""
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_writer, args=(str(path), worker, count)) for worker in range(workers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0] * workers


def test_concurrent_appends_are_whole_lines(history: Path) -> None:
    run_writers(history, 6, 40)
    lines = lines_of(history)
    assert len(lines) == 6 * 40 * 2 and all(isinstance(json.loads(line), dict) for line in lines)
    entries = read(str(history), limit=1000)
    assert len(entries) == 240 and {entry["end_state"] for entry in entries} == {"finished"}


def test_concurrent_appends_and_trims(history: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_job_history, "MAX_LINES", 40)
    monkeypatch.setattr(_job_history, "KEEP_LAUNCHES", 15)
    run_writers(history, 6, 40)
    lines = lines_of(history)
    assert len(lines) <= 40 and all(isinstance(json.loads(line), dict) for line in lines)
    entries = read(str(history))
    assert len(entries) >= 15, "the last trim kept 15 launches, later appends only add"
    assert {entry["end_state"] for entry in entries} == {"finished"}, "every launch ended (an end whose start was trimmed too)"
    assert sorted(p.name for p in history.parent.iterdir()) == ["history.jsonl"]


# ---- what cannot be written ----


def test_paths_that_cannot_be_written(tmp_path: Path) -> None:
    plain = tmp_path / "file"
    plain.write_text("x", encoding="utf-8")
    assert append(str(plain / "sub" / "history.jsonl"), start("a", "S1")) is False, "a parent is a file"
    assert append(str(tmp_path), start("a", "S1")) is False, "the path is a folder"
    assert append("/proc/trainops/history.jsonl", start("a", "S1")) is False, "a folder that cannot be made"
    assert append("", start("a", "S1")) is False
    assert read(str(plain / "sub" / "history.jsonl")) == [] and read(str(tmp_path)) == [] and read("/nonexistent/x") == []


def test_a_full_file_system_loses_the_line_not_the_file(small_fs: Path) -> None:
    full = small_fs / "trainops" / "history.jsonl"
    assert append(str(full), start("a", "S1")) is False
    assert not full.exists() or full.read_bytes() == b"", "nothing, not part of a line"
    (small_fs / "filler").unlink()
    path = small_fs / "history.jsonl"
    written = 0
    while append(str(path), start("a", f"S{written}", reason="r" * 1500)):
        written += 1
        assert written < 100, "a 16 KiB file system cannot take 100 of these"
    assert written > 0 and len(lines_of(path)) == written and path.read_bytes().endswith(b"\n"), "whole lines only"
    assert [entry["started_at"] for entry in read(str(path))] == [f"S{number}" for number in range(written)]


def boot_restart(name: str, started: str, attempts: int, restarts: int, reason: str) -> dict[str, t.Any]:
    """A line the boot recorder writes when ``restart_on_boot`` starts the launch again."""
    return dict(start(name, started), event="boot_restart", time="T", attempts=attempts, boot_restarts=restarts, reason=reason)


def test_a_start_at_boot_goes_on_with_its_launch_and_its_end_ends_it(history: Path) -> None:
    assert append(str(history), start("a", "S1"))
    assert append(str(history), boot_restart("a", "S1", 2, 1, "lost: the container restarted at B; ...; started again as attempt 2"))
    (entry,) = read(str(history))
    assert (entry["end_state"], entry["attempts"], entry["boot_restarts"], entry["reason"]) == (
        "running", 2, 1, "lost: the container restarted at B; ...; started again as attempt 2")
    assert append(str(history), end("a", "S1", 0, attempts=3))
    (entry,) = read(str(history))
    assert (entry["end_state"], entry["attempts"], entry["boot_restarts"], entry["reason"]) == ("finished", 3, 1, "exit status 0")


def test_a_start_at_boot_opens_a_launch_a_clean_shutdown_ended(history: Path) -> None:
    assert append(str(history), start("a", "S1"))
    assert append(str(history), end("a", "S1", 143, end_state="stopped", cause="shutdown"))
    assert append(str(history), boot_restart("a", "S1", 2, 1, "the container shut down at E; started again as attempt 2"))
    (entry,) = read(str(history))
    assert (entry["end_state"], entry["ended_at"], entry["exit_status"], entry["cause"]) == ("running", None, None, None)
    assert append(str(history), start("a", "S2"))
    assert [item["end_state"] for item in read(str(history))] == ["lost", "running"], "no end, and a later launch started"
