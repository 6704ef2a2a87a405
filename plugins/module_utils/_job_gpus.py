# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The GPUs of one start of ``tmux_session``: listed with nvidia-smi, the ones other sessions hold left out (``_gpu_alloc``)."""

from __future__ import annotations

import contextlib
import json
import os
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_alloc import GpuError, allocate, held, locked
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import JOB_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_target import JobError, Target
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import probe, read_text
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import LaunchSpec


def choose_gpus(spec: LaunchSpec, target: Target) -> list[dict[str, t.Any]]:
    """The GPUs this start gives the job (none without ``gpus``); raises JobError gpu_unavailable."""
    if spec.gpus is None:
        return []
    # pylint: disable-next=import-outside-toplevel  # only a start that asks for GPUs lists them (_gpu_smi costs ~3 ms of import)
    from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_smi import gpus

    seen = gpus(spec.nvidia_smi)
    if seen["nvidia_smi"] is None:
        raise JobError("gpu_unavailable", f"gpus is set, but {spec.nvidia_smi} is not found on this host: install the NVIDIA "
                                          "driver's user-space part (nvidia-smi, libcuda) of the node's driver version, or set nvidia_smi")
    if seen["error"]:
        raise JobError("gpu_unavailable", f"cannot list the GPUs: {seen['error']}")

    def alive(name: str) -> bool:
        return probe(target.tmux, name, os.path.join(spec.run_root, name), None).running

    try:
        return allocate(spec.gpus, seen["gpus"], held(spec.run_root, alive, spec.session_name), spec.gpu_exclude)
    except GpuError as exc:
        raise JobError("gpu_unavailable", str(exc)) from None


def gpu_lock(spec: LaunchSpec) -> t.ContextManager[None]:
    """The container-wide lock of GPU choices, for a start that asks for GPUs."""
    return locked(spec.run_root) if spec.gpus is not None else contextlib.nullcontext()


def running_gpus(run_dir: str) -> str:
    """The GPUs (UUIDs, comma-separated) the session's last start gave its job, from its job.json."""
    try:
        job = json.loads(read_text(os.path.join(run_dir, JOB_FILE)) or "{}")
    except ValueError:
        return ""
    uuids = job.get("gpus") if isinstance(job, dict) else None
    return ",".join(str(uuid) for uuid in uuids) if isinstance(uuids, list) else ""
