# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A GPU job ended by its GPU: the node's Xid lines named in wait_for_log, tmux_session_info and status.yml (issue 35).

The job runs in a real stand-in container on the stand-in's GPUs (nvidia-smi with PCI bus ids); the node's kernel log
is the stand-in's journalctl (``tools/pve_standin/node_kernel_log.py``), which the test fills with the lines the NVIDIA
driver logs, in journalctl's format, while the job runs. The controller reads them through the pct connection's
``node_command``, as ``gpu_info`` does. Job ``fell`` (GPU 0) gets an Xid 79 on its GPU during its attempt; job
``plain`` (GPU 1) fails with an Xid of another GPU in its attempt and one of its own GPU from before it started.

VMID 760.
"""

from __future__ import annotations

import time
import typing as t
from pathlib import Path

import pytest

from .conftest import StandinNode
from .gpu_standin import gpu_entries, install_in_container, install_node_kernel_log, xid_line
from .playbook_results import container_host, run_playbook, run_tasks

pytestmark = pytest.mark.integration

CT = 760
HOST = f"ct{CT}"
GPUS = gpu_entries(2)
# the job waits for the test's signal, then fails as a job whose GPU fell off the bus does
COMMAND = ("echo 'Epoch 1/9'; while [ ! -e /w/{name}.fault ]; do sleep 0.2; done; "
           "echo 'RuntimeError: CUDA error: unspecified launch failure'; exit 1")


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> t.Iterator[int]:
    """760 with tmux, /w and the stand-in's two GPUs."""
    standin.create(CT)
    standin.install_tmux(CT, "/w")
    install_in_container(standin, CT, GPUS)
    yield CT
    standin.sh(CT, "tmux kill-server 2>/dev/null; rm -rf /run/trainops; true", check=False)


def _start(tmp_path: Path, name: str, gpu: int) -> None:
    task = {"name": "start", "trainops.pct_launch.tmux_session": {
        "session_name": name, "command": COMMAND.format(name=name), "log_path": f"/w/{name}.log", "gpus": [gpu]}}
    started = run_tasks(tmp_path, {HOST: container_host(CT)}, [task]).result("start", HOST)
    assert started["changed"] and started["state"] == "running", started


def _wait(tmp_path: Path, name: str, log_argv: list[str]) -> dict[str, t.Any]:
    task = {"name": "wait", "trainops.pct_launch.wait_for_log": {
        "session_name": name, "wait_until": "finished", "timeout": 60, "node_kernel_log": log_argv}}
    return run_tasks(tmp_path, {HOST: container_host(CT)}, [task]).result("wait", HOST)


def test_an_xid_79_during_the_attempt_is_the_cause_of_the_end(tmp_path: Path, standin: StandinNode, ct: int) -> None:
    """wait_for_log, tmux_session_info and status.yml name Xid 79 of the job's GPU; another job's end is its own."""
    del ct
    before = time.time() - 120  # an Xid of GPU 1 before job plain started: not plain's
    log_argv = install_node_kernel_log(tmp_path / "node-log", [xid_line(before, GPUS[1], 13, "Graphics Exception: ESR 0x404600=0x80000001")])
    _start(tmp_path, "fell", 0)
    _start(tmp_path, "plain", 1)
    time.sleep(1.5)  # the Xid comes after the attempts' starts (the exit record's times have seconds)
    with open(tmp_path / "node-log" / "kernel.log", "a", encoding="utf-8") as log:
        log.write(xid_line(time.time(), GPUS[0], 79, "GPU has fallen off the bus.") + "\n")
    standin.sh(CT, "touch /w/fell.fault /w/plain.fault")

    fell = _wait(tmp_path, "fell", log_argv)
    print("wait_for_log fell:", fell["msg"])
    assert fell["status"] == "failed" and fell["cause"] == "gpu_xid" and fell["job_cause"] == "exit_status", fell
    assert [(x["xid"], x["pci_bus_id"], x["name"]) for x in fell["xid"]] == [(79, GPUS[0]["pci_bus_id"], "GPU has fallen off the bus")]
    assert fell["gpu_bus_ids"] == [GPUS[0]["pci_bus_id"]] and fell["attempt_started_at"], fell
    assert "exit status 1" in fell["msg"] and "cause gpu_xid: the job's GPU 00000000:07:00.0 logged at " in fell["msg"]
    assert ": Xid 79 (GPU has fallen off the bus): the driver cannot reach the GPU" in fell["msg"]
    assert "action: reboot the node" in fell["msg"] and "follow NVIDIA's action for the Xid" in fell["msg"], fell["msg"]

    plain = _wait(tmp_path, "plain", log_argv)
    assert plain["status"] == "failed" and plain["cause"] == "exit_status" and "xid" not in plain and "gpu_xid" not in plain["msg"], plain

    info = run_tasks(tmp_path, {HOST: container_host(CT)}, [{"name": "info", "trainops.pct_launch.tmux_session_info": {
        "node_kernel_log": log_argv}}]).result("info", HOST)
    sessions = {item["name"]: item for item in info["sessions"]}
    assert sessions["fell"]["cause"] == "gpu_xid" and sessions["fell"]["reason"].startswith("gpu_xid: the job's GPU 00000000:07:00.0 logged at ")
    assert [x["xid"] for x in sessions["fell"]["xid"]] == [79] and sessions["plain"]["cause"] == "exit_status", sessions

    status, _results = run_playbook(tmp_path, "status.yml", {HOST: container_host(CT)},
                                    {"job_hosts": HOST, "job_session_name": "fell", "job_node_kernel_log": log_argv})
    row = [line for line in status.stdout.splitlines() if "fell" in line and f"CT {CT}" in line and "gpu_xid" in line]
    assert status.returncode == 0 and row and " failed " in row[0] and "Xid 79 (GPU has fallen off the bus)" in row[0], status.stdout[-3000:]
    shown, _results = run_playbook(tmp_path, "history.yml", {HOST: container_host(CT)}, {"job_hosts": HOST, "job_node_kernel_log": log_argv})
    rows = {name: [line for line in shown.stdout.splitlines() if f" {name} " in line and f"CT {CT}" in line] for name in ("fell", "plain")}
    assert shown.returncode == 0 and rows["fell"] and "gpu_xid: the job's GPU 00000000:07:00.0 logged at " in rows["fell"][-1], shown.stdout[-3000:]
    assert rows["plain"] and "gpu_xid" not in rows["plain"][-1], shown.stdout[-3000:]


def test_an_unreadable_kernel_log_is_a_warning_and_the_job_s_own_cause_stays(tmp_path: Path, standin: StandinNode, ct: int) -> None:
    """The node's journalctl refuses (an unknown option): the failure is the job's, with a warning saying why."""
    del ct
    log_argv = install_node_kernel_log(tmp_path / "node-log", []) + ["--no-such-option"]
    _start(tmp_path, "unread", 0)
    standin.sh(CT, "touch /w/unread.fault")
    unread = _wait(tmp_path, "unread", log_argv)
    assert unread["status"] == "failed" and unread["cause"] == "exit_status", unread
    assert any("Cannot read the node's kernel log for Xid errors of the job's GPUs: " in w and "unrecognized option" in w
               for w in unread.get("warnings", [])), unread.get("warnings")
