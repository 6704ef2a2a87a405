# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A stand-in for NVIDIA's ``nvidia-smi``: the CSV query formats, driven by a JSON state file.

Installing it is copying two files: this program as ``<dir>/nvidia-smi`` (mode 0755, a ``#!/usr/bin/env python3`` line first: the source has none) and its state
as ``<dir>/nvidia-smi.json``. The state is found next to the program's real path
(``os.path.realpath(__file__)``), so a symlink ``/usr/local/bin/nvidia-smi`` to ``/opt/x/nvidia-smi``
reads ``/opt/x/nvidia-smi.json``. Standard library only; runs on python3.9+ (Debian 11 and newer).

State (JSON)::

    {"view": "node" | "container",
     "driver_version": "550.54.15",          # the kernel driver's version
     "library_version": "550.54.15",         # optional: user-space NVML; != driver -> mismatch, exit 18
     "driver_loaded": true,                  # false -> "couldn't communicate with the NVIDIA driver", exit 9
     "gpus": [{"index": 0, "uuid": "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
               "name": "NVIDIA A100-SXM4-40GB", "pci_bus_id": "00000000:07:00.0",
               "memory_total": 40960, "memory_used": 0, "utilization": 0}],     # MiB, MiB, %
     "processes": [{"pid": 12345, "gpu_uuid": "GPU-...", "used_memory": 1024}]}  # host PIDs, MiB

Views:

- ``node``: ``--query-compute-apps`` lists the state's processes whose PID exists in /proc (a dead
  PID, or a zombie, disappears, as the driver forgets a process that ended). ``process_name`` is argv[0] of
  /proc/PID/cmdline, falling back to /proc/PID/comm. A GPU's ``memory.used`` is its
  ``memory_used`` plus the ``used_memory`` of its live processes.
- ``container``: ``--query-compute-apps`` lists nothing: the driver knows processes by their PID in
  the host's PID namespace only. Utilisation and memory are visible as on the node: the state
  should carry the node's totals in ``memory_used`` (processes listed in a container state are
  counted into ``memory.used`` without a liveness check, since their PIDs are host PIDs).

Options: ``--query-gpu=``, ``--query-compute-apps=``, ``--format=csv[,noheader][,nounits]``,
``-L``/``--list-gpus``, ``-i``/``--id=`` (index or UUID, comma-separated), ``--help-query-gpu``,
``--help-query-compute-apps``, ``-h``; without options a short summary table.

From NVIDIA's nvidia-smi(1) man page (versions 367 to 580): the option names and the CSV format
(``--format=csv`` with ``noheader``/``nounits``, values separated by ", ", a header of the field
names, units in brackets ``memory.used [MiB]``, values like ``1024 MiB`` and ``35 %``), the field
names and the ``used_memory`` alias of ``used_gpu_memory``, ``-L``'s line
``GPU 0: NAME (UUID: GPU-...)``, and the return codes (2 invalid argument, 6 not found,
9 driver not loaded; 18 is NVML_ERROR_LIB_RM_VERSION_MISMATCH from the NVML API reference).
From public reports of real output: ``Field "x" is not a valid field to query.``, ``Failed to
initialize NVML: Driver/library version mismatch`` followed by ``NVML library version: 550.54``
(NVML prints major.minor only: 580.126.18 shows as 580.126), ``NVIDIA-SMI has failed because it
couldn't communicate with the NVIDIA driver. ...``, ``Invalid combination of input arguments.
Please run 'nvidia-smi -h' for help.`` (real output for ``--format`` without a query) and
``ERROR: Option X is not recognized. Please run 'nvidia-smi -h' for help.``.
Assumptions: every message goes to stdout (real nvidia-smi prints its errors there); a query
without ``--format`` gives the "Invalid combination" message with exit 2; the header names the
canonical field (``used_gpu_memory`` for ``used_memory``) and keeps its unit with ``nounits``;
``-i`` with an unknown GPU prints ``No devices were found`` with exit 6; the summary table is
simplified.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

STATE_NAME = "nvidia-smi.json"
HELP = "Please run 'nvidia-smi -h' for help."
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")
EXIT_INVALID, EXIT_NOT_FOUND, EXIT_NO_DRIVER, EXIT_MISMATCH = 2, 6, 9, 18

