# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""GPUs as the node sees them, the busy-GPU preflight, and GPU allocation, on real stand-in containers.

No GPU exists here: the node's and the containers' ``nvidia-smi`` are the stand-in (tools/pve_standin/nvidia_smi.py,
NVIDIA's CSV formats), and the GPU processes are real processes placed in real containers and on the node, so the
mapping PID -> /proc/PID/cgroup -> VMID that gpu_info's node side makes is tested on the kernel's own answers.
Everything runs through ansible-playbook and the collection's pct connection, as users run it.

VMIDs: 680 (with tmux: the jobs), 681 (another container holding a GPU), 682 (on the remote node pve-a), 683 (with
tmux and no GPU: a container of the same fleet without a finding).
"""

from __future__ import annotations

import re
import typing as t
from pathlib import Path

import pytest

from .conftest import StandinNode
from .gpu_standin import GPU_UUIDS, edit_state, gpu_entries, gpu_process_in_container, gpu_process_on_node, gpu_processes
from .gpu_standin import install_in_container, install_node_smi, install_remote_node_smi, remove_devices, state_of, sync_container_view
from .playbook_results import container_host, run_playbook, run_tasks, summary_lines, task_results

pytestmark = pytest.mark.integration

CT_JOBS, CT_OTHER, CT_PLAIN = 680, 681, 683


@pytest.fixture(scope="module")
def cts(standin: StandinNode) -> tuple[int, int]:
    """680 with tmux and /w, and 681."""
    standin.create(CT_JOBS)
    standin.install_tmux(CT_JOBS, "/w")
    standin.create(CT_OTHER)
    return CT_JOBS, CT_OTHER


@pytest.fixture()
def node_smi(tmp_path: Path, standin: StandinNode, cts: tuple[int, int]) -> t.Iterator[Path]:
    """The node's nvidia-smi with 4 GPUs, and both containers seeing them all (device files, libraries)."""
    program = install_node_smi(tmp_path / "node-smi", gpu_entries(4))
    for vmid in cts:
        install_in_container(standin, vmid, gpu_entries(4))
    with gpu_processes():
        yield program
    standin.sh(CT_JOBS, "tmux kill-server 2>/dev/null; rm -rf /run/trainops; true", check=False)


def gpu_info(tmp_path: Path, program: Path, vmid: int, **args: t.Any) -> dict[str, t.Any]:
    """gpu_info on the container, its node asked for its view with ``program``."""
    run = run_tasks(tmp_path, {f"ct{vmid}": container_host(vmid)},
                    [{"name": "gpu", "trainops.pct_launch.gpu_info": dict(args, node_nvidia_smi=str(program))}])
    return run.result("gpu", f"ct{vmid}")


def test_the_node_names_the_container_of_each_gpu_process(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """Processes in this container, in another one and on the node, and a GPU busy with none named."""
    state = state_of(node_smi)
    mine = gpu_process_in_container(standin, CT_JOBS, GPU_UUIDS[0], 30000, state)
    theirs = gpu_process_in_container(standin, CT_OTHER, GPU_UUIDS[1], 2048, state)
    on_node = gpu_process_on_node(GPU_UUIDS[2], 512, state).pid
    with edit_state(state) as data:
        data["gpus"][3]["utilization"] = 97
    sync_container_view(standin, CT_JOBS, state)
    inside = standin.pct("exec", CT_JOBS, "--", "nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader", check=True)
    assert inside.stdout == b"", "inside a container nvidia-smi lists no process"

    result = gpu_info(tmp_path, node_smi, CT_JOBS)
    assert not result.get("failed"), result
    assert sorted((p["pid"], p["vmid"]) for p in result["node"]["processes"]) == sorted([(mine, CT_JOBS), (theirs, CT_OTHER), (on_node, None)])
    assert [(f["index"], f["kind"], f["pid"]) for f in result["busy"]] == [
        (0, "this_container", mine), (1, "other_container", theirs), (2, "node", on_node), (3, "unnamed", None)]
    messages = [f["message"] for f in result["busy"]]
    assert messages[0].endswith(f"is in use by PID {mine} (python3, 30000 MiB) in CT {CT_JOBS} (this container)"), messages
    assert messages[1].endswith(f"is in use by PID {theirs} (python3, 2048 MiB) in CT {CT_OTHER}"), messages
    assert f"PID {on_node} " in messages[2] and messages[2].endswith("in the node itself"), messages
    assert messages[3].startswith(f"GPU 3 ({GPU_UUIDS[3]}, ") and "97 % utilisation" in messages[3], messages
    assert result["busy_uuids"] == sorted(GPU_UUIDS[:4]) and result["problems"] == [] and result["changed"] is False

    # the other container's view: its own process is "this container", ours another one's
    other = gpu_info(tmp_path, node_smi, CT_OTHER)
    assert [(f["kind"], f["vmid"]) for f in other["busy"][:2]] == [("other_container", CT_JOBS), ("this_container", CT_OTHER)]


def _job(name: str, **more: t.Any) -> dict[str, t.Any]:
    return dict({"job_session_name": name, "job_log_path": f"/w/{name}.log", "job_prepare": False,
                 "job_command": "echo \"CVD=$CUDA_VISIBLE_DEVICES NPROC=${NPROC_PER_NODE:-unset}\"; echo 'step 1 loss 0.5'; sleep 600",
                 "job_wait_pattern": "step [0-9]+", "job_wait_timeout": 60}, **more)


def test_the_preflight_refuses_a_busy_gpu_named_with_its_container(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """launch.yml on a community.proxmox-style host (proxmox_vmid) with job_gpu_busy=fail: refused, nothing started."""
    theirs = gpu_process_in_container(standin, CT_OTHER, GPU_UUIDS[1], 4096, state_of(node_smi))
    host = container_host(CT_JOBS)
    host["proxmox_vmid"] = host.pop("pct_vmid")
    hosts = {"trainer": host}
    proc, _results = run_playbook(tmp_path, "launch.yml", hosts, _job("refused", job_gpu_busy="fail", job_node_nvidia_smi=str(node_smi)))
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert (f"Refusing to launch refused in CT {CT_JOBS}: GPU 1 ({GPU_UUIDS[1]}, NVIDIA A100-SXM4-40GB) is in use by PID {theirs} "
            f"(python3, 4096 MiB) in CT {CT_OTHER}") in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert standin.sh(CT_JOBS, "tmux has-session -t =refused", check=False).returncode != 0, "nothing was started"

    # a count of GPUs takes free ones: the busy GPU is only reported, the job gets GPUs 0 and 2
    proc, results = run_playbook(tmp_path, "launch.yml", hosts, _job("counted", job_gpus=2, job_gpu_busy="fail",
                                                                     job_multinode=True, job_master_addr="127.0.0.1",
                                                                     job_node_nvidia_smi=str(node_smi)))
    assert proc.returncode == 0, proc.stdout[-4000:]
    launch = task_results(results, "Start the job in its detached tmux session", "trainer")[-1]
    # (the multi-node variables NODE_RANK 0, NNODES 1 and NPROC_PER_NODE 2 are public_env: as env, no_log, Ansible
    # would hide their digits in every string of the result, the GPUs' UUIDs too)
    assert launch["changed"] and launch["gpus"] == [GPU_UUIDS[0], GPU_UUIDS[2]], launch
    log = standin.pct("exec", CT_JOBS, "--", "cat", "/w/counted.log", check=True).stdout.decode()
    assert f"CVD={GPU_UUIDS[0]},{GPU_UUIDS[2]} NPROC=2" in log, log


def test_a_refused_container_does_not_stop_the_fleet(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """job_gpu_busy=fail refuses the container whose GPU is busy, and only it: the others of the fleet are launched.

    The refusal is a play of the containers with a finding; a play whose every host fails would end the whole run.
    """
    standin.create(CT_PLAIN)
    standin.install_tmux(CT_PLAIN, "/w")
    install_in_container(standin, CT_PLAIN, gpu_entries(4)[:1])  # it can open GPU 0 only, which is free: no finding
    theirs = gpu_process_in_container(standin, CT_OTHER, GPU_UUIDS[1], 4096, state_of(node_smi))
    hosts = {"trainer": container_host(CT_JOBS), "plain": container_host(CT_PLAIN)}
    proc, results = run_playbook(tmp_path, "launch.yml", hosts, _job("fleetgpu", job_gpu_busy="fail", job_node_nvidia_smi=str(node_smi)))
    try:
        assert proc.returncode == 2, proc.stdout[-4000:]
        assert f"Refusing to launch fleetgpu in CT {CT_JOBS}: GPU 1 " in " ".join(proc.stdout.split()) and f"PID {theirs} " in proc.stdout
        assert standin.sh(CT_JOBS, "tmux has-session -t =fleetgpu", check=False).returncode != 0, "nothing was started there"
        assert standin.sh(CT_PLAIN, "tmux has-session -t =fleetgpu", check=False).returncode == 0, proc.stdout[-4000:]
        lines = summary_lines(results)
        assert lines[0] == "fleetgpu: 1 of 2 containers run, failed: trainer", lines
        assert f"plain (CT {CT_PLAIN} on localhost): started" in lines, lines
        assert (f"trainer (CT {CT_JOBS} on localhost): failed: preflight.yml failed on it before the launch (its error is shown above)"
                in lines), lines
        assert results["stats"]["trainer"]["failures"] == 1 and results["stats"]["plain"]["failures"] == 0, results["stats"]
    finally:
        standin.sh(CT_PLAIN, "tmux kill-server 2>/dev/null; true", check=False)


def _start(tmp_path: Path, name: str, gpus: t.Any, *options: str) -> dict[str, t.Any]:
    task = {"name": "start", "trainops.pct_launch.tmux_session": {
        "session_name": name, "command": "echo \"CVD=$CUDA_VISIBLE_DEVICES\"; sleep 600", "log_path": f"/w/{name}.log", "gpus": gpus}}
    return run_tasks(tmp_path, {"ct": container_host(CT_JOBS)}, [task], options=options).result("start", "ct")


def test_two_jobs_in_one_container_get_disjoint_gpus(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """A count, again for idempotency, in check mode, and a request that cannot be given (nothing started)."""
    del node_smi
    first = _start(tmp_path, "gpu-a", 2)
    second = _start(tmp_path, "gpu-b", 1)
    assert first["changed"] and second["changed"], (first, second)
    assert first["gpus"] == list(GPU_UUIDS[:2]) and second["gpus"] == [GPU_UUIDS[2]]
    again = _start(tmp_path, "gpu-a", 2)
    assert again["changed"] is False and again["gpus"] == list(GPU_UUIDS[:2])
    would = _start(tmp_path, "gpu-c", 1, "--check")
    assert would["changed"] and would["gpus"] == [GPU_UUIDS[3]]
    assert standin.sh(CT_JOBS, "tmux has-session -t =gpu-c", check=False).returncode != 0, "check mode starts nothing"

    refused = _start(tmp_path, "gpu-d", 2)
    assert refused["status"] == "failed" and refused["error"] == "gpu_unavailable", refused
    assert re.search(r"2 GPUs asked for, 1 free of 4 \(GPU 0 \(\S+, NVIDIA A100-SXM4-40GB\) held by session gpu-a; .*GPU 2 .* held by session gpu-b\)",
                     refused["msg"]), refused["msg"]
    assert f"in container {CT_JOBS}:" in refused["msg"], refused["msg"]
    assert standin.sh(CT_JOBS, "tmux has-session -t =gpu-d", check=False).returncode != 0, "nothing was started"
    named = _start(tmp_path, "gpu-e", [1])
    assert named["status"] == "failed" and "GPU 1 (" in named["msg"] and "is held by session gpu-a in this container" in named["msg"], named
    for name, gpus in (("gpu-a", list(GPU_UUIDS[:2])), ("gpu-b", [GPU_UUIDS[2]])):
        log = standin.pct("exec", CT_JOBS, "--", "cat", f"/w/{name}.log", check=True).stdout.decode()
        assert f"CVD={','.join(gpus)}" in log, log

    # once gpu-a ends, its GPUs are free again
    stop = run_tasks(tmp_path, {"ct": container_host(CT_JOBS)},
                     [{"name": "stop", "trainops.pct_launch.tmux_session": {"session_name": "gpu-a", "state": "stopped"}}])
    assert stop.result("stop", "ct")["changed"]
    assert _start(tmp_path, "gpu-d", 2)["gpus"] == [GPU_UUIDS[0], GPU_UUIDS[1]]


def test_a_gpu_job_is_refused_where_device_files_or_driver_libraries_are_wrong(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """Missing /dev/nvidia-uvm and libraries of another driver version: the preflight says what to fix; nothing starts."""
    install_in_container(standin, CT_JOBS, gpu_entries(4), library_version="535.104.05")
    remove_devices(standin, CT_JOBS, ["nvidia-uvm"])
    result = gpu_info(tmp_path, node_smi, CT_JOBS, gpus="all")
    problems = result["problems"]
    assert any(p.startswith("the container cannot list its GPUs: ") and "Driver/library version mismatch" in p for p in problems), problems
    assert any(p.startswith("device files missing in the container: /dev/nvidia-uvm: ") for p in problems), problems
    assert any(p.startswith("libcuda.so.535.104.05 in the container does not match the node's driver 550.54.15") for p in problems), problems
    proc, _results = run_playbook(tmp_path, "launch.yml", {"trainer": container_host(CT_JOBS)},
                                  _job("broken", job_gpus="all", job_node_nvidia_smi=str(node_smi)))
    flat = " ".join(proc.stdout.split())
    assert proc.returncode != 0 and f"Cannot launch broken on GPUs in CT {CT_JOBS}: " in flat and "Nothing was started" in flat, proc.stdout[-3000:]
    assert standin.sh(CT_JOBS, "tmux has-session -t =broken", check=False).returncode != 0
    install_in_container(standin, CT_JOBS, gpu_entries(4))


def test_a_remote_node_is_asked_through_the_connections_ssh(tmp_path: Path, remote_nodes: t.Any) -> None:
    """A container on pve-a (its own sshd on loopback): the node's view comes over the pct connection's ssh."""
    node = remote_nodes["pve-a"]
    vmid = remote_nodes.create("pve-a", 682)
    program, on_node = install_remote_node_smi(node, gpu_entries(2))
    install_in_container(node, vmid, gpu_entries(2))
    with gpu_processes():
        pid = gpu_process_in_container(node, vmid, GPU_UUIDS[1], 1000, state_of(program))
        host = container_host(vmid, pct_node="pve-a", pct_ssh_args=f"-F {remote_nodes.ssh_config}")
        run = run_tasks(tmp_path, {"remote": host}, [{"name": "gpu", "trainops.pct_launch.gpu_info": {"node_nvidia_smi": on_node}}],
                        options=("-vvv",))
        result = run.result("gpu", "remote")
    assert [(p["pid"], p["vmid"]) for p in result["node"]["processes"]] == [(pid, vmid)], result["node"]
    assert [(f["index"], f["kind"]) for f in result["busy"]] == [(1, "this_container")], result["busy"]
    node_calls = [line for line in run.proc.stdout.splitlines() if line.startswith("<remote> NODE EXEC ")]
    assert len(node_calls) == 1 and " pve-a -- " in node_calls[0] and "python3 - --nvidia-smi" in node_calls[0], node_calls
