# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.gpu_info``: the node's view next to the container's.

On a container of the ``trainops.pct_launch.pct`` connection the node is asked through the connection
(``Connection.node_command``): ``python3 -`` there runs ``_gpu_smi.py`` (sent on its standard input), which
prints the node's GPUs and their processes, each with the container it belongs to. Then the module runs in
the container, and ``_gpu_verdict`` says what the two views mean. On any other host the module's own view is
the node's. Each container asks its node for itself (one ``node_command`` per container and task): hosts share no
answers. The same call brings the node's driver versions and the ``NVRM: Xid`` lines of its kernel log, which
``_gpu_xid`` names per GPU (``xid``) and ``driver_drift`` compares (``driver``, with a warning when they differ).
"""

from __future__ import annotations

import time
import typing as t

from ansible.plugins.action import ActionBase

from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_alloc import GpuError, parse_request
from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _gpu_xid
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._gpu_node import ask, can_ask
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._gpu_verdict import blocking, busy, problems
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._module_failure import module_answered, module_failure_cause
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_vars import host_node, host_vmid

MODULE_NAME = "trainops.pct_launch.gpu_info"
NODE_KEYS = ("gpus", "driver_version", "error", "processes")
# What the node program adds with --driver and --xid-hours (``_gpu_smi.node_extras``), read here, not returned in ``node``.
EXTRA_KEYS = ("node_name", "driver", "kernel_log", "now", "boot_time")
XID_HOURS = 24
# What the module would report in a container of a node without GPUs.
NO_GPU = {"gpus": [], "nvidia_smi": None, "driver_version": None, "error": None, "device_files": [], "device_access": [],
          "libraries": {}, "held": {}}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def driver_drift(raw: t.Mapping[str, t.Any] | None, node: str) -> tuple[dict[str, t.Any], str | None]:
    """``driver`` (``loaded``, ``installed``, ``module_installed``, ``drift``) and the warning when the loaded kernel
    module is not the installed driver (its user-space libraries', else the module's on disk)."""
    raw = raw or {}
    loaded = raw.get("loaded")
    others = [str(version) for version in (raw.get("installed"), raw.get("module_installed")) if version and version != loaded]
    driver = {"loaded": loaded, "installed": raw.get("installed"), "module_installed": raw.get("module_installed"),
              "drift": bool(loaded and others)}
    if not driver["drift"]:
        return driver, None
    new, old = _version_key(others[0]), _version_key(str(loaded))
    way = "an upgrade" if new > old else "a downgrade" if new < old else "a change"
    return driver, (f"The NVIDIA driver on node {node} changed: the loaded kernel module is {loaded}, the installed driver {others[0]} "
                    f"({way} since the node booted); GPU jobs may fail with \"Driver/library version mismatch\": reboot the node, or "
                    "load the installed module (rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia, then modprobe nvidia and "
                    "nvidia-modprobe -u -c=0) when no GPU is in use")


def node_log_options(args: t.Mapping[str, t.Any]) -> tuple[int, list[str] | None]:
    """``xid_hours`` and ``node_kernel_log``, checked (the module checks them too, but the node is asked first)."""
    try:
        hours = XID_HOURS if args.get("xid_hours") is None else int(args["xid_hours"])
    except (TypeError, ValueError) as exc:
        raise GpuError(f"Invalid xid_hours {args.get('xid_hours')!r}: {exc}; give a whole number of hours, 0 to read no kernel log") from exc
    log_argv = args.get("node_kernel_log")
    if hours < 0:
        raise GpuError(f"Invalid xid_hours {hours}: it must not be negative; 0 reads no kernel log")
    if log_argv is not None and (not isinstance(log_argv, (list, tuple)) or not log_argv or not all(isinstance(a, str) for a in log_argv)):
        raise GpuError(f"Invalid node_kernel_log {log_argv!r}: give the program and its arguments as a list of strings")
    return hours, list(log_argv) if log_argv else None


def node_health(node: dict[str, t.Any], hours: int, task_vars: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """``xid``, ``driver`` and their ``warnings`` from the node's report, whose extra keys it takes out of it."""
    extras = {key: node.pop(key, None) for key in EXTRA_KEYS}
    name = str(extras["node_name"] or host_node(task_vars) or "(the local node)")
    xids = _gpu_xid.of_node(dict(node, **extras), hours, time.time())
    driver, drift = driver_drift(extras["driver"], name)
    log = extras["kernel_log"] or {}
    warnings = ([drift] if drift else []) + _gpu_xid.warnings(xids, name)
    if hours > 0 and log.get("error"):
        warnings.append(f"Cannot read the kernel log of node {name} for Xid errors: {log['error']}; the node user needs root, "
                        "or the systemd-journal group for journalctl (adm for dmesg)")
    return {"xid": xids, "driver": driver, "warnings": warnings}


class ActionModule(ActionBase):
    """Ask the node, run the module on the target, and judge."""

    TRANSFERS_FILES = False

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """The report of the module, with the node's view and the verdicts."""
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        try:
            request = parse_request(args.get("gpus"))
            hours, log_argv = node_log_options(args)
        except GpuError as exc:
            return dict(result, failed=True, msg=str(exc))
        vmid, root = host_vmid(task_vars), str(args.get("node_root") or "/")
        node = ask(self._connection, str(args.get("node_nvidia_smi") or "nvidia-smi"), hours, log_argv, root) if can_ask(self._connection) else None
        if node is not None and request is None and not node.get("gpus") and not node.get("error"):
            # a node without GPUs has none to give its containers: nothing to look at in there (no pct call)
            health = node_health(node, hours, task_vars)
            return dict(result, changed=False, container_checked=False, node=node, busy=[], busy_uuids=[], blocking=[], problems=[],
                        **NO_GPU, **health)
        # in a container, the node has read its own kernel log: the module need not try
        host = self._execute_module(module_name=MODULE_NAME, module_args=dict(args, xid_hours=0) if node is not None else args,
                                    task_vars=task_vars)
        if not module_answered(host):
            where = f"container {vmid}" if vmid is not None else f"host {task_vars.get('inventory_hostname')}"
            return dict(host, msg=f"Cannot report the GPUs of {where}: {module_failure_cause(host)}")
        if host.get("failed"):
            return host
        if node is None:  # the host is its own node
            node = {key: host.get(key) for key in NODE_KEYS + EXTRA_KEYS}
        health = node_health(node, hours, task_vars)
        findings = busy(node, host, int(vmid) if vmid is not None else None,
                        int(args.get("busy_utilization", 10)), int(args.get("busy_memory", 512)))
        for key in ("processes",) + EXTRA_KEYS:
            host.pop(key, None)
        result.update(host, node=node, busy=findings, busy_uuids=sorted({str(item["uuid"]) for item in findings}),
                      blocking=blocking(findings, request), problems=problems(node, host, request), changed=False, container_checked=True)
        result.update(health, warnings=list(host.get("warnings") or []) + health["warnings"])
        return result
