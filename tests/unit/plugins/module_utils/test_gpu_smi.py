# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""nvidia-smi's CSV as NVIDIA documents it, /proc/PID/cgroup to VMID, device files and library versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _gpu_smi as S

GPU_LINES = ("0, GPU-1f3b2c4d-0000-4a5b-8c9d-0123456789ab, NVIDIA A100-SXM4-40GB, 550.54.15, 87, 30123, 40960\n"
             "1, GPU-2f3b2c4d-0000-4a5b-8c9d-0123456789ab, NVIDIA GeForce RTX 3090, 550.54.15, [N/A], [Not Supported], 24576\n")


def test_the_queries_are_nvidias_documented_ones() -> None:
    assert S.query_argv("nvidia-smi", "gpu") == [
        "nvidia-smi", "--query-gpu=index,uuid,name,driver_version,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]
    assert S.query_argv("/usr/bin/nvidia-smi", "apps") == [
        "/usr/bin/nvidia-smi", "--query-compute-apps=pid,gpu_uuid,process_name,used_memory", "--format=csv,noheader,nounits"]


def test_gpu_rows_with_values_not_reported() -> None:
    rows = S.parse_csv(GPU_LINES, S.GPU_FIELDS)
    assert rows[0] == {"index": 0, "uuid": "GPU-1f3b2c4d-0000-4a5b-8c9d-0123456789ab", "name": "NVIDIA A100-SXM4-40GB",
                       "driver_version": "550.54.15", "utilization": 87, "memory_used": 30123, "memory_total": 40960}
    assert rows[1]["utilization"] is None and rows[1]["memory_used"] is None and rows[1]["memory_total"] == 24576


def test_a_name_with_a_comma_stays_one_value() -> None:
    rows = S.parse_csv("3, GPU-x, Tesla T4, rev 2, 535.104.05, 0, 0, 15360\n", S.GPU_FIELDS)
    assert rows[0]["name"] == "Tesla T4, rev 2" and rows[0]["driver_version"] == "535.104.05" and rows[0]["memory_total"] == 15360


def test_process_rows_and_blank_output() -> None:
    assert S.parse_csv("", S.APP_FIELDS) == [] and S.parse_csv("\n", S.APP_FIELDS) == []
    rows = S.parse_csv("4242, GPU-1f3b, /usr/bin/python3, 1024\n77, GPU-2f3b, python, [N/A]\n", S.APP_FIELDS)
    assert rows == [{"pid": 4242, "gpu_uuid": "GPU-1f3b", "process_name": "/usr/bin/python3", "used_memory": 1024},
                    {"pid": 77, "gpu_uuid": "GPU-2f3b", "process_name": "python", "used_memory": None}]


@pytest.mark.parametrize(("cgroup", "vmid"), [
    ("0::/lxc/200/ns/init.scope\n", 200),  # Proxmox VE 7+ (cgroup v2), the payload
    ("0::/lxc/201/ns/user.slice/user-0.slice/session-3.scope\n", 201),
    ("0::/lxc.monitor/200\n", None),  # the container's monitor runs on the node
    ("12:memory:/lxc.payload.670\n11:pids:/lxc.payload.670\n0::/\n", 670),  # LXC 4+ with cgroup v1 (the stand-in)
    ("0::/lxc.payload.105/init.scope\n", 105),
    ("9:name=systemd:/lxc.payload.670\n0::/lxc.payload.670/.lxc\n", 670),  # measured: a process pct exec started
    ("1:cpu:/lxc.payload.200-1\n0::/lxc.payload.200-1\n", 200),  # LXC's suffix for a left-over cgroup of the name
    ("0::/lxc.monitor.670\n", None),
    ("0::/lxc.payload/105\n", 105),
    ("0::/system.slice/ssh.service\n", None),
    ("0::/user.slice/user-0.slice/session-1.scope\n", None),
    ("0::/system.slice/lxc200.service\n", None),  # a unit's name is no container
    ("", None),
])
def test_the_container_of_a_process_from_its_cgroup(cgroup: str, vmid: int | None) -> None:
    assert S.vmid_of_cgroup(cgroup) == vmid


def test_no_nvidia_smi_is_no_gpu_and_no_error() -> None:
    assert S.gpus("/nonexistent/nvidia-smi") == {"nvidia_smi": None, "gpus": [], "driver_version": None, "error": None}
    assert S.find_program("no-such-program-xyz") is None


def _fake_smi(tmp_path: Path, script: str) -> str:
    program = tmp_path / "nvidia-smi"
    program.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    program.chmod(0o755)
    return str(program)


def test_a_failing_nvidia_smi_is_reported_with_its_words(tmp_path: Path) -> None:
    program = _fake_smi(tmp_path, 'echo "Failed to initialize NVML: Driver/library version mismatch"; exit 18\n')
    report = S.node_report(program)
    assert report["gpus"] == [] and report["processes"] == []
    assert report["error"].endswith("exited 18: Failed to initialize NVML: Driver/library version mismatch"), report


def test_node_report_names_the_container_of_each_live_process(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, cgroup in ((101, "0::/lxc/200/ns/init.scope\n"), (102, "0::/user.slice\n")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(cgroup, encoding="utf-8")
    apps = "101, GPU-a, python3, 500\\n102, GPU-a, /usr/bin/python3, 20\\n103, GPU-a, gone, 1\\n"
    program = _fake_smi(tmp_path, f'case "$1" in --query-gpu=*) printf "%s" "$GPUS";; *) printf "{apps}";; esac\n')
    os.environ["GPUS"] = "0, GPU-a, NVIDIA A100, 550.54.15, 50, 520, 40960\n"
    try:
        report = S.node_report(program, str(proc))
    finally:
        del os.environ["GPUS"]
    assert report["driver_version"] == "550.54.15" and report["error"] is None
    assert [(p["pid"], p["vmid"], p["cgroup_known"]) for p in report["processes"]] == [(101, 200, True), (102, None, True), (103, None, False)]


def test_main_prints_one_json_line_when_sent_on_stdin(tmp_path: Path) -> None:
    """As the node runs it: ``python3 - --nvidia-smi PROGRAM`` with the file on standard input."""
    program = _fake_smi(tmp_path, 'case "$1" in --query-gpu=*) echo "0, GPU-a, X, 550.54.15, 0, 0, 1";; *) : ;; esac\n')
    source = Path(S.__file__).read_bytes()
    out = subprocess.run([sys.executable, "-", "--nvidia-smi", program], input=source, capture_output=True, check=True).stdout
    report = json.loads(out)
    assert report["gpus"][0]["uuid"] == "GPU-a" and report["processes"] == [] and report["error"] is None


def test_device_files_and_library_versions(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia0", "nvidia10"):
        os.symlink("/dev/null", dev / name)  # a character device
    (dev / "nvidia1").write_text("", encoding="utf-8")  # not one
    found = {Path(item["path"]).name: (item["present"], item["char_device"]) for item in S.device_files(str(dev))}
    assert found == {"nvidiactl": (True, True), "nvidia-uvm": (False, False), "nvidia0": (True, True),
                     "nvidia1": (True, False), "nvidia10": (True, True)}
    assert [Path(item["path"]).name for item in S.device_files(str(dev))][2:] == ["nvidia0", "nvidia1", "nvidia10"]
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libcuda.so.550.54.15", "libcuda.so.1", "libcuda.so", "libnvidia-ml.so.535.104.05"):
        (lib / name).write_text("", encoding="utf-8")
    assert S.library_versions([str(lib)]) == {"libcuda.so": ["550.54.15"], "libnvidia-ml.so": ["535.104.05"]}
    assert S.library_versions([str(tmp_path / "none")]) == {"libcuda.so": [], "libnvidia-ml.so": []}
