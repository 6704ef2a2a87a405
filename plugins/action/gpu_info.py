# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.gpu_info``: the node's view next to the container's.

On a container of the ``trainops.pct_launch.pct`` connection the node is asked through the connection
(``Connection.node_command``): ``python3 -`` there runs ``_gpu_smi.py`` (sent on its standard input), which
prints the node's GPUs and their processes, each with the container it belongs to. Then the module runs in
the container, and ``_gpu_verdict`` says what the two views mean. On any other host the module's own view is
the node's. Each container asks its node for itself (one ``node_command`` per container and task): hosts share no
answers.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.trainops.pct_launch.plugins.module_utils import _gpu_smi
from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_alloc import GpuError, parse_request
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._gpu_verdict import blocking, busy, problems
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._module_failure import module_answered, module_failure_cause
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._node_program import answer, source_of
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_vars import host_vmid

MODULE_NAME = "trainops.pct_launch.gpu_info"
NODE_KEYS = ("gpus", "driver_version", "error", "processes")
# What the module would report in a container of a node without GPUs.
NO_GPU = {"gpus": [], "nvidia_smi": None, "driver_version": None, "error": None, "device_files": [], "device_access": [],
          "libraries": {}, "held": {}}


def node_argv(nvidia_smi: str) -> list[str]:
    """What runs on the node: ``python3 - --nvidia-smi PROGRAM`` with ``_gpu_smi.py`` on its standard input."""
    return ["python3", "-", "--nvidia-smi", nvidia_smi]


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
        except GpuError as exc:
            return dict(result, failed=True, msg=str(exc))
        vmid = host_vmid(task_vars)
        node = self._ask_node(str(args.get("node_nvidia_smi") or "nvidia-smi")) if self._on_container() else None
        if node is not None and request is None and not node.get("gpus") and not node.get("error"):
            # a node without GPUs has none to give its containers: nothing to look at in there (no pct call)
            return dict(result, changed=False, container_checked=False, node=node, busy=[], busy_uuids=[], blocking=[], problems=[],
                        **NO_GPU)
        host = self._execute_module(module_name=MODULE_NAME, module_args=args, task_vars=task_vars)
        if not module_answered(host):
            where = f"container {vmid}" if vmid is not None else f"host {task_vars.get('inventory_hostname')}"
            return dict(host, msg=f"Cannot report the GPUs of {where}: {module_failure_cause(host)}")
        if host.get("failed"):
            return host
        if node is None:  # the host is its own node
            node = {key: host.get(key) for key in NODE_KEYS}
        findings = busy(node, host, int(vmid) if vmid is not None else None,
                        int(args.get("busy_utilization", 10)), int(args.get("busy_memory", 512)))
        host.pop("processes", None)
        result.update(host, node=node, busy=findings, busy_uuids=sorted({str(item["uuid"]) for item in findings}),
                      blocking=blocking(findings, request), problems=problems(node, host, request), changed=False, container_checked=True)
        return result

    def _on_container(self) -> bool:
        """Whether the task reaches a container through the collection's pct connection (it can ask the node)."""
        return callable(getattr(self._connection, "node_command", None))

    def _ask_node(self, nvidia_smi: str) -> dict[str, t.Any]:
        """The node's report, asked through the connection; one whose ``error`` says why when it could not be had."""
        try:
            rc, out, err = self._connection.node_command(node_argv(nvidia_smi), in_data=node_program())
        except AnsibleError as exc:
            return parse_node_answer(255, b"", to_text(exc).encode())
        return parse_node_answer(rc, out, err)
