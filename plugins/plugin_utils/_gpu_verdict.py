# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What the node's and the container's view of the GPUs mean for a launch: busy GPUs and missing pieces.

Controller side of ``gpu_info`` (and ``tools/gpu_node_check.py``); pure Python, no Ansible import.
``node`` is ``_gpu_smi.node_report`` as the Proxmox VE node printed it, ``host`` what the module found on the
target (its GPUs, device files, user-space libraries, the GPUs its sessions hold).
"""

from __future__ import annotations

import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._cuda_probe import message as cuda_message

BUSY_UTILIZATION = 10  # %: a GPU this busy with no process named is in use by something
BUSY_MEMORY = 512  # MiB
HINT_DEVICES = ("give the container the device files with a mode its job's user can open (in its config: "
                "dev0: /dev/nvidia0,mode=0666, dev1: /dev/nvidiactl,mode=0666, dev2: /dev/nvidia-uvm,mode=0666; without "
                "mode= Proxmox VE makes them 0660 root:root), and on the node load nvidia-uvm "
                "(nvidia-modprobe -u -c=0) so that /dev/nvidia-uvm exists before the container starts")
# The fix for each reason a device file does not open (gpu_info's device_access: failure, or errno of a failed open).
FIX_EACCES = ("give the device files a mode user {user} can open, in the container's config: {example},mode=0666 "
              "(one devN line per file), or gid= of a group user {user} is in ({example},gid=GID,mode=0660); "
              "a file bind-mounted with lxc.mount.entry keeps the node's mode")
FIX_EPERM = ("allow the devices in the container's config ({allow}), or pass each file with devN: ({example}, "
             "Proxmox VE 8.1+), which adds those lines; then restart the container")
FIX_ENXIO = ("on the node, load the NVIDIA driver for them (nvidia-smi there lists the GPUs; nvidia-modprobe -u -c=0 "
             "for /dev/nvidia-uvm), and give the container the node's device files (their numbers: ls -l /dev/nvidia* "
             "on the node)")
WHY = {"EACCES": "no permission", "EPERM": "not allowed by the container's device cgroup",
       "ENXIO": "no driver behind it", "ENODEV": "no driver behind it"}


def where(vmid: int | None, own: int | None) -> str:
    """``CT 201``, ``CT 200 (this container)`` or ``the node itself``."""
    if vmid is None:
        return "the node itself"
    return f"CT {vmid} (this container)" if vmid == own else f"CT {vmid}"


def _name(gpu: t.Mapping[str, t.Any]) -> str:
    name = f", {gpu['name']}" if gpu.get("name") else ""
    return f"GPU {gpu.get('index')} ({gpu.get('uuid')}{name})"


def _mib(value: t.Any) -> str:
    return f"{value} MiB" if isinstance(value, int) else "memory unknown"


def _relevant(node: t.Mapping[str, t.Any], host: t.Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
    """The node's entries of the GPUs the target can open (all of the node's when the target lists none)."""
    seen = {gpu.get("uuid") for gpu in host.get("gpus") or []}
    gpus = [dict(gpu) for gpu in node.get("gpus") or [] if not seen or gpu.get("uuid") in seen]
    return gpus or [dict(gpu) for gpu in host.get("gpus") or []]


def busy(node: t.Mapping[str, t.Any], host: t.Mapping[str, t.Any], vmid: int | None,
         utilization: int = BUSY_UTILIZATION, memory: int = BUSY_MEMORY) -> list[dict[str, t.Any]]:
    """One finding per process on a GPU the target can open, and per such GPU busy with no process named."""
    held = host.get("held") or {}
    findings = []
    for gpu in _relevant(node, host):
        apps = [app for app in node.get("processes") or [] if app.get("gpu_uuid") == gpu.get("uuid")]
        for app in apps:
            owner = where(app.get("vmid"), vmid)
            kind = "node" if app.get("vmid") is None else "this_container" if app.get("vmid") == vmid else "other_container"
            session = held.get(gpu.get("uuid")) if kind == "this_container" else None
            what = f"session {session} of this container" if session else owner
            findings.append({"index": gpu.get("index"), "uuid": gpu.get("uuid"), "kind": kind, "vmid": app.get("vmid"),
                             "pid": app.get("pid"), "process_name": app.get("process_name"), "session_name": session,
                             "message": f"{_name(gpu)} is in use by PID {app.get('pid')} ({app.get('process_name')}, "
                                        f"{_mib(app.get('used_memory'))}) in {what}"})
        load, used = gpu.get("utilization"), gpu.get("memory_used")
        if not apps and ((isinstance(load, int) and load >= utilization) or (isinstance(used, int) and used >= memory)):
            unknown = "" if node.get("gpus") else "; the node was not asked, so processes are unknown"
            findings.append({"index": gpu.get("index"), "uuid": gpu.get("uuid"), "kind": "unnamed", "vmid": None, "pid": None,
                             "process_name": None, "session_name": None,
                             "message": f"{_name(gpu)} is busy ({load if load is not None else '?'} % utilisation, {_mib(used)} used) "
                                        "with no process the node can name (a VM with the GPU passed through, another node's "
                                        "view, or a process that is exiting)" + unknown})
    return findings


def blocking(findings: t.Sequence[t.Mapping[str, t.Any]], request: t.Any) -> list[t.Mapping[str, t.Any]]:
    """The findings that stand in a launch's way: every one, but none for a count (it takes free GPUs only)
    and only those of the named GPUs for a list."""
    if isinstance(request, (list, tuple)) and request and request[0] == "count":
        return []
    if isinstance(request, (list, tuple)) and request and request[0] == "ids":
        wanted = {str(item) for item in request[1]}
        return [item for item in findings if str(item.get("index")) in wanted or item.get("uuid") in wanted]
    return list(findings)


def _library_problems(node_version: str | None, libraries: t.Mapping[str, t.Sequence[str]]) -> list[str]:
    problems = []
    for library, versions in sorted(libraries.items()):
        if not versions:
            problems.append(f"no {library}.* in the container: install the NVIDIA driver's user-space part"
                            + (f" of version {node_version}" if node_version else "")
                            + " (for example NVIDIA-Linux-x86_64-VERSION.run --no-kernel-module, or the distribution's package of that version)")
        elif node_version and node_version not in versions:
            problems.append(f"{library}.{', '.join(versions)} in the container does not match the node's driver {node_version} "
                            f"(CUDA fails with \"API mismatch\"): install the user-space part of driver {node_version} in the container")
    return problems


def _files(items: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    """``/dev/nvidia0 (c 195:0, 0660 root:root), ...``."""
    return ", ".join(f"{item.get('path')} (c {item.get('device') or '?'}, {item.get('mode') or '?'} {item.get('owner') or '?'})"
                     for item in items)


def _access_fix(reason: str, items: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    """What to do about device files that did not open for ``reason`` (an errno name, or a failure of gpu_info's)."""
    user, example = items[0].get("user"), f"devN: {items[0].get('path')}"
    if reason == "EACCES":
        return FIX_EACCES.format(user=user, example=example)
    if reason == "EPERM":
        majors = sorted({str(item.get("device") or "?").partition(":")[0] for item in items}, key=lambda m: (len(m), m))
        allow = ", ".join(f"lxc.cgroup2.devices.allow: c {major}:* rwm" for major in majors)
        uvm = "; nvidia-uvm's major is the node's own: see /proc/devices there" if any(
            str(item.get("path")).endswith("/nvidia-uvm") for item in items) else ""
        return FIX_EPERM.format(allow=allow + uvm, example=example)
    if reason in ("ENXIO", "ENODEV"):
        return FIX_ENXIO
    if reason == "no_user":
        return f"create user {user} in the container, or fix job_user (tmux_session's user)"
    if reason == "switch":
        return "run gpu_info as root in the container (become: true)"
    if reason == "timeout":
        return "the node's NVIDIA driver does not answer: check the node (nvidia-smi, dmesg)"
    return "check these files on the node (ls -l /dev/nvidia*) and the container's device lines in its config"


def access_problems(access: t.Sequence[t.Mapping[str, t.Any]]) -> list[str]:
    """One problem per reason the job's device files did not open (gpu_info's ``device_access``), with its fix."""
    groups: dict[str, list[t.Mapping[str, t.Any]]] = {}
    for item in access:
        if not item.get("opened"):
            groups.setdefault(str(item.get("errno") or item.get("failure")), []).append(item)
    found = []
    for reason, items in groups.items():
        who = "root" if items[0].get("user") == "root" else f"user {items[0].get('user')}"
        cause = f"{reason}, {WHY[reason]}" if reason in WHY else (
            f"{reason}, {items[0].get('error')}" if items[0].get("errno") else str(items[0].get("error")))
        what = "the GPU device files" if reason in ("no_user", "switch") else _files(items)
        found.append(f"cannot open {what} as {who} in the container: {cause}: {_access_fix(reason, items)}")
    return found


def problems(node: t.Mapping[str, t.Any], host: t.Mapping[str, t.Any], request: t.Any) -> list[str]:
    """What a job asking for GPUs (``request`` from ``_gpu_alloc.parse_request``) would lack on the target."""
    if not request:
        return []
    found = []
    if node.get("error"):
        found.append(f"the node cannot list its GPUs: {node['error']}")
    if not host.get("nvidia_smi"):
        found.append("nvidia-smi is not found in the container: install the NVIDIA driver's user-space part there")
    elif host.get("error"):
        found.append(f"the container cannot list its GPUs: {host['error']}")
    devices = host.get("device_files") or []
    missing = [item["path"] for item in devices if not item.get("present") or not item.get("char_device")]
    gpu_files = [item for item in devices if item["path"].rsplit("/", 1)[-1][len("nvidia"):].isdigit() and item.get("char_device")]
    if missing:
        found.append(f"device files missing in the container: {', '.join(missing)}: {HINT_DEVICES}")
    if not gpu_files:
        found.append(f"no GPU device file (/dev/nvidia0, ...) in the container: {HINT_DEVICES}")
    found += access_problems(host.get("device_access") or [])
    failed = cuda_message(host.get("cuda") or {}, "the job's GPUs")
    if failed:
        found.append(failed)
    found += _library_problems(node.get("driver_version"), host.get("libraries") or {})
    visible = len(host.get("gpus") or [])
    if request[0] == "count" and host.get("gpus") is not None and not host.get("error") and request[1] > visible:
        found.append(f"{request[1]} GPUs asked for, the container can open {visible}: ask for fewer, or give it more GPUs")
    return found
