# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""NVIDIA's Xid errors: the driver's kernel log lines parsed, matched to GPUs, and named with NVIDIA's words.

Controller side of ``gpu_info`` (the node's ``_gpu_smi.kernel_log`` prints the lines); pure Python, no Ansible import.
The NVIDIA driver reports a GPU fault to the node's kernel log, never to the container's job, as::

    NVRM: Xid (PCI:0000:2a:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No
    NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.          (older drivers: no pid, no name)

behind the prefix of the command that printed it: ``journalctl -k -o short-iso-precise``
(``2024-03-05T14:22:07.123456+0100 pve1 kernel: ``, ``+01:00`` from systemd 255), ``dmesg --time-format iso``
(``2024-03-05T14:22:07,123456+01:00 ``) or plain ``dmesg`` (``[12345.678901] ``, seconds since boot: a time only
with the node's boot time). Any other prefix leaves the time unknown.

The catalog holds the Xids a GPU job meets most, in NVIDIA's words made short: the name and the immediate
"resolution bucket" of NVIDIA's Xid catalog for Ampere and newer GPUs
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), and the meaning and recommended action of
NVIDIA's Xid errors and GPU debug guidelines (https://docs.nvidia.com/deploy/xid-errors/index.html,
https://docs.nvidia.com/deploy/gpu-debug-guidelines/index.html). Where they give no meaning, the entry says to see
the catalog; an Xid not in the table is named by its number and the catalog's address.
"""

from __future__ import annotations

import datetime
import re
import typing as t

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
SEE_CATALOG = f"see NVIDIA's Xid catalog ({CATALOG_URL})"
RESET = "reset the GPU (nvidia-smi --gpu-reset -i INDEX on the node, once nothing uses it) or reboot the node"
# Xid -> (NVIDIA's name, meaning, recommended action with the catalog's immediate resolution bucket)
CATALOG: dict[int, tuple[str, str, str]] = {
    8: ("GPU stopped processing", SEE_CATALOG, "restart the application (RESTART_APP); contact support if it repeats"),
    13: ("Graphics Engine Exception", "a fault of the application, typically an out-of-bounds memory access, or an illegal "
         "instruction or register; it can also be the driver or hardware", "restart the application (RESTART_APP); if it "
         "repeats on the same GPU, run DCGM and NVIDIA's field diagnostics to rule out hardware, else debug the application "
         "(WORKFLOW_XID_13)"),
    31: ("GPU memory page fault", "an illegal memory access (MMU fault), in most cases by the application, possibly the "
         "driver or hardware", "restart the application (RESTART_APP) and debug it; when only the driver or GPU system "
         "software changed, report it to NVIDIA (WORKFLOW_XID_31)"),
    43: ("GPU stopped processing", "the application hit a software-induced fault and had to end; the GPU stays usable",
         "none for the GPU (IGNORE): look at the application; contact support if it repeats"),
    45: ("Preemptive cleanup, due to previous errors", "the driver ended the GPU's applications after another error (most "
         "often a double-bit ECC error with several CUDA applications) or a user's or the system's action",
         "follow the other Xid logged with it; alone (on NVSwitch systems, an unexpected Fabric Manager stop) restart the "
         "Fabric Manager (WORKFLOW_XID_45)"),
    46: ("GPU stopped processing", SEE_CATALOG, RESET + " (RESET_GPU)"),
    48: ("Double Bit ECC Error", "an uncorrectable ECC memory error on the GPU, also reported to the application; a GPU "
         "reset or a node reboot clears it", "followed by Xid 63 or 64: drain the GPU's jobs and " + RESET + "; else run "
         "NVIDIA's field diagnostics; repeated errors are a case for an RMA (WORKFLOW_XID_48)"),
    61: ("Internal micro-controller breakpoint/warning", "the GPU's internal micro-controller (PMU) stopped; the GPU's "
         "engine stops working (older drivers; the Ampere catalog lists it unused)", "report it to NVIDIA and " + RESET),
    62: ("Internal micro-controller halt", "the GPU's internal micro-controller (PMU) halted", RESET + " (RESET_GPU); "
         "report it to NVIDIA if it repeats"),
    63: ("GPU memory remapping event", "after an ECC error the GPU recorded a row remapping (older GPUs: a page "
         "retirement) in its InfoROM", "none at once (IGNORE); with Xid 94 restart the application; the remapping takes "
         "effect at the next GPU reset or reboot; with Xid 48 drain the GPU's jobs and " + RESET),
    64: ("GPU memory remapping failure", "the GPU could not record a row remapping (older GPUs: a page retirement) in its "
         "InfoROM", RESET + " at once (RESET_GPU); if it repeats, drain the node and report it to NVIDIA"),
    74: ("NVLINK Error", "a fault on an NVLink connection to another GPU or NVSwitch: the link, or the device at its other "
         "end (a failed GPU makes its peers log Xid 74)", RESET + "; nvidia-smi nvlink shows the links' errors; contact "
         "the hardware vendor if it repeats (WORKFLOW_NVLINK_ERR)"),
    79: ("GPU has fallen off the bus", "the driver cannot reach the GPU over PCI Express, most often a failure of the "
         "PCIe link, also failing GPU hardware or the driver", "reboot the node (RESTART_BM); the system event log and the "
         "kernel's PCI messages may show the cause; contact support if it repeats"),
    92: ("High single-bit ECC error rate", "a hardware or driver error", "none at once (IGNORE); run NVIDIA's field "
         "diagnostics; contact support if it repeats"),
    94: ("Contained memory error", "an uncorrectable ECC error contained to one application (A100 and newer); the other "
         "applications are unaffected", "restart the application that hit it (RESTART_APP); reset the GPU when convenient"),
    95: ("Uncontained memory error", "an uncorrectable ECC error that may affect every application on the GPU (A100 and "
         "newer)", RESET + " before applications start again (RESET_GPU); without MIG reboot the node at once"),
    109: ("Context Switch Timeout Error", SEE_CATALOG, RESET + " (RESET_GPU)"),
    119: ("GSP RPC Timeout", "the GPU System Processor (GSP) did not answer the driver in time", RESET + " (RESET_GPU); "
          "power-cycle the node if it persists; look for a newer driver (INVESTIGATE_SW)"),
    120: ("GSP Error", "the GPU System Processor (GSP) failed", RESET + " (RESET_GPU); power-cycle the node if it persists; "
          "look for a newer driver (INVESTIGATE_SW)"),
    154: ("GPU Recovery Action Changed", "the driver says what the GPU needs after another Xid (the line names it: GPU Reset "
          "Required, Node Reboot Required, ...)", "do what the line says (XID_154)"),
}

_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)[^)]*\):"
                   r"\s*(?P<xid>[0-9]+),?\s*(?P<rest>.*)")
_PID = re.compile(r"pid='?(?P<pid>[^,']*)'?,\s*(?:name=(?P<name>[^,]*),\s*)?")
_ISO = re.compile(r"(?P<time>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,](?P<fraction>[0-9]+))?"
                  r"(?P<zone>Z|[+-][0-9]{2}:?[0-9]{2})\s")
_UPTIME = re.compile(r"\[\s*(?P<seconds>[0-9]+\.[0-9]+)\]\s")
_BUS = re.compile(r"(?:PCI:)?(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):(?P<device>[0-9A-Fa-f]{1,2})(?:\.(?P<function>[0-7]))?")


class Xid(t.NamedTuple):
    """One Xid line: ``time`` in seconds since the epoch (None: unknown), the GPU's PCI bus id in nvidia-smi's form."""

    time: float | None
    bus_id: str
    xid: int
    pid: int | None
    process_name: str | None
    text: str


def bus_id(text: str) -> str | None:
    """A PCI bus id in nvidia-smi's form: ``0000:2a:00`` (the kernel's) and ``00000000:2A:00.0`` -> ``00000000:2A:00.0``."""
    match = _BUS.fullmatch(str(text).strip())
    if not match:
        return None
    domain, function = int(match["domain"] or "0", 16), match["function"] or "0"
    return f"{domain:08X}:{int(match['bus'], 16):02X}:{int(match['device'], 16):02X}.{function}"


def _time(prefix: str, boot_time: float | None) -> float | None:
    """The time a line's prefix gives: an ISO 8601 time with its UTC offset, or dmesg's seconds since boot."""
    iso = _ISO.match(prefix)
    if iso:
        zone = iso["zone"].replace(":", "")
        offset = 0 if zone == "Z" else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[3:5]) * 60)
        moment = datetime.datetime.strptime(iso["time"], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
        return moment.timestamp() - offset + float("0." + (iso["fraction"] or "0"))
    uptime = _UPTIME.search(prefix)
    return boot_time + float(uptime["seconds"]) if uptime and boot_time is not None else None


def parse(text: str, boot_time: float | None = None) -> list[Xid]:
    """Every ``NVRM: Xid`` line of ``text`` (kernel log output), in order; other lines are skipped."""
    found = []
    for line in text.splitlines():
        match = _LINE.search(line)
        if not match:
            continue
        rest, pid, name = match["rest"].strip(), None, None
        owner = _PID.match(rest)
        if owner:
            pid = int(owner["pid"]) if owner["pid"].isdigit() else None
            name = owner["name"].strip() if owner["name"] and owner["name"].strip() not in ("<unknown>", "N/A") else None
            rest = rest[owner.end():]
        found.append(Xid(_time(line[:match.start()], boot_time), str(bus_id(match["bus"])), int(match["xid"]), pid, name, rest))
    return found


def of_gpus(xids: t.Iterable[Xid], bus_ids: t.Iterable[str] | None = None, since: float | None = None,
            until: float | None = None) -> list[Xid]:
    """The Xids of the GPUs with these PCI bus ids (any form; None: every GPU) between ``since`` and ``until``
    (seconds since the epoch, inclusive; None: open). With a bound, an Xid of unknown time is left out."""
    wanted = None if bus_ids is None else {bus_id(item) for item in bus_ids} - {None}
    bounded = since is not None or until is not None
    return [xid for xid in xids if (wanted is None or xid.bus_id in wanted) and not (bounded and xid.time is None)
            and (since is None or t.cast(float, xid.time) >= since) and (until is None or t.cast(float, xid.time) <= until)]


def describe(xid: Xid | int) -> str:
    """``Xid 79 (GPU has fallen off the bus): the driver cannot reach the GPU ...; action: reboot the node ...``."""
    number = xid.xid if isinstance(xid, Xid) else int(xid)
    name, meaning, action = CATALOG.get(number, ("not in this collection's catalog", SEE_CATALOG, SEE_CATALOG))
    return f"Xid {number} ({name}): {meaning}; action: {action}"


def when(seconds: float | None) -> str | None:
    """``2024-03-05T13:22:07Z`` (UTC, to the second), None for an unknown time."""
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def as_dict(xid: Xid) -> dict[str, t.Any]:
    """An Xid as ``gpu_info`` returns it: number, time, process, the line's text, NVIDIA's name, meaning and action."""
    name, meaning, action = CATALOG.get(xid.xid, (None, SEE_CATALOG, SEE_CATALOG))
    return {"xid": xid.xid, "time": when(xid.time), "pid": xid.pid, "process_name": xid.process_name, "text": xid.text,
            "name": name, "meaning": meaning, "action": action, "message": describe(xid)}


def per_gpu(xids: t.Iterable[Xid], gpus: t.Iterable[t.Mapping[str, t.Any]]) -> list[dict[str, t.Any]]:
    """One entry per GPU with Xids (``pci_bus_id``, ``index``, ``uuid``, ``errors``), in bus order; a bus id nvidia-smi
    does not list (a GPU that fell off the bus, or nvidia-smi failed) has null ``index`` and ``uuid``."""
    known = {bus_id(str(gpu.get("pci_bus_id") or "")): gpu for gpu in gpus}
    grouped: dict[str, list[Xid]] = {}
    for xid in xids:
        grouped.setdefault(xid.bus_id, []).append(xid)
    return [{"pci_bus_id": bus, "index": known.get(bus, {}).get("index"), "uuid": known.get(bus, {}).get("uuid"),
             "errors": [as_dict(xid) for xid in items]} for bus, items in sorted(grouped.items())]


def of_node(node: t.Mapping[str, t.Any], hours: int, now: float) -> list[dict[str, t.Any]]:
    """The Xid errors of the node's kernel log (``_gpu_smi.kernel_log``) of the last ``hours`` by its clock, per GPU."""
    log = node.get("kernel_log") or {}
    if hours <= 0 or not log.get("lines"):
        return []
    since = float(node.get("now") or now) - hours * 3600
    found = of_gpus(parse("\n".join(log["lines"]), node.get("boot_time")), None, since)
    return per_gpu(found, node.get("gpus") or [])


def warnings(xids: t.Sequence[t.Mapping[str, t.Any]], node: str) -> list[str]:
    """One warning per GPU and Xid number: how often and when last, NVIDIA's meaning and action."""
    found = []
    for gpu in xids:
        name = f"GPU {gpu['index']} ({gpu['pci_bus_id']})" if gpu.get("index") is not None else f"the GPU at {gpu['pci_bus_id']}"
        numbers: dict[int, list[t.Mapping[str, t.Any]]] = {}
        for error in gpu["errors"]:
            numbers.setdefault(error["xid"], []).append(error)
        for errors in numbers.values():
            last = errors[-1]["time"] or "an unknown time"
            times = f"{len(errors)} times, last at {last}" if len(errors) > 1 else f"at {last}"
            label, _sep, rest = str(errors[-1]["message"]).partition(": ")
            found.append(f"{name} on node {node} logged {label} {times}: {rest}")
    return found
