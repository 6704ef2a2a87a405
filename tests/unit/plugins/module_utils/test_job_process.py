# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The job's process as its supervisor starts it (``_job_process.py``), run as the pane runs it; the exit record helpers.

The supervisor runs here as a real process, ``python -I RUN_DIR/supervisor.py RUN_DIR`` (staged as a launch
stages it), with a ``job.json`` written by the test and no tmux: the job reports its environment, working
directory, process group and standard input as hex or JSON so that byte-exact arrival can be checked.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_process, _job_stage
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import (
    CLEAN_PATH,
    exit_record_path,
    exit_record_text,
    read_exit_record,
    write_exit_record,
    write_whole,
)

STARTED_AT = "2025-01-01T00:00:00Z"
HOSTILE = [
    "it's", 'say "hi"', "$(touch pwned)", "`touch pwned`", "new\nline", "trailing\n\n", "*", "?[a]", "-dash",
    "ünïcödé ✓", "back\\slash", "\\", "'", "semi;colon", "100%d %s", "tab\there", "cr\rx", "", " lead space",
    "a\x01b\x7f", "x" * 5000,
]
# The job: its environment (as exec gave it: Python's locale coercion may add LC_CTYPE to os.environ), cwd,
# ids and stdin as JSON in argv[1]; argv[2] (if not empty) a file it waits for; argv[3] the run dir.
DUMP = (
    "import json, os, sys, time\n"
    "with open('/proc/self/environ', 'rb') as handle:\n"
    "    env = dict(item.split(b'=', 1) for item in handle.read().split(b'\\0') if item)\n"
    "data = {'env': {k.hex(): v.hex() for k, v in env.items()}, 'cwd': os.fsencode(os.getcwd()).hex(),\n"
    "        'pid': os.getpid(), 'pgid': os.getpgid(0), 'sid': os.getsid(0), 'uid': os.getuid(), 'gid': os.getgid(),\n"
    "        'groups': os.getgroups(), 'stdin': os.readlink('/proc/self/fd/0'), 'stdin_data': sys.stdin.read(),\n"
    "        'env_file_exists': os.path.exists(os.path.join(sys.argv[3], 'env')) if len(sys.argv) > 3 else None}\n"
    "with open(sys.argv[1] + '.tmp', 'w') as handle:\n"
    "    json.dump(data, handle)\n"
    "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "while len(sys.argv) > 2 and sys.argv[2] and not os.path.exists(sys.argv[2]):\n"
    "    time.sleep(0.02)\n"
)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# A Python another user can run (the venv's may live in /root).
SYSTEM_PYTHON = shutil.which("python3", path=CLEAN_PATH)
needs_root_and_nobody = pytest.mark.skipif(os.geteuid() != 0 or SYSTEM_PYTHON is None or not _has_user("nobody"),
                                           reason="needs root, a system python3 and the user nobody")
TRAILER = re.compile(r"### trainops\.pct_launch: session=(?P<name>\S+) exit_status=(?P<status>\d+) "
                     r"ended_at=(?P<ended>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")


