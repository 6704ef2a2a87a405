# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""GPU health on real stand-in containers (issue 35): driver drift and Xid errors from the node, and the GPU idle watchdog.

Everything runs through ansible-playbook and the collection's pct connection, as users run it:

* ``gpu_info`` asks the node (``node_command``) for its driver's versions, read under ``node_root`` from a fake driver
  tree (the loaded module's ``sys/module/nvidia/version`` against the installed ``libnvidia-ml.so.1``'s target), and
  for the ``NVRM: Xid`` lines of its kernel log, read with ``node_kernel_log`` from the journalctl stand-in
  (tools/pve_standin/node_kernel_log.py) and named per GPU of the node's nvidia-smi stand-in;
* a job of ``tmux_session`` with ``gpus`` and ``gpu_idle_timeout``, printing all the while, is stopped as ``stalled`` by
  its supervisor when a GPU of the container's nvidia-smi stand-in reports 0 %, and runs to its end when its GPUs work;
  with ``stall_action: record`` the stall is only recorded, and ends once the idle GPU works again.

VMID: 755 (with tmux, four stand-in GPUs).
"""

from __future__ import annotations

import json
import time
import typing as t
import uuid
from pathlib import Path

import pytest

from .conftest import StandinNode
from .gpu_standin import GPU_UUIDS, gpu_entries, install_driver_tree, install_in_container, install_node_kernel_log, install_node_smi
from .gpu_standin import set_container_utilization, xid_line
from .playbook_results import PlayRun, container_host, run_tasks

pytestmark = pytest.mark.integration

CT = 755
HOST = f"ct{CT}"
FELL_OFF = "GPU has fallen off the bus."
# A job that prints a line every half second for 20 s and ends well: the log watchdog never fires, only the GPUs' can.
BUSY_PRINTER = 'for i in $(seq 40); do echo "step $i"; sleep 0.5; done; echo all steps done'
IDLE_TIMEOUT = 6


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> t.Iterator[int]:
    """Container 755 with tmux and /w, seeing the node's four stand-in GPUs (device files, libraries, nvidia-smi)."""
    standin.create(CT)
    standin.install_tmux(CT, "/w")
    install_in_container(standin, CT, gpu_entries(4))
    yield CT
    standin.sh(CT, "tmux kill-server 2>/dev/null; rm -rf /run/trainops; true", check=False)


@pytest.fixture()
def node_smi(tmp_path: Path, ct: int) -> Path:
    """The node's nvidia-smi with the same four GPUs."""
    del ct
    return install_node_smi(tmp_path / "node-smi", gpu_entries(4))


def play(tmp_path: Path, tasks: list[dict[str, t.Any]]) -> PlayRun:
    return run_tasks(tmp_path, {HOST: container_host(CT)}, tasks, timeout=600)


def gpu_info(tmp_path: Path, program: Path, **args: t.Any) -> dict[str, t.Any]:
    """gpu_info on the container, its node asked with ``program`` as its nvidia-smi."""
    run = play(tmp_path, [{"name": "gpu", "trainops.pct_launch.gpu_info": dict(args, node_nvidia_smi=str(program))}])
    result = run.result("gpu", HOST)
    assert not result.get("failed"), (result, run.proc.stdout[-3000:])
    return result


def drift_warnings(result: dict[str, t.Any]) -> list[str]:
    return [w for w in result.get("warnings") or [] if "NVIDIA driver on node" in w]


def xid_warnings(result: dict[str, t.Any]) -> list[str]:
    return [w for w in result.get("warnings") or [] if " logged Xid " in w]


def test_a_driver_upgraded_since_the_node_booted_is_drift_with_a_warning(tmp_path: Path, node_smi: Path) -> None:
    """Loaded module 550.54.14, installed 550.90.07: drift, named in a warning; the same versions: none."""
    root = install_driver_tree(tmp_path / "upgraded", loaded="550.54.14", installed="550.90.07")
    result = gpu_info(tmp_path, node_smi, node_root=str(root), xid_hours=0)
    assert result["driver"] == {"loaded": "550.54.14", "installed": "550.90.07", "module_installed": None, "drift": True}, result["driver"]
    warnings = drift_warnings(result)
    assert len(warnings) == 1, result.get("warnings")
    assert "the loaded kernel module is 550.54.14, the installed driver 550.90.07 (an upgrade since the node booted)" in warnings[0], warnings
    assert "reboot the node" in warnings[0] and "Driver/library version mismatch" in warnings[0], warnings

    root = install_driver_tree(tmp_path / "current", loaded="550.90.07", installed="550.90.07")
    result = gpu_info(tmp_path, node_smi, node_root=str(root), xid_hours=0)
    assert result["driver"] == {"loaded": "550.90.07", "installed": "550.90.07", "module_installed": None, "drift": False}, result["driver"]
    assert drift_warnings(result) == [], result.get("warnings")