# field -> (canonical name, unit or "")
GPU_FIELDS = {
    "index": ("index", ""), "uuid": ("uuid", ""), "gpu_uuid": ("uuid", ""),
    "name": ("name", ""), "gpu_name": ("name", ""), "driver_version": ("driver_version", ""),
    "pci.bus_id": ("pci.bus_id", ""), "gpu_bus_id": ("pci.bus_id", ""),
    "utilization.gpu": ("utilization.gpu", "%"), "memory.used": ("memory.used", "MiB"),
    "memory.total": ("memory.total", "MiB"), "memory.free": ("memory.free", "MiB"),
    "count": ("count", ""),
}
APP_FIELDS = {
    "pid": ("pid", ""), "gpu_uuid": ("gpu_uuid", ""), "gpu_name": ("gpu_name", ""),
    "gpu_bus_id": ("gpu_bus_id", ""), "process_name": ("process_name", ""),
    "used_gpu_memory": ("used_gpu_memory", "MiB"), "used_memory": ("used_gpu_memory", "MiB"),
}


class SmiExit(Exception):
    """Stop with this output on stdout and this exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def state_path() -> str:
    """The state file next to the program's real path."""
    return os.path.join(os.path.dirname(os.path.realpath(__file__)), STATE_NAME)


def load_state(path: str) -> dict[str, Any]:
    """Read the state; a missing or broken file is a driver that is not there."""
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError) as err:
        raise SmiExit(NO_DRIVER, EXIT_NO_DRIVER) from err
    return state if isinstance(state, dict) else {}


def check_driver(state: dict[str, Any]) -> None:
    """Fail as nvidia-smi does when the driver is absent or the library does not match it."""
    if not state.get("driver_loaded", True):
        raise SmiExit(NO_DRIVER, EXIT_NO_DRIVER)
    driver = str(state.get("driver_version", ""))
    library = str(state.get("library_version") or driver)
    if library != driver:
        short = ".".join(library.split(".")[:2])
        raise SmiExit("Failed to initialize NVML: Driver/library version mismatch\n"
                      f"NVML library version: {short}", EXIT_MISMATCH)


def proc_name(pid: int) -> str | None:
    """What NVIDIA prints as a Linux process's name: argv[0], else comm; None when the PID is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            if handle.read().rsplit(b")", 1)[-1].split()[:1] == [b"Z"]:
                return None
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv0 = handle.read().split(b"\0")[0]
        if argv0:
            return argv0.decode("utf-8", "replace")
        with open(f"/proc/{pid}/comm", "rb") as handle:
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return None


def live_processes(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The processes the driver reports: in the node view those whose PID is alive, with their names."""
    result = []
    for proc in state.get("processes") or []:
        name = proc_name(int(proc["pid"]))
        if state.get("view", "node") == "node" and name is None:
            continue
        result.append(dict(proc, process_name=name or "[Not Found]"))
    return result


def gpu_memory_used(gpu: dict[str, Any], procs: list[dict[str, Any]]) -> int:
    """A GPU's used memory: its own figure plus what its (live) processes hold."""
    held = sum(int(p.get("used_memory", 0)) for p in procs if p.get("gpu_uuid") == gpu.get("uuid"))
    return int(gpu.get("memory_used", 0)) + held


def select_gpus(state: dict[str, Any], ids: str | None) -> list[dict[str, Any]]:
    """The GPUs named by ``-i`` (indexes or UUIDs, comma-separated), or all of them."""
    gpus = sorted(state.get("gpus") or [], key=lambda g: int(g.get("index", 0)))
    if ids is None:
        return gpus
    wanted = [item.strip() for item in ids.split(",") if item.strip()]
    chosen = [g for g in gpus if str(g.get("index")) in wanted or str(g.get("uuid")) in wanted]
    if not chosen:
        raise SmiExit("No devices were found", EXIT_NOT_FOUND)
    return chosen


