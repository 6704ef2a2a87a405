# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""trainops.pct_launch.wait_for_log against real containers behind the Proxmox VE stand-in.

Every verdict is produced by ansible-playbook on this machine (the Proxmox node) against a real LXC
container with tmux installed by apt: a healthy job (one pct call, counted with the stand-in's
``call_log`` knob on a private node), a log that appears after the first chunk, a job that crashes
(fail fast with its exit status), fail_pattern, a timeout with no log, a bad regex (no pct call),
a killed session, the sh fallback without python3, delegate_to, and the handler pattern.

Jobs are launched with trainops.pct_launch.tmux_session in the same play, as users do; the cases it
cannot produce (a log that does not exist yet, a killed wrapper) start a session by hand with
``tmux new-session -d`` through ``pct exec``. VMIDs: 251 (shared), 252 (no python3), 258 (private node).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import STANDIN_PCT, StandinNode

pytestmark = pytest.mark.integration

CT, CT_NOPY, CT_PRIVATE = 251, 252, 258
PYTHON = "/usr/bin/python3"
INSTALL_TMUX = ("command -v tmux >/dev/null || { apt-get install -y -q tmux >/dev/null 2>&1 || "
                "{ apt-get update -q >/dev/null && apt-get install -y -q tmux >/dev/null; }; }; tmux -V")


def prepare(node: StandinNode, vmid: int) -> int:
    """Create the container, install tmux in it with apt, make /w for the logs."""
    node.create(vmid)
    out = node.sh(vmid, INSTALL_TMUX + "; mkdir -p /w", check=False, timeout=600)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return vmid


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """Container 251 with tmux."""
    return prepare(standin, CT)


Result = t.Tuple[subprocess.CompletedProcess, t.Dict[str, t.Any]]


def playbook(tmp_path: Path, tasks: list[dict[str, t.Any]], handlers: list[dict[str, t.Any]] | None = None,
             env: dict[str, str] | None = None, hosts: str = "localhost", inventory: str = "localhost,",
             prefix: t.Sequence[str] = ()) -> Result:
    """Run a play on this machine; each task registers ``r`` and the last ``r`` is written to a file.

    ``prefix`` goes before the ansible-playbook argv (for example ``unshare -m ...`` to hide a file).
    """
    out = tmp_path / f"result-{uuid.uuid4().hex[:8]}.json"
    play = {"hosts": hosts, "gather_facts": False, "tasks": [
        {"block": tasks, "always": [{"ansible.builtin.copy": {"content": "{{ r | default({}) | to_json }}", "dest": str(out)},
                                     "delegate_to": "localhost"}]}]}
    if handlers:
        play["handlers"] = handlers
    path = tmp_path / f"play-{uuid.uuid4().hex[:8]}.yml"
    path.write_text(json.dumps([play]), encoding="utf-8")
    program = Path(sys.executable).with_name("ansible-playbook")
    full_env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0", **(env or {}))
    argv = [*prefix, str(program), "-i", inventory, "-c", "local", "-e", f"ansible_python_interpreter={PYTHON}", str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=full_env, stdin=subprocess.DEVNULL, check=False)
    result = json.loads(out.read_text()) if out.exists() else {}
    return proc, result


def launch_task(vmid: int, name: str, command: str, **extra: t.Any) -> dict[str, t.Any]:
    """A tmux_session task starting ``command`` with its log at /w/NAME.log; registers ``launch``."""
    args = {"vmid": vmid, "session_name": name, "command": command, "log_path": f"/w/{name}.log", **extra}
    return {"name": "Launch", "trainops.pct_launch.tmux_session": args, "register": "launch"}


def wait_task(**args: t.Any) -> dict[str, t.Any]:
    """A wait_for_log task that registers ``r``."""
    return {"name": "wait", "trainops.pct_launch.wait_for_log": args, "register": "r"}


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


