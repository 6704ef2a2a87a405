# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.tmux_session_info``: the module's report, with the Xid errors of the GPUs of
jobs that ended other than finished named from the node's kernel log (``plugin_utils/_job_xid``).

The module runs on the target as the normal action runs it (one ``pct exec`` on a container). Only when a session's
job had GPUs and ended other than ``finished`` or ``stopped`` is the node asked, once for all of them, through the
pct connection's ``node_command``; on any other host nothing more is asked.
"""

from __future__ import annotations

import typing as t

from ansible.plugins.action import ActionBase

from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _job_xid

MODULE_NAME = "trainops.pct_launch.tmux_session_info"


def log_argv(value: object) -> list[str] | None:
    """``node_kernel_log`` as the module's list type reads it (a list, or a comma-separated string), None when unset."""
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [str(item) for item in items] or None


def with_gpu_fault(session: dict[str, t.Any]) -> None:
    """A session or launch whose end the GPU caused: its ``reason`` says so first (status.yml's and history.yml's REASON)."""
    if session.get("cause") == "gpu_xid":
        job = f"; the job: {session['reason']}" if session.get("reason") else ""
        session["reason"] = f"gpu_xid: {session['xid_reason']}{job}"


class ActionModule(ActionBase):
    """Run the module, then name the GPU faults behind the ends it reports."""

    TRANSFERS_FILES = False

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """The module's result; ``sessions[]`` (and ``session``) and ``history[]`` with ``cause: gpu_xid``, ``xid`` where the
        GPU faulted."""
        result = super().run(tmp, task_vars)
        del tmp
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        result.update(self._execute_module(module_name=MODULE_NAME, module_args=dict(self._task.args), task_vars=task_vars,
                                           wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(None)
        sessions, history = result.get("sessions"), result.get("history")
        if result.get("failed") or not isinstance(sessions, list) or wrap_async:
            return result
        ends = sessions + (history if isinstance(history, list) else [])
        warning = _job_xid.name_ends(self._connection, ends, log_argv(self._task.args.get("node_kernel_log")))
        if warning:
            result.setdefault("warnings", []).append(warning)
        for end in ends:
            with_gpu_fault(end)
        if isinstance(result.get("session"), dict):
            result["session"] = next((item for item in sessions if item.get("name") == result["session"].get("name")), result["session"])
        return result
