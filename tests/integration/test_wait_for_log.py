# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""trainops.pct_launch.wait_for_log against real containers behind the Proxmox VE stand-in.

Every verdict is produced by ansible-playbook on this machine (the Proxmox node) with the module
running IN a real LXC container (tmux installed by apt), an inventory host reached with the
collection's pct connection (``playbook_results.container_host``, pipelined: one ``pct exec`` per
module run, one per chunk of a wait): a healthy job (one pct call for the wait, counted with the
stand-in's ``call_log`` knob on a private node and with the ``EXEC`` lines of ``-vvv``), a log that
appears after the first chunk, a job that crashes (fail fast with its exit status), fail_pattern,
a timeout with no log, a bad regex (no pct call), a killed session, an unknown session, a container
without python3 (a clear failure, no timeout, nothing started), and the handler pattern.

Jobs are launched with trainops.pct_launch.tmux_session in the same play, as users do; the cases it
cannot produce (a log that does not exist yet, a killed wrapper) start a session by hand with
``tmux new-session -d`` through ``pct exec``. VMIDs: 251 (shared), 252 (no python3), 258 (private node).
"""

from __future__ import annotations

import json
import shlex
import time
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import STANDIN_PCT, StandinNode
from .playbook_results import container_host, exec_calls, run_tasks

pytestmark = pytest.mark.integration

CT, CT_NOPY, CT_PRIVATE = 251, 252, 258


def prepare(node: StandinNode, vmid: int) -> int:
    """Create the container, install tmux in it with apt, make /w for the logs."""
    node.create(vmid)
    node.install_tmux(vmid, "/w")
    return vmid


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """Container 251 with tmux."""
    return prepare(standin, CT)


def host_of(vmid: int) -> str:
    """The inventory name of a container."""
    return f"ct{vmid}"


def on_container(vmid: int, **host_vars: t.Any) -> dict[str, dict[str, t.Any]]:
    """An inventory of one container host reached with the pct connection."""
    return {host_of(vmid): container_host(vmid, **host_vars)}


def launch_task(name: str, command: str, **extra: t.Any) -> dict[str, t.Any]:
    """A tmux_session task starting ``command`` with its log at /w/NAME.log; registers ``launch``."""
    args = {"session_name": name, "command": command, "log_path": f"/w/{name}.log", **extra}
    return {"name": "Launch", "trainops.pct_launch.tmux_session": args, "register": "launch"}


def wait_task(**args: t.Any) -> dict[str, t.Any]:
    """A wait_for_log task (named ``wait``)."""
    return {"name": "wait", "trainops.pct_launch.wait_for_log": args}


def counting_pct(tmp_path: Path, root: Path | None = None) -> tuple[str, Path]:
    """A pct_path wrapper for the stand-in that records each call (the stand-in's call_log knob)."""
    calls = tmp_path / "calls.jsonl"
    wrapper = tmp_path / "pct"
    lines = ["#!/bin/sh", f"export PVE_STANDIN_CALL_LOG={shlex.quote(str(calls))}"]
    if root is not None:
        lines.append(f"export PVE_STANDIN_ROOT={shlex.quote(str(root))}")
    lines.append(f'exec {shlex.quote(str(STANDIN_PCT))} "$@"')
    wrapper.write_text("\n".join(lines) + "\n", encoding="utf-8")
    wrapper.chmod(0o755)
    return str(wrapper), calls


def recorded_execs(calls: Path) -> list[list[str]]:
    """The argv of every recorded ``pct exec``."""
    if not calls.exists():
        return []
    entries = [json.loads(line) for line in calls.read_text().splitlines() if line.strip()]
    return [e["argv"] for e in entries if "exec" in e["argv"]]


def name_for(test: str) -> str:
    """A fresh session name."""
    return f"{test}-{uuid.uuid4().hex[:6]}"


@pytest.fixture()
def private_ct(private_node: StandinNode, tmp_path: Path) -> Iterator[tuple[StandinNode, str, Path]]:
    """Container 258 on a private node whose pct calls are logged (call_log in its knobs.conf)."""
    root = Path(private_node.env["PVE_STANDIN_ROOT"])
    calls = tmp_path / "node-calls.jsonl"
    prepare(private_node, CT_PRIVATE)
    (root / "knobs.conf").write_text(f"call_log={calls}\n", encoding="utf-8")
    wrapper = tmp_path / "pct-private"
    wrapper.write_text(f"#!/bin/sh\nexport PVE_STANDIN_ROOT={shlex.quote(str(root))}\nexec {shlex.quote(str(STANDIN_PCT))} \"$@\"\n")
    wrapper.chmod(0o755)
    yield private_node, str(wrapper), calls


def test_healthy_job_one_pct_call(private_ct: tuple[StandinNode, str, Path], tmp_path: Path) -> None:
    node, pct_path, calls = private_ct
    name = name_for("healthy")
    host = host_of(CT_PRIVATE)
    calls.unlink(missing_ok=True)
    run = run_tasks(tmp_path, on_container(CT_PRIVATE, pct_path=pct_path), [
        launch_task(name, "echo loading; sleep 0.5; echo 'Epoch 1/10 loss=2.3'; sleep 300"),
        wait_task(session_name=name, log_path=f"/w/{name}.log", pattern=r"Epoch \d+/", timeout=120)], options=["-vvv"])
    assert run.proc.returncode == 0, run.proc.stdout[-6000:] + run.proc.stderr[-3000:]
    r = run.result("wait", host)
    assert r["verdict"] == "started" and r["matched_line"] == "Epoch 1/10 loss=2.3" and r["pct_calls"] == 1
    assert r["log_path"] == f"/w/{name}.log" and r["session_alive"]
    assert r["log_tail"][0].startswith(f"### trainops.pct_launch: session={name}") and r["log_tail"][-1] == "Epoch 1/10 loss=2.3"
    assert r["msg"].startswith(f"Job started in session {name} in container {CT_PRIVATE}: pattern"), r["msg"]
    execs = recorded_execs(calls)
    assert len(execs) == 2, calls.read_text()  # the launch, then the whole wait
    assert all(argv[argv.index("exec") + 1:argv.index("exec") + 6] == [str(CT_PRIVATE), "--keep-env", "1", "--", "/bin/sh"] for argv in execs), execs
    assert exec_calls(run.proc.stdout, host) == {"Launch": 1, "wait": 1}, run.proc.stdout[-6000:]
    assert node.sh(CT_PRIVATE, 'tmux has-session -t "=$1"', name, check=False).returncode == 0, "the job runs in the container"


def test_log_appears_late_but_in_time(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_for("late")
    log = f"/w/{name}.log"
    # 25 s: past the first 10 s chunk even when ansible-playbook itself starts slowly on a loaded machine.
    standin.sh(ct, f"mkdir -p /w; tmux new-session -d -s {name} 'sleep 25; echo ready > {log}; sleep 300'")
    pct_path, calls = counting_pct(tmp_path)
    run = run_tasks(tmp_path, on_container(ct, pct_path=pct_path), [wait_task(session_name=name, log_path=log, pattern="^ready$", timeout=90)])
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    r = run.result("wait", host_of(ct))
    assert r["verdict"] == "started" and r["pct_calls"] >= 2 and len(recorded_execs(calls)) == r["pct_calls"]
    assert f"[{host_of(ct)}] wait_for_log {name} in container {ct}: 1" in run.proc.stdout, run.proc.stdout
    assert "log missing, session alive" in run.proc.stdout


def test_crash_fails_fast_with_exit_status(ct: int, tmp_path: Path) -> None:
    name = name_for("crash")
    run = run_tasks(tmp_path, on_container(ct), [
        launch_task(name, "echo 'loading data'; sleep 1; echo 'RuntimeError: boom' >&2; exit 3"),
        wait_task(session_name=name, log_path=f"/w/{name}.log", pattern="Epoch", timeout=600)])
    assert run.proc.returncode != 0
    r = run.result("wait", host_of(ct))
    assert r["status"] == "failed" and r["verdict"] == "died" and r["exit_status"] == 3 and r["session_state"] == "finished"
    assert r["elapsed"] < 300 and r["pct_calls"] == 1
    assert r["log_tail"][-2] == "RuntimeError: boom" and "loading data" in r["log_tail"]
    assert r["log_tail"][-1].startswith(f"### trainops.pct_launch: session={name} exit_status=3 ")
    assert r["msg"].startswith(f"Job did not start in session {name} in container {ct}: the job ended with exit status 3"), r["msg"]
    assert "RuntimeError: boom" in run.proc.stdout


def test_dies_while_waiting(ct: int, tmp_path: Path) -> None:
    name = name_for("dies")
    run = run_tasks(tmp_path, on_container(ct), [
        launch_task(name, "echo 'loading data'; sleep 5; echo 'CUDA error: out of memory' >&2; kill -9 $$"),
        wait_task(session_name=name, log_path=f"/w/{name}.log", pattern="Epoch", timeout=900)])
    r = run.result("wait", host_of(ct))
    assert run.proc.returncode != 0 and r["verdict"] == "died" and r["exit_status"] == 137
    assert r["elapsed"] < 450 and r["pct_calls"] == 1 and "CUDA error: out of memory" in r["log_tail"]


def test_fail_pattern(ct: int, tmp_path: Path) -> None:
    name = name_for("failpat")
    run = run_tasks(tmp_path, on_container(ct), [
        launch_task(name, "echo start; echo 'Traceback (most recent call last):'; echo '  File x'; echo 'Epoch 1'; sleep 300"),
        wait_task(session_name=name, log_path=f"/w/{name}.log", pattern="Epoch", fail_pattern="^Traceback", timeout=120)])
    assert run.proc.returncode != 0
    r = run.result("wait", host_of(ct))
    assert r["verdict"] == "fail_pattern" and r["matched_line"] == "Traceback (most recent call last):"
    assert "a log line matches fail_pattern '^Traceback'" in r["msg"] and r["session_alive"]


def test_timeout_without_log(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_for("nolog")
    standin.sh(ct, f"tmux new-session -d -s {name} 'sleep 301'")
    run = run_tasks(tmp_path, on_container(ct), [wait_task(session_name=name, log_path=f"/w/{name}.log", timeout=3)])
    assert run.proc.returncode != 0
    r = run.result("wait", host_of(ct))
    assert r["verdict"] == "timeout" and not r["log_exists"] and r["session_alive"] and r["pane_pid"] > 1
    assert any("sleep 301" in line for line in r["process_tree"]), r["process_tree"]
    assert r["msg"].startswith(f"Timed out after 3 s waiting for the first line of output in session {name} in container {ct}"), r["msg"]
    assert f"log /w/{name}.log does not exist" in r["msg"] and "the session is alive" in r["msg"] and "sleep 301" in r["msg"]


def test_bad_regex_before_any_pct_call(tmp_path: Path) -> None:
    pct_path, calls = counting_pct(tmp_path)
    run = run_tasks(tmp_path, on_container(CT, pct_path=pct_path), [wait_task(session_name="x", pattern="Epoch (")])
    assert run.proc.returncode != 0 and not calls.exists()
    r = run.result("wait", host_of(CT))
    assert r["status"] == "failed" and "verdict" not in r, r
    assert r["msg"].startswith("Cannot use option pattern 'Epoch ('") and "missing ), unterminated subpattern" in r["msg"]


def test_killed_session_is_vanished(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_for("killed")
    run = run_tasks(tmp_path, on_container(ct), [launch_task(name, "echo warming up; sleep 300")])
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    standin.sh(ct, f"kill -9 $(tmux display-message -p -t ={name}: '#{{pane_pid}}')")
    run = run_tasks(tmp_path, on_container(ct), [wait_task(session_name=name, log_path=f"/w/{name}.log", pattern="Epoch", timeout=600)])
    r = run.result("wait", host_of(ct))
    assert run.proc.returncode != 0 and r["verdict"] == "died" and r["session_state"] == "vanished" and r["exit_status"] is None
    assert "the session is gone without an exit status" in r["msg"] and r["log_tail"][-1] == "warming up"


def test_unknown_session(ct: int, tmp_path: Path) -> None:
    run = run_tasks(tmp_path, on_container(ct), [wait_task(session_name="never-launched", log_path="/w/never.log", timeout=600)])
    r = run.result("wait", host_of(ct))
    assert run.proc.returncode != 0 and r["session_state"] == "absent"
    assert r["msg"].startswith(f"Cannot find session never-launched in container {ct}: no tmux session of that name"), r["msg"]


def test_container_without_python3_fails_clearly(standin: StandinNode, tmp_path: Path) -> None:
    """No python3 in the container: no module can run there; the launch and the wait fail at once, nothing starts."""
    prepare(standin, CT_NOPY)
    standin.sh(CT_NOPY, "for p in /usr/bin/python3*; do mv \"$p\" \"$p.hidden\"; done; ! command -v python3")
    name = name_for("nopy")
    host = host_of(CT_NOPY)
    began = time.monotonic()
    run = run_tasks(tmp_path, on_container(CT_NOPY), [
        dict(launch_task(name, "echo 'Epoch 12/100'; sleep 300"), ignore_errors=True),
        wait_task(session_name=name, log_path=f"/w/{name}.log", pattern=r"Epoch \d+/100$", timeout=600)])
    took = time.monotonic() - began
    assert run.proc.returncode != 0, run.proc.stdout
    output = run.proc.stdout + run.proc.stderr
    for task, what in (("Launch", f"Cannot run session {name}"), ("wait", f"Cannot wait for session {name}")):
        r = run.result(task, host)
        assert r["status"] == "failed" and "verdict" not in r, r
        assert r.get("rc") == 127 and "/usr/bin/python3: not found" in r.get("module_stderr", ""), r
        assert r["msg"].startswith(f"{what} in container {CT_NOPY}: the module could not run there: "), r["msg"]
        assert "the target needs Python 3.7 or later" in r["msg"], r["msg"]
    assert "Timed out" not in output and took < 300, f"took {took:.0f} s:\n{output[-4000:]}"
    assert standin.sh(CT_NOPY, 'tmux has-session -t "=$1"', name, check=False).returncode != 0, "a session was started"
    assert standin.sh(CT_NOPY, 'test -e "$1"', f"/w/{name}.log", check=False).returncode != 0, "a log was written"


@pytest.mark.parametrize("job, ok", [("sleep 1; exit 4", False), ("echo Epoch 1; sleep 300", True)])
def test_as_handler_with_flush(ct: int, standin: StandinNode, tmp_path: Path, job: str, ok: bool) -> None:
    name = name_for("handler")
    marker = f"/w/{name}.after-flush"
    tasks = [dict(launch_task(name, job), notify="Wait for the job"), {"name": "Flush", "ansible.builtin.meta": "flush_handlers"},
             {"name": "After", "ansible.builtin.copy": {"content": "x", "dest": marker}}]
    handler = wait_task(session_name="{{ launch.session_name }}", log_path="{{ launch.log_path }}", pattern="Epoch", timeout=600)
    run = run_tasks(tmp_path, on_container(ct), tasks, handlers=[dict(handler, name="Wait for the job")])
    assert (run.proc.returncode == 0) is ok, run.proc.stdout + run.proc.stderr
    wait = run.result("Wait for the job", host_of(ct))
    assert wait["verdict"] == ("started" if ok else "died"), wait
    assert (standin.sh(ct, 'test -e "$1"', marker, check=False).returncode == 0) is ok, "the task after the flush ran or not"
    if not ok:
        assert "RUNNING HANDLER [Wait for the job]" in run.proc.stdout and "the job ended with exit status 4" in run.proc.stdout
