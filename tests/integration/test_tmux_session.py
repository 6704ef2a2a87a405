# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Integration tests of trainops.pct_launch.tmux_session on real LXC containers (the pct stand-in).

Every test runs the module through ``ansible-playbook`` on localhost, which is the (stand-in) Proxmox
node. Containers: 241 (tmux installed), 242 (no tmux), 249 on a private node with the pty knob on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import typing as t
from pathlib import Path

import pytest

from .conftest import StandinNode, lines

pytestmark = pytest.mark.integration

CT = 241
CT_NO_TMUX = 242
CT_PTY = 249
PYTHON = sys.executable
INSTALL_TMUX = "apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null 2>&1; tmux -V"
DUMP = ("import json, os, sys; json.dump({'argv': [os.fsencode(a).hex() for a in sys.argv[2:]], "
        "'env': {k.hex(): v.hex() for k, v in os.environb.items()}, 'cwd': os.fsencode(os.getcwd()).hex()}, open(sys.argv[1], 'w'))")
# No '{{' / '{%' here: Ansible would template them before the module sees them.
HOSTILE = ["it's", 'say "hi"', "$(touch /tmp/pwned)", "`touch /tmp/pwned`", "new\nline", "trailing\n", "*", "?[a]",
           "-dash", "--", "ünïcödé ✓", "back\\slash", "semi;", "100%", "tab\t", "", " lead", "'", "\\"]


