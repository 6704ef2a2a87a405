# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""GPU device files the job can open: the preflight opens them as the job's user, on real stand-in containers.

A device file that exists may still be closed to the job: its mode (Proxmox VE's ``devN:`` makes it 0660 root:root
without ``mode=``), the container's device cgroup, or no driver behind its number. No GPU is here, so the device
files are stand-ins (tests/integration/gpu_standin.py): the null device's numbers 1:3 for a file whose driver answers,
NVIDIA's 195:N for one the device cgroup of a privileged container forbids (EPERM) or, once allowed there, one with
no driver behind it (ENXIO: no driver for major 195 on this host). The kernel checks in that order: mode, cgroup,
driver. Every container here is privileged (mknod inside, LXC's device cgroup rules).

VMIDs: 690 (tmux, user trainer: the launches), 691 (a device with no driver behind it).
"""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from .conftest import StandinNode
from .gpu_standin import (GPU_UUIDS, allow_devices, create_privileged, gpu_entries, install_in_container, install_node_smi,
                          make_device_node, nvidia_numbers)
from .playbook_results import container_host, run_playbook, run_tasks, task_results

pytestmark = pytest.mark.integration

CT, CT_NO_DRIVER = 690, 691
GPUS = gpu_entries(2)
FILES = ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1")
USER = "trainer"


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """690, privileged, with tmux, /w, user trainer (in group video) and two stand-in GPUs."""
    create_privileged(standin, CT)
    standin.install_tmux(CT, "/w")
    standin.sh(CT, 'useradd -m -G video "$1" && chmod 0777 /w', USER)
    install_in_container(standin, CT, GPUS)
    return CT


@pytest.fixture()
def node_smi(tmp_path: Path, ct: int, standin: StandinNode) -> t.Iterator[Path]:
    """The node's nvidia-smi with the two GPUs; the device files answer for everyone again afterwards."""
    yield install_node_smi(tmp_path / "node-smi", GPUS)
    for name in FILES:
        make_device_node(standin, ct, name)
    standin.sh(ct, "tmux kill-server 2>/dev/null; rm -rf /run/trainops; true", check=False)


def gpu_info(tmp_path: Path, program: Path, vmid: int, **args: t.Any) -> dict[str, t.Any]:
    """gpu_info on the container, its node asked with ``program``."""
    run = run_tasks(tmp_path, {f"ct{vmid}": container_host(vmid)},
                    [{"name": "gpu", "trainops.pct_launch.gpu_info": dict(args, node_nvidia_smi=str(program))}])
    return run.result("gpu", f"ct{vmid}")


def _access(result: dict[str, t.Any]) -> dict[str, tuple[t.Any, ...]]:
    """device_access by file name: (user, opened, errno, device, mode, owner)."""
    return {Path(item["path"]).name: (item["user"], item["opened"], item["errno"], item["device"], item["mode"], item["owner"])
            for item in result["device_access"]}


def _job(name: str, **more: t.Any) -> dict[str, t.Any]:
    return dict({"job_session_name": name, "job_log_path": f"/w/{name}.log", "job_prepare": False, "job_gpus": "all",
                 "job_command": "echo \"CVD=$CUDA_VISIBLE_DEVICES USER=$(id -un)\"; echo 'step 1 loss 0.5'; sleep 600",
                 "job_wait_pattern": "step [0-9]+", "job_wait_timeout": 60}, **more)


def test_each_device_file_is_opened_as_the_jobs_user(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """The mode refuses the user (EACCES) but not root; a group the user is in lets it in; the cgroup refuses everyone."""
    make_device_node(standin, CT, "nvidia-uvm", mode="0660")
    make_device_node(standin, CT, "nvidia1", mode="0660", owner="0:44")  # group video, which trainer is in
    make_device_node(standin, CT, "nvidia0", nvidia_numbers("nvidia0"))
    as_user = gpu_info(tmp_path, node_smi, CT, gpus="all", user=USER)
    assert _access(as_user) == {"nvidiactl": (USER, True, None, "1:3", "0666", "root:root"),
                                "nvidia-uvm": (USER, False, "EACCES", "1:3", "0660", "root:root"),
                                "nvidia0": (USER, False, "EPERM", "195:0", "0666", "root:root"),
                                "nvidia1": (USER, True, None, "1:3", "0660", "root:video")}, as_user["device_access"]
    problems = [p for p in as_user["problems"] if p.startswith("cannot open ")]
    assert problems == [
        f"cannot open /dev/nvidia-uvm (c 1:3, 0660 root:root) as user {USER} in the container: EACCES, no permission: give the "
        f"device files a mode user {USER} can open, in the container's config: devN: /dev/nvidia-uvm,mode=0666 (one devN line "
        f"per file), or gid= of a group user {USER} is in (devN: /dev/nvidia-uvm,gid=GID,mode=0660); a file bind-mounted with "
        "lxc.mount.entry keeps the node's mode",
        f"cannot open /dev/nvidia0 (c 195:0, 0666 root:root) as user {USER} in the container: EPERM, not allowed by the "
        "container's device cgroup: allow the devices in the container's config (lxc.cgroup2.devices.allow: c 195:* rwm), or "
        "pass each file with devN: (devN: /dev/nvidia0, Proxmox VE 8.1+), which adds those lines; then restart the container"], problems

    # without a user the job runs as root: the mode lets root in, the device cgroup does not
    as_root = gpu_info(tmp_path, node_smi, CT, gpus="all")
    assert {name: item[:3] for name, item in _access(as_root).items()} == {
        "nvidiactl": ("root", True, None), "nvidia-uvm": ("root", True, None), "nvidia0": ("root", False, "EPERM"),
        "nvidia1": ("root", True, None)}, as_root["device_access"]
    # a list of GPUs needs their files only: GPU 1 (/dev/nvidia1) does without /dev/nvidia0
    named = gpu_info(tmp_path, node_smi, CT, gpus=[GPU_UUIDS[1]])
    assert sorted(_access(named)) == ["nvidia-uvm", "nvidia1", "nvidiactl"] and named["problems"] == [], named
    # without gpus nothing is opened
    assert gpu_info(tmp_path, node_smi, CT)["device_access"] == []


def test_a_user_job_on_device_files_of_mode_0660_is_refused_then_launched_with_0666(
        tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """launch.yml with job_user and job_gpus: 0660 root:root (devN: without mode=) refuses, nothing starts; 0666 runs."""
    for name in FILES:
        make_device_node(standin, CT, name, mode="0660")
    hosts = {"trainer": container_host(CT)}
    proc, _results = run_playbook(tmp_path, "launch.yml", hosts, _job("closed", job_user=USER, job_node_nvidia_smi=str(node_smi)))
    flat = " ".join(proc.stdout.split())
    assert proc.returncode != 0, proc.stdout[-4000:]
    files = ", ".join(f"/dev/{name} (c 1:3, 0660 root:root)" for name in FILES)
    assert (f"Cannot launch closed on GPUs in CT {CT}: cannot open {files} as user {USER} in the container: EACCES, no "
            f"permission: give the device files a mode user {USER} can open, in the container's config: "
            "devN: /dev/nvidiactl,mode=0666 (one devN line per file)") in flat, proc.stdout[-4000:]
    assert "Nothing was started." in flat, proc.stdout[-4000:]
    assert standin.sh(CT, "tmux has-session -t =closed", check=False).returncode != 0, "nothing was started"

    for name in FILES:
        make_device_node(standin, CT, name, mode="0666")  # dev0: /dev/nvidia0,mode=0666 and so on
    proc, results = run_playbook(tmp_path, "launch.yml", hosts, _job("opened", job_user=USER, job_node_nvidia_smi=str(node_smi)))
    assert proc.returncode == 0, proc.stdout[-4000:]
    preflight = task_results(results, "Ask the node which processes hold the GPUs the container can open", "trainer")[-1]
    assert [(item["user"], item["opened"]) for item in preflight["device_access"]] == [(USER, True)] * 4, preflight
    log = standin.pct("exec", CT, "--", "cat", "/w/opened.log", check=True).stdout.decode()
    assert f"CVD={GPU_UUIDS[0]},{GPU_UUIDS[1]} USER={USER}" in log, log


def test_a_device_with_no_driver_behind_it(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """A file with NVIDIA's numbers that the device cgroup allows: ENXIO (the node's driver is not loaded), even for root;
    launch.yml refuses the job and starts nothing."""
    create_privileged(standin, CT_NO_DRIVER)
    try:
        _no_driver(tmp_path, standin, node_smi)
    finally:
        standin.pct("destroy", CT_NO_DRIVER, "--force", check=True)
        standin.created.remove(CT_NO_DRIVER)


def _no_driver(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    install_in_container(standin, CT_NO_DRIVER, GPUS)
    make_device_node(standin, CT_NO_DRIVER, "nvidia1", nvidia_numbers("nvidia1"))
    allow_devices(CT_NO_DRIVER, "c 195:* rwm")
    result = gpu_info(tmp_path, node_smi, CT_NO_DRIVER, gpus=2)
    assert {name: item[:3] for name, item in _access(result).items() if not item[1]} == {"nvidia1": ("root", False, "ENXIO")}, result
    expected = ("cannot open /dev/nvidia1 (c 195:1, 0666 root:root) as root in the container: ENXIO, no driver behind it: on "
                "the node, load the NVIDIA driver for them (nvidia-smi there lists the GPUs; nvidia-modprobe -u -c=0 for "
                "/dev/nvidia-uvm), and give the container the node's device files (their numbers: ls -l /dev/nvidia* on the node)")
    assert result["problems"] == [expected], result["problems"]
    proc, _results = run_playbook(tmp_path, "launch.yml", {"nodriver": container_host(CT_NO_DRIVER)},
                                  _job("nodriver", job_node_nvidia_smi=str(node_smi)))
    flat = " ".join(proc.stdout.split())
    assert proc.returncode != 0 and f"Cannot launch nodriver on GPUs in CT {CT_NO_DRIVER}: {expected}. Nothing was started." in flat, \
        proc.stdout[-4000:]
