# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Integration tests of trainops.pct_launch.tmux_session on real LXC containers (the pct stand-in).

Every test runs the module through ``ansible-playbook`` on a container host reached with the
collection's pct connection (``playbook_results.container_host``, pipelined: one ``pct exec`` per
task), so the module runs inside the container. Containers: 241 (tmux installed), 242 (no tmux),
248 (missing, then created stopped). pct calls are counted, and checked for a terminal, with a
wrapper of the stand-in's pct given as the host variable ``pct_path``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
import time
import typing as t
from pathlib import Path

import pytest

from . import playbook_results
from .conftest import STANDIN_PCT, StandinNode, lines
from .playbook_results import PlayRun, container_host, run_tasks

pytestmark = pytest.mark.integration

CT = 241
CT_NO_TMUX = 242
CT_MISSING = 248
TASK = "launch"
DUMP = ("import json, os, sys; json.dump({'argv': [os.fsencode(a).hex() for a in sys.argv[2:]], "
        "'env': {k.hex(): v.hex() for k, v in os.environb.items()}, 'cwd': os.fsencode(os.getcwd()).hex()}, open(sys.argv[1], 'w'))")
# No '{{' / '{%' here: Ansible would template them before the module sees them.
HOSTILE = ["it's", 'say "hi"', "$(touch /tmp/pwned)", "`touch /tmp/pwned`", "new\nline", "trailing\n", "*", "?[a]",
           "-dash", "--", "ünïcödé ✓", "back\\slash", "semi;", "100%", "tab\t", "", " lead", "'", "\\"]
# Bytes a terminal would act on (^C, ^D, CR, ^Z): they must reach the job as data.
CONTROL = "a\x03b\x04c\rd\x1ae"
# The pct_path wrapper: one JSON line per call (its arguments, which of its fds 0-2 are terminals), then the stand-in's pct.
# The connection runs pct with a clean environment, so the log's path is written into the wrapper.
COUNTING_PCT = """#!/usr/bin/python3
import json, os, sys
with open({log!r}, "a", encoding="utf-8") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "tty": [fd for fd in (0, 1, 2) if os.isatty(fd)]}}) + "\\n")
os.execv({pct!r}, [{pct!r}, *sys.argv[1:]])
"""


def host_name(vmid: int) -> str:
    """The inventory name of the container host."""
    return f"ct{vmid}"


def run_module(folder: Path, args: dict[str, t.Any], vmid: int = CT, options: t.Sequence[str] = (),
               host_vars: dict[str, t.Any] | None = None) -> tuple[PlayRun, dict[str, t.Any], float]:
    """Run tmux_session once on container ``vmid`` (pct connection); return the run, the task result and the seconds it took."""
    started = time.monotonic()
    run = run_tasks(folder, {host_name(vmid): container_host(vmid, **(host_vars or {}))},
                    [{"name": TASK, "trainops.pct_launch.tmux_session": args}], options=options)
    seconds = time.monotonic() - started
    return run, run.result(TASK, host_name(vmid)), seconds


def counting_pct(folder: Path) -> tuple[Path, Path]:
    """A wrapper of the stand-in's pct for the host variable ``pct_path``, and the JSON lines log of its calls."""
    folder.mkdir(parents=True, exist_ok=True)
    log, wrapper = folder / "pct-calls.jsonl", folder / "pct"
    wrapper.write_text(COUNTING_PCT.format(log=str(log), pct=str(STANDIN_PCT)), encoding="utf-8")
    wrapper.chmod(0o755)
    return wrapper, log


def pct_calls(log: Path) -> list[dict[str, t.Any]]:
    """The calls the wrapper logged, in order (none when the log does not exist)."""
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


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
    assert standin.install_tmux(CT).startswith("tmux ")
    ct_sh(standin, CT, "mkdir -p /w && useradd -m trainer 2>/dev/null; mkdir -p /w/venv/bin && ln -sf /usr/bin/python3 /w/venv/bin/python")
    return CT


