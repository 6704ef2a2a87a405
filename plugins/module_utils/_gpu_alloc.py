# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""GPUs for a job: the request (``tmux_session``'s ``gpus``), the GPUs other sessions hold, and the choice.

A job asks for V(all) the GPUs its host can open, a count, or some of them by index (as ``nvidia-smi``
numbers them on that host) or UUID. The choice is written to the session's ``job.json`` (``gpus``: UUIDs)
and given to the job as ``CUDA_VISIBLE_DEVICES`` (the UUIDs: CUDA accepts them, and unlike indices they mean
the same GPU on the node and in every container, whatever devices a container was given).
A container-wide lock (``RUN_ROOT/gpus.lock``) makes two launches in one container choose one after the other,
so two jobs never get the same GPU while both run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import GPU_LOCK, JOB_FILE

_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]+")


class GpuError(ValueError):
    """A request that cannot be given; the message says which GPU and why."""


def parse_request(value: t.Any) -> tuple[str, t.Any] | None:
    """``gpus`` as given: None; ("all", None); ("count", N); ("ids", (index or UUID, ...)). Raises GpuError."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str) and value.strip().lower() == "all":
        return ("all", None)
    if isinstance(value, bool):
        raise GpuError(f"Invalid gpus {value!r}: use all, a count (2), or a list of indices or UUIDs ([0, 2])")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        count = int(value)
        if not 1 <= count <= 1024:
            raise GpuError(f"Invalid gpus {value!r}: a count is from 1 to 1024")
        return ("count", count)
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise GpuError(f"Invalid gpus {value!r}: use all, a count (2), or a list of indices or UUIDs ([0, 2])")
    ids = []
    for item in items:
        text = str(item).strip()
        if not (text.isdigit() or _UUID.fullmatch(text)) or isinstance(item, bool):
            raise GpuError(f"Invalid gpus item {item!r}: use an index as nvidia-smi shows it on the host (0, 1, ...) or a GPU UUID (GPU-...)")
        ids.append(text)
    if len(set(ids)) != len(ids):
        raise GpuError(f"Invalid gpus {value!r}: a GPU is listed twice")
    return ("ids", tuple(ids))


def describe(gpu: t.Mapping[str, t.Any]) -> str:
    """``GPU 1 (GPU-5a3e..., NVIDIA A100)`` for messages."""
    name = f", {gpu['name']}" if gpu.get("name") else ""
    return f"GPU {gpu.get('index')} ({gpu.get('uuid')}{name})"


@contextlib.contextmanager
def locked(run_root: str) -> t.Iterator[None]:
    """The container-wide lock of GPU choices (released when the process ends, however it ends)."""
    os.makedirs(run_root, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(run_root, GPU_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def held(run_root: str, alive: t.Callable[[str], bool], but: str) -> dict[str, str]:
    """UUID -> session name for the GPUs the running sessions of ``run_root`` hold (``but`` this one)."""
    holders: dict[str, str] = {}
    try:
        names = sorted(os.listdir(run_root))
    except OSError:
        return holders
    for name in names:
        if name == but:
            continue
        try:
            with open(os.path.join(run_root, name, JOB_FILE), encoding="utf-8") as handle:
                job = json.load(handle)
        except (OSError, ValueError):
            continue
        uuids = job.get("gpus") if isinstance(job, dict) else None
        if isinstance(uuids, list) and uuids and alive(name):
            holders.update({str(uuid): name for uuid in uuids})
    return holders


def _pick(request: tuple[str, t.Any], visible: list[dict[str, t.Any]]) -> list[dict[str, t.Any]]:
    if request[0] == "all":
        return list(visible)
    chosen = []
    for wanted in request[1]:
        match = [gpu for gpu in visible if str(gpu.get("index")) == wanted or gpu.get("uuid") == wanted]
        if not match:
            seen = ", ".join(describe(gpu) for gpu in visible) or "none"
            raise GpuError(f"GPU {wanted} is not visible on this host (visible: {seen}); fix gpus, or give the container that GPU's "
                           "device file with a mode the job's user can open (in its config: devN: /dev/nvidiaN,mode=0666)")
        chosen.append(match[0])
    return chosen


def allocate(request: tuple[str, t.Any], visible: list[dict[str, t.Any]], holders: t.Mapping[str, str],
             exclude: t.Collection[str] = ()) -> list[dict[str, t.Any]]:
    """The GPUs to give: a count from the free ones (lowest index first); all or named ones only if none is held.

    ``exclude``: UUIDs or indices a count must not take (the busy ones the node reported). Raises GpuError.
    """
    if not visible:
        raise GpuError("no GPU is visible on this host (nvidia-smi lists none): give the container the GPU's device files "
                       "with a mode the job's user can open (in its config: dev0: /dev/nvidia0,mode=0666, dev1: /dev/nvidiactl,mode=0666, "
                       "dev2: /dev/nvidia-uvm,mode=0666) and the driver's user-space libraries, or drop gpus")
    if request[0] == "count":
        free = [gpu for gpu in visible if gpu.get("uuid") not in holders
                and gpu.get("uuid") not in exclude and str(gpu.get("index")) not in exclude]
        if len(free) < request[1]:
            taken = [f"{describe(gpu)} held by session {holders[gpu['uuid']]}" for gpu in visible if gpu.get("uuid") in holders]
            taken += [f"{describe(gpu)} busy" for gpu in visible if gpu not in free and gpu.get("uuid") not in holders]
            raise GpuError(f"{request[1]} GPUs asked for, {len(free)} free of {len(visible)}"
                           + (f" ({'; '.join(taken)})" if taken else "") + ": ask for fewer, or stop what holds them")
        return free[:request[1]]
    chosen = _pick(request, visible)
    clash = [f"{describe(gpu)} is held by session {holders[gpu['uuid']]}" for gpu in chosen if gpu.get("uuid") in holders]
    if clash:
        raise GpuError("; ".join(clash) + " in this container: stop that session, or ask for a count of GPUs instead")
    return chosen


def environment(chosen: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, str]:
    """What the job gets: ``CUDA_VISIBLE_DEVICES`` (UUIDs, in the order chosen)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(gpu["uuid"]) for gpu in chosen)}
