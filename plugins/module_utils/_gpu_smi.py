# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What the host this runs on sees of its NVIDIA GPUs, through ``nvidia-smi`` and ``/proc``.

The one reader of nvidia-smi's output in the collection. It runs in two places:

* in a container (or any host), by ``gpu_info`` and ``tmux_session``: the GPUs that host can open, their
  utilisation and memory (visible in a container too), its device files and its user-space driver libraries;
* on the Proxmox VE node, sent on the standard input of ``python3 -`` by ``gpu_info``'s action
  (``main`` prints ``node_report`` as JSON): the same GPUs, and each compute process with the container it
  belongs to. The driver knows processes only by their PID in the node's PID namespace, so inside a
  container ``--query-compute-apps`` lists nothing; only the node can name them, from ``/proc/PID/cgroup``.
  Asked for (``--driver``, ``--xid-hours N``), also the driver's versions (``driver_report``: the loaded kernel
  module's, the installed user-space driver's and the module's on disk) and the driver's ``NVRM: Xid`` lines of
  the node's kernel log (``kernel_log``), which a container cannot read; ``_gpu_xid`` reads them on the controller.

Queries and formats are NVIDIA's documented ones: ``--query-gpu=...`` and ``--query-compute-apps=...`` with
``--format=csv,noheader,nounits`` (one line per item, values separated by ", ", memory in MiB,
utilisation in %, ``[N/A]`` or ``[Not Supported]`` for a value the GPU does not report).
Standard library only: the node may have nothing else.
"""

from __future__ import annotations

import glob
import json
import os
import re
import stat
import subprocess
import sys
import time
import typing as t

GPU_FIELDS = ("index", "uuid", "name", "driver_version", "utilization.gpu", "memory.used", "memory.total", "pci.bus_id")
APP_FIELDS = ("pid", "gpu_uuid", "process_name", "used_memory")
FORMAT = "--format=csv,noheader,nounits"
_NUMERIC = frozenset(("index", "utilization.gpu", "memory.used", "memory.total", "pid", "used_memory"))
_KEYS = {"utilization.gpu": "utilization", "memory.used": "memory_used", "memory.total": "memory_total", "pci.bus_id": "pci_bus_id"}
# Proxmox VE (cgroup v2): 0::/lxc/200/ns/...; LXC 4+ elsewhere: lxc.payload.200 (v1 or v2), lxc.payload.200-1 when
# an older cgroup of that name was left over. Not the monitor (lxc.monitor.200, lxc.monitor/200), which runs on the node.
_CGROUP_VMID = re.compile(r"(?:^|/)lxc(?:/|\.payload[./])([0-9]+)(?:-[0-9]+)?(?:/|$)")
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64",
                "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")
LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TIMEOUT = 30
# The kernel log as the node keeps it: systemd's journal (with times to the microsecond and the UTC offset), else the
# kernel's ring buffer (since boot). The driver's fault reports start with "NVRM: Xid".
JOURNALCTL = ("journalctl", "-k", "-o", "short-iso-precise", "--no-pager")
DMESG = ("dmesg", "--time-format", "iso")
XID_MARK = "NVRM: Xid"
KERNEL_LOG_LINES = 200
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+){1,2}")


def query_argv(nvidia_smi: str, what: str) -> list[str]:
    """``nvidia-smi --query-gpu=...`` (``what`` gpu) or ``--query-compute-apps=...`` (apps), CSV without header or units."""
    fields = GPU_FIELDS if what == "gpu" else APP_FIELDS
    option = "--query-gpu=" if what == "gpu" else "--query-compute-apps="
    return [nvidia_smi, option + ",".join(fields), FORMAT]


def _value(field: str, text: str) -> t.Any:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):  # [N/A], [Not Supported], [Insufficient Permissions]
        return None
    if field in _NUMERIC:
        try:
            return int(float(text))
        except ValueError:
            return None
    return text


def parse_csv(text: str, fields: t.Sequence[str]) -> list[dict[str, t.Any]]:
    """Rows of ``--format=csv,noheader,nounits`` output as dicts (keys: the field names, dots as in ``_KEYS``)."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split(", ")
        if len(values) != len(fields):  # a name with ", " in it: the name is the only free-text field
            extra = len(values) - len(fields)
            at = list(fields).index("name") if "name" in fields and extra > 0 else -1
            if at < 0:
                continue
            values[at:at + extra + 1] = [", ".join(values[at:at + extra + 1])]
        rows.append({_KEYS.get(field, field): _value(field, value) for field, value in zip(fields, values)})
    return rows


def find_program(name: str) -> str | None:
    """``name`` itself when it is a path, else found in the search path (pct gives containers a short PATH)."""
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    for folder in (os.environ.get("PATH", "") + ":" + SEARCH_PATH).split(":"):
        candidate = os.path.join(folder or ".", name)
        if folder and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def run(argv: t.Sequence[str]) -> tuple[int, str]:
    """Exit status and output (stdout, then stderr) of a query; 127 when it cannot run."""
    try:
        proc = subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    text = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        text = (text + proc.stderr.decode("utf-8", "replace")).strip()
    return proc.returncode, text