def base(name: str, **kwargs: t.Any) -> dict[str, t.Any]:
    """Module arguments for a session logging to /w/NAME.log."""
    args: dict[str, t.Any] = {"session_name": name, "log_path": f"/w/{name}.log"}
    args.update(kwargs)
    return args


def test_healthy_start_then_unchanged(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    wrapper, calls = counting_pct(tmp_path)
    args = base("healthy", command="echo first-output; exec sleep 300")
    _run, r, seconds = run_module(tmp_path, args, host_vars={"pct_path": str(wrapper)})
    assert r["changed"] is True and r["state"] == "running", r
    assert isinstance(r["pane_pid"], int) and r["tmux_version"] and r["rotated_log"] is None
    assert r["started_at"].endswith("Z") and r["log_path"] == "/w/healthy.log"
    made = pct_calls(calls)
    assert [call["argv"][:6] for call in made] == [["exec", str(ct), "--keep-env", "1", "--", "/bin/sh"]], "one pct exec per launch"
    assert "first-output" not in json.dumps(made), "the module's arguments travel on stdin, never on pct's argv"
    assert made[0]["tty"] == [], "pct got a terminal"
    print(f"launch through ansible-playbook: {seconds:.2f} s, 1 pct call")
    wait_in_ct(standin, ct, 'grep -q first-output /w/healthy.log')
    log = lines(standin.sh(ct, "cat /w/healthy.log").stdout)
    assert log[0].startswith("### trainops.pct_launch: session=healthy started_at=") and "command=echo first-output" in log[0]
    assert log[1] == "first-output"
    assert standin.sh(ct, 'kill -0 "$1"', str(r["pane_pid"]), check=False).returncode == 0
    _run, again, _s = run_module(tmp_path, args, host_vars={"pct_path": str(wrapper)})
    assert again["changed"] is False and again["pane_pid"] == r["pane_pid"] and again["state"] == "running", again
    assert len(pct_calls(calls)) == 2, "an idempotent re-run is one pct exec"


def test_different_spec_fails_clearly(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _run, first, _s = run_module(tmp_path, base("conflict", argv=["sleep", "300"], env={"TOKEN": "first-token-value"}))
    assert first["changed"] is True, first
    run, r, _s = run_module(tmp_path, base("conflict", argv=["sleep", "301"], env={"TOKEN": "second-token-value"}))
    assert r["status"] == "failed" and r["error"] == "spec_conflict", r
    assert r["msg"].startswith(f"Cannot start session conflict in container {ct}: session conflict is already running with a different spec"), r["msg"]
    assert 'argv differs (running: ["sleep", "300"], wanted: ["sleep", "301"])' in r["msg"]
    assert "env differs (variables TOKEN; values not shown)" in r["msg"] and "state: restarted" in r["msg"]
    assert "token-value" not in json.dumps(r) and "token-value" not in run.proc.stdout + run.proc.stderr
    assert "sleep 300" in ct_sh(standin, ct, "ps -eo args") and "sleep 301" not in ct_sh(standin, ct, "ps -eo args")


def test_restart_rotates_and_records_the_old_run(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _run, first, _s = run_module(tmp_path, base("restart", argv=["sleep", "300"]))
    assert first["changed"] is True, first
    _run, r, _s = run_module(tmp_path, base("restart", argv=["sleep", "302"], state="restarted"), options=["--diff"])
    assert r["changed"] is True and r["state"] == "running" and r["pane_pid"] != first["pane_pid"], r
    assert r["rotated_log"] == "/w/restart.log.1" and r["exit_status"] == 143
    assert "command: sleep 300" in r["diff"]["before"] and "command: sleep 302" in r["diff"]["after"]
    old = ct_sh(standin, ct, "cat /w/restart.log.1 /w/restart.log.1.exit")
    assert "exit_status=143" in old and "stopped_by=trainops" in old
    assert "command=sleep 302" in ct_sh(standin, ct, "head -n 1 /w/restart.log")


@pytest.mark.both_privileges
def test_stop_with_term_then_unchanged(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _run, first, _s = run_module(tmp_path, base("stopme", argv=["sleep", "300"]))
    assert first["changed"] is True, first
    _run, r, _s = run_module(tmp_path, {"session_name": "stopme", "state": "stopped"})
    assert r["changed"] is True and r["state"] == "finished" and r["exit_status"] == 143 and "killed" not in r, r
    assert not session_alive(standin, ct, "stopme")
    assert "exit_status=143" in ct_sh(standin, ct, "cat /w/stopme.log.exit")
    _run, r, _s = run_module(tmp_path, {"session_name": "stopme", "state": "stopped"})
    assert r["changed"] is False and r["status"] == "ok", r


def test_job_ignoring_term_is_killed_after_stop_timeout(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _run, first, _s = run_module(tmp_path, base("stubborn", command="trap 'echo ignoring TERM' TERM; echo ready; while :; do sleep 1; done"))
    assert first["changed"] is True, first
    wait_in_ct(standin, ct, "grep -q ready /w/stubborn.log")
    started = time.monotonic()
    _run, r, _s = run_module(tmp_path, {"session_name": "stubborn", "state": "stopped", "stop_timeout": 2})
    assert r["changed"] is True and r["killed"] is True and r["exit_status"] == 137, r
    assert time.monotonic() - started < 20
    exit_file = ct_sh(standin, ct, "cat /w/stubborn.log.exit")
    assert "exit_status=137" in exit_file and "stopped_by=trainops" in exit_file
    assert not [a for a in ct_sh(standin, ct, "ps -eo args").splitlines() if a.startswith("sh -c trap 'echo ignoring TERM'")]


def test_crash_at_start_records_the_exit_code(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _run, r, _s = run_module(tmp_path, base("crash", command="echo about to fail; exit 7"))
    assert r["changed"] is True, r
    wait_in_ct(standin, ct, "[ -e /w/crash.log.exit ]")
    assert "exit_status=7" in ct_sh(standin, ct, "cat /w/crash.log.exit")
    assert ct_sh(standin, ct, "tail -n 1 /w/crash.log").startswith("### trainops.pct_launch: session=crash exit_status=7")


def test_missing_script_starts_nothing(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _run, r, _s = run_module(tmp_path, base("noscript", argv=["python3", "train_missing.py"], chdir="/w"))
    assert r["status"] == "failed" and r["error"] == "script_missing", r
    assert r["msg"] == (f"Cannot start session noscript in container {ct}: script train_missing.py does not exist "
                        "(relative to /w); nothing was started; check command/argv and chdir")
    assert not session_alive(standin, ct, "noscript")
    assert ct_sh(standin, ct, "ls /w/noscript.log /run/trainops/noscript 2>&1 || true").count("No such file") == 2


def test_tmux_missing_is_a_clear_error(standin: StandinNode, tmp_path: Path) -> None:
    standin.create(CT_NO_TMUX)
    _run, r, _s = run_module(tmp_path, {"session_name": "x", "command": "true", "log_path": "/tmp/x.log"}, vmid=CT_NO_TMUX)
    assert r["status"] == "failed" and r["error"] == "tmux_missing", r
    assert r["msg"] == (f"Cannot start session x in container {CT_NO_TMUX}: tmux is not installed there: "
                        "apply role trainops.pct_launch.tmux")
    assert ct_sh(standin, CT_NO_TMUX, "ls /tmp/x.log /run/trainops/x 2>&1 || true").count("No such file") == 2
    _run, r, _s = run_module(tmp_path, {"session_name": "x", "state": "stopped"}, vmid=CT_NO_TMUX)
    assert r["changed"] is False and r["state"] == "absent" and r["status"] == "ok", r


def test_missing_and_stopped_containers(standin: StandinNode, tmp_path: Path) -> None:
    """The pct connection cannot run the module: the host is unreachable, with the connection's message."""
    wrapper, calls = counting_pct(tmp_path)
    args = {"session_name": "x", "command": "true", "log_path": "/root/x.log"}
    if standin.pct("config", CT_MISSING).returncode == 0:  # left over from an earlier run of this test
        standin.pct("destroy", CT_MISSING, "--force", check=True)
    run, r, _s = run_module(tmp_path, args, vmid=CT_MISSING, host_vars={"pct_path": str(wrapper)})
    assert r["unreachable"] is True and r["status"] == "unreachable" and run.proc.returncode == 4, r
    assert (f"Cannot run a command in container {CT_MISSING}: the container does not exist on the local node "
            f"(pct: Configuration file 'nodes/") in r["msg"], r["msg"]
    assert run.results["stats"][host_name(CT_MISSING)]["unreachable"] == 1
    assert standin.pct("config", CT_MISSING).returncode != 0, "the failed launch created a container"
    standin.create(CT_MISSING, start=False)
    run, r, _s = run_module(tmp_path, args, vmid=CT_MISSING, host_vars={"pct_path": str(wrapper)})
    assert r["unreachable"] is True and r["status"] == "unreachable" and run.proc.returncode == 4, r
    assert (f"Cannot run a command in container {CT_MISSING}: the container is not running; "
            f"start it with 'pct start {CT_MISSING}'") in r["msg"], r["msg"]
    # one exec per launch; the stopped container costs one `pct config` more, on that failure only, to look for a lock
    assert [call["argv"][:2] for call in pct_calls(calls)] == [["exec", str(CT_MISSING)], ["exec", str(CT_MISSING)],
                                                               ["config", str(CT_MISSING)]], "pct did more than one exec per launch"
    assert standin.pct("status", CT_MISSING).stdout.strip() == b"status: stopped"
    standin.pct("start", CT_MISSING, check=True)
    assert "No such file" in ct_sh(standin, CT_MISSING, "ls /root/x.log 2>&1 || true"), "something ran in the stopped container"


def test_rotate_keeps_logs_and_never_overwrites(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    for run in range(1, 5):
        _run, r, _s = run_module(tmp_path, base("rot", command=f"echo run-{run}", log_keep=2))
        assert r["changed"] is True and r["rotated_log"] == (None if run == 1 else "/w/rot.log.1"), r
        wait_in_ct(standin, ct, "[ -e /w/rot.log.exit ]")
    expected = ["rot.log", "rot.log.1", "rot.log.1.exit", "rot.log.2", "rot.log.2.exit", "rot.log.exit"]
    assert ct_sh(standin, ct, "cd /w && ls rot.log*").split() == expected
    for name, run in (("rot.log", 4), ("rot.log.1", 3), ("rot.log.2", 2)):
        assert f"run-{run}" in ct_sh(standin, ct, 'cat "/w/$1"', name)


def test_fail_if_exists_refuses_and_keeps_the_log(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    ct_sh(standin, ct, "echo precious > /w/keep.log")
    _run, r, _s = run_module(tmp_path, base("keep", command="echo new", log_mode="fail_if_exists"))
    assert r["status"] == "failed" and r["error"] == "log_exists" and "fail_if_exists" in r["msg"], r
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
    _run, r, _s = run_module(tmp_path, base("checked", argv=["sleep", "300"]), options=["--check", "--diff"])
    assert r["changed"] is True and r["state"] == "running", r
    assert r["diff"]["before"] == "state: absent\n"
    assert not session_alive(standin, ct, "checked")
    assert ct_sh(standin, ct, "ls /w/checked.log /run/trainops/checked 2>&1 || true").count("No such file") == 2
    _run, r, _s = run_module(tmp_path, base("checked", argv=["sleep", "300"], chdir="/nonexistent"), options=["--check"])
    assert r["status"] == "failed" and r["error"] == "chdir_missing", r


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
        run, r, _s = run_module(tmp_path, base("secret", command='printf "%s" "$API_TOKEN" > /w/secret.out; exec sleep 300',
                                               env={"API_TOKEN": secret}))
        wait_in_ct(standin, ct, "[ -s /w/secret.out ]")
    finally:
        done.set()
        watcher.join()
    assert r["changed"] is True, r
    assert len(seen) > 20 and not any(secret in snapshot for snapshot in seen)
    assert secret not in json.dumps(r) and secret not in run.proc.stdout + run.proc.stderr
    assert secret not in ct_sh(standin, ct, "cat /w/secret.log; ls -a /run/trainops/secret; cat /run/trainops/secret/spec")
    assert ct_sh(standin, ct, "cat /w/secret.out") == secret
    assert "env" not in ct_sh(standin, ct, "ls /run/trainops/secret").split()


def test_values_arrive_byte_exact(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    env = {f"V{i}": value for i, value in enumerate(HOSTILE)}
    workdir = "/w/dir with 'quotes' and $(x)"
    ct_sh(standin, ct, 'mkdir -p "$1"', workdir)
    _run, r, _s = run_module(tmp_path, base("exact", argv=["python3", "-c", DUMP, "/w/exact.json", *HOSTILE], env=env, chdir=workdir))
    assert r["changed"] is True, r
    wait_in_ct(standin, ct, "[ -s /w/exact.json ]")
    dump = json.loads(ct_sh(standin, ct, "cat /w/exact.json"))
    assert [bytes.fromhex(a).decode() for a in dump["argv"]] == HOSTILE
    got_env = {bytes.fromhex(k).decode(): bytes.fromhex(v).decode() for k, v in dump["env"].items()}
    assert {k: got_env.get(k) for k in env} == env
    assert bytes.fromhex(dump["cwd"]).decode() == workdir
    assert "No such file" in ct_sh(standin, ct, "ls /tmp/pwned 2>&1 || true")


def test_user_and_venv(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    _run, r, _s = run_module(tmp_path, base("asuser", command='id -un; echo "$HOME $VIRTUAL_ENV"; command -v python',
                                            user="trainer", venv="/w/venv"))
    assert r["changed"] is True, r
    wait_in_ct(standin, ct, "[ -e /w/asuser.log.exit ]")
    log = lines(standin.sh(ct, "cat /w/asuser.log").stdout)
    assert log[1:4] == ["trainer", "/home/trainer /w/venv", "/w/venv/bin/python"]
    assert ct_sh(standin, ct, "stat -c %U /w/asuser.log") == "trainer\n"


def test_launch_from_a_terminal_gives_pct_no_terminal(ct: int, standin: StandinNode, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """ansible-playbook in a real terminal (script(1)): pct never gets it, and control bytes reach the job as data."""
    real = playbook_results.ansible_playbook()
    tty_seen = tmp_path / "tty"
    in_terminal = tmp_path / "ansible-playbook-in-a-terminal"
    in_terminal.write_text("#!/usr/bin/python3\nimport os, shlex, sys\n"
                           f"inner = 'tty > {shlex.quote(str(tty_seen))}; exec ' + shlex.join([{real!r}, *sys.argv[1:]])\n"
                           "os.execvp('script', ['script', '-qefc', inner, '/dev/null'])\n", encoding="utf-8")
    in_terminal.chmod(0o755)
    monkeypatch.setattr(playbook_results, "ansible_playbook", lambda: str(in_terminal))
    wrapper, calls = counting_pct(tmp_path)
    args = base("fromtty", argv=["sh", "-c", 'python3 -c "$0" "$@"; exec sleep 300', DUMP, "/w/fromtty.json", *HOSTILE],
                env={"CTRL": CONTROL})
    run, r, _s = run_module(tmp_path, args, host_vars={"pct_path": str(wrapper)})
    assert tty_seen.read_text(encoding="utf-8").startswith("/dev/pts/"), "ansible-playbook did not run in a terminal"
    assert r["changed"] is True and r["state"] == "running", (r, run.proc.stdout[-3000:])
    made = pct_calls(calls)
    assert len(made) == 1 and made[0]["tty"] == [], f"pct got a terminal on fds {made}"
    wait_in_ct(standin, ct, "[ -s /w/fromtty.json ]")
    dump = json.loads(ct_sh(standin, ct, "cat /w/fromtty.json"))
    assert [bytes.fromhex(a).decode() for a in dump["argv"]] == HOSTILE
    assert dump["env"][b"CTRL".hex()] == CONTROL.encode().hex()
    _run, again, _s = run_module(tmp_path, args, host_vars={"pct_path": str(wrapper)})
    assert again["changed"] is False and again["status"] == "ok", again
    assert [call["tty"] for call in pct_calls(calls)] == [[], []]
