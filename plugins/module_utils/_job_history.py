# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The history of the launches of a target: one JSON object per line, two lines per launch (docs/job-life.md).

The job's supervisor (in the target, without the collection) calls ``append`` when a launch's first
attempt starts (``{"event": "start", ...}``) and when it ends (``{"event": "end", ...}``); the boot recorder
(``_job_boot``) writes the end of a job its container's stop cut off (``end_state: lost``), or, when it starts
the job again (``restart_on_boot``), ``{"event": "boot_restart", ...}`` with its ``reason``, ``attempts`` and
``boot_restarts`` (how many times so far). ``tmux_session_info`` reads the file with ``read``, which merges each
launch's lines into one entry (a later line's values win). It therefore imports nothing of the collection but ``_job_layout``, and works with the
target's Python 3.7 or later.

``append`` writes each line whole, under ``flock`` on the file, and never raises: a full disk, a
folder it cannot create or a lock it cannot get within ``LOCK_TIMEOUT`` seconds only make it return
False, so the history never harms the job. When the file has grown past ``MAX_LINES`` lines, the
same ``append`` rewrites it (temporary file and rename, under the lock) with the last
``KEEP_LAUNCHES`` launches, the two lines of a launch kept or dropped together.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pwd
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import ROOT_HISTORY, USER_HISTORY

MAX_LINES = 3000
KEEP_LAUNCHES = 1000
LOCK_TIMEOUT = 10.0
FOLDER_MODE = 0o755
FILE_MODE = 0o644
ENTRY_KEYS = ("session_name", "host", "started_at", "ended_at", "end_state", "exit_status", "cause", "reason", "attempts", "log_path",
              "boot_restarts", "attempt_started_at", "gpu_bus_ids")
_INT_KEYS = ("exit_status", "attempts", "boot_restarts")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def history_path(euid: int | None = None, home: str | None = None) -> str:
    """``ROOT_HISTORY`` for root, ``HOME/.local/state/trainops/history.jsonl`` (``USER_HISTORY``) for another user."""
    euid = os.geteuid() if euid is None else euid
    if euid == 0:
        return ROOT_HISTORY
    if home is None:
        try:
            home = pwd.getpwuid(euid).pw_dir
        except KeyError:
            home = os.environ.get("HOME") or "/"
    return os.path.join(home or "/", *USER_HISTORY)


# ---- append ----


def encode(record: t.Mapping[str, t.Any]) -> bytes | None:
    """One line of JSON for ``record``: text read with surrogateescape keeps its bytes; None when it is no JSON object."""
    try:
        text = json.dumps(dict(record), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return None
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "replace")
    return data + b"\n"


def _make_folders(folder: str) -> None:
    """Create ``folder`` and its missing parents, mode 0755 whatever the umask."""
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for item in reversed(missing):
        try:
            os.mkdir(item, FOLDER_MODE)
        except FileExistsError:
            continue
        os.chmod(item, FOLDER_MODE)


def _open(path: str) -> int:
    """The file opened for reading and appending; created with mode 0644 whatever the umask."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | _CLOEXEC, FILE_MODE)
    except FileExistsError:
        return os.open(path, os.O_RDWR | os.O_APPEND | _CLOEXEC)
    try:
        os.fchmod(fd, FILE_MODE)
    except OSError:
        pass
    return fd


def _lock(fd: int, timeout: float) -> None:
    """``flock`` LOCK_EX, given up after ``timeout`` seconds (OSError): a stuck holder never blocks the supervisor."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def _same_file(fd: int, path: str) -> bool:
    """Whether ``path`` is still the file of ``fd`` (a trim replaces the file while others wait for the lock)."""
    mine = os.fstat(fd)
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)


