# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""nvidia-smi's CSV as NVIDIA documents it, /proc/PID/cgroup to VMID, device files and library versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _gpu_smi as S

GPU_LINES = ("0, GPU-1f3b2c4d-0000-4a5b-8c9d-0123456789ab, NVIDIA A100-SXM4-40GB, 550.54.15, 87, 30123, 40960, 00000000:2A:00.0\n"
             "1, GPU-2f3b2c4d-0000-4a5b-8c9d-0123456789ab, NVIDIA GeForce RTX 3090, 550.54.15, [N/A], [Not Supported], 24576, 00000000:41:00.0\n")


def test_the_queries_are_nvidias_documented_ones() -> None:
    assert S.query_argv("nvidia-smi", "gpu") == [
        "nvidia-smi", "--query-gpu=index,uuid,name,driver_version,utilization.gpu,memory.used,memory.total,pci.bus_id",
        "--format=csv,noheader,nounits"]
    assert S.query_argv("/usr/bin/nvidia-smi", "apps") == [
        "/usr/bin/nvidia-smi", "--query-compute-apps=pid,gpu_uuid,process_name,used_memory", "--format=csv,noheader,nounits"]


def test_gpu_rows_with_values_not_reported() -> None:
    rows = S.parse_csv(GPU_LINES, S.GPU_FIELDS)
    assert rows[0] == {"index": 0, "uuid": "GPU-1f3b2c4d-0000-4a5b-8c9d-0123456789ab", "name": "NVIDIA A100-SXM4-40GB",
                       "driver_version": "550.54.15", "utilization": 87, "memory_used": 30123, "memory_total": 40960,
                       "pci_bus_id": "00000000:2A:00.0"}
    assert rows[1]["utilization"] is None and rows[1]["memory_used"] is None and rows[1]["memory_total"] == 24576


def test_a_name_with_a_comma_stays_one_value() -> None:
    rows = S.parse_csv("3, GPU-x, Tesla T4, rev 2, 535.104.05, 0, 0, 15360, 00000000:3B:00.0\n", S.GPU_FIELDS)
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
    os.environ["GPUS"] = "0, GPU-a, NVIDIA A100, 550.54.15, 50, 520, 40960, 00000000:07:00.0\n"
    try:
        report = S.node_report(program, str(proc))
    finally:
        del os.environ["GPUS"]
    assert report["driver_version"] == "550.54.15" and report["error"] is None
    assert [(p["pid"], p["vmid"], p["cgroup_known"]) for p in report["processes"]] == [(101, 200, True), (102, None, True), (103, None, False)]


def test_main_prints_one_json_line_when_sent_on_stdin(tmp_path: Path) -> None:
    """As the node runs it: ``python3 - --nvidia-smi PROGRAM`` with the file on standard input."""
    program = _fake_smi(tmp_path, 'case "$1" in --query-gpu=*) echo "0, GPU-a, X, 550.54.15, 0, 0, 1, 00000000:07:00.0";; *) : ;; esac\n')
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


STANDIN_LOG = Path(__file__).resolve().parents[4] / "tools" / "pve_standin" / "node_kernel_log.py"
XID_LINE = "NVRM: Xid (PCI:0000:07:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def _journal(tmp_path: Path, lines: list[str]) -> list[str]:
    """The stand-in's journalctl over a file of ``lines``, as gpu_info's node_kernel_log would give it."""
    log = tmp_path / "kernel.log"
    log.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return [sys.executable, str(STANDIN_LOG), "--file", str(log), "-k", "-o", "short-iso-precise", "--no-pager", "--since=-24h"]


def test_the_kernel_log_keeps_the_last_200_xid_lines_of_the_command(tmp_path: Path) -> None:
    now = time.time()
    lines = [f"2020-01-01T00:00:00.000000+0000 pve1 kernel: {XID_LINE}"]  # older than --since: journalctl leaves it out
    for i in range(250):
        lines += [f"{_stamp(now - 3600 + i)} pve1 kernel: usb 2-3: reset", f"{_stamp(now - 3600 + i)} pve1 kernel: NVRM: Xid (PCI:0000:07:00): {i}, x"]
    log = S.kernel_log(24, _journal(tmp_path, lines))
    assert log["error"] is None and log["command"][0] == sys.executable
    assert len(log["lines"]) == 200 and all("NVRM: Xid" in line for line in log["lines"])
    assert log["lines"][0].endswith("): 50, x") and log["lines"][-1].endswith("): 249, x")


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + ".000000+0000"


def test_no_xid_lines_is_an_empty_list_not_an_error(tmp_path: Path) -> None:
    assert S.kernel_log(24, _journal(tmp_path, [])) == {"command": _journal(tmp_path, []), "lines": [], "error": None}