def vmid_of_cgroup(text: str) -> int | None:
    """The VMID of the LXC container whose cgroup ``/proc/PID/cgroup`` names, or None (the node itself)."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        match = _CGROUP_VMID.search(path)
        if match:
            return int(match.group(1))
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def gpus(nvidia_smi: str = "nvidia-smi") -> dict[str, t.Any]:
    """``{"nvidia_smi", "gpus", "driver_version", "error"}`` for this host; no nvidia-smi: no GPU, no error."""
    program = find_program(nvidia_smi)
    if program is None:
        return {"nvidia_smi": None, "gpus": [], "driver_version": None, "error": None}
    rc, text = run(query_argv(program, "gpu"))
    if rc != 0:
        return {"nvidia_smi": program, "gpus": [], "driver_version": None, "error": f"{' '.join(query_argv(program, 'gpu'))} exited {rc}: {text}"}
    rows = parse_csv(text, GPU_FIELDS)
    versions = sorted({row["driver_version"] for row in rows if row.get("driver_version")})
    return {"nvidia_smi": program, "gpus": rows, "driver_version": versions[0] if versions else None, "error": None}


def processes(program: str, proc: str = "/proc") -> tuple[list[dict[str, t.Any]], str | None]:
    """The compute processes as this host's PID namespace sees them, each with the container it belongs to."""
    rc, text = run(query_argv(program, "apps"))
    if rc != 0:
        return [], f"{' '.join(query_argv(program, 'apps'))} exited {rc}: {text}"
    found = []
    for row in parse_csv(text, APP_FIELDS):
        cgroup = _read(os.path.join(proc, str(row.get("pid")), "cgroup")) if row.get("pid") else None
        row["vmid"] = vmid_of_cgroup(cgroup) if cgroup is not None else None
        row["cgroup_known"] = cgroup is not None
        found.append(row)
    return found, None


def node_report(nvidia_smi: str = "nvidia-smi", proc: str = "/proc") -> dict[str, t.Any]:
    """What the node sees: its GPUs, and each compute process with its container (``vmid``, None: the node)."""
    report = gpus(nvidia_smi)
    report["processes"] = []
    if report["nvidia_smi"] and not report["error"]:
        report["processes"], report["error"] = processes(report["nvidia_smi"], proc)
    return report


def kernel_log(hours: int, command: t.Sequence[str] | None = None) -> dict[str, t.Any]:
    """The driver's ``NVRM: Xid`` lines of the kernel log of the last ``hours`` hours, as printed (the last 200).

    ``journalctl -k -o short-iso-precise --no-pager --since=-Nh``, else (no journal) ``dmesg --time-format iso``, whose
    ring buffer holds what it still has since boot; ``command`` (an argv) replaces both and runs as given. The lines
    are picked here, not by a shell pipe. ``{"command", "lines", "error"}``; ``error`` says why no command answered.
    """
    tries = [list(command)] if command else [[*JOURNALCTL, f"--since=-{int(hours)}h"], list(DMESG)]
    failures = []
    for argv in tries:
        program = find_program(argv[0]) if argv else None
        if program is None:
            failures.append(f"{argv[0] if argv else 'an empty command'}: not found")
            continue
        rc, text = run([program, *argv[1:]])
        if rc == 0:
            lines = [line for line in text.splitlines() if XID_MARK in line]
            return {"command": argv, "lines": lines[-KERNEL_LOG_LINES:], "error": None}
        failures.append(f"{' '.join(argv)} exited {rc}: {' '.join(text.split())[:200]}")
    return {"command": None, "lines": [], "error": "; ".join(failures)}


def module_version(text: str | None) -> str | None:
    """The version in ``/sys/module/nvidia/version`` (``550.54.14``) or in the first line of
    ``/proc/driver/nvidia/version`` (``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 ...``,
    ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build ...``)."""
    for line in (text or "").splitlines()[:1]:
        for word in line.split():
            if _VERSION.fullmatch(word):
                return word
    return None


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def installed_version(dirs: t.Sequence[str] = LIBRARY_DIRS) -> str | None:
    """The installed user-space driver's version: what ``libnvidia-ml.so.1`` (else ``libcuda.so.1``) points to
    (``libnvidia-ml.so.550.90.07``), else the newest ``libnvidia-ml.so.VERSION`` or ``libcuda.so.VERSION`` found."""
    for library in ("libnvidia-ml.so", "libcuda.so"):
        for folder in dirs:
            link = os.path.join(folder, library + ".1")
            target = os.path.basename(os.path.realpath(link)) if os.path.exists(link) else ""
            if target.startswith(library + ".") and _VERSION.fullmatch(target[len(library) + 1:]):
                return target[len(library) + 1:]
    found = sorted({version for versions in library_versions(dirs).values() for version in versions}, key=_version_key)
    return found[-1] if found else None


