# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.backup_window_info``: the node's backup jobs, judged for the container.

On a container of the ``trainops.pct_launch.pct`` connection the node is asked through the connection
(``Connection.node_command``), as ``gpu_info``'s action asks it: ``python3 -`` there runs ``_pve_backup_files.py``
(sent on its standard input), which prints what the node holds about its backup jobs; nothing runs in the container.
On another host given ``vmid`` the module reads the same on that host (it is the node). Then
``_pve_backup_window.evaluate`` judges it on the controller. Each container asks its node for itself.

A task of its own rather than a part of ``gpu_info``'s question to the node: backup windows are no GPU matter (a CPU
job needs them as much), ``gpu_info`` keeps its contract (a node without GPUs costs no ``pct exec``) and its result,
and this one can run alone; the price is one more task in the preflight and one more process on the node (local, or
over the connection's shared ssh) per container.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.trainops.pct_launch.plugins.module_utils import _pve_backup_files
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._module_failure import module_answered, module_failure_cause
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._node_program import answer, source_of
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_vars import host_node, host_vmid
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pve_backup_window import evaluate

MODULE_NAME = "trainops.pct_launch.backup_window_info"


def node_argv(pve_dir: str, vmid: int) -> list[str]:
    """What runs on the node: ``python3 - --pve-dir DIR --vmid VMID`` with ``_pve_backup_files.py`` on its standard input."""
    return ["python3", "-", "--pve-dir", pve_dir, "--vmid", str(vmid)]


def node_program() -> bytes:
    """The source of ``_pve_backup_files.py``, as the node's python3 reads it from its standard input."""
    return source_of(_pve_backup_files)


def parse_node_answer(rc: int, out: bytes, err: bytes, node: str) -> dict[str, t.Any]:
    """The node's report, or one whose ``error`` says why the node could not give it."""
    report, cause = answer(rc, out, err)
    if report is not None:
        return report
    return {"error": f"Cannot read the backup jobs of node {node}: python3 there failed (exit status {rc}): {cause}"}


class ActionModule(ActionBase):
    """Ask the node (or run the module on a host that is one), and judge."""

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """The backup jobs that cover the container, and the windows among them."""
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        on_container = self._on_container()
        given = host_vmid(task_vars) if on_container else args.get("vmid")
        try:
            time_limit = float(args.get("time_limit") or 0)
            vmid = None if given is None else int(given)
        except (TypeError, ValueError) as exc:
            return dict(result, failed=True, msg=f"Cannot check the backup windows of {task_vars.get('inventory_hostname')}: "
                                                 f"time_limit and vmid must be numbers: {exc}")
        if vmid is None:
            return dict(result, changed=False, checked=False, node=None, timezone=None, now=None, jobs=[], windows=[], problems=[],
                        horizon=int(-(-time_limit // 1)) if time_limit > 0 else 86400,
                        reason="not a container of the trainops.pct_launch.pct connection, and no vmid given")
        pve_dir = str(args.get("pve_dir") or "/etc/pve")
        report = self._ask_node(pve_dir, vmid, task_vars) if on_container else self._ask_host(args, task_vars)
        if report.get("failed"):
            return report
        result.update(evaluate(report, vmid, time_limit), changed=False)
        return result

    def _on_container(self) -> bool:
        """Whether the task reaches a container through the collection's pct connection (it can ask the node)."""
        return callable(getattr(self._connection, "node_command", None))

    def _ask_node(self, pve_dir: str, vmid: int, task_vars: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        """The node's report, asked through the connection; one whose ``error`` says why when it could not be had."""
        node = str(host_node(task_vars) or "localhost")
        try:
            rc, out, err = self._connection.node_command(node_argv(pve_dir, vmid), in_data=node_program())
        except AnsibleError as exc:
            return {"error": f"Cannot read the backup jobs of node {node}: {' '.join(to_text(exc).split())[:300]}"}
        return parse_node_answer(rc, out, err, node)

    def _ask_host(self, args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        """The module's report on a host that is the node itself; a failed result when it could not run there."""
        host = self._execute_module(module_name=MODULE_NAME, module_args=args, task_vars=task_vars)
        if host.get("failed") or host.get("unreachable"):
            cause = module_failure_cause(host) if not module_answered(host) else host.get("msg")
            return dict(host, failed=True, msg=f"Cannot read the backup jobs of host {task_vars.get('inventory_hostname')}: {cause}")
        return dict(host.get("node_files") or {})
