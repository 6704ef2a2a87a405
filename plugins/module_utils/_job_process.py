# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The job's process as its supervisor starts, signals and waits for it, and the exit record it leaves.

The supervisor (``_job_supervise``, run in the pane by ``RUN_DIR/supervisor.py``, which is ``_supervisor_entry.py``)
is the job's parent; this file is what it does to the job's process, not the supervisor itself: it reads
``RUN_DIR/job.json`` (``load_job``: session_name, log_path, argv, chdir, venv, user, started_at, host, supervise)
and ``RUN_DIR/env`` and ``RUN_DIR/notify_url`` (``read_env``, ``read_notify_url``: the job's env values as JSON and
its webhook, the secrets of its launch, mode 0600, deleted before the job starts), starts
each attempt of the job in a new session and process group of its own (``RUN_DIR/pgid``) with standard input
``/dev/null`` and its output appended to the log (``start_job``), forwards TERM, INT and HUP to that group, and
waits for it. It is staged in ``RUN_DIR/lib`` with the supervisor (``_job_stage``), imports only ``_job_layout``
and the standard library, and works with the target's Python 3.7 or later.

The exit record helpers (``exit_record_text``, ``write_exit_record``, ``exit_record_path``,
``read_exit_record``) are the collection's only implementation of the record (docs/launch-protocol.md): the
launcher and the readers import them from here.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import select
import signal
import subprocess
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import (
    ENV_FILE,
    EXIT_FILE,
    EXIT_SUFFIX,
    JOB_FILE,
    LOG_PATH_FILE,
    NOTIFY_URL_FILE,
    PGID_FILE,
    STOP_FILE,
)

CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROTOCOL = "### trainops.pct_launch: "
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# A job the supervisor cannot start ends like a shell's: 126 (cannot run), 127 (not found).
CANNOT_RUN = 126
NOT_FOUND = 127


def hostname() -> str:
    """The host's name, as ``socket.gethostname()`` gives it on Linux (uname's nodename), without socket's import."""
    return os.uname()[1]


def now() -> str:
    """The time as the protocol writes it: ISO 8601 UTC, seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# The keys an exit record may carry after the first four (docs/job-life.md), in the order they are written.
RECORD_KEYS = ("attempts", "end_state", "cause", "signal", "reason", "attempt_started_at", "gpu_bus_ids")


def one_line(text: str, limit: int = 300) -> str:
    """``text`` as one line of at most ``limit`` characters: control characters become spaces."""
    flat = "".join(" " if ord(char) < 32 or ord(char) == 127 else char for char in text)
    return " ".join(flat.split())[:limit]


def exit_record_text(name: str, status: int | None, started_at: str, ended_at: str, stop_signal: str | None = None,
                     end: t.Mapping[str, t.Any] | None = None) -> str:
    """The ``key=value`` lines of an exit record; ``end`` adds the keys of ``RECORD_KEYS`` it has.

    ``status`` None (a job lost with its container: nobody saw its end) writes an empty ``exit_status``."""
    shown = "" if status is None else status
    lines = [f"session_name={name}", f"exit_status={shown}", f"started_at={started_at}", f"ended_at={ended_at}"]
    for key in RECORD_KEYS:
        value = (end or {}).get(key)
        if value is not None and value != "":
            lines.append(f"{key}={one_line(str(value))}")
    if stop_signal is not None:
        lines += ["stopped_by=trainops", f"stop_signal={stop_signal}"]
    return "\n".join(lines) + "\n"


def write_whole(path: str, text: str, mode: int) -> bool:
    """Write ``text`` to ``path`` through a temporary file that must read back whole; False when it could not."""
    tmp = f"{path}.tmp.{os.getpid()}"
    data = text.encode("utf-8", "surrogateescape")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        with open(tmp, "rb") as handle:
            whole = handle.read() == data
        if whole:
            os.replace(tmp, path)
            return True
    except OSError:
        pass
    try:
        os.unlink(tmp)
    except OSError:
        pass
    return False


def write_exit_record(run_dir: str, log_path: str, text: str) -> None:
    """First ``RUN_DIR/exit`` (``/run``, always writable), then ``LOG.exit`` (kept), each whole or not at all."""
    write_whole(os.path.join(run_dir, EXIT_FILE), text, 0o600)
    write_whole(log_path + EXIT_SUFFIX, text, 0o644)


def _recorded_log(run_dir: str) -> str | None:
    try:
        with open(os.path.join(run_dir, LOG_PATH_FILE), "rb") as handle:
            return handle.read().decode("utf-8", "surrogateescape")
    except OSError:
        return None


def _nonempty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def exit_record_path(log_path: str, run_dir: str | None) -> str | None:
    """``LOG.exit``; when it is missing or empty, ``RUN_DIR/exit`` if the session's last launch wrote that log."""
    kept = log_path + EXIT_SUFFIX
    if _nonempty(kept):
        return kept
    copy = os.path.join(run_dir, EXIT_FILE) if run_dir else None
    if copy and _nonempty(copy) and _recorded_log(run_dir or "") == log_path:
        return copy
    return kept if os.path.lexists(kept) else None


def read_exit_record(log_path: str, run_dir: str | None) -> dict[str, str] | None:
    """The exit record of ``log_path`` as a dict, or None when there is none."""
    path = exit_record_path(log_path, run_dir)
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            text = handle.read(65536).decode("utf-8", "replace")
    except OSError:
        return None
    record: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key not in record:
            record[key] = value
    return record