def _wait_for(predicate: t.Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def _setup(tmp_path: Path, argv: list[str], env: dict[str, str] | None = None, name: str = "job", **job: t.Any) -> tuple[Path, Path]:
    """RUN_DIR with job.json (and env), and the log's path."""
    run_dir = tmp_path / "run" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o755)
    (tmp_path / "run").chmod(0o755)
    log = tmp_path / "logs" / f"{name}.log"
    log.parent.mkdir(exist_ok=True)
    spec = {"session_name": name, "log_path": str(log), "argv": argv, "chdir": None, "venv": None, "user": None,
            "started_at": STARTED_AT, "history_path": str(tmp_path / "history.jsonl")}
    spec.update(job)
    (run_dir / "job.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    if env is not None:
        (run_dir / "env").write_text(json.dumps(env, ensure_ascii=False), encoding="utf-8")
        (run_dir / "env").chmod(0o600)
    return run_dir, log


def _supervisor_argv(run_dir: Path) -> list[str]:
    """The pane's command line, after staging the supervisor into RUN_DIR as tmux_session does."""
    assert _job_stage.stage(str(run_dir)) is None
    return [sys.executable, "-I", str(run_dir / "supervisor.py"), str(run_dir)]


def _run(run_dir: Path, environ: dict[str, str] | None = None, timeout: float = 20) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(_supervisor_argv(run_dir), stdin=subprocess.DEVNULL, capture_output=True, env=environ,
                          timeout=timeout, check=False)


@contextlib.contextmanager
def _start(run_dir: Path) -> t.Iterator[subprocess.Popen[bytes]]:
    """The parent running in the background; it and its job are killed if the test leaves them running."""
    proc = subprocess.Popen(_supervisor_argv(run_dir), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            try:
                os.killpg(int((run_dir / "pgid").read_text(encoding="ascii")), signal.SIGKILL)
            except (OSError, ValueError):
                pass
            proc.kill()
        proc.wait()


def _record(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines())


def _dump_job(out: Path, go: Path | None = None, run_dir: Path | None = None, python: str = sys.executable) -> list[str]:
    return [python, "-c", DUMP, str(out), str(go or ""), *([str(run_dir)] if run_dir else [])]


def _decode_env(dump: dict[str, t.Any]) -> dict[bytes, bytes]:
    return {bytes.fromhex(k): bytes.fromhex(v) for k, v in dump["env"].items()}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("status", [0, 3])
def test_exit_status_goes_to_both_records_and_the_trailer(tmp_path: Path, status: int) -> None:
    run_dir, log = _setup(tmp_path, ["sh", "-c", f"echo out; echo err >&2; exit {status}"])
    proc = _run(run_dir)
    assert proc.returncode == status, proc.stderr
    lines = log.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["out", "err"] and len(lines) == 3
    trailer = TRAILER.fullmatch(lines[2])
    assert trailer is not None, lines[2]
    assert trailer["name"] == "job" and trailer["status"] == str(status)
    primary = Path(str(log) + ".exit").read_bytes()
    assert (run_dir / "exit").read_bytes() == primary
    end = {"attempts": "1", "end_state": "finished" if status == 0 else "failed", "cause": "exit_status", "reason": f"exit status {status}"}
    assert primary.decode().splitlines()[:4] == exit_record_text("job", status, STARTED_AT, trailer["ended"]).splitlines()
    assert {key: value for key, value in _record(Path(str(log) + ".exit")).items() if key in ("attempts", "end_state", "cause")} == \
        {key: end[key] for key in ("attempts", "end_state", "cause")}
    assert primary.startswith(f"session_name=job\nexit_status={status}\nstarted_at={STARTED_AT}\nended_at=".encode())
    assert b"stopped_by" not in primary
    assert (run_dir / "exit").stat().st_mode & 0o777 == 0o600
    assert Path(str(log) + ".exit").stat().st_mode & 0o777 == 0o644
    assert not (run_dir / "pgid").exists()
    assert not list(run_dir.glob("*.tmp.*")) and not list(log.parent.glob("*.tmp.*"))
    assert b"runs pid" in proc.stdout and str(log).encode() in proc.stdout


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGUSR1, signal.SIGSEGV])
def test_a_job_killed_by_a_signal_is_128_plus_n(tmp_path: Path, signum: int) -> None:
    run_dir, log = _setup(tmp_path, [sys.executable, "-c", f"import os; os.kill(os.getpid(), {int(signum)})"])
    proc = _run(run_dir)
    assert proc.returncode == 128 + signum, proc.stderr
    assert _record(Path(str(log) + ".exit"))["exit_status"] == str(128 + signum)
    assert _record(run_dir / "exit")["exit_status"] == str(128 + signum)
    assert f"exit_status={128 + signum} ended_at=" in log.read_text(encoding="utf-8")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_parent_is_forwarded_to_the_job(tmp_path: Path, signum: int) -> None:
    run_dir, log = _setup(tmp_path, ["sleep", "30"])
    started = time.monotonic()
    with _start(run_dir) as proc:
        _wait_for((run_dir / "pgid").exists)
        pgid = int((run_dir / "pgid").read_text(encoding="ascii"))
        assert _group_alive(pgid)
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == 128 + signum
    assert time.monotonic() - started < 5, "the job did not get the signal: sleep 30 ran out"
    assert not _group_alive(pgid)
    record = _record(Path(str(log) + ".exit"))
    assert record["exit_status"] == str(128 + signum)
    assert "stopped_by" not in record, "no stop_requested: not a stop of trainops"
    assert f"exit_status={128 + signum} ended_at=" in log.read_text(encoding="utf-8")


