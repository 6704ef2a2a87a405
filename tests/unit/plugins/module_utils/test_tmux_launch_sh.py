# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Run the generated sh (the launch program and the wrapper) with a real sh against temp dirs.

The launch program runs here as it would in a container, with the host's tmux on a private
socket (``t_tmux`` is redefined) and ``run_root`` in a temp dir; the job reports its argv,
environment and working directory as hex so that byte-exact arrival can be checked.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _pct
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import (
    LaunchSpec,
    build_program,
    env_file_text,
    parse_output,
    spec_from_params,
    wrapper_text,
)
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_outcome import result

HOSTILE = [
    "it's", 'say "hi"', "$(touch pwned)", "`touch pwned`", "new\nline", "trailing\n\n", "*", "?[a]",
    "-dash", "--", "ünïcödé ✓", "back\\slash", "semi;colon", "100%d %s", "tab\there", "cr\rx", "", " lead space",
    "'", "\\", "a\x01b\x7f", "TRAINOPS_EOF_0000", "-m -s x", "x" * 5000,
]
DUMP = (
    "import json, os, sys; json.dump({'argv': [os.fsencode(a).hex() for a in sys.argv[2:]], "
    "'env': {k.hex(): v.hex() for k, v in os.environb.items()}, 'cwd': os.fsencode(os.getcwd()).hex(), "
    "'pgid': os.getpgid(0), 'pid': os.getpid(), 'stdin_tty': os.isatty(0)}, open(sys.argv[1], 'w'))"
)
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)] + (["busybox"] if shutil.which("busybox") else [])
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None or os.geteuid() != 0, reason="needs tmux and root")


def _shell_argv(shell: str) -> list[str]:
    return ["busybox", "sh"] if shell == "busybox" else [shell]


def _decode_dump(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        "argv": [bytes.fromhex(a) for a in data["argv"]],
        "env": {bytes.fromhex(k): bytes.fromhex(v) for k, v in data["env"].items()},
        "cwd": bytes.fromhex(data["cwd"]),
        "pgid": data["pgid"],
        "pid": data["pid"],
        "stdin_tty": data["stdin_tty"],
    }


def _spec(tmp_path: Path, **kwargs) -> LaunchSpec:
    params = {"vmid": 240, "session_name": "job", "log_path": str(tmp_path / "logs" / "job.log")}
    params.update(kwargs)
    spec = spec_from_params(params)
    (tmp_path / "logs").mkdir(exist_ok=True)
    return dataclasses.replace(spec, run_root=str(tmp_path / "run"))


def _run_wrapper(spec: LaunchSpec, shell: str = "dash", timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.sh").write_text(wrapper_text(spec), encoding="utf-8", errors="surrogateescape")
    if spec.env:
        (run_dir / "env").write_text(env_file_text(spec), encoding="utf-8", errors="surrogateescape")
    return subprocess.run([*_shell_argv(shell), str(run_dir / "run.sh"), "2025-01-01T00:00:00Z"], stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout, check=False)


@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_passes_argv_env_and_chdir_byte_exact(tmp_path: Path, shell: str) -> None:
    workdir = tmp_path / "wörk dir $(x) `y` *"
    workdir.mkdir()
    out = tmp_path / "dump.json"
    env = {f"V{i}": value for i, value in enumerate(HOSTILE)}
    env["PATH"] = "/custom/bin:/usr/bin:/bin"
    spec = _spec(tmp_path, argv=["python3", "-c", DUMP, str(out), *HOSTILE], env=env, chdir=str(workdir))
    result = _run_wrapper(spec, shell)
    assert result.returncode == 0, result.stderr
    dump = _decode_dump(out)
    assert dump["argv"] == [value.encode() for value in HOSTILE]
    for key, value in env.items():
        assert dump["env"][key.encode()] == value.encode()
    assert dump["cwd"] == os.fsencode(str(workdir))
    assert dump["pgid"] == dump["pid"], "the job leads its own process group"
    assert dump["stdin_tty"] is False
    assert b"TRAINOPS_WRAPPER" not in dump["env"] and b"w_envtext" not in dump["env"]
    assert not (Path(spec.run_dir) / "env").exists(), "the env file is deleted before the job runs"
    assert not (Path(spec.run_dir) / "pgid").exists(), "the wrapper removes pgid when the job ended"


def test_wrapper_gives_a_clean_environment_and_venv(tmp_path: Path) -> None:
    out = tmp_path / "dump.json"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(shutil.which("python3"))
    spec = _spec(tmp_path, argv=["python3", "-c", DUMP, str(out)], venv=str(venv))
    env = dict(os.environ, LEAKED_FROM_NODE="1", TMUX="/tmp/tmux-0/default,1,0")
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "run.sh").write_text(wrapper_text(spec), encoding="utf-8")
    subprocess.run(["sh", str(run_dir / "run.sh"), "S"], env=env, check=True, capture_output=True, timeout=30)
    dump = _decode_dump(out)
    assert dump["env"][b"VIRTUAL_ENV"] == os.fsencode(str(venv))
    assert dump["env"][b"PATH"].split(b":")[0] == os.fsencode(str(venv / "bin"))
    assert b"LEAKED_FROM_NODE" not in dump["env"] and b"TMUX" not in dump["env"]
    assert dump["env"][b"HOME"] == b"/root" and dump["cwd"] == b"/root"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_wrapper_runs_the_job_as_user(tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="trainops-user-"))
    try:
        shared.chmod(0o777)
        out = shared / "out"
        spec = _spec(tmp_path, command=f"id -un > {out}; id -u >> {out}", user="nobody", chdir="/")
        assert _run_wrapper(spec).returncode == 0, Path(spec.log_path).read_text(encoding="utf-8")
        assert out.read_text(encoding="utf-8").split() == ["nobody", str(pwd.getpwnam("nobody").pw_uid)]
    finally:
        shutil.rmtree(shared)


