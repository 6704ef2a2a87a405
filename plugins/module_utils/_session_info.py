# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""``tmux_session_info``'s options and result, for the module's ``main()``.

The module (``plugins/modules/tmux_session_info.py``) validates the options with ``ARGUMENT_SPEC`` and ``RULES`` and
returns ``info``'s result.
"""

from __future__ import annotations

import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import reportable
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_sessions import check_info_options, launch_history, report, session_entry

ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = dict(
    session_name=dict(type="str"),
    log_path=dict(type="str"),
    lines=dict(type="int", default=20),
    history=dict(type="bool", default=False),
    history_limit=dict(type="int", default=100),
    # the action plugin's (controller side): the module never reads it
    node_kernel_log=dict(type="list", elements="str"),
)

RULES: dict[str, t.Any] = dict(required_by={"log_path": "session_name"})


def info(params: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The report of this host's sessions for the validated options; ``failed`` (and nothing read) when they are wrong."""
    errors = check_info_options(params)
    if errors:
        return {"failed": True, "msg": "; ".join(errors)}
    tmux, found = report(params["session_name"], params["log_path"], params["lines"])
    sessions = [session_entry(facts) for facts in found]
    result: dict[str, t.Any] = {"changed": False, "tmux": tmux, "sessions": sessions}
    if params["session_name"]:
        result["session"] = sessions[0] if sessions else None
    if params["history"]:
        result["history"] = launch_history(params["session_name"], params["history_limit"])
    return reportable(result)
