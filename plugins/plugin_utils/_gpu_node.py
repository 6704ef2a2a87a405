# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The node's GPU report, asked from the controller: ``python3 -`` on the Proxmox VE node (``Connection.node_command``
of the collection's pct connection) runs ``_gpu_smi.py``, sent on its standard input, and prints its report as JSON.

``gpu_info`` asks for the GPUs, their processes, the driver's versions and the kernel log's Xid lines; the readers of
a job's end (``wait_for_log``, ``tmux_session_info``, through ``_job_xid``) ask for the Xid lines only. A container
cannot read its node's kernel log: this is the only way to it.
"""

from __future__ import annotations

import json
import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.trainops.pct_launch.plugins.module_utils import _gpu_smi
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._node_program import answer, source_of


def node_argv(nvidia_smi: str, xid_hours: int = 0, kernel_log: t.Sequence[str] | None = None, root: str = "/") -> list[str]:
    """What runs on the node: ``python3 - --nvidia-smi PROGRAM --driver [--xid-hours N [--kernel-log-command JSON]]
    [--root DIR]`` with ``_gpu_smi.py`` on its standard input."""
    argv = ["python3", "-", "--nvidia-smi", nvidia_smi, "--driver"]
    if xid_hours > 0:
        argv += ["--xid-hours", str(xid_hours)] + (["--kernel-log-command", json.dumps(list(kernel_log))] if kernel_log else [])
    return argv + (["--root", root] if root not in ("", "/") else [])


def node_program() -> bytes:
    """The source of ``_gpu_smi.py``, as the node's python3 reads it from its standard input."""
    return source_of(_gpu_smi)


def parse_node_answer(rc: int, out: bytes, err: bytes) -> dict[str, t.Any]:
    """The node's report, or one whose ``error`` says why the node could not give it."""
    report, cause = answer(rc, out, err)
    if report is not None:
        return report
    return {"gpus": [], "driver_version": None, "processes": [], "nvidia_smi": None,
            "error": f"python3 on the node could not report its GPUs (exit status {rc}): {cause}"}


def can_ask(connection: t.Any) -> bool:
    """Whether the task reaches a container through the collection's pct connection (it can ask the node)."""
    return callable(getattr(connection, "node_command", None))


def ask(connection: t.Any, nvidia_smi: str = "nvidia-smi", hours: int = 0, log_argv: t.Sequence[str] | None = None,
        root: str = "/") -> dict[str, t.Any]:
    """The node's report, asked through the connection; one whose ``error`` says why when it could not be had."""
    try:
        rc, out, err = connection.node_command(node_argv(nvidia_smi, hours, log_argv, root), in_data=node_program())
    except AnsibleError as exc:
        return parse_node_answer(255, b"", to_text(exc).encode())
    return parse_node_answer(rc, out, err)
