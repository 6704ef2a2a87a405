# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A launch's log on the target: rotation and the header line (docs/launch-protocol.md, "Files, per launch").

A log is never truncated or overwritten: ``rotate`` moves ``LOG`` to ``LOG.1`` (with ``LOG.exit``),
``append`` appends, ``fail_if_exists`` refuses an existing log (``O_EXCL``, so a log created meanwhile
is refused too).
"""

from __future__ import annotations

import errno
import os
import shutil
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import EXIT_FILE, EXIT_SUFFIX
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import (
    PROTOCOL,
    exit_record_path,
    write_whole,
)
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import read_text


class LogError(Exception):
    """The log could not be prepared; ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _keep_exit_record(log_path: str, run_dir: str) -> None:
    """A record only ``RUN_DIR/exit`` kept goes to ``LOG.exit`` first, so that it moves with its log."""
    copy = os.path.join(run_dir, EXIT_FILE)
    if exit_record_path(log_path, run_dir) == copy:
        with open(copy, "rb") as handle:
            write_whole(log_path + EXIT_SUFFIX, handle.read().decode("utf-8", "surrogateescape"), 0o644)


def _move(source: str, target: str) -> None:
    if os.path.lexists(source):
        os.replace(source, target)


def rotate(log_path: str, keep: int, run_dir: str) -> str | None:
    """``LOG`` → ``LOG.1`` … ``LOG.KEEP`` (exit records alongside); the name the log got, if it existed."""
    _keep_exit_record(log_path, run_dir)
    if not os.path.lexists(log_path) and not os.path.lexists(log_path + EXIT_SUFFIX):
        return None
    for suffix in ("", EXIT_SUFFIX):
        try:
            os.unlink(f"{log_path}.{keep}{suffix}")
        except FileNotFoundError:
            pass
    for index in range(keep - 1, 0, -1):
        _move(f"{log_path}.{index}", f"{log_path}.{index + 1}")
        _move(f"{log_path}.{index}{EXIT_SUFFIX}", f"{log_path}.{index + 1}{EXIT_SUFFIX}")
    rotated = f"{log_path}.1" if os.path.lexists(log_path) else None
    _move(log_path, f"{log_path}.1")
    _move(log_path + EXIT_SUFFIX, f"{log_path}.1{EXIT_SUFFIX}")
    return rotated


def header(name: str, started_at: str, command: str) -> str:
    """The log's first line of a launch (never env values)."""
    host = (read_text("/proc/sys/kernel/hostname") or os.uname().nodename).strip()
    return f"{PROTOCOL}session={name} started_at={started_at} host={host} command={command}\n"


def _header_failed(log_path: str, created: bool, rotated: str | None, exc: OSError) -> LogError:
    """Why the header could not be written; an empty log this launch created is removed."""
    if created:
        try:
            if os.path.getsize(log_path) == 0:
                os.unlink(log_path)
        except OSError:
            pass
    kept = f" (the earlier log is kept as {rotated})" if rotated else ""
    folder = os.path.dirname(log_path) or "/"
    if exc.errno == errno.ENOSPC or shutil.disk_usage(folder).free == 0:
        return LogError("start_failed", f"cannot write the log header to {log_path}: No space left on device, the file system of "
                                        f"{folder} is full{kept}; free space there or choose another log_path")
    return LogError("start_failed", f"cannot write the log header to {log_path}{kept}: {exc.strerror or exc}")


def prepare(log_path: str, mode: str, keep: int, run_dir: str, line: str) -> str | None:
    """Rotate (or not) and write the header ``line``; the rotated log's name. Raises LogError."""
    rotated = None
    try:
        if mode == "rotate":
            rotated = rotate(log_path, keep, run_dir)
        else:
            remove_file(log_path + EXIT_SUFFIX)
    except OSError as exc:
        raise LogError("start_failed", f"cannot rotate {log_path}: {exc.strerror or exc}") from None
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_EXCL if mode == "fail_if_exists" else 0)
    created = not os.path.lexists(log_path)
    try:
        fd = os.open(log_path, flags, 0o644)
    except FileExistsError:
        raise LogError("log_exists", f"log file {log_path} already exists") from None
    except OSError as exc:
        raise _header_failed(log_path, created, rotated, exc) from None
    try:
        _write_all(fd, line.encode("utf-8", "surrogateescape"))
    except OSError as exc:
        raise _header_failed(log_path, created, rotated, exc) from None
    finally:
        os.close(fd)
    return rotated


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def remove_file(path: str) -> None:
    """Remove a file; one that is not there is fine, any other error is raised."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def chown_to(log_path: str, user: t.Optional[t.Tuple[int, int]]) -> None:
    """The log belongs to the job's user (best effort, as a launch as root can always do it)."""
    if user is not None:
        try:
            os.chown(log_path, user[0], user[1])
        except OSError:
            pass