def _open_locked(path: str, timeout: float) -> int:
    """The history file, opened and locked, the one ``path`` names now."""
    _make_folders(os.path.dirname(os.path.abspath(path)))
    deadline = time.monotonic() + timeout
    for _attempt in range(100):
        fd = _open(path)
        try:
            _lock(fd, max(0.0, deadline - time.monotonic()))
            if _same_file(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, f"{path} keeps being replaced")


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks, offset = [], 0
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _append_whole(fd: int, data: bytes) -> bool:
    """Append ``data`` (a line); on any error, cut the file back to where it was: whole lines or nothing."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        data = b"\n" + data  # the last line is not whole (an old write cut short): ours stays whole
    written = 0
    try:
        while written < len(data):
            count = os.write(fd, data[written:])
            if count <= 0:
                raise OSError(errno.ENOSPC, "short write")
            written += count
    except OSError:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass
        return False
    return True


def _launch_key(line: bytes) -> tuple[str | None, str | None] | None:
    record = parse_line(line)
    if record is None:
        return None
    return (as_text(record.get("session_name")), as_text(record.get("started_at")))


def last_launches(lines: list[bytes], keep: int) -> list[bytes]:
    """The lines of the last ``keep`` launches (in the order their first lines came), broken lines dropped."""
    keys = [_launch_key(line) for line in lines]
    order: dict[tuple[str | None, str | None], None] = {}
    for key in keys:
        if key is not None:
            order.setdefault(key, None)
    kept = set(list(order)[-keep:]) if keep > 0 else set()
    return [line for line, key in zip(lines, keys) if key in kept]


def _trim(fd: int, path: str) -> None:
    """Past ``MAX_LINES`` lines, replace the file by its last ``KEEP_LAUNCHES`` launches (the lock is held)."""
    try:
        data = _read_all(fd)
        if data.count(b"\n") <= MAX_LINES:
            return
        kept = last_launches([line for line in data.split(b"\n") if line.strip()], KEEP_LAUNCHES)
        text = b"".join(line + b"\n" for line in kept)
    except (OSError, MemoryError):
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, FILE_MODE)
        try:
            os.fchmod(out, os.fstat(fd).st_mode & 0o7777)
            if os.write(out, text) != len(text):
                raise OSError(errno.ENOSPC, "short write")
            os.fsync(out)
        finally:
            os.close(out)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def append(path: str, record: t.Mapping[str, t.Any], timeout: float = LOCK_TIMEOUT) -> bool:
    """Append ``record`` as one whole JSON line under ``flock``; False, never an exception, when it could not."""
    data = encode(record)
    if data is None:
        return False
    try:
        fd = _open_locked(path, timeout)
    except (OSError, ValueError):
        return False
    try:
        if not _append_whole(fd, data):
            return False
        _trim(fd, path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the lock


# ---- read ----


def parse_line(line: bytes) -> dict[str, t.Any] | None:
    """A line's JSON object, or None (not JSON, not an object)."""
    try:
        value = json.loads(line.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _records(path: str) -> list[dict[str, t.Any]]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return []
    records = [parse_line(line) for line in data.split(b"\n") if line.strip()]
    return [record for record in records if record is not None]


def as_int(value: t.Any) -> int | None:
    """An integer of the file (a number or a string of digits), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    digits = text[1:] if text.startswith("-") else text
    return int(text) if digits.isascii() and digits.isdigit() else None


def as_text(value: t.Any) -> str | None:
    """A text of the file, or None (missing, empty, not text)."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _fold(entry: dict[str, t.Any], record: t.Mapping[str, t.Any]) -> None:
    """The values of one line into its launch's entry (the end line's win; a start at boot opens an ended launch again)."""
    if record.get("event") == "boot_restart":
        entry.update(ended=False, ended_at=None, end_state=None, exit_status=None, cause=None)
    for key in ENTRY_KEYS[1:]:
        value = as_int(record.get(key)) if key in _INT_KEYS else as_text(record.get(key))
        if value is not None:
            entry[key] = value
    if record.get("event") == "end":
        entry["ended"] = True


def merge(records: t.Iterable[t.Mapping[str, t.Any]], session_name: str | None = None) -> list[dict[str, t.Any]]:
    """One entry per launch (session_name and started_at), oldest first; a launch without an end is running or lost."""
    launches: dict[tuple[str, str | None], dict[str, t.Any]] = {}
    for record in records:
        name = record.get("session_name")
        if not isinstance(name, str) or not name or (session_name is not None and name != session_name):
            continue
        key = (name, as_text(record.get("started_at")))
        if key not in launches:
            launches[key] = dict(dict.fromkeys(ENTRY_KEYS), session_name=name, ended=False)
        _fold(launches[key], record)
    latest: dict[str, tuple[str, str | None]] = {}
    for key in launches:
        latest[key[0]] = key
    entries = []
    for key, entry in launches.items():
        if not entry.pop("ended"):
            entry["end_state"] = "running" if latest[key[0]] == key else "lost"
        entries.append(entry)
    return entries


def read(path: str, session_name: str | None = None, limit: int = 100) -> list[dict[str, t.Any]]:
    """The last ``limit`` launches of the history (of ``session_name`` only, when given), oldest first."""
    if limit <= 0:
        return []
    return merge(_records(path), session_name)[-limit:]