def exec_calls(calls: Path) -> list[list[str]]:
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
    _node, pct_path, calls = private_ct
    name = name_for("healthy")
    calls.unlink(missing_ok=True)
    proc, r = playbook(tmp_path, [
        launch_task(CT_PRIVATE, name, "echo loading; sleep 0.5; echo 'Epoch 1/10 loss=2.3'; sleep 300", pct_path=pct_path),
        wait_task(vmid=CT_PRIVATE, session_name=name, log_path=f"/w/{name}.log", pattern=r"Epoch \d+/", timeout=120, pct_path=pct_path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert r["verdict"] == "started" and r["matched_line"] == "Epoch 1/10 loss=2.3" and r["pct_calls"] == 1
    assert r["log_path"] == f"/w/{name}.log" and r["session_alive"] and r["engine"] == "python3"
    assert r["log_tail"][0].startswith(f"### trainops.pct_launch: session={name}") and r["log_tail"][-1] == "Epoch 1/10 loss=2.3"
    assert len(exec_calls(calls)) == 2, calls.read_text()  # the launch, then the whole wait


def test_log_appears_late_but_in_time(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_for("late")
    log = f"/w/{name}.log"
    # 25 s: past the first 10 s chunk even when ansible-playbook itself starts slowly on a loaded machine.
    standin.sh(ct, f"mkdir -p /w; tmux new-session -d -s {name} 'sleep 25; echo ready > {log}; sleep 300'")
    pct_path, calls = counting_pct(tmp_path)
    proc, r = playbook(tmp_path, [wait_task(vmid=ct, session_name=name, log_path=log, pattern="^ready$", timeout=90, pct_path=pct_path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert r["verdict"] == "started" and r["pct_calls"] >= 2 and len(exec_calls(calls)) == r["pct_calls"]
    assert f"[localhost] wait_for_log {name} in container {ct}: 1" in proc.stdout and "log missing, session alive" in proc.stdout


def test_crash_fails_fast_with_exit_status(ct: int, tmp_path: Path) -> None:
    name = name_for("crash")
    proc, r = playbook(tmp_path, [
        launch_task(ct, name, "echo 'loading data'; sleep 1; echo 'RuntimeError: boom' >&2; exit 3"),
        wait_task(vmid=ct, session_name=name, log_path=f"/w/{name}.log", pattern="Epoch", timeout=600)])
    assert proc.returncode != 0
    assert r["verdict"] == "died" and r["exit_status"] == 3 and r["session_state"] == "finished"
    assert r["elapsed"] < 300 and r["pct_calls"] == 1
    assert r["log_tail"][-2] == "RuntimeError: boom" and "loading data" in r["log_tail"]
    assert r["log_tail"][-1].startswith(f"### trainops.pct_launch: session={name} exit_status=3 ")
    assert "the job ended with exit status 3" in r["msg"] and "RuntimeError: boom" in proc.stdout


def test_dies_while_waiting(ct: int, tmp_path: Path) -> None:
    name = name_for("dies")
    proc, r = playbook(tmp_path, [
        launch_task(ct, name, "echo 'loading data'; sleep 5; echo 'CUDA error: out of memory' >&2; kill -9 $$"),
        wait_task(vmid=ct, session_name=name, log_path=f"/w/{name}.log", pattern="Epoch", timeout=900)])
    assert proc.returncode != 0 and r["verdict"] == "died" and r["exit_status"] == 137
    assert r["elapsed"] < 450 and r["pct_calls"] == 1 and "CUDA error: out of memory" in r["log_tail"]


def test_fail_pattern(ct: int, tmp_path: Path) -> None:
    name = name_for("failpat")
    proc, r = playbook(tmp_path, [
        launch_task(ct, name, "echo start; echo 'Traceback (most recent call last):'; echo '  File x'; echo 'Epoch 1'; sleep 300"),
        wait_task(vmid=ct, session_name=name, log_path=f"/w/{name}.log", pattern="Epoch", fail_pattern="^Traceback", timeout=120)])
    assert proc.returncode != 0
    assert r["verdict"] == "fail_pattern" and r["matched_line"] == "Traceback (most recent call last):"
    assert "a log line matches fail_pattern '^Traceback'" in r["msg"] and r["session_alive"]


def test_timeout_without_log(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_for("nolog")
    standin.sh(ct, f"tmux new-session -d -s {name} 'sleep 301'")
    proc, r = playbook(tmp_path, [wait_task(vmid=ct, session_name=name, log_path=f"/w/{name}.log", timeout=3)])
    assert proc.returncode != 0
    assert r["verdict"] == "timeout" and not r["log_exists"] and r["session_alive"] and r["pane_pid"] > 1
    assert any("sleep 301" in line for line in r["process_tree"]), r["process_tree"]
    assert r["msg"].startswith(f"Timed out after 3 s waiting for the first line of output in session {name} in container {ct}")
    assert f"log /w/{name}.log does not exist" in r["msg"] and "the session is alive" in r["msg"] and "sleep 301" in r["msg"]


def test_bad_regex_before_any_pct_call(tmp_path: Path) -> None:
    pct_path, calls = counting_pct(tmp_path)
    proc, r = playbook(tmp_path, [wait_task(vmid=CT, session_name="x", pattern="Epoch (", pct_path=pct_path)])
    assert proc.returncode != 0 and not calls.exists()
    assert r["msg"].startswith("Cannot use option pattern 'Epoch ('") and "missing ), unterminated subpattern" in r["msg"]


def test_killed_session_is_vanished(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_for("killed")
    proc, _r = playbook(tmp_path, [launch_task(ct, name, "echo warming up; sleep 300")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    standin.sh(ct, f"kill -9 $(tmux display-message -p -t ={name}: '#{{pane_pid}}')")
    proc, r = playbook(tmp_path, [wait_task(vmid=ct, session_name=name, log_path=f"/w/{name}.log", pattern="Epoch", timeout=600)])
    assert proc.returncode != 0 and r["verdict"] == "died" and r["session_state"] == "vanished" and r["exit_status"] is None
    assert "the session is gone without an exit status" in r["msg"] and r["log_tail"][-1] == "warming up"


def test_unknown_session(ct: int, tmp_path: Path) -> None:
    proc, r = playbook(tmp_path, [wait_task(vmid=ct, session_name="never-launched", log_path="/w/never.log", timeout=600)])
    assert proc.returncode != 0 and r["session_state"] == "absent"
    assert r["msg"].startswith(f"Cannot find session never-launched in container {ct}: no tmux session of that name")


def test_sh_fallback_without_python3(standin: StandinNode, tmp_path: Path) -> None:
    prepare(standin, CT_NOPY)
    standin.sh(CT_NOPY, "for p in /usr/bin/python3*; do mv \"$p\" \"$p.hidden\"; done; ! command -v python3")
    name, crash = name_for("nopy"), name_for("nopycrash")
    proc, r = playbook(tmp_path, [
        launch_task(CT_NOPY, name, "echo 'Epoch 12/100'; sleep 300"),
        wait_task(vmid=CT_NOPY, session_name=name, log_path=f"/w/{name}.log", pattern=r"Epoch \d+/100$", timeout=60)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert r["verdict"] == "started" and r["engine"] == "sh" and r["matched_line"] == "Epoch 12/100"
    assert "has no python3" in proc.stdout + proc.stderr
    proc, r = playbook(tmp_path, [
        launch_task(CT_NOPY, crash, "sleep 1; exit 5"),
        wait_task(vmid=CT_NOPY, session_name=crash, log_path=f"/w/{crash}.log", pattern="Epoch", timeout=600)])
    assert r["verdict"] == "died" and r["exit_status"] == 5 and r["elapsed"] < 300


def test_delegate_to_the_node(ct: int, tmp_path: Path) -> None:
    name = name_for("deleg")
    inventory = tmp_path / "inv.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"trainer": {
        "ansible_connection": "trainops.pct_launch.pct", "pct_vmid": ct, "ansible_python_interpreter": PYTHON}}}}))
    node = {"delegate_to": "localhost", "vars": {"ansible_connection": "local"}}
    tasks = [dict(launch_task(ct, name, "echo 'Epoch 1'; sleep 300"), **node),
             dict(wait_task(vmid=ct, session_name=name, log_path=f"/w/{name}.log", pattern="Epoch"), **node)]
    proc, r = playbook(tmp_path, tasks, hosts="trainer", inventory=str(inventory))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert r["verdict"] == "started" and r["matched_line"] == "Epoch 1"


@pytest.mark.parametrize("job, ok", [("sleep 1; exit 4", False), ("echo Epoch 1; sleep 300", True)])
def test_as_handler_with_flush(ct: int, tmp_path: Path, job: str, ok: bool) -> None:
    name = name_for("handler")
    marker = tmp_path / "after-flush"
    tasks = [dict(launch_task(ct, name, job), notify="Wait for the job"), {"ansible.builtin.meta": "flush_handlers"},
             {"name": "After", "ansible.builtin.copy": {"content": "x", "dest": str(marker)}, "register": "r"}]
    handler = wait_task(vmid="{{ launch.vmid }}", session_name="{{ launch.session_name }}", log_path="{{ launch.log_path }}",
                        pattern="Epoch", timeout=600)
    proc, _r = playbook(tmp_path, tasks, handlers=[dict(handler, name="Wait for the job")])
    assert (proc.returncode == 0) is ok, proc.stdout + proc.stderr
    assert marker.exists() is ok
    if not ok:
        assert "RUNNING HANDLER [Wait for the job]" in proc.stdout and "the job ended with exit status 4" in proc.stdout
