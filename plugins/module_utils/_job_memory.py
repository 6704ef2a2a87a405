# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A job near its memory limit: the counters of its memory cgroup, read by its supervisor before and after each
attempt (docs/job-life.md, "A job near its memory limit").

``snapshot()`` reads, where the target has them (missing keys: unknown):

* ``oom_kill``: kills by the OOM killer in the job's own cgroup (``_job_end.oom_kills``);
* ``high``, ``max`` (cgroup v2 ``memory.events``): how often the memory use met ``memory.high`` (the processes are
  throttled: put to reclaim, then made to sleep) or ``memory.max`` (reclaim before an OOM kill). An event is counted
  in the cgroup whose limit was met and in its ancestors, never below it (the kernel's ``memcg_memory_event``), so
  they are read from the job's cgroup up to the first one that has a limit, or the mount's root;
* ``failcnt`` (cgroup v1 ``memory.failcnt``): how often the use hit ``memory.limit_in_bytes`` (v1 has no high);
* ``stall_us`` (cgroup v2 ``memory.pressure``, PSI ``some total``): microseconds in which a process of the job's
  cgroup waited for memory (reclaim, the memory.high penalty, refaults), whichever cgroup's limit caused it.

Proxmox VE 7 and later put a container's limits on ``/lxc/VMID`` (``lxc.cgroup2.memory.max`` and
``memory.high``, 1016/1024 of it; pve-container src/PVE/LXC.pm and LXC/Config.pm) and make ``/lxc/VMID/ns`` the
root of the container's cgroup namespace (``lxc.cgroup.dir.container = lxc/VMID``, ``.inner = ns``; LXC writes the
limits to the outer one, src/lxc/cgroups/cgfsng.c). Inside the container ``/sys/fs/cgroup`` is ``ns``: its
``memory.events`` never counts ``high`` or ``max``, which happen one level up, out of sight; ``oom_kill`` (counted
for the killed process's cgroup) and ``memory.pressure`` (the stalls of its own processes) do show. On the node,
``/sys/fs/cgroup/lxc/VMID/memory.events`` has them all. A host whose limit is on a cgroup the job can see (a systemd
unit's ``MemoryHigh=``, LXC without ``.inner``) shows ``high`` inside too. Standard library only, Python 3.7+.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_end import cgroup_of, oom_kills

V2_EVENTS = ("high", "max")
NO_LIMIT_V1 = 1 << 60
# PSI stalls worth a word: at least this many seconds, and this share of the attempt.
STALL_MIN = 1.0
STALL_SHARE = 0.01


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(65536).decode("ascii", "replace")
    except OSError:
        return None


def _fields(text: str | None) -> dict[str, int]:
    """``key value`` lines (memory.events, memory.oom_control) as integers."""
    found: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _sep, value = line.partition(" ")
        if value.strip().isdigit():
            found[key] = int(value)
    return found


def _levels(base: str, path: str) -> list[str]:
    """The folders of the cgroup ``path`` and of its ancestors up to the mount ``base`` that exist, nearest first."""
    parts = [part for part in path.split("/") if part]
    if ".." in parts:
        parts = []  # outside this namespace's mount: its root is the namespace's cgroup
    levels = [os.path.join(base, *parts[:count]) for count in range(len(parts), -1, -1)]
    return [level for level in levels if os.path.isdir(level)]


def _limited(level: str, version: str) -> bool:
    """Whether the cgroup of ``level`` has a memory limit of its own."""
    if version == "v1":
        value = (_read(os.path.join(level, "memory.limit_in_bytes")) or "").strip()
        return value.isdigit() and int(value) < NO_LIMIT_V1
    return any((_read(os.path.join(level, name)) or "max").strip() != "max" for name in ("memory.high", "memory.max"))


def _limit_counters(levels: t.Sequence[str], version: str) -> dict[str, int]:
    """``high``/``max`` (v2) or ``failcnt`` (v1), from the nearest level up to the first with a limit (most counted)."""
    found: dict[str, int] = {}
    for level in levels:
        if version == "v1":
            text = _read(os.path.join(level, "memory.failcnt"))
            values = {"failcnt": int(text)} if text and text.strip().isdigit() else {}
        else:
            events = _fields(_read(os.path.join(level, "memory.events")))
            values = {key: events[key] for key in V2_EVENTS if key in events}
        for key, value in values.items():
            found[key] = max(found.get(key, 0), value)
        if _limited(level, version):
            break
    return found


def _unified_path(pid: int | None, proc_root: str) -> str | None:
    text = _read(os.path.join(proc_root, "self" if pid is None else str(pid), "cgroup"))
    for line in (text or "").splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def _stall_us(pid: int | None, proc_root: str, cgroup_root: str) -> int | None:
    """PSI ``some total`` of the process's cgroup v2 (``memory.pressure``; in ``unified/`` on a hybrid host)."""
    path = _unified_path(pid, proc_root)
    if path is None:
        return None
    for base in (cgroup_root, os.path.join(cgroup_root, "unified")):
        if not os.path.exists(os.path.join(base, "cgroup.controllers")):
            continue
        levels = _levels(base, path)
        for line in (_read(os.path.join(levels[0], "memory.pressure")) or "").splitlines() if levels else []:
            if line.startswith("some "):
                total = line.rpartition("total=")[2].strip()
                return int(total) if total.isdigit() else None
    return None


def snapshot(pid: int | None = None, *, proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> dict[str, int]:
    """The memory counters of the cgroup of ``pid`` (default: this process) that can be read (see the docstring)."""
    found: dict[str, int] = {}
    kills = oom_kills(pid, proc_root=proc_root, cgroup_root=cgroup_root)
    if kills is not None:
        found["oom_kill"] = kills
    where = cgroup_of(pid, proc_root)
    if where is not None:
        version, path = where
        base = os.path.join(cgroup_root, "memory") if version == "v1" else cgroup_root
        found.update(_limit_counters(_levels(base, path), version))
    stall = _stall_us(pid, proc_root, cgroup_root)
    if stall is not None:
        found["stall_us"] = stall
    return found


def growth(before: t.Mapping[str, int], after: t.Mapping[str, int]) -> dict[str, int]:
    """How much each counter known before and after grew (only those that grew)."""
    return {key: after[key] - before[key] for key in after if key in before and after[key] > before[key]}


def _times(count: int) -> str:
    return f"{count} time{'' if count == 1 else 's'}"


def note(grown: t.Mapping[str, int], seconds: float = 0.0) -> str | None:
    """What the growth says about the job's memory in words, or None: ``its container was at its memory limit
    (memory.high reached 152 times)``, or ``its processes waited 12 s for memory (memory.pressure)``."""
    hits = [f"memory.high reached {_times(grown['high'])}" if grown.get("high") else "",
            f"memory.max reached {_times(grown['max'])}" if grown.get("max") else "",
            f"the limit reached {_times(grown['failcnt'])} (memory.failcnt)" if grown.get("failcnt") else ""]
    stalled = grown.get("stall_us", 0) / 1e6
    waited = f"{stalled:.0f} s waiting for memory" if stalled >= max(STALL_MIN, STALL_SHARE * seconds) else ""
    if any(hits):
        return f"its container was at its memory limit ({'; '.join(part for part in hits + [waited] if part)})"
    return f"its processes waited {stalled:.0f} s for memory (memory.pressure)" if waited else None
