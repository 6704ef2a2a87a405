# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""trainops.pct_launch.tmux_session_info against real containers behind the Proxmox VE stand-in.

Both modules run on container hosts reached with the collection's pct connection
(``playbook_results.container_host``, pipelined), so they run inside the container. Container 254
(tmux installed with apt) gets sessions launched by trainops.pct_launch.tmux_session (running,
finished, and one whose wrapper was killed: vanished), a plain tmux session, and is asked about a
session that never existed; container 255 has no tmux at all, then tmux without a server. Each
report is exactly one ``pct exec``, counted with a wrapper of the stand-in's pct given as the host
variable ``pct_path``.
"""

from __future__ import annotations

import json
import time
import typing as t
import uuid
from pathlib import Path

import pytest

from .conftest import STANDIN_PCT, StandinNode
from .playbook_results import container_host, run_tasks

pytestmark = pytest.mark.integration

CT, CT_NO_TMUX = 254, 255
REPORT = "report"
# The pct_path wrapper: appends each call's arguments to a log, then runs the stand-in's pct.
# The connection runs pct with a clean environment, so the log's path is written into the wrapper.
COUNTING_PCT = """#!/usr/bin/python3
import json, os, sys
with open({log!r}, "a", encoding="utf-8") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
os.execv({pct!r}, [{pct!r}, *sys.argv[1:]])
"""


def host_name(vmid: int) -> str:
    """The inventory name of the container host."""
    return f"ct{vmid}"


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """Container 254 with tmux installed."""
    standin.create(CT)
    standin.install_tmux(CT, "/w")
    return CT


def launch(tmp_path: Path, vmid: int, jobs: dict[str, str]) -> None:
    """Start each job (session name: command) with trainops.pct_launch.tmux_session on the container, log /w/NAME.log."""
    tasks = [{"name": f"launch {name}", "trainops.pct_launch.tmux_session": {"session_name": name, "command": command, "log_path": f"/w/{name}.log"}}
             for name, command in jobs.items()]
    run = run_tasks(tmp_path / "launch", {host_name(vmid): container_host(vmid)}, tasks)
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    for name in jobs:
        assert run.result(f"launch {name}", host_name(vmid))["changed"] is True


def info(tmp_path: Path, vmid: int, **args: t.Any) -> tuple[dict[str, t.Any], int]:
    """Run the module on the container (check mode); returns the result and the pct exec count of the task."""
    folder = tmp_path / f"info-{uuid.uuid4().hex[:6]}"
    folder.mkdir(parents=True)
    calls, wrapper = folder / "calls.jsonl", folder / "pct"
    wrapper.write_text(COUNTING_PCT.format(log=str(calls), pct=str(STANDIN_PCT)), encoding="utf-8")
    wrapper.chmod(0o755)
    run = run_tasks(folder, {host_name(vmid): container_host(vmid, pct_path=str(wrapper))},
                    [{"name": REPORT, "trainops.pct_launch.tmux_session_info": args, "check_mode": True}])
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    made = [json.loads(line) for line in calls.read_text(encoding="utf-8").splitlines()] if calls.exists() else []
    assert all(call[:2] == ["exec", str(vmid)] for call in made), made
    return run.result(REPORT, host_name(vmid)), len(made)


def test_sessions_in_every_state(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    run, fin, gone, plain = (f"{kind}-{tag}" for kind in ("run", "fin", "gone", "plain"))
    launch(tmp_path, ct, {run: "for i in $(seq 1 30); do echo step $i; done; sleep 300", fin: "echo done; exit 2",
                          gone: "echo working; sleep 300"})
    standin.sh(ct, f"tmux new-session -d -s {plain} 'sleep 300'; kill -9 $(tmux display-message -p -t ={gone}: '#{{pane_pid}}')")
    time.sleep(1)
    r, count = info(tmp_path, ct, lines=5)
    assert count == 1 and r["changed"] is False and r["tmux"] == "running", (count, r)
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
    r, count = info(tmp_path, ct, session_name=name, lines=2)
    assert count == 1 and [s["name"] for s in r["sessions"]] == [name], (count, r)
    assert r["session"]["state"] == "finished" and r["session"]["exit_status"] == 0
    assert r["session"]["log_tail"][0] == "bye" and r["session"]["log_path"] == f"/w/{name}.log"


def test_absent_session(ct: int, tmp_path: Path) -> None:
    r, count = info(tmp_path, ct, session_name="never-was", log_path="/w/never-was.log")
    assert count == 1 and r["session"]["state"] == "absent" and r["session"]["log_size"] is None, (count, r)


def test_no_tmux_is_not_an_error(standin: StandinNode, tmp_path: Path) -> None:
    standin.create(CT_NO_TMUX)
    r, count = info(tmp_path, CT_NO_TMUX)
    assert count == 1 and r["tmux"] == "missing" and r["sessions"] == [] and r["status"] == "ok", (count, r)
    r, _count = info(tmp_path, CT_NO_TMUX, session_name="train")
    assert r["session"]["state"] == "absent" and r["status"] == "ok", r


def test_no_server_is_not_an_error(standin: StandinNode, tmp_path: Path) -> None:
    """tmux installed in the container but no server there: no_server; once a session runs there, it is reported."""
    vmid = CT_NO_TMUX
    standin.create(vmid)
    standin.install_tmux(vmid)
    assert standin.sh(vmid, "tmux list-sessions", check=False).returncode != 0, "a tmux server runs in the fresh container"
    r, count = info(tmp_path, vmid)
    assert count == 1 and r["tmux"] == "no_server" and r["sessions"] == [] and r["status"] == "ok", (count, r)
    name = f"lone-{uuid.uuid4().hex[:6]}"
    standin.sh(vmid, 'tmux new-session -d -s "$1" "sleep 300"', name)
    r, _count = info(tmp_path, vmid)
    assert r["tmux"] == "running" and [(s["name"], s["state"]) for s in r["sessions"]] == [(name, "running")], r
