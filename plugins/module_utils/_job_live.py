# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The live record of a job: what the container's next boot needs to tell that the job was running when the
container went away (docs/job-life.md, "A container that goes away").

``RUN_DIR`` is in ``/run``, which every boot empties, so a launch as root also writes ``LIVE_DIR/NAME.json``
(``/var/lib/trainops/jobs``, mode 0600 in a folder of mode 0700; ``_boot_stage.keep``): the launch (session name,
``started_at``: the key of its history lines, log, host, ``RUN_DIR``, history file), the boot it runs in
(``boot_key``), the supervisor's state and attempt, which the supervisor notes at each change (``note``), and
what starting it again needs (``job.json`` without ``notify_url``). The supervisor removes it once the exit record
and the history say how the job ended (``ended``), except after a clean shutdown when ``restart_on_boot`` asks for
a start at the next boot. At boot the recorder (``_job_boot``) reads the records (``records``): one of another boot
whose launch has no exit record is a job the container's stop cut off.

No secret values: ``notify_url`` is kept apart, in ``LIVE_DIR/NAME.notify`` (0600), and only when the launch asked
for it (``notify_url_keep``); the values of ``env`` never are.

The boot is the kernel's boot id (``/proc/sys/kernel/random/boot_id``: LXC bind-mounts an id of its own for each
start of a container over it, ``/dev/.lxc-boot-id``) and the start of the container's PID 1 in clock ticks since the
node's boot (field 22 of ``/proc/1/stat``), so a restart of the container is a new boot with either.
Staged with the supervisor and the boot recorder; standard library only, Python 3.7 or later.
"""

from __future__ import annotations

import json
import os
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import KEPT_URL_SUFFIX, LIVE_DIR, LIVE_SUFFIX
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import write_whole

FORMAT = 1
BOOT_ID = ("sys", "kernel", "random", "boot_id")  # in /proc
STARTTIME_FIELD = 22  # of /proc/PID/stat, counted from 1: the start in clock ticks after the boot
FOLDER_MODE = 0o700


def _read(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "surrogateescape")
    except OSError:
        return None


def iso(seconds: float) -> str:
    """A time as the protocol writes it: ISO 8601 UTC, seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def pid1_start(proc_root: str = "/proc") -> int | None:
    """When this system's PID 1 started, in clock ticks after the kernel's boot; None when unreadable."""
    text = _read(os.path.join(proc_root, "1", "stat"), 4096)
    if not text or ")" not in text:
        return None
    fields = text.rpartition(")")[2].split()  # the fields after the command, from field 3 (state) on
    index = STARTTIME_FIELD - 3
    return int(fields[index]) if len(fields) > index and fields[index].isdigit() else None


def boot_key(proc_root: str = "/proc") -> str:
    """This boot of the system (container): ``BOOT_ID/PID1_START``, ``-`` for a part that cannot be read."""
    boot_id = (_read(os.path.join(proc_root, *BOOT_ID), 256) or "").strip() or "-"
    start = pid1_start(proc_root)
    return f"{boot_id}/{'-' if start is None else start}"


def boot_time(proc_root: str = "/proc", now: float | None = None, since_boot: float | None = None) -> str:
    """When PID 1 started (the container's boot), ISO 8601; ``now`` when that cannot be known.

    ``since_boot``: the kernel's ``CLOCK_BOOTTIME`` (in which ``/proc/1/stat`` counts), for the tests.
    """
    now = time.time() if now is None else now
    start = pid1_start(proc_root)
    try:
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) if since_boot is None else since_boot
        ticks = float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, OSError, ValueError):
        return iso(now)
    return iso(now if start is None else now - max(0.0, since_boot - start / ticks))


def record_path(name: str, live_dir: str = LIVE_DIR) -> str:
    """``LIVE_DIR/NAME.json``."""
    return os.path.join(live_dir, name + LIVE_SUFFIX)


def kept_url_path(record: str) -> str:
    """``LIVE_DIR/NAME.notify`` beside the record ``LIVE_DIR/NAME.json``."""
    return record[:-len(LIVE_SUFFIX)] + KEPT_URL_SUFFIX if record.endswith(LIVE_SUFFIX) else record + KEPT_URL_SUFFIX


def make_folder(folder: str) -> bool:
    """``folder`` with mode 0700 (its missing parents 0755); False when it cannot be made."""
    try:
        os.makedirs(os.path.dirname(folder), 0o755, exist_ok=True)
        os.makedirs(folder, FOLDER_MODE, exist_ok=True)
        os.chmod(folder, FOLDER_MODE)
    except OSError:
        return False
    return True


def write(path: str, record: t.Mapping[str, t.Any]) -> bool:
    """The record, whole (mode 0600, its folder 0700); False when it could not be written."""
    if not make_folder(os.path.dirname(path)):
        return False
    return write_whole(path, json.dumps(dict(record), ensure_ascii=False, sort_keys=True), 0o600)


def keep_url(path: str, url: str | None) -> bool:
    """``notify_url`` beside the record (0600), or, without one, no such file; False when that failed."""
    kept = kept_url_path(path)
    if url is None:
        return _remove(kept)
    return make_folder(os.path.dirname(kept)) and write_whole(kept, url + "\n", 0o600)


def kept_url(path: str) -> str | None:
    """The ``notify_url`` kept beside the record ``path``, or None."""
    text = _read(kept_url_path(path), 65536)
    return (text or "").strip() or None


def read(path: str) -> dict[str, t.Any] | None:
    """The record of ``path``, None when it is missing or broken."""
    text = _read(path)
    try:
        value = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and isinstance(value.get("session_name"), str) else None


def records(live_dir: str = LIVE_DIR) -> list[tuple[str, dict[str, t.Any]]]:
    """(path, record) of every live record of ``live_dir``, by session name."""
    try:
        names = sorted(os.listdir(live_dir))
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(live_dir, name)
        record = read(path) if name.endswith(LIVE_SUFFIX) else None
        if record is not None and record_path(record["session_name"], live_dir) == path:
            found.append((path, record))
    return found


def note(path: str | None, started_at: t.Any, **values: t.Any) -> bool:
    """Update the record of the launch ``started_at`` with ``values``; False when it is another launch's or gone."""
    record = read(path) if path else None
    if record is None or record.get("started_at") != started_at:
        return False
    record.update(values)
    return write(str(path), record)


def ended(path: str | None, started_at: t.Any, attempt: int, again: bool = False) -> None:
    """The end of the launch ``started_at`` is recorded: its record goes; with ``again`` (a clean shutdown under
    ``restart_on_boot``) it stays, ``state`` ended, for the next boot to start the job again."""
    if again:
        note(path, started_at, state="ended", since=iso(time.time()), attempt=attempt)
    else:
        remove(path, started_at)


def remove(path: str | None, started_at: t.Any) -> None:
    """The record of the launch ``started_at`` and its kept URL are gone (those of a later launch stay)."""
    record = read(path) if path else None
    if record is None or record.get("started_at") != started_at:
        return
    discard(str(path))


def discard(path: str) -> None:
    """The record ``path`` and its kept URL are gone, whichever launch wrote them."""
    _remove(path)
    _remove(kept_url_path(path))


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True
