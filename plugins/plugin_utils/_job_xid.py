# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The Xid errors behind a GPU job's end: read on the node, matched to the job's GPUs and to its last attempt.

A job that ends other than ``finished`` (or ``stopped``) on GPUs may have been ended by its GPU: the NVIDIA driver logs
the fault (``NVRM: Xid (PCI:...): 79, ...``) to the node's kernel log, and the job sees only a CUDA error or a hang.
The exit record names the job's GPUs by PCI bus id (``gpus``) and the attempt's start (``attempt_started_at``); the
readers of the end (``wait_for_log``'s action, ``tmux_session_info``'s) ask the node once (``_gpu_node.ask``) for the
kernel log's Xid lines of the hours since the earliest of those starts, and ``apply`` names what it found in the end:
``cause: gpu_xid``, ``xid`` (NVIDIA's name, meaning and action per error, ``_gpu_xid``) and a sentence for the message.
"""

from __future__ import annotations

import datetime
import math
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _gpu_node, _gpu_xid

# An Xid logged this long after the job's end is still its end's (the driver logs a fallen GPU as the job dies).
AFTER_END = 10.0
BEFORE_START = 5.0
NOT_THE_GPU = ("finished", "stopped", None, "")


class Window(t.NamedTuple):
    """The GPUs (PCI bus ids) and the time (seconds since the epoch) of one job's last attempt."""

    bus_ids: tuple[str, ...]
    since: float
    until: float


def seconds(stamp: object) -> float | None:
    """``2024-03-05T13:22:07Z`` (the protocol's time) as seconds since the epoch; None when it is not one."""
    try:
        moment = datetime.datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def window(end: t.Mapping[str, t.Any]) -> Window | None:
    """The window of an end the GPU may have caused: an end other than finished or stopped, of a job with GPUs whose
    exit record or history names them (``gpu_bus_ids``, a list or comma-separated) and the last attempt's start; else None."""
    listed = end.get("gpu_bus_ids") or ()
    buses = tuple(str(bus) for bus in (listed.split(",") if isinstance(listed, str) else listed) if bus)
    since = seconds(end.get("attempt_started_at") or end.get("started_at"))
    if end.get("end_state") in NOT_THE_GPU or not buses or since is None:
        return None
    until = seconds(end.get("ended_at"))
    return Window(buses, since - BEFORE_START, (until if until is not None else time.time()) + AFTER_END)


def hours_for(windows: t.Iterable[Window], now: float) -> int:
    """The hours of kernel log to ask for, to cover the earliest window (at least 1)."""
    earliest = min((item.since for item in windows), default=now)
    return max(1, math.ceil((now - earliest) / 3600.0) + 1)


def read(connection: t.Any, windows: t.Sequence[Window], log_argv: t.Sequence[str] | None) -> tuple[list[_gpu_xid.Xid], str | None]:
    """The Xid lines of the node's kernel log covering ``windows`` (one node call), or ([], why they could not be read)."""
    report = _gpu_node.ask(connection, hours=hours_for(windows, time.time()), log_argv=log_argv)
    log = report.get("kernel_log") or {}
    if report.get("error") and not log:
        return [], str(report["error"])
    if log.get("error"):
        return [], str(log["error"])
    return _gpu_xid.parse("\n".join(log.get("lines") or []), report.get("boot_time")), None


def sentence(found: t.Sequence[_gpu_xid.Xid]) -> str:
    """``the job's GPU 00000000:07:00.0 logged at T: Xid 79 (GPU has fallen off the bus): ...; action: ...`` for each
    GPU and Xid number, its last occurrence."""
    last: dict[tuple[str, int], _gpu_xid.Xid] = {}
    for xid in found:
        last[(xid.bus_id, xid.xid)] = xid
    parts = [f"the job's GPU {xid.bus_id} logged at {_gpu_xid.when(xid.time) or 'an unknown time'}: {_gpu_xid.describe(xid)}"
             for xid in last.values()]
    return "; ".join(parts)


def apply(end: dict[str, t.Any], found: t.Sequence[_gpu_xid.Xid], item: Window) -> bool:
    """Name the Xids of the end's window in it: ``cause`` gpu_xid (the job's own cause kept as ``job_cause``), ``xid``
    and ``xid_reason``. False when there were none."""
    mine = _gpu_xid.of_gpus(found, item.bus_ids, item.since, item.until)
    if not mine:
        return False
    end["job_cause"] = end.get("cause")
    end.update(cause="gpu_xid", xid=[dict(_gpu_xid.as_dict(xid), pci_bus_id=xid.bus_id) for xid in mine], xid_reason=sentence(mine))
    return True


def name_ends(connection: t.Any, ends: t.Sequence[dict[str, t.Any]], log_argv: t.Sequence[str] | None) -> str | None:
    """Name the Xids in each end that a GPU may have caused (one node call for all); the warning when the node's
    kernel log could not be read, else None. Nothing is asked without such an end or without a way to the node."""
    windows = [(end, window(end)) for end in ends]
    wanted = [(end, item) for end, item in windows if item is not None]
    if not wanted or not _gpu_node.can_ask(connection):
        return None
    found, error = read(connection, [item for _end, item in wanted], log_argv)
    if error:
        return f"Cannot read the node's kernel log for Xid errors of the job's GPUs: {error}"
    for end, item in wanted:
        apply(end, found, item)
    return None
