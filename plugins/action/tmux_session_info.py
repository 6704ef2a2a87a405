# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.tmux_session_info``: the report as a direct run where it can.

A direct run (``plugin_utils/_direct_run.py``) is the same one ``pct exec``, without the module runtime's import on
the target; otherwise (async, delegated or unpipelined tasks, an interpreter Ansible must still discover) the module
runs as usual.
"""

from __future__ import annotations

import typing as t

from ansible.plugins.action import ActionBase

from ansible_collections.trainops.pct_launch.plugins.module_utils._session_info import ARGUMENT_SPEC, RULES
from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _direct_run

MODULE_NAME = "trainops.pct_launch.tmux_session_info"


class ActionModule(ActionBase):
    """Run the report of the target's sessions."""

    TRANSFERS_FILES = False
    _supports_async = True  # an async task runs the module (plugin_utils/_direct_run.run_module)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """The module's report."""
        result = super().run(tmp, task_vars)
        del tmp
        result.update(_direct_run.run_module(self, MODULE_NAME, "_session_info", ARGUMENT_SPEC, dict(self._task.args), task_vars or {},
                                             **RULES))
        return result