@pytest.mark.parametrize("requested, recorded", [("TERM\n", "TERM"), ("", "TERM"), ("INT\n", "INT")])
def test_a_requested_stop_is_named_in_the_exit_record(tmp_path: Path, requested: str, recorded: str) -> None:
    run_dir, log = _setup(tmp_path, ["sleep", "30"])
    with _start(run_dir) as proc:
        _wait_for((run_dir / "pgid").exists)
        (run_dir / "stop_requested").write_text(requested, encoding="ascii")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
    primary = Path(str(log) + ".exit").read_bytes()
    assert primary.endswith(f"\nstopped_by=trainops\nstop_signal={recorded}\n".encode())
    assert (run_dir / "exit").read_bytes() == primary
    record = _record(Path(str(log) + ".exit"))
    assert record["exit_status"] == "143" and record["stopped_by"] == "trainops" and record["stop_signal"] == recorded


def test_env_values_reach_the_job_byte_exact_and_the_env_file_is_gone(tmp_path: Path) -> None:
    out = tmp_path / "dump.json"
    env = {f"V{index}": value for index, value in enumerate(HOSTILE)}
    run_dir, _log = _setup(tmp_path, [], env=env)
    job = json.loads((run_dir / "job.json").read_text(encoding="utf-8"))
    job["argv"] = _dump_job(out, run_dir=run_dir)
    (run_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
    proc = _run(run_dir)
    assert proc.returncode == 0, proc.stderr
    dump = json.loads(out.read_text(encoding="utf-8"))
    environ = _decode_env(dump)
    for key, value in env.items():
        assert environ[key.encode()] == value.encode("utf-8"), key
    assert dump["env_file_exists"] is False, "the env file is deleted before the job starts"
    assert not (run_dir / "env").exists()
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_an_unreadable_env_file_is_deleted_and_the_job_runs(tmp_path: Path) -> None:
    run_dir, log = _setup(tmp_path, ["sh", "-c", "echo ran"])
    (run_dir / "env").write_text("{not json", encoding="utf-8")
    assert _run(run_dir).returncode == 0
    assert not (run_dir / "env").exists()
    assert log.read_text(encoding="utf-8").startswith("ran\n")


def test_the_environment_is_clean(tmp_path: Path) -> None:
    out = tmp_path / "dump.json"
    run_dir, _log = _setup(tmp_path, _dump_job(out), env={"MY_VAR": "mine", "LANG": "de_DE.UTF-8"})
    environ = dict(os.environ, LEAKED_FROM_PARENT="1", TMUX="/tmp/tmux-0/default,1,0", PYTHONPATH="/leak")
    assert _run(run_dir, environ).returncode == 0
    dump = json.loads(out.read_text(encoding="utf-8"))
    home = pwd.getpwuid(os.getuid()).pw_dir
    environ = _decode_env(dump)
    supervisor = {b"TRAINOPS_ATTEMPT", b"TRAINOPS_RESTARTS", b"TRAINOPS_SESSION_NAME", b"TORCHELASTIC_ERROR_FILE"}
    assert set(environ) == {b"PATH", b"HOME", b"USER", b"LOGNAME", b"LANG", b"MY_VAR"} | supervisor, "nothing of the parent's environment"
    assert (environ[b"TRAINOPS_ATTEMPT"], environ[b"TRAINOPS_SESSION_NAME"]) == (b"1", b"job")
    assert environ[b"TORCHELASTIC_ERROR_FILE"] == str(run_dir / "attempt-1-error.json").encode()
    assert (environ[b"PATH"], environ[b"HOME"]) == (CLEAN_PATH.encode(), home.encode())
    assert (environ[b"LANG"], environ[b"MY_VAR"]) == (b"de_DE.UTF-8", b"mine"), "env overrides the defaults"
    if os.geteuid() == 0:
        assert (environ[b"USER"], environ[b"LOGNAME"]) == (b"root", b"root")
    assert bytes.fromhex(dump["cwd"]) == home.encode(), "without chdir the job starts in its home"


def test_a_venv_comes_first_on_path(tmp_path: Path) -> None:
    out = tmp_path / "dump.json"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    workdir = tmp_path / "wörk $(x)"
    workdir.mkdir()
    run_dir, _log = _setup(tmp_path, _dump_job(out), env={"PYTHONHOME": "/bad"}, venv=str(venv), chdir=str(workdir))
    assert _run(run_dir).returncode == 0
    dump = json.loads(out.read_text(encoding="utf-8"))
    environ = _decode_env(dump)
    assert environ[b"VIRTUAL_ENV"] == os.fsencode(str(venv))
    assert environ[b"PATH"] == os.fsencode(str(venv / "bin")) + b":" + CLEAN_PATH.encode()
    assert b"PYTHONHOME" not in environ
    supervisor = {b"TRAINOPS_ATTEMPT", b"TRAINOPS_RESTARTS", b"TRAINOPS_SESSION_NAME", b"TORCHELASTIC_ERROR_FILE"}
    assert set(environ) - supervisor == {b"PATH", b"HOME", b"USER", b"LOGNAME", b"LANG", b"VIRTUAL_ENV"}
    assert bytes.fromhex(dump["cwd"]) == os.fsencode(str(workdir))


def test_a_missing_chdir_is_126_with_the_message_in_the_log(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    run_dir, log = _setup(tmp_path, ["sh", "-c", "echo must-not-run"], chdir=str(gone))
    assert _run(run_dir).returncode == 126
    text = log.read_text(encoding="utf-8")
    assert text.startswith(f"trainops.pct_launch: cannot change to directory {gone}\n")
    assert "must-not-run" not in text
    assert _record(Path(str(log) + ".exit"))["exit_status"] == "126"
    assert TRAILER.search(text) is not None and "exit_status=126" in text
    assert not (run_dir / "pgid").exists()


def test_a_program_not_found_is_127_and_one_not_executable_126(tmp_path: Path) -> None:
    run_dir, log = _setup(tmp_path, ["no-such-program-trainops", "x"])
    assert _run(run_dir).returncode == 127
    assert "trainops.pct_launch: cannot run no-such-program-trainops: No such file or directory" in log.read_text(encoding="utf-8")
    assert _record(Path(str(log) + ".exit"))["exit_status"] == "127"
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho ran\n", encoding="utf-8")
    script.chmod(0o644)
    run_dir, log = _setup(tmp_path, [str(script)], name="noexec")
    assert _run(run_dir).returncode == 126
    assert f"cannot run {script}: Permission denied" in log.read_text(encoding="utf-8")
    assert _record(Path(str(log) + ".exit"))["exit_status"] == "126"


def test_stdin_is_dev_null(tmp_path: Path) -> None:
    out = tmp_path / "dump.json"
    run_dir, _log = _setup(tmp_path, _dump_job(out))
    with subprocess.Popen(_supervisor_argv(run_dir), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL) as proc:
        assert proc.stdin is not None
        proc.stdin.write(b"data for the parent, not the job\n")
        proc.stdin.flush()
        assert proc.wait(timeout=20) == 0
    dump = json.loads(out.read_text(encoding="utf-8"))
    assert dump["stdin"] == "/dev/null" and dump["stdin_data"] == ""


def test_the_job_leads_its_own_group_named_in_pgid_while_it_runs(tmp_path: Path) -> None:
    out, go = tmp_path / "dump.json", tmp_path / "go"
    run_dir, _log = _setup(tmp_path, _dump_job(out, go))
    with _start(run_dir) as proc:
        _wait_for(lambda: out.exists() and (run_dir / "pgid").exists())
        dump = json.loads(out.read_text(encoding="utf-8"))
        assert (run_dir / "pgid").read_text(encoding="ascii") == f"{dump['pid']}\n"
        assert dump["pgid"] == dump["pid"] == dump["sid"], "the job leads a session and process group of its own"
        assert dump["pgid"] != os.getpgid(proc.pid)
        assert (run_dir / "pgid").stat().st_mode & 0o777 == 0o600
        go.touch()
        assert proc.wait(timeout=10) == 0
    assert not (run_dir / "pgid").exists(), "pgid is removed when the job ended"


@needs_root_and_nobody
def test_the_job_runs_as_its_user(tmp_path: Path, shared: Path) -> None:
    entry = pwd.getpwnam("nobody")
    out = shared / "dump.json"
    run_dir, log = _setup(tmp_path, _dump_job(out, python=str(SYSTEM_PYTHON)), user="nobody", chdir="/")
    proc = _run(run_dir)
    assert proc.returncode == 0, (proc.stderr, log.read_text(encoding="utf-8"))
    dump = json.loads(out.read_text(encoding="utf-8"))
    assert dump["uid"] == entry.pw_uid and dump["gid"] == entry.pw_gid
    assert 0 not in dump["groups"], "root's groups are dropped"
    environ = _decode_env(dump)
    assert environ[b"USER"] == environ[b"LOGNAME"] == b"nobody"
    assert environ[b"HOME"] == os.fsencode(entry.pw_dir or "/")
    assert bytes.fromhex(dump["cwd"]) == b"/"


@pytest.fixture()
def shared(tmp_path: Path) -> t.Iterator[Path]:
    """A folder every user may use (pytest's tmp_path is root's only)."""
    folder = Path(tempfile.mkdtemp(prefix="trainops-parent-"))
    try:
        folder.chmod(0o777)
        yield folder
    finally:
        shutil.rmtree(folder)


def _run_as_nobody(run_dir: Path, log: Path) -> subprocess.CompletedProcess[bytes]:
    """The parent run by nobody (a launch without become), its run dir and log folder nobody's."""
    entry = pwd.getpwnam("nobody")
    for path in (run_dir, log.parent):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    argv = _supervisor_argv(run_dir)
    for folder, _dirs, files in os.walk(run_dir):  # the staged program is nobody's, as for a launch without become
        for path in [folder] + [os.path.join(folder, name) for name in files]:
            os.chown(path, entry.pw_uid, entry.pw_gid)
    return subprocess.run([str(SYSTEM_PYTHON), *argv[1:]], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=20, check=False, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[])


@needs_root_and_nobody
def test_a_parent_that_is_not_root_names_its_own_user(shared: Path) -> None:
    # Regression (found by these tests, fixed): job_environment sets USER=LOGNAME=root whenever job.json has no user, even when the parent (a launch
    # without become: run_root() gives such a user a run dir of its own) runs as another user; HOME is that
    # user's, so the job sees HOME=/nonexistent with USER=root (getpass.getuser() says root for uid 65534).
    out = shared / "dump.json"
    run_dir, log = _setup(shared, _dump_job(out, python=str(SYSTEM_PYTHON)), chdir="/")
    proc = _run_as_nobody(run_dir, log)
    assert proc.returncode == 0, (proc.stderr, log.read_text(encoding="utf-8"))
    dump = json.loads(out.read_text(encoding="utf-8"))
    assert dump["uid"] == pwd.getpwnam("nobody").pw_uid
    environ = _decode_env(dump)
    assert (environ[b"USER"], environ[b"LOGNAME"]) == (b"nobody", b"nobody")


@needs_root_and_nobody
def test_a_user_the_parent_cannot_become_ends_with_126_and_its_record(shared: Path) -> None:
    # Regression (found by these tests, fixed): start_job catches only OSError, but a failed switch to the job's user (initgroups/setgid/setuid in
    # preexec_fn; here the parent is not root) raises subprocess.SubprocessError: the parent dies with a traceback,
    # and the log gets no reason, no trailer and no exit record (neither RUN_DIR/exit nor LOG.exit), so
    # wait_for_log calls the session vanished ("tmux killed, SIGKILL, or the container restarted").
    run_dir, log = _setup(shared, ["sh", "-c", "echo must-not-run"], user="nobody", chdir="/")
    proc = _run_as_nobody(run_dir, log)
    text = log.read_text(encoding="utf-8")
    assert "must-not-run" not in text
    assert proc.returncode == 126, proc.stderr
    assert text.startswith("trainops.pct_launch: cannot "), text
    assert TRAILER.search(text) is not None
    assert _record(Path(str(log) + ".exit"))["exit_status"] == "126"
    assert _record(run_dir / "exit")["exit_status"] == "126"


# ---- the exit record helpers ----

def test_exit_record_path_prefers_log_exit(tmp_path: Path) -> None:
    log, run_dir = tmp_path / "job.log", tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "log_path").write_text(str(log), encoding="utf-8")
    (run_dir / "exit").write_text(exit_record_text("job", 4, STARTED_AT, STARTED_AT), encoding="utf-8")
    Path(str(log) + ".exit").write_text(exit_record_text("job", 5, STARTED_AT, STARTED_AT), encoding="utf-8")
    assert exit_record_path(str(log), str(run_dir)) == str(log) + ".exit"
    assert read_exit_record(str(log), str(run_dir)) == {"session_name": "job", "exit_status": "5", "started_at": STARTED_AT,
                                                        "ended_at": STARTED_AT}


@pytest.mark.parametrize("log_exit", [None, b""])
def test_exit_record_path_falls_back_to_run_only_for_its_own_log(tmp_path: Path, log_exit: bytes | None) -> None:
    log, run_dir = tmp_path / "job.log", tmp_path / "run"
    run_dir.mkdir()
    if log_exit is not None:
        Path(str(log) + ".exit").write_bytes(log_exit)  # as a full file system leaves it
    (run_dir / "exit").write_text(exit_record_text("job", 4, STARTED_AT, STARTED_AT, "TERM"), encoding="utf-8")
    # no log_path file: the record in /run cannot be shown to be this log's
    missing = None if log_exit is None else str(log) + ".exit"
    assert exit_record_path(str(log), str(run_dir)) == missing
    (run_dir / "log_path").write_text(str(tmp_path / "other.log"), encoding="utf-8")
    assert exit_record_path(str(log), str(run_dir)) == missing
    (run_dir / "log_path").write_text(str(log) + "\n", encoding="utf-8")
    assert exit_record_path(str(log), str(run_dir)) == missing, "log_path holds the path exactly, no newline"
    (run_dir / "log_path").write_text(str(log), encoding="utf-8")
    assert exit_record_path(str(log), str(run_dir)) == str(run_dir / "exit")
    assert exit_record_path(str(log), None) == missing
    record = read_exit_record(str(log), str(run_dir))
    assert record is not None and record["exit_status"] == "4" and record["stopped_by"] == "trainops"
    assert record["stop_signal"] == "TERM"
    (run_dir / "exit").write_bytes(b"")
    assert exit_record_path(str(log), str(run_dir)) == missing, "an empty copy is no record either"


def test_read_exit_record_keeps_the_first_value_of_a_key(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    Path(str(log) + ".exit").write_bytes(b"exit_status=1\nno separator\nexit_status=2\nstopped_by=trainops\n")
    assert read_exit_record(str(log), None) == {"exit_status": "1", "stopped_by": "trainops"}
    assert read_exit_record(str(tmp_path / "none.log"), None) is None


def test_write_exit_record_writes_run_then_log(tmp_path: Path) -> None:
    log, run_dir = tmp_path / "job.log", tmp_path / "run"
    run_dir.mkdir()
    text = exit_record_text("job", 0, STARTED_AT, STARTED_AT)
    write_exit_record(str(run_dir), str(log), text)
    assert (run_dir / "exit").read_text(encoding="utf-8") == text == Path(str(log) + ".exit").read_text(encoding="utf-8")
    write_exit_record(str(tmp_path / "missing-run"), str(log), exit_record_text("job", 9, STARTED_AT, STARTED_AT))
    assert _record(Path(str(log) + ".exit"))["exit_status"] == "9", "LOG.exit is written even when /run is not"


def test_write_whole_writes_the_file_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "file"
    assert write_whole(str(target), "ünï\n", 0o640) is True
    assert target.read_bytes() == "ünï\n".encode() and target.stat().st_mode & 0o777 == 0o640
    assert write_whole(str(target), "second\n", 0o640) is True and target.read_text(encoding="utf-8") == "second\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_write_whole_fails_without_leaving_a_tmp_file(tmp_path: Path) -> None:
    assert write_whole(str(tmp_path / "missing" / "file"), "text\n", 0o600) is False
    assert not (tmp_path / "missing").exists()
    folder = tmp_path / "dir"
    (folder / "target").mkdir(parents=True)  # the target is a directory: os.replace fails after the tmp file was written
    assert write_whole(str(folder / "target"), "text\n", 0o600) is False
    assert sorted(p.name for p in folder.iterdir()) == ["target"]
    assert list((folder / "target").iterdir()) == []


def test_write_whole_on_a_full_file_system_writes_nothing(small_fs: Path) -> None:
    assert write_whole(str(small_fs / "job.log.exit"), "session_name=job\nexit_status=0\n" * 200, 0o644) is False
    assert sorted(p.name for p in small_fs.iterdir()) == ["filler"]


def test_the_exit_status_survives_a_log_file_system_the_job_filled(tmp_path: Path, small_empty_fs: Path) -> None:
    """The trailer and LOG.exit cannot be written any more: RUN_DIR/exit still gets the whole record, LOG.exit nothing partial."""
    log = small_empty_fs / "job.log"
    run_dir, _log = _setup(tmp_path, ["sh", "-c", f"echo started; dd if=/dev/zero of={small_empty_fs / 'filler'} bs=1k 2>/dev/null; exit 3"],
                           log_path=str(log))
    (run_dir / "log_path").write_text(str(log), encoding="utf-8")  # as the launch leaves it
    proc = _run(run_dir)
    assert proc.returncode == 3, proc.stderr
    assert not Path(f"{log}.exit").exists(), "no LOG.exit without its whole content"
    assert sorted(p.name for p in small_empty_fs.iterdir()) == ["filler", "job.log"]
    record = _record(run_dir / "exit")
    assert (record["session_name"], record["exit_status"], record["started_at"]) == ("job", "3", STARTED_AT)
    assert read_exit_record(str(log), str(run_dir)) == record, "the record in the run dir is the log's record"
    assert not list(run_dir.glob("*.tmp.*"))


class _FullFile(io.RawIOBase):
    """A log on a full file system: every write fails with ENOSPC."""

    def writable(self) -> bool:
        return True

    def write(self, data: t.Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_protocol_line_on_a_full_file_system_is_lost_quietly() -> None:
    """The trailer's write fails on a full log: the parent goes on to write the exit record (it must not die there)."""
    _job_process.log_line(t.cast(t.BinaryIO, _FullFile()), "### trainops.pct_launch: session=s exit_status=3")  # pylint: disable=protected-access


# The supervisor's wait between ticks (_job_watch.Watch.run): with a pidfd it sleeps in select until the job
# ends or the tick is over, where Popen.wait(timeout) would look with waitpid every few milliseconds.
def test_wait_job_with_a_pidfd_sleeps_while_the_job_runs_and_wakes_at_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(5)"], stdin=subprocess.PIPE)
    pidfd = _job_process.pidfd_of(proc)
    assert pidfd >= 0, "os.pidfd_open is there on this machine (Linux 5.3, Python 3.9 on)"
    waitpids: list[int] = []
    real_waitpid = os.waitpid

    def counting_waitpid(pid: int, options: int) -> tuple[int, int]:
        waitpids.append(pid)
        return real_waitpid(pid, options)

    monkeypatch.setattr(os, "waitpid", counting_waitpid)
    try:
        assert _job_process.wait_job(proc, 0.3, pidfd) is None
        assert not waitpids, f"a running job was polled {len(waitpids)} times in one tick"
        assert proc.stdin is not None
        proc.stdin.close()  # the job ends now
        assert _job_process.wait_job(proc, 60.0, pidfd) == 5 and proc.returncode == 5
    finally:
        os.close(pidfd)
        proc.kill()
        proc.wait()


def test_wait_job_without_a_pidfd_still_waits_for_the_end() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(7)"], stdin=subprocess.PIPE)
    try:
        assert _job_process.wait_job(proc, 0.1) is None
        assert proc.stdin is not None
        proc.stdin.close()
        assert _job_process.wait_job(proc, 60.0) == 7
    finally:
        proc.kill()
        proc.wait()
