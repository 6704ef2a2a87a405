# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the action plugin of trainops.pct_launch.gpu_info: the node's Xid errors and driver drift, asked in the
one call to the node that lists its GPUs (``node_command`` with ``_gpu_smi.py`` on standard input), and a host that is
its own node."""

from __future__ import annotations

import json
import time
import typing as t
from unittest.mock import MagicMock

import pytest

from ansible_collections.trainops.pct_launch.plugins.action.gpu_info import MODULE_NAME, ActionModule, driver_drift
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._gpu_node import node_argv, node_program

NOW = time.time()
GPU = {"index": 0, "uuid": "GPU-a", "name": "NVIDIA A100", "driver_version": "550.54.14", "utilization": 0, "memory_used": 0,
       "memory_total": 40960, "pci_bus_id": "00000000:2A:00.0"}
XID_LINE = "NVRM: Xid (PCI:0000:2a:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + ".000000+0000"


def node_answer(gpus: list[dict[str, t.Any]], lines: list[str], loaded: str = "550.54.14", installed: str = "550.54.14") -> dict[str, t.Any]:
    """What ``_gpu_smi.py --driver --xid-hours N`` prints on the node."""
    return {"gpus": gpus, "driver_version": "550.54.14" if gpus else None, "error": None, "processes": [], "nvidia_smi": "/usr/bin/nvidia-smi",
            "node_name": "pve1", "driver": {"loaded": loaded, "installed": installed, "module_installed": installed},
            "kernel_log": {"command": ["journalctl"], "lines": lines, "error": None}, "now": NOW, "boot_time": NOW - 86400 * 3}


class Node:
    """A pct connection's ``node_command``: records each call, answers with ``report``."""

    def __init__(self, report: dict[str, t.Any]) -> None:
        self.report = report
        self.calls: list[tuple[list[str], bytes | None]] = []
        self._shell = MagicMock()  # what ActionBase.run looks at

    def node_command(self, argv: list[str], in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        self.calls.append((argv, in_data))
        return 0, (json.dumps(self.report) + "\n").encode(), b""


def make_action(args: dict[str, t.Any], connection: t.Any, module: dict[str, t.Any] | None = None) -> tuple[ActionModule, list[dict[str, t.Any]]]:
    task = MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.action = MODULE_NAME
    action = ActionModule(task, connection, MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    calls: list[dict[str, t.Any]] = []

    def execute(**kwargs: t.Any) -> dict[str, t.Any]:
        calls.append(kwargs)
        return dict(module or {"changed": False, "gpus": [GPU], "nvidia_smi": "/usr/bin/nvidia-smi", "driver_version": "550.54.14",
                               "error": None, "processes": [], "device_files": [], "device_access": [], "libraries": {}, "held": {},
                               "node_name": "ct200", "driver": {"loaded": "550.54.14", "installed": "1.0", "module_installed": None}})

    action._execute_module = execute  # type: ignore[method-assign]  # pylint: disable=protected-access
    return action, calls


def test_the_node_argv_keeps_older_calls_and_adds_the_flags() -> None:
    assert node_argv("nvidia-smi") == ["python3", "-", "--nvidia-smi", "nvidia-smi", "--driver"]
    assert node_argv("/x/nvidia-smi", 6, ["/x/log", "-k"], "/fake") == [
        "python3", "-", "--nvidia-smi", "/x/nvidia-smi", "--driver", "--xid-hours", "6", "--kernel-log-command", '["/x/log", "-k"]',
        "--root", "/fake"]


def test_one_call_to_the_node_names_its_xids_and_the_drift() -> None:
    lines = [f"{_stamp(NOW - 600)} pve1 kernel: {XID_LINE}", f"{_stamp(NOW - 30 * 3600)} pve1 kernel: {XID_LINE}"]
    node = Node(node_answer([GPU], lines, installed="550.90.07"))
    action, calls = make_action({"node_kernel_log": ["/opt/standin/node-kernel-log", "-k"]}, node)
    result = action.run(task_vars={"inventory_hostname": "ct200", "pct_vmid": 200, "pct_node": "pve1"})
    [(argv, in_data)] = node.calls
    assert argv == ["python3", "-", "--nvidia-smi", "nvidia-smi", "--driver", "--xid-hours", "24",
                    "--kernel-log-command", '["/opt/standin/node-kernel-log", "-k"]'] and in_data == node_program()
    assert calls[0]["module_args"]["xid_hours"] == 0  # the node read its kernel log: the container need not
    [gpu] = result["xid"]
    assert (gpu["index"], gpu["uuid"], gpu["pci_bus_id"]) == (0, "GPU-a", "00000000:2A:00.0")
    assert [(e["xid"], e["pid"], e["process_name"]) for e in gpu["errors"]] == [(79, 1234, "python3")]  # 30 h ago: out of 24 h
    assert result["driver"] == {"loaded": "550.54.14", "installed": "550.90.07", "module_installed": "550.90.07", "drift": True}
    drift, xid = result["warnings"]
    assert drift == ("The NVIDIA driver on node pve1 changed: the loaded kernel module is 550.54.14, the installed driver 550.90.07 "
                     "(an upgrade since the node booted); GPU jobs may fail with \"Driver/library version mismatch\": reboot the node, "
                     "or load the installed module (rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia, then modprobe nvidia and "
                     "nvidia-modprobe -u -c=0) when no GPU is in use")
    assert xid.startswith("GPU 0 (00000000:2A:00.0) on node pve1 logged Xid 79 (GPU has fallen off the bus) at ")
    assert not set(result["node"]) & {"kernel_log", "driver", "now", "boot_time", "node_name"} and "kernel_log" not in result


def test_xid_hours_zero_reads_no_kernel_log_and_no_drift_no_warning() -> None:
    node = Node(node_answer([GPU], []))
    action, _calls = make_action({"xid_hours": 0}, node)
    result = action.run(task_vars={"pct_vmid": 200})
    assert "--xid-hours" not in node.calls[0][0] and result["xid"] == [] and result["warnings"] == []
    assert result["driver"]["drift"] is False


def test_a_node_without_gpus_still_reports_its_driver() -> None:
    node = Node(node_answer([], [], loaded="550.54.14", installed="535.104.05"))
    action, calls = make_action({}, node)
    result = action.run(task_vars={"pct_vmid": 200})
    assert calls == [] and result["container_checked"] is False and result["driver"]["drift"] is True
    assert "(a downgrade since the node booted)" in result["warnings"][0]


def test_an_unreadable_kernel_log_is_a_warning() -> None:
    report = node_answer([GPU], [])
    report["kernel_log"] = {"command": None, "lines": [], "error": "journalctl: not found; dmesg --time-format iso exited 1: dmesg: "
                                                                   "read kernel buffer failed: Operation not permitted"}
    result = make_action({}, Node(report))[0].run(task_vars={"pct_vmid": 200})
    assert result["warnings"] == ["Cannot read the kernel log of node pve1 for Xid errors: journalctl: not found; dmesg --time-format iso "
                                  "exited 1: dmesg: read kernel buffer failed: Operation not permitted; the node user needs root, or "
                                  "the systemd-journal group for journalctl (adm for dmesg)"]


def test_a_host_that_is_its_own_node_reads_them_in_the_module() -> None:
    module = dict(node_answer([GPU], [f"{_stamp(NOW - 60)} gpu1 kernel: {XID_LINE}"]), changed=False, device_files=[], device_access=[],
                  libraries={}, held={}, warnings=["a module warning"])
    action, calls = make_action({"xid_hours": 2}, MagicMock(spec=["_shell"]), module)
    result = action.run(task_vars={"inventory_hostname": "gpu1"})
    assert calls[0]["module_args"] == {"xid_hours": 2}
    assert [e["xid"] for e in result["xid"][0]["errors"]] == [79] and result["driver"]["drift"] is False
    assert result["warnings"][0] == "a module warning" and "on node pve1 logged Xid 79" in result["warnings"][1]
    assert "kernel_log" not in result and "now" not in result and "kernel_log" not in result["node"]


@pytest.mark.parametrize(("args", "words"), [
    ({"xid_hours": -1}, "Invalid xid_hours -1: it must not be negative"),
    ({"xid_hours": "a day"}, "Invalid xid_hours 'a day': "),
    ({"node_kernel_log": "journalctl -k"}, "Invalid node_kernel_log 'journalctl -k': give the program and its arguments as a list"),
])
def test_bad_options_fail_before_the_node_is_asked(args: dict[str, t.Any], words: str) -> None:
    node = Node(node_answer([GPU], []))
    result = make_action(args, node)[0].run(task_vars={"pct_vmid": 200})
    assert result["failed"] is True and result["msg"].startswith(words) and node.calls == []


@pytest.mark.parametrize(("raw", "drift"), [
    ({"loaded": "550.54.14", "installed": "550.54.14", "module_installed": "550.54.14"}, False),
    ({"loaded": "550.54.14", "installed": None, "module_installed": "550.90.07"}, True),  # the module on disk only
    ({"loaded": None, "installed": "550.90.07", "module_installed": None}, False),  # no driver loaded: nvidia-smi says so
    ({}, False), (None, False),
])
def test_drift_is_a_loaded_module_that_is_not_the_installed_one(raw: dict[str, t.Any] | None, drift: bool) -> None:
    driver, warning = driver_drift(raw, "pve1")
    assert driver["drift"] is drift and (warning is not None) is drift