def gpu_value(field: str, gpu: dict[str, Any], state: dict[str, Any], used: int) -> str:
    """The raw (unit-less) value of one --query-gpu field."""
    values: dict[str, Callable[[], object]] = {
        "index": lambda: gpu.get("index", 0), "uuid": lambda: gpu.get("uuid", ""),
        "name": lambda: gpu.get("name", ""), "driver_version": lambda: state.get("driver_version", ""),
        "pci.bus_id": lambda: gpu.get("pci_bus_id", ""), "utilization.gpu": lambda: gpu.get("utilization", 0),
        "memory.used": lambda: used, "memory.total": lambda: gpu.get("memory_total", 0),
        "memory.free": lambda: int(gpu.get("memory_total", 0)) - used,
        "count": lambda: len(state.get("gpus") or []),
    }
    return str(values[field]())


def parse_fields(spec: str, table: dict[str, tuple[str, str]], topic: str) -> list[tuple[str, str]]:
    """The (canonical field, unit) list of a --query-* argument; an unknown field fails as nvidia-smi does."""
    fields = []
    for item in spec.split(","):
        name = item.strip().lower()
        if name not in table:
            raise SmiExit(f'Field "{item.strip()}" is not a valid field to query.\n\n'
                          f"Run 'nvidia-smi --help-query-{topic}' for usage.", EXIT_INVALID)
        fields.append(table[name])
    return fields


def parse_format(spec: str) -> tuple[bool, bool]:
    """``--format=csv[,noheader][,nounits]`` -> (header, units)."""
    words = [w.strip() for w in spec.split(",") if w.strip()]
    if "csv" not in words:
        raise SmiExit(f"ERROR: Option {spec} is not recognized. {HELP}", EXIT_INVALID)
    for word in words:
        if word not in ("csv", "noheader", "nounits"):
            raise SmiExit(f"ERROR: Option {word} is not recognized. {HELP}", EXIT_INVALID)
    return "noheader" not in words, "nounits" not in words


def render(fields: list[tuple[str, str]], rows: list[list[str]], header: bool, units: bool) -> str:
    """CSV as nvidia-smi writes it: ", " separators, units in the header and (unless nounits) the values."""
    lines = []
    if header:
        lines.append(", ".join(f"{name} [{unit}]" if unit else name for name, unit in fields))
    for row in rows:
        cells = [f"{value} {unit}" if unit and units else value for value, (_name, unit) in zip(row, fields)]
        lines.append(", ".join(cells))
    return "".join(line + "\n" for line in lines)


def query_gpu(state: dict[str, Any], opts: dict[str, str]) -> str:
    """``--query-gpu=...``: one line per GPU."""
    fields = parse_fields(opts["query-gpu"], GPU_FIELDS, "gpu")
    header, units = parse_format(opts["format"])
    procs = live_processes(state)
    rows = []
    for gpu in select_gpus(state, opts.get("id")):
        used = gpu_memory_used(gpu, procs)
        rows.append([gpu_value(name, gpu, state, used) for name, _unit in fields])
    return render(fields, rows, header, units)


def query_apps(state: dict[str, Any], opts: dict[str, str]) -> str:
    """``--query-compute-apps=...``: one line per live process (none in a container's view)."""
    fields = parse_fields(opts["query-compute-apps"], APP_FIELDS, "compute-apps")
    header, units = parse_format(opts["format"])
    gpus = {g.get("uuid"): g for g in select_gpus(state, opts.get("id"))}
    procs = [] if state.get("view", "node") == "container" else live_processes(state)
    rows = []
    for proc in procs:
        gpu = gpus.get(proc.get("gpu_uuid"))
        if gpu is None:
            continue
        values = {"pid": proc["pid"], "gpu_uuid": gpu.get("uuid", ""), "gpu_name": gpu.get("name", ""),
                  "gpu_bus_id": gpu.get("pci_bus_id", ""), "process_name": proc["process_name"],
                  "used_gpu_memory": proc.get("used_memory", 0)}
        rows.append([str(values[name]) for name, _unit in fields])
    return render(fields, rows, header, units)


def list_gpus(state: dict[str, Any], opts: dict[str, str]) -> str:
    """``-L``: ``GPU 0: NAME (UUID: GPU-...)`` per GPU."""
    return "".join(f"GPU {g.get('index', 0)}: {g.get('name', '')} (UUID: {g.get('uuid', '')})\n"
                   for g in select_gpus(state, opts.get("id")))