def module_on_disk(root: str = "/") -> str | None:
    """The version of the nvidia kernel module installed for the running kernel (``modinfo -F version nvidia``), or None."""
    program = find_program("modinfo")
    if program is None:
        return None
    rc, text = run([program, "-F", "version", *(["-b", root] if root != "/" else []), "nvidia"])
    return text.strip() if rc == 0 and _VERSION.fullmatch(text.strip()) else None


def driver_report(root: str = "/") -> dict[str, t.Any]:
    """``loaded``: the kernel module's version (``/sys/module/nvidia/version``, else ``/proc/driver/nvidia/version``);
    ``installed``: the user-space driver's (``installed_version``); ``module_installed``: ``module_on_disk``. Read
    under ``root`` (tests point it at a fake tree); None for what is not there (no driver loaded, none installed)."""
    def under(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    loaded = module_version(_read(under("/sys/module/nvidia/version"))) or module_version(_read(under("/proc/driver/nvidia/version")))
    return {"loaded": loaded, "installed": installed_version([under(folder) for folder in LIBRARY_DIRS]),
            "module_installed": module_on_disk(root)}


def boot_time(proc: str = "/proc") -> float | None:
    """When this host booted, in seconds since the epoch (``btime`` of ``/proc/stat``), for ``dmesg``'s times."""
    for line in (_read(os.path.join(proc, "stat")) or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def node_extras(xid_hours: int = 0, command: t.Sequence[str] | None = None, root: str = "/") -> dict[str, t.Any]:
    """The node's name, its driver's versions and (``xid_hours`` > 0) its kernel log's Xid lines with the node's
    clock (``now``) and ``boot_time``, so the controller judges the lines' times by the node's clock."""
    extras: dict[str, t.Any] = {"node_name": os.uname().nodename, "driver": driver_report(root)}
    if xid_hours > 0:
        extras.update(kernel_log=kernel_log(xid_hours, command), now=time.time(), boot_time=boot_time(os.path.join(root, "proc")))
    return extras


def device_files(dev: str = "/dev") -> list[dict[str, t.Any]]:
    """NVIDIA's device files here: nvidiactl, nvidia-uvm, nvidia-uvm-tools and nvidiaN, each present or not."""
    numbered = (os.path.basename(path) for path in glob.glob(os.path.join(dev, "nvidia[0-9]*")))
    names = ["nvidiactl", "nvidia-uvm"] + sorted(numbered, key=lambda name: int(re.sub(r"\D", "", name) or 0))
    found = []
    for name in names:
        path = os.path.join(dev, name)
        try:
            char = stat.S_ISCHR(os.stat(path).st_mode)
            present = True
        except OSError:
            char = present = False
        found.append({"path": path, "present": present, "char_device": char})
    return found


def library_versions(dirs: t.Sequence[str] = LIBRARY_DIRS) -> dict[str, list[str]]:
    """The versions of NVIDIA's user-space libraries installed here (``libcuda.so.550.54.15``: 550.54.15)."""
    versions: dict[str, list[str]] = {}
    for library in LIBRARIES:
        found = set()
        for folder in dirs:
            for path in glob.glob(os.path.join(folder, library + ".*")):
                suffix = os.path.basename(path)[len(library) + 1:]
                if re.fullmatch(r"[0-9]+(\.[0-9]+){1,2}", suffix):
                    found.add(suffix)
        versions[library] = sorted(found)
    return versions


def host_report(nvidia_smi: str = "nvidia-smi") -> dict[str, t.Any]:
    """What a container (or any host) has for a GPU job: its GPUs, device files and user-space libraries."""
    return dict(gpus(nvidia_smi), device_files=device_files(), libraries=library_versions())


def _option(argv: t.Sequence[str], name: str, default: str | None = None) -> str | None:
    return argv[list(argv).index(name) + 1] if name in argv[:-1] else default


def main(argv: t.Sequence[str]) -> int:
    """``python3 - [--nvidia-smi PATH] [--host]``: ``node_report`` (or ``host_report``) as one JSON line.

    With ``--driver`` or ``--xid-hours N`` (and ``--kernel-log-command JSON_ARGV``, ``--root DIR``), the node's report
    has ``node_extras`` too; a call without them gets what it always got."""
    program = _option(argv, "--nvidia-smi") or "nvidia-smi"
    if "--host" in argv:
        report = host_report(program)
    else:
        report = node_report(program)
        if "--driver" in argv or "--xid-hours" in argv:
            command = _option(argv, "--kernel-log-command")
            report.update(node_extras(int(_option(argv, "--xid-hours") or 0), json.loads(command) if command else None,
                                      _option(argv, "--root") or "/"))
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    main(sys.argv[1:])
