# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""One chunk of ``wait_for_log`` on the host the log is on: what its module returns.

The action plugin (``plugins/action/wait_for_log.py``) runs the chunks, each one run of the module; ``tmux_session``'s
option ``wait`` runs the first one in its own run (``_tmux_run``). Check mode records no proof of the start.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._log_poll import poll
from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import SUCCESS, check_options, message, poll_parameters, result_from_facts
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import reportable


def chunk(params: t.Mapping[str, t.Any], check_mode: bool) -> dict[str, t.Any]:
    """The verdict of one chunk of waiting (the module's validated options); ``failed`` unless it is a success."""
    errors = check_options(params)
    if errors:
        return {"failed": True, "msg": "; ".join(errors)}
    started = time.monotonic()
    facts = poll(poll_parameters(dict(params, record_proof=not check_mode), params["timeout"], params["offset"]))
    result = reportable(result_from_facts(facts, time.monotonic() - started))
    if result["verdict"] in SUCCESS:
        return dict(result, changed=False, msg=message(result, params))
    return dict(result, failed=True, msg=message(result, params))
