# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Backup windows (issue 33, part 4) on stand-in nodes: the preflight reads the node's backup jobs and warns about
those in mode stop or suspend that cover the container and are due before ``job_time_limit`` is up (within 24 h
without one); the launch goes on, and its report names them.

The stand-in keeps its ``/etc/pve`` under its state root (``nodes/<node>/lxc/<vmid>.conf``), so its ``jobs.cfg`` and
``vzdump.cron`` are written beside ``nodes/`` (tools/pve_standin/standin_backup.py) and the preflight is pointed there
with ``job_node_pve_dir`` (``backup_window_info``'s ``pve_dir``). Nothing runs the jobs (the stand-in has no vzdump).

* a node of its own (state root in a temporary folder, node name ``testnode``, CT 740 with tmux): ``launch.yml`` with a
  stop-mode job due in about 2 h and ``job_time_limit`` 3 h warns (job ID, schedule, mode, when due) and starts the
  job; the report says ``backup ahead``; with a 1-hour limit, or a snapshot or excluded job, nothing is said;
  ``vzdump.cron`` of an older node is read as well; without ``job_node_pve_dir`` (no ``/etc/pve`` here) nothing is
  checked and nothing said;
* a remote node (pve-a, CT 741): the node is asked once, over the pct connection's ssh.

Schedules are written in the node's local time (this machine's: the stand-in node is the machine itself).
"""

from __future__ import annotations

import sys
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import STANDIN_DIR, StandinNode, knob_pct, require_standin
from .playbook_results import container_host, report_msg, run_playbook, run_tasks, task_results

pytestmark = pytest.mark.integration

CT, REMOTE_CT = 740, 741
HOST = f"ct{CT}"
NODE_NAME = "testnode"
ASK = "Ask the node which backup jobs stop or suspend the container during the job"
WARN = "Warn about backups that stop or suspend the container during the job"
HOUR = 3600


def _tools() -> t.Any:
    """tools/pve_standin/standin_backup.py (the stand-in's folder is no package), as conftest.py imports its modules."""
    if str(STANDIN_DIR) not in sys.path:
        sys.path.insert(0, str(STANDIN_DIR))
    import standin_backup  # pylint: disable=import-outside-toplevel,import-error
    return standin_backup


def at(hours: float) -> str:
    """``HH:MM`` of the node's local time ``hours`` from now (a daily calendar event)."""
    return time.strftime("%H:%M", time.localtime(time.time() + hours * HOUR))


class Node(t.NamedTuple):
    """A stand-in node of its own with CT 740, and the inventory variables that reach it."""

    standin: StandinNode
    root: Path
    host: dict[str, t.Any]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """State root in a temporary folder (``node``: testnode), CT 740 running with tmux; destroyed at the end."""
    require_standin()
    folder = tmp_path_factory.mktemp("backup-node")
    root = folder / "root"
    root.mkdir()
    (root / "node").write_text(f"{NODE_NAME}\n", encoding="utf-8")
    standin = StandinNode(root)
    standin.create(CT)
    standin.install_tmux(CT, "/w")
    host = container_host(CT, pct_path=knob_pct(folder, root=str(root)))
    yield Node(standin, root, host)
    _tools().remove_backup_jobs(root)
    standin.destroy_all()


@pytest.fixture(autouse=True)
def no_jobs_left(node: Node) -> Iterator[None]:
    """Each test writes the jobs it needs."""
    yield
    _tools().remove_backup_jobs(node.root)


def _job(name: str, **more: t.Any) -> dict[str, t.Any]:
    return dict({"job_session_name": name, "job_log_path": f"/w/{name}.log", "job_prepare": False,
                 "job_command": "echo 'step 1 loss 0.5'; sleep 600", "job_wait_pattern": "step [0-9]+", "job_wait_timeout": 60},
                **more)


def _ask(tmp_path: Path, host: dict[str, t.Any], pve_dir: str | None, time_limit: float = 0, *options: str) -> t.Any:
    args: dict[str, t.Any] = {"time_limit": time_limit}
    if pve_dir is not None:
        args["pve_dir"] = pve_dir
    return run_tasks(tmp_path, {"ct": host}, [{"name": "backups", "trainops.pct_launch.backup_window_info": args}], options=options)


def test_launch_warns_about_a_stop_backup_within_the_time_limit(tmp_path: Path, node: Node) -> None:
    tools = _tools()
    stop_at, frozen_at, snap_at = at(2), at(2.5), at(1)
    tools.write_jobs_cfg(node.root, [
        tools.BackupJob("backup-stop-740", stop_at, "stop", vmids=(CT,), node=NODE_NAME),
        tools.BackupJob("backup-suspend-others", frozen_at, "suspend", exclude=(CT,)),
        tools.BackupJob("backup-snapshot-all", snap_at, "snapshot", all=True)])
    proc, results = run_playbook(tmp_path, "launch.yml", {HOST: node.host},
                                 _job("backupwin", job_time_limit=3 * HOUR, job_node_pve_dir=str(node.root)))
    assert proc.returncode == 0, proc.stdout[-4000:]
    [asked] = task_results(results, ASK, HOST)
    assert asked["checked"] is True and asked["node"] == NODE_NAME and asked["horizon"] == 3 * HOUR, asked
    assert [(job["id"], job["in_window"]) for job in asked["jobs"]] == [("backup-stop-740", True), ("backup-snapshot-all", False)]
    [window] = asked["windows"]
    assert 2 * HOUR - 300 <= window["due_in"] <= 2 * HOUR + 60, window
    flat = " ".join(proc.stdout.split())
    assert (f"Backup job backup-stop-740 stops CT {CT} in " in flat and f"mode stop, schedule '{stop_at}'" in flat
            and "before the job's time_limit of 3 h is up" in flat and f"next due {window['next_due_local']}" in flat), proc.stdout[-4000:]
    assert f"CT {CT}: backups that stop or suspend the container during the job (a warning; the launch goes on)" in flat
    report = report_msg(results, HOST)
    assert report is not None and "(backup ahead: backup job backup-stop-740 stops it at " in report, report
    assert node.standin.sh(CT, "tmux has-session -t =backupwin", check=False).returncode == 0
    node.standin.sh(CT, "tmux kill-session -t =backupwin", check=False)


@pytest.mark.parametrize(("time_limit", "warned"), [(1 * HOUR, False), (2 * HOUR + 300, True), (0, True)])
def test_the_time_limit_decides(tmp_path: Path, node: Node, time_limit: float, warned: bool) -> None:
    tools = _tools()
    tools.write_jobs_cfg(node.root, [tools.BackupJob("backup-stop-740", at(2), "stop", vmids=(CT,))])
    result = _ask(tmp_path, node.host, str(node.root), time_limit).result("backups", "ct")
    assert bool(result["windows"]) is warned, result


def test_what_is_no_window(tmp_path: Path, node: Node) -> None:
    tools = _tools()
    tools.write_jobs_cfg(node.root, [
        tools.BackupJob("backup-snapshot", at(1), "snapshot", vmids=(CT,)),
        tools.BackupJob("backup-excluded", at(1), "stop", exclude=(CT,)),
        tools.BackupJob("backup-other-node", at(1), "stop", all=True, node="pve-x"),
        tools.BackupJob("backup-disabled", at(1), "suspend", vmids=(CT,), enabled=False)])
    proc, results = run_playbook(tmp_path, "launch.yml", {HOST: node.host}, _job("nowin", job_node_pve_dir=str(node.root)))
    assert proc.returncode == 0, proc.stdout[-4000:]
    [asked] = task_results(results, ASK, HOST)
    assert asked["windows"] == [] and asked["problems"] == [], asked
    assert [job["id"] for job in asked["jobs"]] == ["backup-snapshot", "backup-disabled"]
    assert "backups that stop or suspend" not in proc.stdout and all(r.get("status") == "skipped" for r in task_results(results, WARN, HOST))
    node.standin.sh(CT, "tmux kill-session -t =nowin", check=False)


def test_vzdump_cron_of_an_older_node(tmp_path: Path, node: Node) -> None:
    tools = _tools()
    due = time.localtime(time.time() + 2 * HOUR)
    day = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")[due.tm_wday]
    tools.write_vzdump_cron(node.root, [(due.tm_min, due.tm_hour, day, tools.BackupJob("cron", "", "suspend", vmids=(CT,)))])
    [window] = _ask(tmp_path, node.host, str(node.root)).result("backups", "ct")["windows"]
    assert window["source"] == f"line 6 of {node.root}/vzdump.cron" and window["mode"] == "suspend"
    assert window["schedule"] == f"{day} {due.tm_hour:02d}:{due.tm_min:02d}" and window["message"].startswith(
        f"The backup job on line 6 of {node.root}/vzdump.cron suspends CT {CT} in "), window


def test_without_the_nodes_pve_dir_nothing_is_checked(tmp_path: Path, node: Node) -> None:
    """The stand-in machine has no /etc/pve: not Proxmox VE, no warning (the default of every other test)."""
    result = _ask(tmp_path, node.host, None).result("backups", "ct")
    assert result["checked"] is False and result["problems"] == [] and "/etc/pve" in result["reason"], result


def test_a_remote_node_is_asked_once_over_the_connections_ssh(tmp_path: Path, remote_nodes: t.Any) -> None:
    tools = _tools()
    pve_a = remote_nodes["pve-a"]
    vmid = remote_nodes.create("pve-a", REMOTE_CT)
    tools.write_jobs_cfg(pve_a.state_root, [tools.BackupJob("backup-remote", at(3), "stop", pool="gpu")])
    (pve_a.state_root / "user.cfg").write_text(f"user:root@pam:1:0::::::\npool:gpu::{vmid}::\n", encoding="utf-8")
    try:
        host = container_host(vmid, pct_node="pve-a", pct_ssh_args=f"-F {remote_nodes.ssh_config}")
        run = _ask(tmp_path, host, "/var/lib/pve-standin", 0, "-vvv")
        result = run.result("backups", "ct")
    finally:
        tools.remove_backup_jobs(pve_a.state_root)
        (pve_a.state_root / "user.cfg").unlink(missing_ok=True)
    [window] = result["windows"]
    assert result["node"] == "pve-a" and window["selects"] == "pool gpu" and window["id"] == "backup-remote", result
    node_calls = [line for line in run.proc.stdout.splitlines() if " NODE EXEC " in line]
    assert len(node_calls) == 1 and " pve-a -- " in node_calls[0] and "python3 - --pve-dir /var/lib/pve-standin" in node_calls[0], node_calls
