# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""trainops.pct_launch.fleet_run against real containers behind the Proxmox VE stand-in.

Containers 296 and 297 (tmux installed) and 298 (stopped) are hosts of the pct connection; ``localhost`` (the local
connection) and a container host whose Python is not known are in the play too. One ``run_once`` fleet_run task of
tmux_session with ``wait`` starts the job in the running containers and proves it there, from one worker: each
result is the one a per-host task registers (changed, pane_pid, the proof), the stopped container is unreachable with
the pct connection's message, the other hosts are left out with their reason and nothing runs there. Each container's
launch and proof is one ``pct exec`` (a counting wrapper of the stand-in's pct). Run again: nothing changes, no second
job. Check mode starts nothing. Wrong options of fleet_run name the option; wrong options of the module fail each host's
result with the module's message and start nothing. A per-host task of tmux_session_info then sees the sessions.
launch.yml launches a mixed fleet (the containers from one task, localhost per host), and the junit_launch callback
reports a fleet_run task as a test case per container.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
import xml.etree.ElementTree as ET
import uuid
from pathlib import Path

import pytest

from .conftest import STANDIN_PCT, StandinNode
from .playbook_results import (FLEET_LAUNCH_TASK, LAUNCH_TASK, PlayRun, ansible_playbook, container_host, results_by_host, run_playbook, run_tasks,
                               summary_lines)

pytestmark = pytest.mark.integration

RUNNING, STOPPED = (296, 297), 298
TASK = "fleet"
COUNTING_PCT = """#!/usr/bin/python3
import json, os, sys
with open({log!r}, "a", encoding="utf-8") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
os.execv({pct!r}, [{pct!r}, *sys.argv[1:]])
"""


@pytest.fixture(scope="module")
def fleet(standin: StandinNode) -> tuple[int, ...]:
    """Containers 296 and 297 with tmux and /w, container 298 stopped."""
    for vmid in RUNNING:
        standin.create(vmid)
        standin.install_tmux(vmid, "/w")
    standin.create(STOPPED, start=False)
    return RUNNING


def hosts(folder: Path) -> tuple[dict[str, dict[str, t.Any]], Path]:
    """The play's hosts (every container through a counting pct), and the file of pct calls."""
    calls, wrapper = folder / "calls.jsonl", folder / "pct"
    wrapper.write_text(COUNTING_PCT.format(log=str(calls), pct=str(STANDIN_PCT)), encoding="utf-8")
    wrapper.chmod(0o755)
    found = {f"ct{vmid}": container_host(vmid, pct_path=str(wrapper)) for vmid in (*RUNNING, STOPPED)}
    unknown = dict(container_host(RUNNING[0], pct_path=str(wrapper)))
    del unknown["ansible_python_interpreter"]
    found["ct-unknown-python"] = unknown
    found["localhost"] = {"ansible_connection": "local"}
    return found, calls


def fleet_task(module: str, args: dict[str, t.Any], **task: t.Any) -> dict[str, t.Any]:
    """The run_once fleet_run task over every host of the play."""
    return {"name": TASK, "trainops.pct_launch.fleet_run": {"hosts": "{{ ansible_play_hosts_all }}", "module": module, "args": args},
            "run_once": True, **task}


def run(folder: Path, tasks: list[dict[str, t.Any]], *options: str) -> tuple[PlayRun, list[list[str]]]:
    """The play on every host; (its run, the pct calls it made)."""
    folder.mkdir(parents=True)
    inventory, calls = hosts(folder)
    played = run_tasks(folder, inventory, tasks, options=options)
    made = [json.loads(line) for line in calls.read_text(encoding="utf-8").splitlines()] if calls.exists() else []
    return played, made


def launch_args(session: str, command: str, **more: t.Any) -> dict[str, t.Any]:
    """tmux_session's options for a job that proves its start with a step line."""
    return {"session_name": session, "command": command, "log_path": f"/w/{session}.log",
            "wait": {"pattern": r"^step \d+", "timeout": 30}, **more}


def dies_in(standin: StandinNode, vmid: int, session: str, folder: str = "/w") -> str:
    """A job's command that exits 3 in container ``vmid`` (a marker file there) and prints its step line elsewhere."""
    standin.sh(vmid, f"touch {folder}/{session}.dies")
    return f"if [ -e {folder}/{session}.dies ]; then echo boom; exit 3; fi; echo step 1; sleep 300"


def fleet_result(played: PlayRun) -> dict[str, t.Any]:
    """fleet_run's result (it ran once, on the first host)."""
    assert played.proc.returncode == 0, played.proc.stdout[-4000:] + played.proc.stderr[-2000:]
    return played.result(TASK, "ct296")


def test_launch_and_proof_from_one_task(fleet: tuple[int, ...], standin: StandinNode, tmp_path: Path) -> None:
    session = f"fr-{uuid.uuid4().hex[:6]}"
    args = launch_args(session, "echo step 1; sleep 300")
    played, calls = run(tmp_path / "first", [fleet_task("trainops.pct_launch.tmux_session", args)])
    result = fleet_result(played)
    assert result["changed"] is True and result["ok_hosts"] == ["ct296", "ct297"], result
    assert result["failed_hosts"] == result["unreachable_hosts"] == ["ct298"], result
    assert "container 298" in result["results"]["ct298"]["msg"] and "pct start 298" in result["results"]["ct298"]["msg"], result
    assert set(result["left_out"]) == {"localhost", "ct-unknown-python"}, result
    assert "ansible_connection is local" in result["left_out"]["localhost"]
    assert "Python is not known" in result["left_out"]["ct-unknown-python"]
    for vmid in fleet:
        mine = result["results"][f"ct{vmid}"]
        assert mine["changed"] is True and mine["proven"] is True and mine["wait"]["verdict"] == "started", mine
        assert mine["wait"]["matched_line"] == "step 1" and f"container {vmid}" in mine["wait"]["msg"], mine
        pid = standin.sh(vmid, f"tmux display-message -p -t ={session}: '#{{pane_pid}}'").stdout.decode().strip()
        assert int(pid) == mine["pane_pid"], (pid, mine)
    execs = [call for call in calls if call[:1] == ["exec"]]
    assert sorted(call[1] for call in execs if call[1] != str(STOPPED)) == ["296", "297"], calls  # launch + proof: one each

    again, calls = run(tmp_path / "again", [fleet_task("tmux_session", args)])
    result = fleet_result(again)
    assert result["changed"] is False and result["ok_hosts"] == ["ct296", "ct297"], result
    assert all(result["results"][f"ct{vmid}"]["state"] == "running" for vmid in fleet), result
    for vmid in fleet:
        count = standin.sh(vmid, f"tmux list-sessions -F '#{{session_name}}' | grep -cx {session}").stdout.decode().strip()
        assert count == "1", (vmid, count)

    info, _calls = run(tmp_path / "info", [{"name": "info", "trainops.pct_launch.tmux_session_info": {"session_name": session}}],
                       "--limit", "ct296,ct297")
    assert info.proc.returncode == 0, info.proc.stdout[-3000:]
    assert all(info.result("info", f"ct{vmid}")["sessions"][0]["state"] == "running" for vmid in fleet)


def test_check_mode_starts_nothing(fleet: tuple[int, ...], standin: StandinNode, tmp_path: Path) -> None:
    session = f"frc-{uuid.uuid4().hex[:6]}"
    played, _calls = run(tmp_path / "check", [fleet_task("tmux_session", launch_args(session, "echo step 1; sleep 300"))], "--check")
    result = fleet_result(played)
    assert result["changed"] is True and result["ok_hosts"] == ["ct296", "ct297"], result
    for vmid in fleet:
        assert result["results"][f"ct{vmid}"]["changed"] is True
        assert standin.sh(vmid, f"tmux has-session -t ={session}", check=False).returncode != 0
        assert standin.sh(vmid, f"test -e /w/{session}.log", check=False).returncode != 0


def test_a_job_that_dies_fails_its_host_only(fleet: tuple[int, ...], standin: StandinNode, tmp_path: Path) -> None:
    session = f"frd-{uuid.uuid4().hex[:6]}"
    command = dies_in(standin, fleet[0], session)
    played, _calls = run(tmp_path / "dies", [fleet_task("tmux_session", launch_args(session, command))], "--limit", "ct296,ct297")
    result = fleet_result(played)
    assert result["ok_hosts"] == ["ct297"] and result["failed_hosts"] == ["ct296"], result
    failed = result["results"]["ct296"]
    assert failed["changed"] is True and failed["wait"]["verdict"] == "died" and failed["wait"]["exit_status"] == 3, failed
    assert "exit status 3" in failed["msg"] and "boom" in json.dumps(failed["wait"]["log_tail"]), failed


def test_wrong_options(fleet: tuple[int, ...], standin: StandinNode, tmp_path: Path) -> None:
    played, calls = run(tmp_path / "module", [fleet_task("ansible.builtin.command", {})])
    assert played.proc.returncode != 0 and calls == []
    assert "module" in played.result(TASK, "ct296")["msg"], played.result(TASK, "ct296")
    session = f"frw-{uuid.uuid4().hex[:6]}"
    both = {"session_name": session, "command": "true", "argv": ["true"], "log_path": f"/w/{session}.log"}
    played, calls = run(tmp_path / "args", [fleet_task("tmux_session", both)])
    result = fleet_result(played)
    assert result["ok_hosts"] == [] and calls == [], (result, calls)
    assert all("mutually exclusive: command|argv" in result["results"][f"ct{vmid}"]["msg"] for vmid in fleet), result
    assert all(standin.sh(vmid, f"test -e /w/{session}.log", check=False).returncode != 0 for vmid in fleet)


def test_launch_yml_launches_a_fleet_from_one_task(fleet: tuple[int, ...], standin: StandinNode, tmp_path: Path) -> None:
    """launch.yml on the two containers and localhost: the containers from one task, localhost (left out) per host."""
    session = f"frl-{uuid.uuid4().hex[:6]}"
    command = dies_in(standin, fleet[0], session, "/tmp")
    folder = tmp_path / "launch"
    folder.mkdir()
    inventory, calls = hosts(folder)
    chosen = {f"ct{vmid}": inventory[f"ct{vmid}"] for vmid in fleet}
    chosen["localhost"] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    job = {"job_session_name": session, "job_log_path": f"/tmp/{session}.log", "job_prepare": False, "job_wait_pattern": r"^step \d+",
           "job_command": command}
    try:
        proc, results = run_playbook(folder, "launch.yml", chosen, job)
        assert proc.returncode == 2, proc.stdout[-5000:]
        one = results_by_host(results, FLEET_LAUNCH_TASK)["ct296"]
        assert one["ok_hosts"] == ["ct297"] and one["failed_hosts"] == ["ct296"] and list(one["left_out"]) == ["localhost"], one
        per_host = [host for host, result in results_by_host(results, LAUNCH_TASK).items() if result["status"] != "skipped"]
        assert per_host == ["localhost"], per_host  # the per-host launch: only the host left out
        lines = summary_lines(results)
        assert lines[0] == f"{session}: 2 of 3 containers run, failed: ct296", lines
        assert "ct296 (CT 296 on localhost): failed: Job did not start" in lines[1] and "exit status 3" in lines[1], lines
        assert lines[2:] == ["ct297 (CT 297 on localhost): started", "localhost: started"], lines
        assert "fatal: [ct296]" in proc.stdout and "fatal: [ct297]" not in proc.stdout
        made = [json.loads(line) for line in calls.read_text(encoding="utf-8").splitlines()]
        assert [call[1] for call in made if call[:1] == ["exec"]].count("297") == 1, made  # launch and proof: one pct exec

        again, results = run_playbook(folder, "launch.yml", {name: chosen[name] for name in ("ct297", "localhost")}, job)
        assert again.returncode == 0, again.stdout[-4000:]
        assert summary_lines(results)[1:] == ["ct297 (CT 297 on localhost): already running", "localhost: already running"]
        assert "changed=0" in again.stdout.split("PLAY RECAP")[-1]
    finally:
        subprocess.run(["tmux", "kill-session", "-t", f"={session}"], check=False, capture_output=True)


def test_junit_report_has_a_case_per_container(fleet: tuple[int, ...], standin: StandinNode, tmp_path: Path) -> None:
    """The junit_launch callback reports a fleet_run task as a test case per container: passed, failed, skipped (left out)."""
    session = f"frj-{uuid.uuid4().hex[:6]}"
    command = dies_in(standin, fleet[0], session)
    folder = tmp_path / "junit"
    folder.mkdir()
    inventory, _calls = hosts(folder)
    (folder / "inventory.json").write_text(json.dumps({"all": {"hosts": inventory}}), encoding="utf-8")
    play = [{"hosts": "all", "gather_facts": False, "tasks": [fleet_task("tmux_session", launch_args(session, command))]}]
    (folder / "play.yml").write_text(json.dumps(play), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CALLBACKS_ENABLED="trainops.pct_launch.junit_launch", JUNIT_OUTPUT_DIR=str(folder / "junit"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ansible_playbook(), "-i", str(folder / "inventory.json"), str(folder / "play.yml")], capture_output=True,
                          text=True, env=env, timeout=300, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    (report,) = (folder / "junit").glob("*.xml")
    cases = {case.get("name", "").split("]")[0].lstrip("["): case for case in ET.parse(report).getroot().iter("testcase")}
    assert set(cases) == {"ct296", "ct297", "ct298", "ct-unknown-python", "localhost"}, sorted(cases)
    failure = cases["ct296"].find("failure")
    assert failure is not None and "exit status 3" in str(failure.get("message")), ET.tostring(cases["ct296"])
    assert cases["ct297"].find("failure") is None and cases["ct297"].find("skipped") is None
    assert cases["ct298"].find("error") is not None and cases["localhost"].find("skipped") is not None