def test_wrapper_records_exit_status_and_trailer(tmp_path: Path) -> None:
    spec = _spec(tmp_path, command="echo out; echo err >&2; exit 7")
    assert _run_wrapper(spec).returncode == 7
    log = Path(spec.log_path).read_text(encoding="utf-8").splitlines()
    assert log[:2] == ["out", "err"]
    assert log[2].startswith("### trainops.pct_launch: session=job exit_status=7 ended_at=")
    exit_file = dict(line.split("=", 1) for line in Path(spec.log_path + ".exit").read_text(encoding="utf-8").splitlines())
    assert exit_file["exit_status"] == "7" and exit_file["session_name"] == "job"
    assert exit_file["started_at"] == "2025-01-01T00:00:00Z"
    assert "stopped_by" not in exit_file


@pytest.mark.parametrize("signal_name, status", [("TERM", 143), ("HUP", 129), ("INT", 130)])
def test_wrapper_forwards_signals_and_waits_for_the_status(tmp_path: Path, signal_name: str, status: int) -> None:
    spec = _spec(tmp_path, command="echo started; sleep 30 & wait")
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "run.sh").write_text(wrapper_text(spec), encoding="utf-8")
    with subprocess.Popen(["sh", str(run_dir / "run.sh"), "S"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) as proc:
        _wait_for((run_dir / "pgid").exists)
        time.sleep(0.2)
        os.kill(proc.pid, getattr(signal, "SIG" + signal_name))
        assert proc.wait(timeout=10) == status
    assert f"exit_status={status}" in Path(spec.log_path + ".exit").read_text(encoding="utf-8")


def test_wrapper_reports_a_missing_chdir_in_the_log(tmp_path: Path) -> None:
    spec = _spec(tmp_path, command="true", chdir=str(tmp_path / "gone"))
    assert _run_wrapper(spec).returncode == 126
    assert "cannot change to directory" in Path(spec.log_path).read_text(encoding="utf-8")
    assert "exit_status=126" in Path(spec.log_path + ".exit").read_text(encoding="utf-8")


def _wait_for(predicate, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


# ---- the whole launch program, with the host's tmux on a private socket ----

@pytest.fixture()
def tmux_socket(tmp_path: Path):
    sock = tmp_path / "tmux.sock"
    yield sock
    subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)


def _launch(spec: LaunchSpec, sock: Path, check_mode: bool = False, via_bootstrap: bool = True) -> tuple[int, dict, str]:
    program = build_program(spec, check_mode=check_mode)
    assert program.endswith("t_main\n")
    program = program[:-len("t_main\n")] + "t_tmux() { env -i PATH=\"$PATH\" HOME=/root tmux -S " + str(sock) + " \"$@\"; }\nt_main\n"
    data = _pct.bootstrap(program.encode("utf-8", "surrogateescape")) if via_bootstrap else program.encode()
    proc = subprocess.run(["sh", "-s"], input=data, capture_output=True, timeout=60, check=False)
    return proc.returncode, parse_output(proc.stdout.decode("utf-8", "surrogateescape")), proc.stderr.decode("utf-8", "replace")


def _tmux(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", "-S", str(sock), *args], capture_output=True, text=True, check=False)


@needs_tmux
def test_launch_starts_once_then_is_unchanged(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="echo first-instruction; sleep 60", env={"SECRET": "s3cr3t-value"})
    rc, facts, err = _launch(spec, tmux_socket)
    assert rc == 0, (facts, err)
    assert facts["result"] == "started" and facts["state"] == "running" and facts["pane_pid"].isdigit()
    _wait_for(lambda: "first-instruction" in Path(spec.log_path).read_text(encoding="utf-8"))
    lines = Path(spec.log_path).read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("### trainops.pct_launch: session=job started_at=")
    assert lines[0].endswith("command=echo first-instruction; sleep 60")
    assert lines[1] == "first-instruction"
    assert "s3cr3t-value" not in "".join(lines) + json.dumps(facts)
    assert _tmux(tmux_socket, "show-options", "-v", "-t", "=job:", "@trainops_log").stdout.strip() == spec.log_path
    assert not (Path(spec.run_dir) / "lock").exists()
    rc, facts, _err = _launch(spec, tmux_socket)
    assert rc == 0 and facts["result"] == "unchanged" and facts["state"] == "running"


@needs_tmux
def test_launch_refuses_a_different_spec_and_names_it(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="sleep 60")
    assert _launch(spec, tmux_socket)[0] == 0
    other = dataclasses.replace(spec, command="sleep 61")
    rc, facts, _err = _launch(other, tmux_socket)
    assert rc == 29 and facts["error"] == "spec_conflict"
    assert json.loads(facts["running_summary"])["command"] == "sleep 60"


@needs_tmux
def test_launch_rotates_and_never_overwrites(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="echo run; exit 3", log_keep=2)
    for expected_rotated in ("", spec.log_path + ".1", spec.log_path + ".1", spec.log_path + ".1"):
        rc, facts, err = _launch(spec, tmux_socket)
        assert rc == 0, err
        assert facts["rotated_log"] == expected_rotated
        _wait_for(lambda: Path(spec.log_path + ".exit").exists())
    names = sorted(p.name for p in Path(spec.log_path).parent.iterdir())
    assert names == ["job.log", "job.log.1", "job.log.1.exit", "job.log.2", "job.log.2.exit", "job.log.exit"]


@needs_tmux
def test_launch_fail_if_exists_and_append(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="echo run", log_mode="fail_if_exists")
    Path(spec.log_path).write_text("old\n", encoding="utf-8")
    rc, facts, _err = _launch(spec, tmux_socket)
    assert rc == 26 and facts["error"] == "log_exists"
    assert Path(spec.log_path).read_text(encoding="utf-8") == "old\n"
    spec = dataclasses.replace(spec, log_mode="append")
    assert _launch(spec, tmux_socket)[0] == 0
    _wait_for(lambda: Path(spec.log_path + ".exit").exists())
    assert Path(spec.log_path).read_text(encoding="utf-8").startswith("old\n### trainops.pct_launch: session=job started_at=")


@needs_tmux
@pytest.mark.parametrize("option, value, code", [
    ("chdir", "/nonexistent-dir", "chdir_missing"),
    ("venv", "/nonexistent-venv", "venv_missing"),
    ("user", "no-such-user-x", "user_missing"),
    ("log_path", "/nonexistent-dir/x.log", "log_dir_missing"),
    ("command", "./missing-script.sh --flag", "script_missing"),
])
def test_launch_preflight_errors_start_nothing(tmp_path: Path, tmux_socket: Path, option: str, value: str, code: str) -> None:
    spec = _spec(tmp_path, **{"command": "true", option: value})
    for check_mode in (True, False):
        rc, facts, _err = _launch(spec, tmux_socket, check_mode=check_mode)
        assert facts["error"] == code and rc != 0
    assert _tmux(tmux_socket, "has-session", "-t", "=job").returncode != 0
    assert not Path(spec.run_dir).exists()


@needs_tmux
def test_check_mode_changes_nothing(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="sleep 60")
    rc, facts, _err = _launch(spec, tmux_socket, check_mode=True)
    assert rc == 0 and facts["would"] == "start"
    assert not Path(spec.log_path).exists() and not Path(spec.run_dir).exists()
    assert _tmux(tmux_socket, "has-session", "-t", "=job").returncode != 0


@needs_tmux
def test_two_launches_at_once_start_one_job(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="sleep 60")
    results: list[tuple[int, dict, str]] = []
    threads = [threading.Thread(target=lambda: results.append(_launch(spec, tmux_socket))) for _index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r[1]["result"] for r in results) == ["started", "unchanged", "unchanged", "unchanged"]
    assert _tmux(tmux_socket, "list-sessions", "-F", "#{session_name}").stdout.split() == ["job"]


@needs_tmux
def test_stop_escalates_to_sigkill(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="trap '' TERM; echo ready; while :; do sleep 1; done")
    assert _launch(spec, tmux_socket)[0] == 0
    _wait_for(lambda: "ready" in Path(spec.log_path).read_text(encoding="utf-8"))
    stop = dataclasses.replace(spec, state="stopped", stop_timeout=1)
    started = time.monotonic()
    rc, facts, err = _launch(stop, tmux_socket)
    assert rc == 0, err
    assert facts["result"] == "stopped" and facts["killed"] == "1" and facts["exit_status"] == "137"
    assert time.monotonic() - started < 8
    exit_file = Path(spec.log_path + ".exit").read_text(encoding="utf-8")
    assert "exit_status=137" in exit_file and "stopped_by=trainops" in exit_file
    rc, facts, _err = _launch(stop, tmux_socket)
    assert rc == 0 and facts["result"] == "unchanged"


@needs_tmux
def test_restart_in_one_program(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="sleep 60")
    assert _launch(spec, tmux_socket)[0] == 0
    restart = dataclasses.replace(spec, state="restarted", command="sleep 61")
    rc, facts, err = _launch(restart, tmux_socket)
    assert rc == 0, err
    assert facts["result"] == "started" and facts["exit_status"] == "143"
    assert facts["rotated_log"] == spec.log_path + ".1"
    assert "command=sleep 61" in Path(spec.log_path).read_text(encoding="utf-8")


@needs_tmux
def test_stale_lock_is_removed(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="sleep 60")
    lock = Path(spec.run_dir) / "lock"
    lock.mkdir(parents=True)
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    (lock / "pid").write_text(dead + "\n", encoding="utf-8")
    rc, facts, err = _launch(spec, tmux_socket)
    assert rc == 0 and facts["result"] == "started", err


@needs_tmux
def test_launch_without_bootstrap_is_equivalent(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, argv=["sleep", "60"])
    rc, facts, _err = _launch(spec, tmux_socket, via_bootstrap=False)
    assert rc == 0 and facts["result"] == "started"


@needs_tmux
def test_tmux_missing_is_reported(tmp_path: Path) -> None:
    spec = _spec(tmp_path, command="true")
    program = build_program(spec)
    program = program[:-len("t_main\n")] + "command() { return 1; }\nt_main\n"
    proc = subprocess.run(["sh", "-s"], input=program.encode(), capture_output=True, timeout=30, check=False)
    assert proc.returncode == 20
    assert parse_output(proc.stdout.decode())["error"] == "tmux_missing"


@needs_tmux
def test_stop_of_a_finished_job_without_log_path_reports_its_exit_status(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="echo done; exit 3")
    assert _launch(spec, tmux_socket)[0] == 0
    _wait_for(lambda: Path(spec.log_path + ".exit").exists())
    for log_path in (None, spec.log_path):
        stop = dataclasses.replace(spec, state="stopped", log_path=log_path, command=None)
        rc, facts, err = _launch(stop, tmux_socket)
        assert rc == 0, err
        assert facts["before_state"] == "finished" and facts["exit_status"] == "3" and facts["result"] == "unchanged", facts
        out = result(stop, facts, False)
        assert out["state"] == "finished" and out["exit_status"] == 3 and out["log_path"] == spec.log_path, out


@needs_tmux
def test_stop_with_int_reaches_a_python_job_as_keyboard_interrupt(tmp_path: Path, tmux_socket: Path) -> None:
    code = "import time\ntry:\n    print('ready', flush=True); time.sleep(60)\nexcept KeyboardInterrupt:\n    print('graceful'); raise SystemExit(5)\n"
    spec = _spec(tmp_path, argv=["python3", "-c", code])
    assert _launch(spec, tmux_socket)[0] == 0
    _wait_for(lambda: "ready" in Path(spec.log_path).read_text(encoding="utf-8"))
    rc, facts, err = _launch(dataclasses.replace(spec, state="stopped", stop_signal="INT", stop_timeout=10), tmux_socket)
    assert rc == 0, err
    assert facts["exit_status"] == "5" and facts["killed"] == "0"
    assert "graceful" in Path(spec.log_path).read_text(encoding="utf-8")


@needs_tmux
def test_script_without_execute_bit_says_how_to_fix(tmp_path: Path, tmux_socket: Path) -> None:
    script = tmp_path / "start.sh"
    script.write_text("#!/bin/sh\necho started\n", encoding="utf-8")
    script.chmod(0o644)
    spec = _spec(tmp_path, argv=[str(script)])
    rc, facts, _err = _launch(spec, tmux_socket)
    assert rc == 23 and facts["error"] == "script_missing"
    assert facts["message"] == (f"script {script} is not executable: make it executable (chmod +x {script}) "
                                f"or run it through its interpreter (argv: [sh, {script}])")
    assert _tmux(tmux_socket, "has-session", "-t", "=job").returncode != 0 and not Path(spec.log_path).exists()


@pytest.fixture()
def small_fs(tmp_path: Path):
    """A full 16 KiB tmpfs (root only)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], capture_output=True, check=False).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


@needs_tmux
def test_full_log_fs_is_named_and_keeps_the_earlier_log(tmp_path: Path, tmux_socket: Path, small_fs: Path) -> None:
    log = small_fs / "job.log"
    log.write_bytes(b"precious\n" * 100)
    subprocess.run(["dd", "if=/dev/zero", f"of={small_fs / 'filler'}", "bs=1k"], capture_output=True, check=False)
    spec = _spec(tmp_path, command="echo started; sleep 60", log_path=str(log))
    for attempt in range(3):
        rc, facts, _err = _launch(spec, tmux_socket)
        assert rc == 30 and facts["error"] == "start_failed"
        assert facts["message"].startswith(f"cannot write the log header to {log}: No space left on device, the file system of {small_fs} is full")
        assert (f"(the earlier log is kept as {log}.1)" in facts["message"]) is (attempt == 0)
        assert sorted(p.name for p in small_fs.iterdir()) == ["filler", "job.log.1"]
        assert (small_fs / "job.log.1").read_bytes() == b"precious\n" * 100
    assert _tmux(tmux_socket, "has-session", "-t", "=job").returncode != 0


@needs_tmux
def test_a_job_that_exits_at_once_keeps_its_exit_status(tmp_path: Path, tmux_socket: Path) -> None:
    """With job control on, dash forgot a job that ended before ``wait`` ran (status 127, about 1 in 7 launches)."""
    specs = [dataclasses.replace(_spec(tmp_path, session_name=f"fast{i}", command="echo boom; exit 3"),
                                 log_path=str(tmp_path / "logs" / f"fast{i}.log")) for i in range(25)]
    for spec in specs:
        rc, _facts, err = _launch(spec, tmux_socket)
        assert rc == 0, err
    for spec in specs:
        _wait_for(lambda s=spec: Path(s.log_path + ".exit").exists())
    statuses = [Path(s.log_path + ".exit").read_text(encoding="utf-8").splitlines()[1] for s in specs]
    assert statuses == ["exit_status=3"] * len(specs)


# ---- the start proof flag (@trainops_proven) and the exit record in /run (proof-and-exit) ----

@needs_tmux
def test_a_running_job_says_whether_its_start_was_proven(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="echo up; sleep 60")
    rc, facts, err = _launch(spec, tmux_socket)
    assert rc == 0 and facts["result"] == "started" and "proven" not in facts, (facts, err)
    rc, facts, err = _launch(spec, tmux_socket)
    assert rc == 0 and facts["result"] == "unchanged" and facts["proven"] == "0" and facts["before_proven"] == "0", (facts, err)
    assert _tmux(tmux_socket, "set-option", "-t", "=job:", "@trainops_proven", "2025-01-01T00:00:00Z").returncode == 0
    rc, facts, err = _launch(spec, tmux_socket)
    assert rc == 0 and facts["proven"] == "1" and facts["started_at"].endswith("Z") and facts["pane_pid"].isdigit(), (facts, err)
    rc, facts, _err = _launch(dataclasses.replace(spec, state="restarted"), tmux_socket)
    assert rc == 0 and facts["result"] == "started"
    rc, facts, _err = _launch(spec, tmux_socket)
    assert facts["proven"] == "0", "a restarted job is a new session: not proven"


def test_wrapper_writes_the_same_exit_record_to_run(tmp_path: Path) -> None:
    spec = _spec(tmp_path, command="exit 5")
    assert _run_wrapper(spec).returncode == 5
    primary = Path(spec.log_path + ".exit").read_bytes()
    copy = Path(spec.run_dir) / "exit"
    assert copy.read_bytes() == primary
    assert oct(copy.stat().st_mode & 0o777) == oct(0o600)
    assert primary.startswith(b"session_name=job\nexit_status=5\nstarted_at=2025-01-01T00:00:00Z\nended_at=")
    assert primary.endswith(b"Z\n") and primary.count(b"\n") == 4
    assert not list(Path(spec.log_path).parent.glob("*.tmp.*")) and not list(Path(spec.run_dir).glob("*.tmp.*"))


def test_wrapper_exit_record_names_the_stop(tmp_path: Path) -> None:
    spec = _spec(tmp_path, command="exit 0")
    Path(spec.run_dir).mkdir(parents=True)
    (Path(spec.run_dir) / "stop_requested").write_text("INT\n")
    assert _run_wrapper(spec).returncode == 0
    primary = Path(spec.log_path + ".exit").read_bytes()
    assert primary.endswith(b"Z\nstopped_by=trainops\nstop_signal=INT\n")
    assert (Path(spec.run_dir) / "exit").read_bytes() == primary


def test_wrapper_keeps_the_exit_status_when_the_log_fs_is_full(tmp_path: Path, small_fs: Path) -> None:
    log = small_fs / "job.log"
    spec = _spec(tmp_path, command=f"echo started; dd if=/dev/zero of={small_fs / 'filler'} bs=1k 2>/dev/null; exit 3", log_path=str(log))
    assert _run_wrapper(spec).returncode == 3
    assert not Path(str(log) + ".exit").exists(), "no LOG.exit without its whole content"
    assert sorted(p.name for p in small_fs.iterdir()) == ["filler", "job.log"]
    record = (Path(spec.run_dir) / "exit").read_text(encoding="utf-8").splitlines()
    assert record[:2] == ["session_name=job", "exit_status=3"]


@needs_tmux
def test_launch_reads_the_exit_record_in_run_when_log_exit_is_missing(tmp_path: Path, tmux_socket: Path) -> None:
    spec = _spec(tmp_path, command="echo run; exit 4")
    rc, _facts, err = _launch(spec, tmux_socket)
    assert rc == 0, err
    _wait_for(lambda: Path(spec.log_path + ".exit").exists() and _tmux(tmux_socket, "has-session", "-t", "=job").returncode != 0)
    Path(spec.log_path + ".exit").write_bytes(b"")  # as a full file system leaves it
    rc, facts, _err = _launch(spec, tmux_socket, check_mode=True)
    assert rc == 0 and facts["before_state"] == "finished" and facts["would"] == "start"
    other = dataclasses.replace(spec, log_path=str(tmp_path / "logs" / "other.log"))
    Path(other.log_path).write_text("x\n")
    rc, facts, _err = _launch(other, tmux_socket, check_mode=True)
    assert facts["before_state"] == "vanished", "the record in /run belongs to another log"
    record = (Path(spec.run_dir) / "exit").read_bytes()
    assert b"\nexit_status=4\n" in record
    rc, facts, err = _launch(spec, tmux_socket)  # the next launch removes the old record before it starts
    assert rc == 0 and facts["result"] == "started", err
    assert facts["rotated_log"] == spec.log_path + ".1"
    assert Path(spec.log_path + ".1.exit").read_bytes() == record, "the record only /run kept moves with its log"
    _wait_for(lambda: Path(spec.log_path + ".exit").exists())
    assert Path(spec.log_path + ".exit").read_bytes() == (Path(spec.run_dir) / "exit").read_bytes()
    assert not list(Path(spec.log_path).parent.glob("*.tmp.*"))