def run_module(tmp_path: Path, args: dict[str, t.Any], check: bool = False, diff: bool = False,
               env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, t.Any], float]:
    """Run tmux_session once with ansible-playbook; return the process, the task result and the seconds it took."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / f"result-{time.monotonic_ns()}.json"
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "launch", "trainops.pct_launch.tmux_session": args, "register": "r", "ignore_errors": True},
        {"ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(out)}, "check_mode": False, "diff": False}]}]
    path = out.with_suffix(".yml")
    path.write_text(json.dumps(play), encoding="utf-8")
    argv = [str(Path(PYTHON).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local",
            "-e", f"ansible_python_interpreter={PYTHON}", str(path)] + (["--check"] if check else []) + (["--diff"] if diff else [])
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=600,
                          stdin=subprocess.DEVNULL, check=False)
    seconds = time.monotonic() - started
    assert out.exists(), proc.stdout + proc.stderr
    return proc, json.loads(out.read_text(encoding="utf-8")), seconds


def ct_sh(node: StandinNode, vmid: int, script: str, *args: str, check: bool = True) -> str:
    """Output of a sh script inside the container."""
    return node.sh(vmid, script, *args, check=check).stdout.decode("utf-8", "surrogateescape")


def wait_in_ct(node: StandinNode, vmid: int, condition: str, *args: str, timeout: float = 20) -> None:
    """Wait until a sh condition is true inside the container."""
    script = 'i=0; until ' + condition + '; do i=$((i+1)); [ "$i" -gt ' + str(int(timeout * 10)) + ' ] && exit 1; sleep 0.1; done'
    node.sh(vmid, script, *args, check=True, timeout=timeout + 30)


def session_alive(node: StandinNode, vmid: int, name: str) -> bool:
    """Whether the tmux session exists in the container."""
    return node.sh(vmid, 'tmux has-session -t "=$1" 2>/dev/null', name, check=False).returncode == 0


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """CT 241 with tmux and python3; removed at the end of the session."""
    standin.create(CT)
    assert b"tmux" in standin.sh(CT, INSTALL_TMUX, timeout=600).stdout
    ct_sh(standin, CT, "mkdir -p /w && useradd -m trainer 2>/dev/null; mkdir -p /w/venv/bin && ln -sf /usr/bin/python3 /w/venv/bin/python")
    return CT


def base(name: str, **kwargs: t.Any) -> dict[str, t.Any]:
    """Module arguments for a session in CT 241 logging to /w/NAME.log."""
    args: dict[str, t.Any] = {"vmid": CT, "session_name": name, "log_path": f"/w/{name}.log"}
    args.update(kwargs)
    return args


def test_healthy_start_then_unchanged(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    args = base("healthy", command="echo first-output; exec sleep 300")
    _proc, r, seconds = run_module(tmp_path, args, env={"PVE_STANDIN_CALL_LOG": str(calls)})
    assert r["changed"] is True and r["state"] == "running", r
    assert isinstance(r["pane_pid"], int) and r["tmux_version"] and r["rotated_log"] is None
    assert r["started_at"].endswith("Z") and r["log_path"] == "/w/healthy.log"
    calls_made = [json.loads(line)["argv"][1:] for line in calls.read_text(encoding="utf-8").splitlines()]
    assert calls_made == [["exec", str(ct), "--", "/bin/sh", "-s"]], "one pct exec per launch, nothing else on its argv"
    print(f"launch through ansible-playbook: {seconds:.2f} s, 1 pct call")
    wait_in_ct(standin, ct, 'grep -q first-output /w/healthy.log')
    log = lines(standin.sh(ct, "cat /w/healthy.log").stdout)
    assert log[0].startswith("### trainops.pct_launch: session=healthy started_at=") and "command=echo first-output" in log[0]
    assert log[1] == "first-output"
    assert standin.sh(ct, 'kill -0 "$1"', str(r["pane_pid"]), check=False).returncode == 0
    _proc, again, _s = run_module(tmp_path, args)
    assert again["changed"] is False and again["pane_pid"] == r["pane_pid"] and again["state"] == "running"


def test_different_spec_fails_clearly(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    run_module(tmp_path, base("conflict", argv=["sleep", "300"], env={"TOKEN": "first-token-value"}))
    _proc, r, _s = run_module(tmp_path, base("conflict", argv=["sleep", "301"], env={"TOKEN": "second-token-value"}))
    assert r["failed"] is True
    assert r["msg"].startswith("Cannot start session conflict in container 241: session conflict is already running with a different spec")
    assert 'argv differs (running: ["sleep", "300"], wanted: ["sleep", "301"])' in r["msg"]
    assert "env differs (variables TOKEN; values not shown)" in r["msg"] and "state: restarted" in r["msg"]
    assert "token-value" not in json.dumps(r)
    assert "sleep 300" in ct_sh(standin, ct, "ps -eo args")


def test_restart_rotates_and_records_the_old_run(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _p, first, _s = run_module(tmp_path, base("restart", argv=["sleep", "300"]))
    _p, r, _s = run_module(tmp_path, base("restart", argv=["sleep", "302"], state="restarted"), diff=True)
    assert r["changed"] is True and r["state"] == "running" and r["pane_pid"] != first["pane_pid"]
    assert r["rotated_log"] == "/w/restart.log.1" and r["exit_status"] == 143
    assert "command: sleep 300" in r["diff"]["before"] and "command: sleep 302" in r["diff"]["after"]
    old = ct_sh(standin, ct, "cat /w/restart.log.1 /w/restart.log.1.exit")
    assert "exit_status=143" in old and "stopped_by=trainops" in old
    assert "command=sleep 302" in ct_sh(standin, ct, "head -n 1 /w/restart.log")


def test_stop_with_term_then_unchanged(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    run_module(tmp_path, base("stopme", argv=["sleep", "300"]))
    _p, r, _s = run_module(tmp_path, {"vmid": ct, "session_name": "stopme", "state": "stopped"})
    assert r["changed"] is True and r["state"] == "finished" and r["exit_status"] == 143 and "killed" not in r
    assert not session_alive(standin, ct, "stopme")
    assert "exit_status=143" in ct_sh(standin, ct, "cat /w/stopme.log.exit")
    _p, r, _s = run_module(tmp_path, {"vmid": ct, "session_name": "stopme", "state": "stopped"})
    assert r["changed"] is False


def test_job_ignoring_term_is_killed_after_stop_timeout(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    run_module(tmp_path, base("stubborn", command="trap 'echo ignoring TERM' TERM; echo ready; while :; do sleep 1; done"))
    wait_in_ct(standin, ct, "grep -q ready /w/stubborn.log")
    started = time.monotonic()
    _p, r, _s = run_module(tmp_path, {"vmid": ct, "session_name": "stubborn", "state": "stopped", "stop_timeout": 2})
    assert r["changed"] is True and r["killed"] is True and r["exit_status"] == 137, r
    assert time.monotonic() - started < 20
    exit_file = ct_sh(standin, ct, "cat /w/stubborn.log.exit")
    assert "exit_status=137" in exit_file and "stopped_by=trainops" in exit_file
    assert not [a for a in ct_sh(standin, ct, "ps -eo args").splitlines() if a.startswith("sh -c trap 'echo ignoring TERM'")]


def test_crash_at_start_records_the_exit_code(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _p, r, _s = run_module(tmp_path, base("crash", command="echo about to fail; exit 7"))
    assert r["changed"] is True
    wait_in_ct(standin, ct, "[ -e /w/crash.log.exit ]")
    assert "exit_status=7" in ct_sh(standin, ct, "cat /w/crash.log.exit")
    assert ct_sh(standin, ct, "tail -n 1 /w/crash.log").startswith("### trainops.pct_launch: session=crash exit_status=7")


def test_missing_script_starts_nothing(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _p, r, _s = run_module(tmp_path, base("noscript", argv=["python3", "train_missing.py"], chdir="/w"))
    assert r["failed"] is True and r["error"] == "script_missing"
    assert r["msg"] == ("Cannot start session noscript in container 241: script train_missing.py does not exist (relative to /w); "
                        "nothing was started; check command/argv and chdir")
    assert not session_alive(standin, ct, "noscript")
    assert ct_sh(standin, ct, "ls /w/noscript.log /run/trainops/noscript 2>&1 || true").count("No such file") == 2


def test_tmux_missing_is_a_clear_error(standin: StandinNode, tmp_path: Path) -> None:
    standin.create(CT_NO_TMUX)
    _p, r, _s = run_module(tmp_path, {"vmid": CT_NO_TMUX, "session_name": "x", "command": "true", "log_path": "/tmp/x.log"})
    assert r["failed"] is True
    assert r["msg"] == ("Cannot start session x in container 242: tmux is not installed in CT 242: "
                        "apply role trainops.pct_launch.tmux")
    _p, r, _s = run_module(tmp_path, {"vmid": CT_NO_TMUX, "session_name": "x", "state": "stopped"})
    assert r["changed"] is False and r["state"] == "absent"


def test_missing_and_stopped_containers(standin: StandinNode, tmp_path: Path) -> None:
    _p, r, _s = run_module(tmp_path, {"vmid": 248, "session_name": "x", "command": "true", "log_path": "/tmp/x.log"})
    assert r["failed"] is True and "no such container on this node" in r["msg"]
    standin.create(248, start=False)
    _p, r, _s = run_module(tmp_path, {"vmid": 248, "session_name": "x", "command": "true", "log_path": "/tmp/x.log"})
    assert r["failed"] is True and "pct start 248" in r["msg"]


def test_rotate_keeps_logs_and_never_overwrites(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    for run in range(1, 5):
        _p, r, _s = run_module(tmp_path, base("rot", command=f"echo run-{run}", log_keep=2))
        assert r["changed"] is True and r["rotated_log"] == (None if run == 1 else "/w/rot.log.1")
        wait_in_ct(standin, ct, "[ -e /w/rot.log.exit ]")
    expected = ["rot.log", "rot.log.1", "rot.log.1.exit", "rot.log.2", "rot.log.2.exit", "rot.log.exit"]
    assert ct_sh(standin, ct, "cd /w && ls rot.log*").split() == expected
    for name, run in (("rot.log", 4), ("rot.log.1", 3), ("rot.log.2", 2)):
        assert f"run-{run}" in ct_sh(standin, ct, 'cat "/w/$1"', name)


def test_fail_if_exists_refuses_and_keeps_the_log(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    ct_sh(standin, ct, "echo precious > /w/keep.log")
    _p, r, _s = run_module(tmp_path, base("keep", command="echo new", log_mode="fail_if_exists"))
    assert r["failed"] is True and r["error"] == "log_exists" and "fail_if_exists" in r["msg"]
    assert ct_sh(standin, ct, "cat /w/keep.log") == "precious\n"
    assert not session_alive(standin, ct, "keep")


def test_two_launches_at_once_start_one_job(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    args = base("race", argv=["sleep", "311"])
    results: list[dict[str, t.Any]] = []
    threads = [threading.Thread(target=lambda d=tmp_path / f"p{i}": results.append(run_module(d, args)[1])) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r["changed"] for r in results) == [False, True], results
    assert ct_sh(standin, ct, "ps -eo args").splitlines().count("sleep 311") == 1
    assert ct_sh(standin, ct, "grep -c 'started_at=' /w/race.log") == "1\n"


def test_check_mode_changes_nothing(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _p, r, _s = run_module(tmp_path, base("checked", argv=["sleep", "300"]), check=True, diff=True)
    assert r["changed"] is True and r["state"] == "running"
    assert r["diff"]["before"] == "state: absent\n"
    assert not session_alive(standin, ct, "checked")
    assert "No such file" in ct_sh(standin, ct, "ls /w/checked.log /run/trainops/checked 2>&1 || true")
    _p, r, _s = run_module(tmp_path, base("checked", argv=["sleep", "300"], chdir="/nonexistent"), check=True)
    assert r["failed"] is True and r["error"] == "chdir_missing"


def test_env_secret_never_on_a_process_list_or_in_the_header(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    secret = "s3cr3t-" + os.urandom(6).hex()
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False).stdout)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        _p, r, _s = run_module(tmp_path, base("secret", command='printf "%s" "$API_TOKEN" > /w/secret.out; exec sleep 300',
                                              env={"API_TOKEN": secret}))
        wait_in_ct(standin, ct, "[ -s /w/secret.out ]")
    finally:
        done.set()
        watcher.join()
    assert r["changed"] is True
    assert len(seen) > 20 and not any(secret in snapshot for snapshot in seen)
    assert secret not in ct_sh(standin, ct, "cat /w/secret.log; ls -a /run/trainops/secret; cat /run/trainops/secret/spec")
    assert ct_sh(standin, ct, "cat /w/secret.out") == secret
    assert "env" not in ct_sh(standin, ct, "ls /run/trainops/secret").split()


def test_values_arrive_byte_exact(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    env = {f"V{i}": value for i, value in enumerate(HOSTILE)}
    workdir = "/w/dir with 'quotes' and $(x)"
    ct_sh(standin, ct, 'mkdir -p "$1"', workdir)
    _p, r, _s = run_module(tmp_path, base("exact", argv=["python3", "-c", DUMP, "/w/exact.json", *HOSTILE], env=env, chdir=workdir))
    assert r["changed"] is True, r
    wait_in_ct(standin, ct, "[ -s /w/exact.json ]")
    dump = json.loads(ct_sh(standin, ct, "cat /w/exact.json"))
    assert [bytes.fromhex(a).decode() for a in dump["argv"]] == HOSTILE
    got_env = {bytes.fromhex(k).decode(): bytes.fromhex(v).decode() for k, v in dump["env"].items()}
    assert {k: got_env.get(k) for k in env} == env
    assert bytes.fromhex(dump["cwd"]).decode() == workdir
    assert "No such file" in ct_sh(standin, ct, "ls /tmp/pwned 2>&1 || true")


def test_user_and_venv(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _p, r, _s = run_module(tmp_path, base("asuser", command='id -un; echo "$HOME $VIRTUAL_ENV"; command -v python',
                                          user="trainer", venv="/w/venv"))
    assert r["changed"] is True, r
    wait_in_ct(standin, ct, "[ -e /w/asuser.log.exit ]")
    log = lines(standin.sh(ct, "cat /w/asuser.log").stdout)
    assert log[1:4] == ["trainer", "/home/trainer /w/venv", "/w/venv/bin/python"]
    assert ct_sh(standin, ct, "stat -c %U /w/asuser.log") == "trainer\n"


@pytest.fixture()
def pty_node(private_node: StandinNode) -> t.Iterator[StandinNode]:
    """A private node whose pct exec gives every command a pty (knobs.conf), with CT 249 and tmux."""
    private_node.create(CT_PTY)
    assert b"tmux" in private_node.sh(CT_PTY, INSTALL_TMUX, timeout=600).stdout
    root = Path(private_node.env["PVE_STANDIN_ROOT"])
    (root / "knobs.conf").write_text("pty=1\n", encoding="utf-8")
    yield private_node


def test_launch_works_when_pct_gives_a_pty(pty_node: StandinNode, tmp_path: Path) -> None:
    env = {"PVE_STANDIN_ROOT": pty_node.env["PVE_STANDIN_ROOT"]}
    assert "yes" in pty_node.sh(CT_PTY, "[ -t 0 ] && echo yes || echo no").stdout.decode()
    args = {"vmid": CT_PTY, "session_name": "ptyjob", "argv": ["sh", "-c", 'python3 -c "$0" "$@"; exec sleep 300', DUMP, "/tmp/pty.json", *HOSTILE],
            "env": {"CTRL": "a\x03b\x04c\rd\x1ae"}, "log_path": "/tmp/pty.log"}
    _p, r, seconds = run_module(tmp_path, args, env=env)
    assert r["changed"] is True and r["state"] == "running", r
    print(f"launch under a pty: {seconds:.2f} s")
    pty_node.sh(CT_PTY, 'i=0; until [ -s /tmp/pty.json ]; do i=$((i+1)); [ $i -gt 100 ] && exit 1; sleep 0.1; done')
    dump = json.loads(pty_node.sh(CT_PTY, "cat /tmp/pty.json").stdout)
    assert [bytes.fromhex(a).decode() for a in dump["argv"]] == HOSTILE
    assert dump["env"][b"CTRL".hex()] == "a\x03b\x04c\rd\x1ae".encode().hex()
    _p, again, _s = run_module(tmp_path, args, env=env)
    assert again["failed"] is not True and again["changed"] is False
