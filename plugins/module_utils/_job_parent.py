# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The job's parent inside its tmux pane, and the exit record it leaves (docs/launch-protocol.md).

``tmux_session`` copies this file, as it is, to ``RUN_DIR/parent.py`` in the target and makes tmux run
``PYTHON -I RUN_DIR/parent.py RUN_DIR`` in the session's pane. It therefore imports nothing of the
collection (it runs without it) and works with the target's Python 3.7 or later.

The parent reads ``RUN_DIR/job.json`` (session_name, log_path, argv, chdir, venv, user, started_at)
and ``RUN_DIR/env`` (the job's env values as JSON, mode 0600, deleted before the job starts), starts
the job in a new session and process group of its own (``RUN_DIR/pgid``) with standard input
``/dev/null`` and its output appended to the log, forwards TERM, INT and HUP to that group, and when
the job ends appends the trailer line to the log and writes the exit record.

The exit record helpers (``exit_record_text``, ``write_exit_record``, ``exit_record_path``,
``read_exit_record``) are the collection's only implementation of the record: the launcher and the
readers import them from here.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import signal
import subprocess
import sys
import time
import typing as t

CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROTOCOL = "### trainops.pct_launch: "
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# A job the parent cannot start ends like a shell's: 126 (cannot run), 127 (not found).
CANNOT_RUN = 126
NOT_FOUND = 127


def now() -> str:
    """The time as the protocol writes it: ISO 8601 UTC, seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def exit_record_text(name: str, status: int, started_at: str, ended_at: str, stop_signal: str | None = None) -> str:
    """The ``key=value`` lines of an exit record."""
    lines = [f"session_name={name}", f"exit_status={status}", f"started_at={started_at}", f"ended_at={ended_at}"]
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
    write_whole(os.path.join(run_dir, "exit"), text, 0o600)
    write_whole(log_path + ".exit", text, 0o644)


def _recorded_log(run_dir: str) -> str | None:
    try:
        with open(os.path.join(run_dir, "log_path"), "rb") as handle:
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
    if _nonempty(log_path + ".exit"):
        return log_path + ".exit"
    copy = os.path.join(run_dir, "exit") if run_dir else None
    if copy and _nonempty(copy) and _recorded_log(run_dir or "") == log_path:
        return copy
    return log_path + ".exit" if os.path.lexists(log_path + ".exit") else None


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


def _read_env(run_dir: str) -> dict[str, str]:
    """The job's env values; the file is deleted before the job starts, whatever it holds."""
    path = os.path.join(run_dir, "env")
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


def _log_line(log: t.BinaryIO, text: str) -> None:
    """One protocol line in the log; a full (or failing) file system loses the line, never the exit record."""
    try:
        log.write((text + "\n").encode("utf-8", "surrogateescape"))
        log.flush()
    except OSError:
        pass


def start_job(job: t.Mapping[str, t.Any], run_dir: str, log: t.BinaryIO) -> subprocess.Popen | int:
    """The started job, or the status of a job that could not start (the reason is in the log)."""
    home, switch = _become(job.get("user"))
    cwd = job.get("chdir") or home
    environ = job_environment(job, home, _read_env(run_dir))
    try:
        return subprocess.Popen(list(job["argv"]), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=cwd, env=environ, start_new_session=True, preexec_fn=switch, close_fds=True)
    except OSError as exc:
        if exc.filename == cwd and not os.path.isdir(cwd):
            _log_line(log, f"trainops.pct_launch: cannot change to directory {cwd}")
            return CANNOT_RUN
        _log_line(log, f"trainops.pct_launch: cannot run {job['argv'][0]}: {exc.strerror or exc}")
        return NOT_FOUND if exc.errno == errno.ENOENT else CANNOT_RUN
    except subprocess.SubprocessError as exc:  # the switch to the job's user failed (in preexec_fn)
        _log_line(log, f"trainops.pct_launch: cannot run the job as user {job.get('user')}: {exc}")
        return CANNOT_RUN


def forward_signals(children: list[int]) -> None:
    """From now on TERM, INT and HUP go to the process group of the job in ``children`` (once it is there)."""
    def forward(signum: int, _frame: t.Any) -> None:
        for pgid in children:
            try:
                os.killpg(pgid, signum)
            except OSError:
                pass
    for signum in FORWARDED:
        signal.signal(signum, forward)


def wait_job(proc: subprocess.Popen) -> int:
    """The job's status as a shell reports it: 128+N when signal N killed it."""
    status = proc.wait()
    return 128 - status if status < 0 else status


def run(run_dir: str) -> int:
    """Run the job of ``run_dir`` to its end; the job's exit status."""
    with open(os.path.join(run_dir, "job.json"), "rb") as handle:
        job = json.loads(handle.read().decode("utf-8", "surrogateescape"))
    name, log_path = job["session_name"], job["log_path"]
    children: list[int] = []
    forward_signals(children)
    with open(log_path, "ab", buffering=0) as log:
        proc = start_job(job, run_dir, log)
        if isinstance(proc, int):
            status = proc
        else:
            children.append(proc.pid)
            _write_pgid(run_dir, proc.pid)
            sys.stdout.write(f"trainops.pct_launch: session {name} runs pid {proc.pid}; output goes to {log_path}\n")
            sys.stdout.flush()
            status = wait_job(proc)
        ended = now()
        _log_line(log, f"{PROTOCOL}session={name} exit_status={status} ended_at={ended}")
    write_exit_record(run_dir, log_path, exit_record_text(name, status, job.get("started_at", ""), ended, _stop_signal(run_dir)))
    _remove(os.path.join(run_dir, "pgid"))
    return status


def _write_pgid(run_dir: str, pgid: int) -> None:
    write_whole(os.path.join(run_dir, "pgid"), f"{pgid}\n", 0o600)


def _stop_signal(run_dir: str) -> str | None:
    try:
        with open(os.path.join(run_dir, "stop_requested"), encoding="ascii", errors="replace") as handle:
            return handle.read().strip() or "TERM"
    except OSError:
        return None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1]))
