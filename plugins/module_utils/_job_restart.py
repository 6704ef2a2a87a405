# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""When the supervisor starts a job again (docs/job-life.md, ``supervise``): the settings' defaults, the delay
before each restart and the decision. ``_job_supervise`` imports it (and names it as its own, as before); staged
with the supervisor, standard library only, Python 3.7 or later.
"""

from __future__ import annotations

import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_notify

DEFAULTS: dict[str, t.Any] = {
    "restart": "never", "restart_limit": 3, "restart_delay": 10.0, "restart_backoff": 2.0, "restart_max_delay": 300.0,
    "no_restart_exit_codes": [], "time_limit": 0, "time_limit_signal": "TERM", "time_limit_grace": 30,
    "stall_timeout": 0, "stall_pattern": None, "stall_action": "record",
    "notify_command": None, "notify_url": None, "notify_states": list(_job_notify.STATES), "notify_lines": 10,
    # the container's next boot (_job_boot): start a job it cut off again; keep notify_url for its lost event
    "restart_on_boot": False, "notify_url_keep": False,
}


def policy_of(job: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The job's ``supervise`` settings over the defaults."""
    return dict(DEFAULTS, **(job.get("supervise") or {}))


def restart_delay(policy: t.Mapping[str, t.Any], restart: int) -> float:
    """Seconds before restart number ``restart`` (1-based): the delay, times the backoff per earlier restart, capped."""
    delay = float(policy["restart_delay"]) * float(policy["restart_backoff"]) ** (restart - 1)
    return min(delay, float(policy["restart_max_delay"]))


def wants_restart(policy: t.Mapping[str, t.Any], status: int, ended: t.Mapping[str, bool], restarts: int) -> bool:
    """Whether an attempt that ended so is started again (``ended``: stopped, signalled, shutdown, timed_out, stalled,
    stall_restart): never in a container that shuts down."""
    if any(ended.get(key) for key in ("stopped", "signalled", "shutdown", "timed_out")) or restarts >= int(policy["restart_limit"]):
        return False
    if ended.get("stall_restart"):
        return True
    if ended.get("stalled") or status in policy["no_restart_exit_codes"]:
        return False
    return policy["restart"] == "always" or (policy["restart"] == "on_failure" and status != 0)