def test_without_journalctl_dmesg_answers_and_a_log_nobody_prints_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dmesg = _fake_smi(tmp_path, f'echo "2024-03-05T14:22:07,123456+01:00 {XID_LINE}"; echo "2024-03-05T14:22:08,0+01:00 eth0: up"\n')
    failing = tmp_path / "journalctl"
    failing.write_text("#!/bin/sh\necho 'No journal files were found.' >&2; exit 1\n", encoding="utf-8")
    failing.chmod(0o755)
    monkeypatch.setattr(S, "JOURNALCTL", (str(failing), "-k"))
    monkeypatch.setattr(S, "DMESG", (dmesg, "--time-format", "iso"))
    log = S.kernel_log(6)
    assert log == {"command": [dmesg, "--time-format", "iso"], "lines": [f"2024-03-05T14:22:07,123456+01:00 {XID_LINE}"], "error": None}
    monkeypatch.setattr(S, "DMESG", ("/nonexistent/dmesg",))
    log = S.kernel_log(6)
    assert log["lines"] == [] and log["command"] is None
    assert log["error"] == f"{failing} -k --since=-6h exited 1: No journal files were found.; /nonexistent/dmesg: not found"


@pytest.mark.parametrize(("text", "version"), [
    ("550.54.14\n", "550.54.14"),  # /sys/module/nvidia/version
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version:  gcc version 12.2.0\n", "550.54.14"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue May 20\n", "575.57.08"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  177.80  Wed Oct  1 14:43:46 PDT 2008\n", "177.80"),
    ("", None), (None, None), ("garbage\n", None),
])
def test_the_loaded_modules_version(text: str | None, version: str | None) -> None:
    assert S.module_version(text) == version


def _driver_tree(root: Path, loaded: str | None, libraries: tuple[str, ...], link: str | None) -> None:
    if loaded:
        (root / "sys" / "module" / "nvidia").mkdir(parents=True)
        (root / "sys" / "module" / "nvidia" / "version").write_text(loaded + "\n", encoding="utf-8")
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    for name in libraries:
        (lib / name).write_text("", encoding="utf-8")
    if link:
        os.symlink(link, lib / "libnvidia-ml.so.1")


def test_a_driver_upgraded_since_boot_shows_two_versions(tmp_path: Path) -> None:
    _driver_tree(tmp_path, "550.54.14", ("libnvidia-ml.so.550.54.14", "libnvidia-ml.so.550.90.07", "libcuda.so.550.90.07"),
                 "libnvidia-ml.so.550.90.07")
    assert S.driver_report(str(tmp_path)) == {"loaded": "550.54.14", "installed": "550.90.07", "module_installed": None}


def test_the_proc_file_when_sysfs_has_no_version_and_the_newest_library_without_a_link(tmp_path: Path) -> None:
    _driver_tree(tmp_path, None, ("libcuda.so.550.9.1", "libcuda.so.550.10.1", "libcuda.so.1"), None)
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "proc" / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.10.1  Thu Feb 22 01:44:30 UTC 2024\n", encoding="utf-8")
    assert S.driver_report(str(tmp_path)) == {"loaded": "550.10.1", "installed": "550.10.1", "module_installed": None}


def test_no_driver_at_all(tmp_path: Path) -> None:
    assert S.driver_report(str(tmp_path)) == {"loaded": None, "installed": None, "module_installed": None}
    assert S.boot_time(str(tmp_path)) is None


def test_main_adds_the_driver_and_the_kernel_log_when_asked(tmp_path: Path) -> None:
    """As gpu_info's action runs it on the node: the new flags, the file on standard input."""
    program = _fake_smi(tmp_path, 'case "$1" in --query-gpu=*) echo "0, GPU-a, X, 550.54.14, 0, 0, 1, 00000000:07:00.0";; *) : ;; esac\n')
    root = tmp_path / "root"
    _driver_tree(root, "550.54.14", ("libnvidia-ml.so.550.90.07",), "libnvidia-ml.so.550.90.07")
    (root / "proc").mkdir()
    (root / "proc" / "stat").write_text("cpu  1 2 3\nbtime 1709640000\nprocesses 42\n", encoding="utf-8")
    command = _journal(tmp_path, [f"{_stamp(time.time() - 60)} pve1 kernel: {XID_LINE}"])
    argv = [sys.executable, "-", "--nvidia-smi", program, "--driver", "--xid-hours", "24", "--kernel-log-command", json.dumps(command),
            "--root", str(root)]
    report = json.loads(subprocess.run(argv, input=Path(S.__file__).read_bytes(), capture_output=True, check=True).stdout)
    assert report["gpus"][0]["pci_bus_id"] == "00000000:07:00.0" and report["error"] is None
    assert report["driver"] == {"loaded": "550.54.14", "installed": "550.90.07", "module_installed": None}
    assert report["kernel_log"]["lines"][0].endswith(XID_LINE) and report["boot_time"] == 1709640000
    assert abs(report["now"] - time.time()) < 60 and report["node_name"] == os.uname().nodename
    plain = json.loads(subprocess.run([sys.executable, "-", "--nvidia-smi", program, "--driver"], input=Path(S.__file__).read_bytes(),
                                      capture_output=True, check=True).stdout)
    assert "driver" in plain and "kernel_log" not in plain and "now" not in plain