def test_xid_errors_of_the_last_hours_are_named_per_gpu(tmp_path: Path, node_smi: Path) -> None:
    """An Xid 79 of GPU 1 an hour ago is reported with NVIDIA's name and a warning; an Xid 48 of GPU 2 two days ago is
    past xid_hours (24) and left out; xid_hours 0 reads no kernel log."""
    now = time.time()
    gpus = gpu_entries(4)
    log = install_node_kernel_log(tmp_path / "kernel-log", [
        xid_line(now - 2 * 86400, gpus[2], 48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer."),
        f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(now - 3600))}.000000+0000 pve-standin kernel: usb 1-1: new device",
        xid_line(now - 3600, gpus[1], 79, FELL_OFF, pid=4242),
    ])
    result = gpu_info(tmp_path, node_smi, node_kernel_log=log)
    assert [(gpu["pci_bus_id"], gpu["index"], gpu["uuid"]) for gpu in result["xid"]] == [("00000000:0F:00.0", 1, GPU_UUIDS[1])], result["xid"]
    errors = result["xid"][0]["errors"]
    assert [(e["xid"], e["name"], e["pid"], e["process_name"], e["text"]) for e in errors] == [
        (79, "GPU has fallen off the bus", 4242, "python3", FELL_OFF)], errors
    assert errors[0]["time"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 3600)), errors
    assert "reboot the node" in errors[0]["action"], errors
    warnings = xid_warnings(result)
    assert len(warnings) == 1, result.get("warnings")
    assert warnings[0].startswith("GPU 1 (00000000:0F:00.0) on node ") and "logged Xid 79 (GPU has fallen off the bus) at " in warnings[0], warnings
    assert drift_warnings(result) == [] and result["driver"]["drift"] is False, result

    quiet = gpu_info(tmp_path, node_smi, node_kernel_log=log, xid_hours=0)
    assert quiet["xid"] == [] and xid_warnings(quiet) == [], quiet

    # the older error is there to be read: a window of 3 days has it
    wide = gpu_info(tmp_path, node_smi, node_kernel_log=log, xid_hours=72)
    assert [(gpu["index"], [e["xid"] for e in gpu["errors"]]) for gpu in wide["xid"]] == [(1, [79]), (2, [48])], wide["xid"]


def launch(name: str, command: str = BUSY_PRINTER, **options: t.Any) -> dict[str, t.Any]:
    return {"name": "Launch", "trainops.pct_launch.tmux_session": {
        "session_name": name, "command": command, "log_path": f"/w/{name}.log", "chdir": "/w", "gpus": [0, 1],
        "gpu_idle_timeout": IDLE_TIMEOUT, "stall_action": "stop", **options}}


def run_job(tmp_path: Path, name: str) -> PlayRun:
    """Launch the job, wait for its end, report it with the history."""
    run = play(tmp_path, [launch(name),
                          {"name": "Wait", "ignore_errors": True,
                           "trainops.pct_launch.wait_for_log": {"session_name": name, "wait_until": "finished", "timeout": 120}},
                          {"name": "Report", "trainops.pct_launch.tmux_session_info": {"session_name": name, "history": True}}])
    assert run.proc.returncode == 0, run.proc.stdout[-4000:]
    assert run.result("Launch", HOST)["gpus"] == list(GPU_UUIDS[:2]), run.result("Launch", HOST)
    return run


def job_files(standin: StandinNode, name: str) -> str:
    """The job's log, exit record and supervisor state, for a failure's message."""
    script = 'for f in "/w/$1.log" "/w/$1.log.exit" "/run/trainops/$1/state.json"; do echo "== $f"; cat "$f"; done'
    return standin.sh(CT, script, name, check=False).stdout.decode("utf-8", "replace")


