# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""trainops.pct_launch.tmux_session_info against real containers behind the Proxmox VE stand-in.

Container 254 (tmux installed with apt) gets sessions launched by trainops.pct_launch.tmux_session
(running, finished, and one whose wrapper was killed: vanished), a plain tmux session, and is asked
about a session that never existed; container 255 has no tmux at all. Each report is exactly one ``pct exec``, counted with the
stand-in's ``call_log`` knob.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import typing as t
import uuid
from pathlib import Path

import pytest

from .conftest import STANDIN_PCT, StandinNode

pytestmark = pytest.mark.integration

CT, CT_NO_TMUX = 254, 255
PYTHON = "/usr/bin/python3"
INSTALL_TMUX = ("command -v tmux >/dev/null || { apt-get install -y -q tmux >/dev/null 2>&1 || "
                "{ apt-get update -q >/dev/null && apt-get install -y -q tmux >/dev/null; }; }; tmux -V")


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """Container 254 with tmux installed."""
    standin.create(CT)
    out = standin.sh(CT, INSTALL_TMUX + "; mkdir -p /w", check=False, timeout=600)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return CT


def launch(tmp_path: Path, vmid: int, jobs: dict[str, str]) -> None:
    """Start each job (session name: command) with trainops.pct_launch.tmux_session, log /w/NAME.log."""
    tasks = [{"trainops.pct_launch.tmux_session": {"vmid": vmid, "session_name": name, "command": command,
                                                   "log_path": f"/w/{name}.log"}} for name, command in jobs.items()]
    path = tmp_path / f"launch-{uuid.uuid4().hex[:6]}.yml"
    path.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    program = Path(sys.executable).with_name("ansible-playbook")
    proc = subprocess.run([str(program), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={PYTHON}", str(path)],
                          capture_output=True, text=True, env=dict(os.environ, ANSIBLE_NOCOLOR="1"), timeout=600,
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def info(tmp_path: Path, **args: t.Any) -> tuple[subprocess.CompletedProcess[str], dict[str, t.Any], int]:
    """Run the module through ansible-playbook (check mode); returns the process, the result, the pct exec count."""
    calls = tmp_path / f"calls-{uuid.uuid4().hex[:6]}.jsonl"
    wrapper = tmp_path / "pct"
    wrapper.write_text(f'#!/bin/sh\nexport PVE_STANDIN_CALL_LOG="$CALLS"\nexec {shlex.quote(str(STANDIN_PCT))} "$@"\n')
    wrapper.chmod(0o755)
    out = tmp_path / f"r-{uuid.uuid4().hex[:6]}.json"
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"trainops.pct_launch.tmux_session_info": dict(args, pct_path=str(wrapper)), "register": "r", "check_mode": True},
        {"ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(out)}}]}]
    path = tmp_path / f"play-{uuid.uuid4().hex[:6]}.yml"
    path.write_text(json.dumps(play))
    program = Path(sys.executable).with_name("ansible-playbook")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", CALLS=str(calls))
    proc = subprocess.run([str(program), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={PYTHON}", str(path)],
                          capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    count = sum(1 for line in calls.read_text().splitlines() if '"exec"' in line) if calls.exists() else 0
    return proc, json.loads(out.read_text()), count


def test_sessions_in_every_state(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    run, fin, gone, plain = (f"{kind}-{tag}" for kind in ("run", "fin", "gone", "plain"))
    launch(tmp_path, ct, {run: "for i in $(seq 1 30); do echo step $i; done; sleep 300", fin: "echo done; exit 2",
                          gone: "echo working; sleep 300"})
    standin.sh(ct, f"tmux new-session -d -s {plain} 'sleep 300'; kill -9 $(tmux display-message -p -t ={gone}: '#{{pane_pid}}')")
    time.sleep(1)
    _proc, r, count = info(tmp_path, vmid=ct, lines=5)
    assert count == 1 and r["changed"] is False and r["tmux"] == "running"
    by_name = {s["name"]: s for s in r["sessions"]}
    assert by_name[run]["state"] == "running" and by_name[run]["managed"] and by_name[run]["pane_pid"] > 1
    assert by_name[run]["log_tail"] == [f"step {i}" for i in range(26, 31)]
    assert by_name[run]["command"] == "for i in $(seq 1 30); do echo step $i; done; sleep 300"
    assert by_name[run]["started_at"].endswith("Z") and by_name[run]["log_path"] == f"/w/{run}.log"
    assert by_name[fin]["state"] == "finished" and by_name[fin]["exit_status"] == 2 and by_name[fin]["ended_at"]
    assert by_name[fin]["log_tail"][-2] == "done" and by_name[fin]["pane_pid"] is None
    assert by_name[fin]["log_tail"][-1].startswith(f"### trainops.pct_launch: session={fin} exit_status=2")
    assert by_name[gone]["state"] == "vanished" and by_name[gone]["exit_status"] is None and by_name[gone]["log_size"] > 0
    assert by_name[plain]["state"] == "running" and not by_name[plain]["managed"] and "sleep 300" in by_name[plain]["command"]


def test_one_session(ct: int, tmp_path: Path) -> None:
    name = f"one-{uuid.uuid4().hex[:6]}"
    launch(tmp_path, ct, {name: "echo bye"})
    time.sleep(1)
    _proc, r, count = info(tmp_path, vmid=ct, session_name=name, lines=2)
    assert count == 1 and [s["name"] for s in r["sessions"]] == [name]
    assert r["session"]["state"] == "finished" and r["session"]["exit_status"] == 0
    assert r["session"]["log_tail"][0] == "bye" and r["session"]["log_path"] == f"/w/{name}.log"


def test_absent_session(ct: int, tmp_path: Path) -> None:
    _proc, r, count = info(tmp_path, vmid=ct, session_name="never-was", log_path="/w/never-was.log")
    assert count == 1 and r["session"]["state"] == "absent" and r["session"]["log_size"] is None


def test_no_tmux_is_not_an_error(standin: StandinNode, tmp_path: Path) -> None:
    standin.create(CT_NO_TMUX)
    _proc, r, count = info(tmp_path, vmid=CT_NO_TMUX)
    assert count == 1 and r["tmux"] == "missing" and r["sessions"] == []
    _proc, r, _count = info(tmp_path, vmid=CT_NO_TMUX, session_name="train")
    assert r["session"]["state"] == "absent"


def test_no_server_is_not_an_error(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    vmid = CT_NO_TMUX
    standin.create(vmid)
    standin.sh(vmid, INSTALL_TMUX, timeout=600)
    _proc, r, _count = info(tmp_path, vmid=vmid)
    assert r["tmux"] == "no_server" and r["sessions"] == []
