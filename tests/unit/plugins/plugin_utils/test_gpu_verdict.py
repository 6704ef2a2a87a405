# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What the node's and the container's views of the GPUs mean for a launch."""

from __future__ import annotations

import typing as t

from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _gpu_verdict as V

U = [f"GPU-{i}0000000-0000-4000-8000-000000000000" for i in range(4)]
NODE = {
    "driver_version": "550.54.15", "error": None,
    "gpus": [{"index": i, "uuid": U[i], "name": "NVIDIA A100", "utilization": u, "memory_used": m}
             for i, (u, m) in enumerate(((95, 30000), (40, 2000), (0, 0), (100, 39000)))],
    "processes": [{"pid": 11, "gpu_uuid": U[0], "process_name": "/usr/bin/python3", "used_memory": 30000, "vmid": 200},
                  {"pid": 22, "gpu_uuid": U[1], "process_name": "python", "used_memory": 2000, "vmid": 201},
                  {"pid": 33, "gpu_uuid": U[1], "process_name": "xyz", "used_memory": None, "vmid": None}],
}
HOST = {"gpus": [{"index": i, "uuid": U[i]} for i in range(4)], "nvidia_smi": "/usr/bin/nvidia-smi", "error": None, "held": {},
        "device_files": [{"path": p, "present": True, "char_device": True} for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0")],
        "libraries": {"libcuda.so": ["550.54.15"], "libnvidia-ml.so": ["550.54.15"]}}


def test_each_process_is_named_with_its_container() -> None:
    found = V.busy(NODE, HOST, 200)
    assert [(f["index"], f["kind"], f["vmid"], f["pid"]) for f in found] == [
        (0, "this_container", 200, 11), (1, "other_container", 201, 22), (1, "node", None, 33), (3, "unnamed", None, None)]
    assert found[0]["message"] == f"GPU 0 ({U[0]}, NVIDIA A100) is in use by PID 11 (/usr/bin/python3, 30000 MiB) in CT 200 (this container)"
    assert found[1]["message"].endswith("in use by PID 22 (python, 2000 MiB) in CT 201")
    assert found[2]["message"].endswith("in use by PID 33 (xyz, memory unknown) in the node itself")
    assert found[3]["message"].startswith(f"GPU 3 ({U[3]}, NVIDIA A100) is busy (100 % utilisation, 39000 MiB used) with no process the node can name")


def test_only_the_gpus_the_container_can_open_count() -> None:
    host = dict(HOST, gpus=[{"index": 0, "uuid": U[2]}])
    assert V.busy(NODE, host, 200) == []
    assert [f["index"] for f in V.busy(NODE, dict(HOST, gpus=[{"index": 0, "uuid": U[1]}]), 201)] == [1, 1]


def test_a_gpu_of_a_session_of_this_container_says_so() -> None:
    found = V.busy(NODE, dict(HOST, held={U[0]: "train-a"}), 200)
    assert found[0]["session_name"] == "train-a" and found[0]["message"].endswith("in session train-a of this container")


def test_what_blocks_which_request() -> None:
    found = V.busy(NODE, HOST, 200)
    assert V.blocking(found, None) == found and V.blocking(found, ("all", None)) == found
    assert V.blocking(found, ("count", 2)) == []
    assert [f["index"] for f in V.blocking(found, ("ids", ("2", U[3])))] == [3]


def test_no_problems_without_a_request_or_with_everything_there() -> None:
    assert V.problems(NODE, {}, None) == []
    assert V.problems(NODE, HOST, ("count", 2)) == []


def test_problems_name_the_fix() -> None:
    host = dict(HOST, device_files=[{"path": "/dev/nvidiactl", "present": True, "char_device": True},
                                    {"path": "/dev/nvidia-uvm", "present": False, "char_device": False}],
                libraries={"libcuda.so": ["535.104.05"], "libnvidia-ml.so": []})
    found = V.problems(NODE, host, ("count", 8))
    assert found[0].startswith("device files missing in the container: /dev/nvidia-uvm: give the container the device files")
    assert "nvidia-modprobe -u -c=0" in found[0]
    assert found[1].startswith("no GPU device file (/dev/nvidia0, ...) in the container")
    assert found[2].startswith("libcuda.so.535.104.05 in the container does not match the node's driver 550.54.15")
    assert found[3].startswith("no libnvidia-ml.so.* in the container: install the NVIDIA driver's user-space part of version 550.54.15")
    assert found[4] == "8 GPUs asked for, the container can open 4: ask for fewer, or give it more GPUs"


def test_a_container_whose_nvidia_smi_fails_or_is_missing() -> None:
    failing = dict(HOST, gpus=[], error="nvidia-smi exited 18: Failed to initialize NVML: Driver/library version mismatch")
    assert V.problems(NODE, failing, ("all", None))[0] == f"the container cannot list its GPUs: {failing['error']}"
    assert V.problems(NODE, dict(HOST, nvidia_smi=None), ("all", None))[0].startswith("nvidia-smi is not found in the container")
    assert V.where(None, 200) == "the node itself" and V.where(7, 200) == "CT 7"


def _access(path: str, **more: t.Any) -> dict[str, t.Any]:
    item = {"path": path, "mode": "0660", "owner": "root:root", "device": "195:0", "user": "trainer", "opened": False,
            "failure": "open", "errno": None, "error": None}
    item.update(more)
    return item


def test_device_files_the_user_cannot_open_name_the_error_and_its_fix() -> None:
    access = [_access("/dev/nvidiactl", device="195:255", errno="EACCES", error="Permission denied"),
              _access("/dev/nvidia0", errno="EACCES", error="Permission denied"),
              _access("/dev/nvidia-uvm", device="511:0", mode="0666", errno="EPERM", error="Operation not permitted"),
              _access("/dev/nvidia1", device="195:1", mode="0666", errno="EPERM", error="Operation not permitted"),
              _access("/dev/nvidia2", device="195:2", mode="0666", errno="ENXIO", error="No such device or address"),
              _access("/dev/nvidia3", device="195:3", mode="0666", opened=True, failure=None)]
    found = V.access_problems(access)
    assert found == [
        "cannot open /dev/nvidiactl (c 195:255, 0660 root:root), /dev/nvidia0 (c 195:0, 0660 root:root) as user trainer in the "
        "container: EACCES, no permission: give the device files a mode user trainer can open, in the container's config: "
        "devN: /dev/nvidiactl,mode=0666 (one devN line per file), or gid= of a group user trainer is in "
        "(devN: /dev/nvidiactl,gid=GID,mode=0660); a file bind-mounted with lxc.mount.entry keeps the node's mode",
        "cannot open /dev/nvidia-uvm (c 511:0, 0666 root:root), /dev/nvidia1 (c 195:1, 0666 root:root) as user trainer in the "
        "container: EPERM, not allowed by the container's device cgroup: allow the devices in the container's config "
        "(lxc.cgroup2.devices.allow: c 195:* rwm, lxc.cgroup2.devices.allow: c 511:* rwm; nvidia-uvm's major is the node's own: "
        "see /proc/devices there), or pass each file with devN: (devN: /dev/nvidia-uvm, Proxmox VE 8.1+), which adds those "
        "lines; then restart the container",
        "cannot open /dev/nvidia2 (c 195:2, 0666 root:root) as user trainer in the container: ENXIO, no driver behind it: on "
        "the node, load the NVIDIA driver for them (nvidia-smi there lists the GPUs; nvidia-modprobe -u -c=0 for "
        "/dev/nvidia-uvm), and give the container the node's device files (their numbers: ls -l /dev/nvidia* on the node)"]
    assert V.problems(NODE, dict(HOST, device_access=access), ("all", None)) == found
    assert V.problems(NODE, dict(HOST, device_access=access), None) == []


def test_other_reasons_a_device_file_does_not_open() -> None:
    as_root = V.access_problems([_access("/dev/nvidia0", user="root", errno="ENODEV", error="No such device")])
    assert as_root[0].startswith("cannot open /dev/nvidia0 (c 195:0, 0660 root:root) as root in the container: ENODEV, no driver behind it: on the node")
    assert V.access_problems([_access("/dev/nvidia0", failure="no_user", error="user trainer does not exist")]) == [
        "cannot open the GPU device files as user trainer in the container: user trainer does not exist: create user trainer "
        "in the container, or fix job_user (tmux_session's user)"]
    assert V.access_problems([_access("/dev/nvidia0", failure="switch", error="cannot become user trainer: Operation not permitted "
                                      "(this runs as alice)")])[0].endswith("(this runs as alice): run gpu_info as root in the container (become: true)")
    assert V.access_problems([_access("/dev/nvidia0", failure="timeout", error="opening it did not return within 30 s")]) == [
        "cannot open /dev/nvidia0 (c 195:0, 0660 root:root) as user trainer in the container: opening it did not return within "
        "30 s: the node's NVIDIA driver does not answer: check the node (nvidia-smi, dmesg)"]
    assert V.access_problems([_access("/dev/nvidia0", errno="EBUSY", error="Device or resource busy")]) == [
        "cannot open /dev/nvidia0 (c 195:0, 0660 root:root) as user trainer in the container: EBUSY, Device or resource busy: "
        "check these files on the node (ls -l /dev/nvidia*) and the container's device lines in its config"]


def test_a_cuda_probe_that_failed_is_a_problem_with_its_error_and_fix() -> None:
    failed = {"ran": True, "ok": False, "visible_devices": f"{U[0]},{U[1]}", "call": "cuInit", "code": 999, "name": "CUDA_ERROR_UNKNOWN",
              "text": "unknown error", "device": None, "fix": "load nvidia-uvm on the node (nvidia-modprobe -u -c=0), then restart the container"}
    found = V.problems(NODE, dict(HOST, cuda=failed), ("count", 2))
    assert len(found) == 1 and found[0].startswith("CUDA cannot initialise the job's GPUs for the job: cuInit failed with CUDA_ERROR_UNKNOWN (999"), found
    assert "nvidia-modprobe -u -c=0" in found[0]
    assert V.problems(NODE, dict(HOST, cuda={"ran": False, "reason": "no libcuda"}), ("count", 2)) == []
    assert V.problems(NODE, dict(HOST, cuda={"ran": True, "ok": True, "devices": []}), ("count", 2)) == []