def exit_record(standin: StandinNode, name: str) -> dict[str, str]:
    text = standin.sh(CT, 'cat "$1"', f"/w/{name}.log.exit").stdout.decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_a_job_whose_gpu_idles_is_stopped_as_stalled_and_one_whose_gpus_work_is_not(tmp_path: Path, standin: StandinNode, ct: int) -> None:
    """GPU 0 at 0 % and GPU 1 at 80 %: the printing job is stopped as stalled, the reason naming GPU 0 only; both at
    80 %: the same job runs its 20 s to the end (its window of 6 s passed three times over)."""
    set_container_utilization(standin, ct, [0, 80, 80, 80])
    idle = f"idle-{uuid.uuid4().hex[:6]}"
    run = run_job(tmp_path, idle)
    waited = run.result("Wait", HOST)
    assert waited["verdict"] == "failed" and waited["end_state"] == "stalled", (waited, job_files(standin, idle))
    session = run.result("Report", HOST)["sessions"][0]
    words = f"1 of the job's 2 GPUs idled below 5 % for {IDLE_TIMEOUT} s (gpu_idle_timeout): {GPU_UUIDS[0][:12]} 0 %"
    assert (session["state"], session["end_state"], session["cause"]) == ("finished", "stalled", "stall"), session
    assert words in session["reason"] and GPU_UUIDS[1][:12] not in session["reason"], session["reason"]
    launches = [entry for entry in run.result("Report", HOST)["history"] if entry["session_name"] == idle]
    assert [(entry["end_state"], entry["cause"]) for entry in launches] == [("stalled", "stall")], launches
    assert words in launches[0]["reason"], launches
    assert exit_record(standin, idle)["end_state"] == "stalled"
    log = standin.sh(CT, 'cat "$1"', f"/w/{idle}.log").stdout.decode().splitlines()
    assert "step 1" in log and "all steps done" not in log, log  # printing all the while, stopped before its end

    set_container_utilization(standin, ct, [80, 80, 80, 80])
    busy = f"busy-{uuid.uuid4().hex[:6]}"
    run = run_job(tmp_path, busy)
    waited = run.result("Wait", HOST)
    assert waited["verdict"] == "finished" and waited["end_state"] == "finished", (waited, job_files(standin, busy))
    session = run.result("Report", HOST)["sessions"][0]
    assert (session["state"], session["end_state"], session["exit_status"]) == ("finished", "finished", 0), session
    assert "idled" not in str(session.get("reason")), session
    launches = [entry for entry in run.result("Report", HOST)["history"] if entry["session_name"] == busy]
    assert [entry["end_state"] for entry in launches] == ["finished"], launches
    log = standin.sh(CT, 'cat "$1"', f"/w/{busy}.log").stdout.decode()
    assert "\nstep 40\nall steps done\n" in log and "gpu_idle_timeout" not in log, log


def wait_state(standin: StandinNode, name: str, state: str) -> dict[str, t.Any]:
    """The supervisor's state.json once its state is ``state`` (looked at for up to 60 s: a wait, not a measure)."""
    script = ('for i in $(seq 600); do grep -q "\\"state\\": \\"$2\\"" "$1" && cat "$1" && exit 0; sleep 0.1; done; cat "$1"; exit 1')
    out = standin.sh(CT, script, f"/run/trainops/{name}/state.json", state, check=False)
    assert out.returncode == 0, (state, out.stdout.decode("utf-8", "replace"), job_files(standin, name))
    return t.cast(dict[str, t.Any], json.loads(out.stdout))


def test_a_recorded_gpu_stall_ends_when_the_idle_gpu_works_again(tmp_path: Path, standin: StandinNode, ct: int) -> None:
    """stall_action record: GPU 1 at 0 % makes the running job stalled (its reason naming GPU 1); once GPU 1 works
    again the stall ends and the job, never stopped, runs on."""
    set_container_utilization(standin, ct, [80, 0, 80, 80])
    name = f"record-{uuid.uuid4().hex[:6]}"
    run = play(tmp_path, [launch(name, command='while :; do echo "step"; sleep 0.5; done', stall_action="record")])
    assert run.proc.returncode == 0, run.proc.stdout[-4000:]
    try:
        stalled = wait_state(standin, name, "stalled")
        words = f"1 of the job's 2 GPUs idled below 5 % for {IDLE_TIMEOUT} s (gpu_idle_timeout): {GPU_UUIDS[1][:12]} 0 %"
        assert stalled["reason"] == f"stalled: {words}", stalled
        session = play(tmp_path, [{"name": "Report", "trainops.pct_launch.tmux_session_info": {"session_name": name}}]).result("Report", HOST)
        assert (session["sessions"][0]["state"], session["sessions"][0]["supervisor_state"]) == ("running", "stalled"), session
        set_container_utilization(standin, ct, [80, 80, 80, 80])
        running = wait_state(standin, name, "running")
        assert running["reason"] is None and running["attempt"] == 1, running
        session = play(tmp_path, [{"name": "Report", "trainops.pct_launch.tmux_session_info": {"session_name": name}}]).result("Report", HOST)
        assert (session["sessions"][0]["state"], session["sessions"][0]["supervisor_state"]) == ("running", "running"), session
    finally:
        play(tmp_path, [{"name": "Stop", "trainops.pct_launch.tmux_session": {"session_name": name, "state": "stopped"}}])