def _row(text: str) -> str:
    """One line of the summary table, framed to its width."""
    return f"| {text:<85} |\n"


def summary(state: dict[str, Any], opts: dict[str, str]) -> str:
    """Plain ``nvidia-smi``: a short table in the spirit of NVIDIA's (simplified)."""
    rule = "+" + "-" * 87 + "+\n"
    driver = state.get("driver_version", "")
    out = [rule, _row(f"NVIDIA-SMI {driver:<22} Driver Version: {driver}"), rule]
    procs = live_processes(state)
    for gpu in select_gpus(state, opts.get("id")):
        used = gpu_memory_used(gpu, procs)
        out.append(_row(f"{gpu.get('index', 0):>3}  {gpu.get('name', ''):<28} {gpu.get('pci_bus_id', ''):<17}"
                        f" {used:>6}MiB / {gpu.get('memory_total', 0):>6}MiB {gpu.get('utilization', 0):>5}%"))
    out += [rule, _row("Processes:"), _row(f" GPU        PID   {'Process name':<50}  GPU Memory")]
    shown = [] if state.get("view", "node") == "container" else procs
    index = {g.get("uuid"): g.get("index", 0) for g in state.get("gpus") or []}
    for proc in shown:
        out.append(_row(f" {index.get(proc.get('gpu_uuid'), '?'):>3}  {proc['pid']:>9}   "
                        f"{proc['process_name'][:50]:<50} {proc.get('used_memory', 0):>8}MiB"))
    if not shown:
        out.append(_row(" No running processes found"))
    return "".join(out + [rule])


def help_fields(table: dict[str, tuple[str, str]]) -> str:
    """``--help-query-*``: the fields this stand-in knows."""
    return "".join(f'"{name}"\n' for name in table)


def parse_argv(argv: list[str]) -> dict[str, str]:
    """Options as nvidia-smi takes them: ``--name=value``, ``--name value``, ``-i 0``, ``-L``."""
    short = {"-L": "list-gpus", "-i": "id", "-h": "help"}
    valued = {"query-gpu", "query-compute-apps", "format", "id"}
    flags = {"list-gpus", "help", "help-query-gpu", "help-query-compute-apps"}
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv):
        item = argv[i]
        i += 1
        name, sep, value = (short[item] if item in short else item.lstrip("-")).partition("=")
        if not item.startswith("-") or name not in valued | flags:
            raise SmiExit(f"ERROR: Option {item} is not recognized. {HELP}", EXIT_INVALID)
        if name in valued and not sep:
            if i >= len(argv):
                raise SmiExit(f"ERROR: Option {item} is missing its value. {HELP}", EXIT_INVALID)
            value = argv[i]
            i += 1
        opts[name] = value if name in valued else "1"
    return opts


def run(argv: list[str], path: str) -> str:
    """Do what the command line asks; returns the output or raises SmiExit."""
    opts = parse_argv(argv)
    if "help" in opts:
        return "NVIDIA System Management Interface (stand-in)\n\n" + __doc__ + "\n"
    if "help-query-gpu" in opts:
        return help_fields(GPU_FIELDS)
    if "help-query-compute-apps" in opts:
        return help_fields(APP_FIELDS)
    queries = [q for q in ("query-gpu", "query-compute-apps", "list-gpus") if q in opts]
    if len(queries) > 1 or ("format" in opts) != bool(queries and queries[0] != "list-gpus"):
        raise SmiExit(f"Invalid combination of input arguments. {HELP}", EXIT_INVALID)
    state = load_state(path)
    check_driver(state)
    action = {"query-gpu": query_gpu, "query-compute-apps": query_apps, "list-gpus": list_gpus}
    return action[queries[0]](state, opts) if queries else summary(state, opts)


def main(argv: list[str] | None = None) -> int:
    """Entry point: print what nvidia-smi would and return its exit status."""
    try:
        sys.stdout.write(run(list(sys.argv[1:] if argv is None else argv), state_path()))
    except SmiExit as stop:
        sys.stdout.write(stop.message + "\n")
        return stop.code
    return 0


if __name__ == "__main__":
    sys.exit(main())
