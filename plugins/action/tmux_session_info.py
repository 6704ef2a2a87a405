# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.tmux_session_info``: the report as a direct run where it can.

A direct run (``plugin_utils/_direct_run.py``) is the same one ``pct exec``, without the module runtime's import on
the target; otherwise (async, delegated or unpipelined tasks, an interpreter Ansible must still discover) the module
runs as usual.
"""

from __future__ import annotations

from ansible_collections.trainops.pct_launch.plugins.module_utils._session_info import ARGUMENT_SPEC, RULES
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._direct_run import DirectRunAction


class ActionModule(DirectRunAction):
    """Run the report of the target's sessions."""

    MODULE_NAME = "trainops.pct_launch.tmux_session_info"
    ENTRY = "_session_info"
    ARGUMENT_SPEC = ARGUMENT_SPEC
    RULES = RULES
