# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What the node's and the container's views of the GPUs mean for a launch."""

from __future__ import annotations

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
