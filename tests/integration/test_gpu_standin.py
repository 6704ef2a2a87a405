# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Stand-in GPUs on real stand-in containers: nvidia-smi inside and on the node, device files, libraries,
and GPU processes whose host PIDs map to their container through /proc/PID/cgroup."""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import StandinNode, lines
from .playbook_results import container_host, run_tasks
from .gpu_standin import (DRIVER, GPU_UUIDS, LIB_DIR, cgroup_names_container, gpu_entries, gpu_process_in_container,
                          gpu_process_on_node, gpu_processes, install_in_container, install_node_smi,
                          install_remote_node_smi, kill_gpu_process, proc_cgroup, remove_devices, state_of,
                          sync_container_view)

pytestmark = pytest.mark.integration

CT = 670
REMOTE_CT = 671
BULLSEYE_CT = 672
SECOND_CT = 673
GPUS = gpu_entries(2)
GPU_QUERY = "--query-gpu=index,uuid,name,driver_version,utilization.gpu,memory.used,memory.total"
APP_QUERY = "--query-compute-apps=pid,gpu_uuid,process_name,used_memory"
CSV = "--format=csv,noheader,nounits"


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> Iterator[int]:
    """Container 670 with two stand-in GPUs passed through; GPU processes are killed at the end."""
    standin.create(CT)
    install_in_container(standin, CT, GPUS)
    with gpu_processes():
        yield CT


@pytest.fixture(scope="module")
def node_smi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node's nvidia-smi (view node) with the same two GPUs."""
    return install_node_smi(tmp_path_factory.mktemp("node-smi"), GPUS)