def read_env(run_dir: str) -> dict[str, str]:
    """The job's env values; the file is deleted before the job starts, whatever it holds."""
    path = os.path.join(run_dir, ENV_FILE)
    try:
        with open(path, "rb") as handle:
            values = json.loads(handle.read().decode("utf-8", "surrogateescape"))
    except (OSError, ValueError):
        values = {}
    try:
        os.unlink(path)
    except OSError:
        pass
    return {str(k): str(v) for k, v in values.items()} if isinstance(values, dict) else {}


def read_notify_url(run_dir: str) -> str | None:
    """The job's ``notify_url`` (``RUN_DIR/notify_url``), or None; the file is deleted at once, as ``env``'s."""
    path = os.path.join(run_dir, NOTIFY_URL_FILE)
    try:
        with open(path, "rb") as handle:
            url = handle.read(65536).decode("utf-8", "surrogateescape").strip()
    except OSError:
        url = ""
    try:
        os.unlink(path)
    except OSError:
        pass
    return url or None


def job_environment(job: t.Mapping[str, t.Any], home: str, env: t.Mapping[str, str]) -> dict[str, str]:
    """A clean environment: PATH, HOME, USER, LOGNAME, LANG, then the job's env, then its venv."""
    user = job.get("user") or pwd.getpwuid(os.getuid()).pw_name
    environ = {"PATH": CLEAN_PATH, "HOME": home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8"}
    environ.update(env)
    venv = job.get("venv")
    if venv:
        environ["VIRTUAL_ENV"] = venv
        environ["PATH"] = venv + "/bin:" + environ["PATH"]
        environ.pop("PYTHONHOME", None)
    return environ


def _become(user: str | None) -> tuple[str, t.Callable[[], None] | None]:
    """The job's home and the function that switches the child to ``user`` (None: stay root)."""
    if not user:
        return pwd.getpwuid(os.getuid()).pw_dir or "/", None
    entry = pwd.getpwnam(user)

    def switch() -> None:
        os.initgroups(user, entry.pw_gid)
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
    return entry.pw_dir or "/", switch


def log_line(log: t.BinaryIO, text: str) -> None:
    """One protocol line in the log; a full (or failing) file system loses the line, never the exit record."""
    try:
        log.write((text + "\n").encode("utf-8", "surrogateescape"))
        log.flush()
    except OSError:
        pass


def start_job(job: t.Mapping[str, t.Any], log: t.BinaryIO, env: t.Mapping[str, str]) -> subprocess.Popen | int:
    """The started job (``env``: its env values, ``read_env``), or the status of a job that could not start (the reason is in the log)."""
    home, switch = _become(job.get("user"))
    cwd = job.get("chdir") or home
    environ = job_environment(job, home, env)
    try:
        return subprocess.Popen(list(job["argv"]), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=cwd, env=environ, start_new_session=True, preexec_fn=switch, close_fds=True)
    except OSError as exc:
        if exc.filename == cwd and not os.path.isdir(cwd):
            log_line(log, f"trainops.pct_launch: cannot change to directory {cwd}")
            return CANNOT_RUN
        log_line(log, f"trainops.pct_launch: cannot run {job['argv'][0]}: {exc.strerror or exc}")
        return NOT_FOUND if exc.errno == errno.ENOENT else CANNOT_RUN
    except subprocess.SubprocessError as exc:  # the switch to the job's user failed (in preexec_fn)
        log_line(log, f"trainops.pct_launch: cannot run the job as user {job.get('user')}: {exc}")
        return CANNOT_RUN


def forward_signals(children: list[int], received: list[int] | None = None) -> None:
    """From now on TERM, INT and HUP go to the process group of the job in ``children`` (once it is there),
    and are noted in ``received``."""
    def forward(signum: int, _frame: t.Any) -> None:
        if received is not None:
            received.append(signum)
        for pgid in children:
            try:
                os.killpg(pgid, signum)
            except OSError:
                pass
    for signum in FORWARDED:
        signal.signal(signum, forward)


def pidfd_of(proc: subprocess.Popen) -> int:
    """A pidfd of the job's process (Linux 5.3 and Python 3.9 on): readable once it ends; -1 where there is none."""
    try:
        return int(os.pidfd_open(proc.pid))  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        return -1


def wait_job(proc: subprocess.Popen, timeout: float | None = None, pidfd: int = -1) -> int | None:
    """The job's status as a shell reports it (128+N when signal N killed it); None if it still runs after ``timeout`` s.

    With a ``pidfd`` (``pidfd_of``) the wait sleeps until the job ends or the time is up; without one
    ``Popen.wait`` looks every few milliseconds.
    """
    if pidfd >= 0 and timeout is not None and not select.select([pidfd], [], [], timeout)[0]:
        return None
    try:
        status = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
    return 128 - status if status < 0 else status


def load_job(run_dir: str) -> dict[str, t.Any]:
    """``RUN_DIR/job.json``."""
    with open(os.path.join(run_dir, JOB_FILE), "rb") as handle:
        return dict(json.loads(handle.read().decode("utf-8", "surrogateescape")))


def write_pgid(run_dir: str, pgid: int) -> None:
    """``RUN_DIR/pgid``: the process group of the job's running attempt."""
    write_whole(os.path.join(run_dir, PGID_FILE), f"{pgid}\n", 0o600)


def stop_signal_of(run_dir: str) -> str | None:
    """The signal of a stop by trainops (``RUN_DIR/stop_requested``), or None when nobody asked for one."""
    try:
        with open(os.path.join(run_dir, STOP_FILE), encoding="ascii", errors="replace") as handle:
            return handle.read().strip() or "TERM"
    except OSError:
        return None


def remove(path: str) -> None:
    """Delete a file if it is there."""
    try:
        os.unlink(path)
    except OSError:
        pass