def smi(program: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the node's nvidia-smi."""
    return subprocess.run([str(program), *args], capture_output=True, text=True, timeout=30, check=False)


def ct_smi(node: StandinNode, vmid: int, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run nvidia-smi inside a container (found on pct's PATH, /usr/bin)."""
    return node.pct("exec", vmid, "--keep-env", "0", "--", "nvidia-smi", *args)


def test_container_lists_gpus_and_no_processes(standin: StandinNode, ct: int, node_smi: Path) -> None:
    gpu_process_in_container(standin, ct, GPU_UUIDS[0], 2048, state_of(node_smi))
    out = ct_smi(standin, ct, GPU_QUERY, CSV)
    assert out.returncode == 0, out
    assert lines(out.stdout) == [f"{i}, {GPU_UUIDS[i]}, NVIDIA A100-SXM4-40GB, {DRIVER}, 0, 0, 40960" for i in (0, 1)]
    listing = ct_smi(standin, ct, "-L")
    assert lines(listing.stdout)[0] == f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {GPU_UUIDS[0]})"
    apps = ct_smi(standin, ct, APP_QUERY, CSV)
    assert (apps.returncode, apps.stdout) == (0, b"")
    assert lines(ct_smi(standin, ct, APP_QUERY, "--format=csv").stdout) == ["pid, gpu_uuid, process_name, used_gpu_memory [MiB]"]


@pytest.mark.both_privileges
def test_container_process_shows_on_node_with_host_pid(standin: StandinNode, ct: int, node_smi: Path) -> None:
    pid = gpu_process_in_container(standin, ct, GPU_UUIDS[1], 1024, state_of(node_smi))
    out = smi(node_smi, APP_QUERY, CSV)
    assert f"{pid}, {GPU_UUIDS[1]}, python3, 1024" in out.stdout.splitlines()
    cgroup = proc_cgroup(pid)
    # Proxmox VE's layout (lxc/VMID/ns, which the stand-in uses), or plain LXC's (lxc.payload.VMID)
    assert any(line in cgroup for line in (f":memory:/lxc/{ct}/ns\n", f"0::/lxc/{ct}/ns/", f":memory:/lxc.payload.{ct}\n",
                                           f"0::/lxc.payload.{ct}/")), cgroup
    assert cgroup_names_container(cgroup, ct) and not cgroup_names_container(cgroup, 200)
    used = smi(node_smi, "--query-gpu=memory.used", "-i", "1", CSV).stdout
    assert int(used) >= 1024
    kill_gpu_process(pid)
    assert str(pid) not in smi(node_smi, APP_QUERY, CSV).stdout


def test_container_view_gets_node_totals(standin: StandinNode, ct: int, node_smi: Path) -> None:
    pid = gpu_process_in_container(standin, ct, GPU_UUIDS[0], 512, state_of(node_smi))
    sync_container_view(standin, ct, state_of(node_smi))
    inside = ct_smi(standin, ct, "--query-gpu=memory.used", CSV).stdout
    outside = smi(node_smi, "--query-gpu=memory.used", CSV).stdout.encode()
    assert inside == outside and int(lines(inside)[0]) >= 512
    assert ct_smi(standin, ct, APP_QUERY, CSV).stdout == b""
    kill_gpu_process(pid)


def test_process_on_node_is_in_no_container(node_smi: Path, ct: int) -> None:
    proc = gpu_process_on_node(GPU_UUIDS[0], 300, state_of(node_smi))
    try:
        assert f"{proc.pid}, {GPU_UUIDS[0]}, " in smi(node_smi, APP_QUERY, CSV).stdout
        assert not cgroup_names_container(proc_cgroup(proc.pid), ct)
    finally:
        proc.kill()
        proc.wait()
    assert f"{proc.pid}, " not in smi(node_smi, APP_QUERY, CSV).stdout


def test_device_files_are_char_devices_whose_driver_answers(standin: StandinNode, ct: int) -> None:
    """The null device's numbers (1:3) stand for NVIDIA's: LXC's device rules allow them, and every open is answered."""
    files = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1")
    out = standin.sh(ct, 'for d in "$@"; do stat -c "%n %F %t:%T" "$d"; : <>"$d" || exit 1; done', *files)
    assert lines(out.stdout) == [f"{path} character special file 1:3" for path in files]
    remove_devices(standin, ct, ["nvidia-uvm"])
    assert standin.sh(ct, "test -e /dev/nvidia-uvm", check=False).returncode == 1
    install_in_container(standin, ct, GPUS)
    assert standin.sh(ct, "test -c /dev/nvidia-uvm", check=False).returncode == 0


def test_libraries_match_the_driver(standin: StandinNode, ct: int) -> None:
    out = standin.sh(ct, 'cd "$1" && for f in libcuda.so libcuda.so.1 libnvidia-ml.so.1; do readlink -f "$f"; done; '
                     'test -s "libcuda.so.$2" && test -s "libnvidia-ml.so.$2"', LIB_DIR, DRIVER)
    assert lines(out.stdout) == [f"{LIB_DIR}/libcuda.so.{DRIVER}", f"{LIB_DIR}/libcuda.so.{DRIVER}",
                                 f"{LIB_DIR}/libnvidia-ml.so.{DRIVER}"]


def test_library_mismatch_fails_like_nvidia(standin: StandinNode, ct: int) -> None:
    install_in_container(standin, ct, GPUS, library_version="550.67.01")
    try:
        out = ct_smi(standin, ct, GPU_QUERY, CSV)
        assert out.returncode == 18
        assert lines(out.stdout) == ["Failed to initialize NVML: Driver/library version mismatch", "NVML library version: 550.67"]
        assert standin.sh(ct, f"test -e {LIB_DIR}/libcuda.so.550.67.01 && ! test -e {LIB_DIR}/libcuda.so.{DRIVER}",
                          check=False).returncode == 0
    finally:
        install_in_container(standin, ct, GPUS)


def test_each_container_asks_its_node(tmp_path: Path, standin: StandinNode, ct: int, node_smi: Path) -> None:
    """Two containers of one node, a play of two gpu_info tasks: each container asks the node for itself, per task."""
    standin.create(SECOND_CT)
    install_in_container(standin, SECOND_CT, GPUS)
    pid = gpu_process_in_container(standin, ct, GPU_UUIDS[0], 1024, state_of(node_smi))
    calls = tmp_path / "node-smi-calls.log"
    wrapper = tmp_path / "nvidia-smi-counted"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\nexec {node_smi} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    hosts = {f"ct{vmid}": container_host(vmid) for vmid in (ct, SECOND_CT)}
    tasks = [{"name": name, "trainops.pct_launch.gpu_info": {"node_nvidia_smi": str(wrapper)}} for name in ("first", "second")]
    run = run_tasks(tmp_path, hosts, tasks, options=("-vvv", "--forks", "2"))
    queries = [line for line in calls.read_text(encoding="utf-8").splitlines() if line.startswith("--query-gpu=")]
    assert len(queries) == 4, (queries, run.proc.stdout[-4000:])  # one per host and task: hosts share no answers
    assert len([line for line in run.proc.stdout.splitlines() if " NODE EXEC " in line]) == 4, run.proc.stdout[-4000:]
    for task in ("first", "second"):
        mine, theirs = run.result(task, f"ct{ct}"), run.result(task, f"ct{SECOND_CT}")
        assert not mine.get("failed") and not theirs.get("failed"), (mine, theirs)
        for report in (mine["node"], theirs["node"]):  # asked twice: the same node's view
            assert pid in [p["pid"] for p in report["processes"]] and report["gpus"] == mine["node"]["gpus"], report
        assert "node_shared" not in mine and "node_shared" not in theirs
        # the node's report, judged for each container (an earlier test's process in 670 may still be there)
        assert [f["kind"] for f in mine["busy"] if f["pid"] == pid] == ["this_container"], mine["busy"]
        assert [f["kind"] for f in theirs["busy"] if f["pid"] == pid] == ["other_container"], theirs["busy"]
    kill_gpu_process(pid)
    standin.pct("destroy", SECOND_CT, "--force", check=True)
    standin.created.remove(SECOND_CT)


def test_runs_on_debian_11_python_3_9(standin: StandinNode) -> None:
    standin.create(BULLSEYE_CT, release="bullseye")
    install_in_container(standin, BULLSEYE_CT, GPUS[:1])
    assert standin.sh(BULLSEYE_CT, "python3 --version").stdout.startswith(b"Python 3.9")
    out = ct_smi(standin, BULLSEYE_CT, GPU_QUERY, CSV)
    assert lines(out.stdout) == [f"0, {GPU_UUIDS[0]}, NVIDIA A100-SXM4-40GB, {DRIVER}, 0, 0, 40960"], out
    assert ct_smi(standin, BULLSEYE_CT, APP_QUERY, "--format=csv").returncode == 0
    standin.pct("destroy", BULLSEYE_CT, "--force", check=True)
    standin.created.remove(BULLSEYE_CT)


def test_remote_node_maps_container_process(remote_nodes: dict[str, StandinNode]) -> None:
    fleet = remote_nodes
    node = fleet["pve-a"]
    probe = subprocess.run(node.ssh_argv(["sh", "-c", "command -v pct"]),  # type: ignore[attr-defined]
                           capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        pytest.skip("pct is not on the remote node's PATH (is /usr/local/sbin/pct a dangling link? run setup.sh)")
    fleet.create("pve-a", REMOTE_CT)  # type: ignore[attr-defined]
    program, node_program = install_remote_node_smi(node, GPUS)
    install_in_container(node, REMOTE_CT, GPUS)
    with gpu_processes():
        pid = gpu_process_in_container(node, REMOTE_CT, GPU_UUIDS[0], 4096, state_of(program))
        argv = node.ssh_argv([node_program, APP_QUERY, CSV])  # type: ignore[attr-defined]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert out.stdout.splitlines() == [f"{pid}, {GPU_UUIDS[0]}, python3, 4096"], out
        assert cgroup_names_container(proc_cgroup(pid), REMOTE_CT), proc_cgroup(pid)
        assert ct_smi(node, REMOTE_CT, APP_QUERY, CSV).stdout == b""
