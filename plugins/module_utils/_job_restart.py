# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""When the supervisor starts a job again (docs/job-life.md, ``supervise``): the settings' defaults, the delay
before each restart, the restarts that count (``Counted``: ``restart_limit_window``) and the decision (``decide``:
``restart``, ``restart_on`` by the cause of the attempt's end, ``no_restart_exit_codes``, ``restart_limit``), with its
words, and the end of a restart that the CUDA probe refused (``refused_by_cuda``: a job with GPUs whose GPUs CUDA
cannot initialise any more is not started again, issue 35). ``_job_supervise`` imports it (and names it as its own,
as before); staged with the supervisor, standard library only, Python 3.7 or later.
"""

from __future__ import annotations

import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_notify

# The causes of a failed attempt's end that restart_on may name (docs/job-life.md, "Classification of the end"):
# stall is the end of an attempt the stall watchdog stopped (stall_action restart).
CAUSES = ("exit_status", "signal", "oom_kill", "cuda_oom", "nccl", "python_exception", "torchelastic", "stall")
RESTART_ON = ("any",) + CAUSES
DEFAULTS: dict[str, t.Any] = {
    "restart": "never", "restart_limit": 3, "restart_delay": 10.0, "restart_backoff": 2.0, "restart_max_delay": 300.0,
    "no_restart_exit_codes": [], "restart_on": ["any"], "restart_limit_window": 0,
    "time_limit": 0, "time_limit_signal": "TERM", "time_limit_grace": 30,
    "stall_timeout": 0, "stall_pattern": None, "stall_action": "record",
    # the GPU idle watchdog (_job_gpu_idle): a GPU of the job below gpu_idle_utilization % for gpu_idle_timeout s is a stall
    "gpu_idle_timeout": 0, "gpu_idle_utilization": 5,
    "notify_command": None, "notify_url": None, "notify_states": list(_job_notify.STATES), "notify_lines": 10,
    "notify_format": "json",
    # the container's next boot (_job_boot): start a job it cut off again; keep notify_url for its lost event
    "restart_on_boot": False, "notify_url_keep": False,
}
# How an attempt ended that is never started again, whatever the settings: a stop by trainops, a signal to the pane,
# a container that shuts down, the time limit.
NEVER = ("stopped", "signalled", "shutdown", "timed_out")
# The cause of the end of a job whose restart the CUDA probe refused (the end_state stays the last attempt's).
CUDA_PROBE = "cuda_probe"
# How much of the last attempt's reason the end of a refused restart keeps before the CUDA error and its fix, so that
# the command of the fix stays within the reason's 300 characters (``_job_end.REASON_MAX``).
ATTEMPT_WORDS = 40


class Decision(t.NamedTuple):
    """Whether the attempt is started again, after how many seconds, and why (or why not) in words: ``restart 2 of 3:
    cause nccl is in restart_on``, ``not restarted: cause python_exception is not in restart_on``; None when no restart
    was asked for (``restart: never``, exit status 0 under ``on_failure``, a stop)."""

    restart: bool
    words: str | None = None
    delay: float = 0.0


class Counted:
    """The restarts that count against ``restart_limit`` and the backoff: every one, or, with ``restart_limit_window``,
    those whose attempt ended within that many seconds before now (monotonic seconds)."""

    def __init__(self, policy: t.Mapping[str, t.Any], earlier: int, now: float) -> None:
        """``earlier``: the launch's restarts before this supervisor (a start at boot); when they ended is not known,
        so they count as ended ``now``."""
        self.window = float(policy.get("restart_limit_window") or 0)
        self.ends = [now] * earlier

    def count(self, now: float) -> int:
        """How many restarts count now."""
        if self.window > 0:
            self.ends = [end for end in self.ends if now - end <= self.window]
        return len(self.ends)

    def add(self, ended: float) -> None:
        """A restart of an attempt that ended at ``ended``."""
        self.ends.append(ended)


def policy_of(job: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The job's ``supervise`` settings over the defaults (a job.json of an earlier release lacks the newer keys)."""
    return dict(DEFAULTS, **(job.get("supervise") or {}))


def restart_delay(policy: t.Mapping[str, t.Any], restart: int) -> float:
    """Seconds before restart number ``restart`` (1-based, among the restarts that count): the delay, times the
    backoff per earlier restart, capped."""
    delay = float(policy["restart_delay"]) * float(policy["restart_backoff"]) ** (restart - 1)
    return min(delay, float(policy["restart_max_delay"]))


def _grounds(policy: t.Mapping[str, t.Any], status: int, ended: t.Mapping[str, t.Any]) -> str | None:
    """What asks for a restart of an attempt that ended so, before ``restart_on`` and the limit; None: nothing."""
    if any(ended.get(key) for key in NEVER):
        return None
    if ended.get("stall_restart"):
        return "stall_action restart"
    if ended.get("stalled") and policy["stall_action"] == "stop":
        return None
    if policy["restart"] == "always" or (policy["restart"] == "on_failure" and status != 0):
        return f"restart {policy['restart']}"
    return None


def decide(policy: t.Mapping[str, t.Any], status: int, ended: t.Mapping[str, t.Any], cause: str | None, counted: int) -> Decision:
    """Whether an attempt that ended so is started again: ``ended`` the supervisor's flags (stopped, signalled, shutdown,
    timed_out, stalled, stall_restart), ``cause`` its end's (``_job_end.classify``), ``counted`` the restarts that count
    (``Counted``). ``no_restart_exit_codes`` wins, then ``restart_on`` (for a failure; an exit status 0 under ``always``
    is restarted whatever it says), then ``restart_limit``."""
    grounds = _grounds(policy, status, ended)
    if grounds is None:
        return Decision(False)
    restart_on = list(policy.get("restart_on") or ["any"])
    limit, window = int(policy["restart_limit"]), float(policy.get("restart_limit_window") or 0)
    failed = status != 0 or bool(ended.get("stall_restart"))
    if status in policy["no_restart_exit_codes"] and not ended.get("stall_restart"):
        return Decision(False, f"not restarted: exit status {status} is in no_restart_exit_codes")
    if failed and "any" not in restart_on:
        if cause not in restart_on:
            return Decision(False, f"not restarted: cause {cause or 'unknown'} is not in restart_on")
        grounds = f"cause {cause} is in restart_on"
    if counted >= limit:
        return Decision(False, f"not restarted: restart_limit {limit} reached" + (f" within restart_limit_window {window:g} s" if window > 0 else ""))
    within = f" within {window:g} s" if window > 0 else ""
    return Decision(True, f"restart {counted + 1} of {limit}{within}: {grounds}", restart_delay(policy, counted + 1))


def wants_restart(policy: t.Mapping[str, t.Any], status: int, ended: t.Mapping[str, t.Any], restarts: int, cause: str | None = None) -> bool:
    """Whether an attempt that ended so is started again (``decide`` without its words)."""
    return decide(policy, status, ended, cause, restarts).restart


def refused_by_cuda(end: t.Mapping[str, t.Any], words: str) -> dict[str, t.Any]:
    """The end of a job whose restart the CUDA probe refused: the last attempt's ``end`` (its ``end_state``), with the
    cause ``cuda_probe`` and the reason ``<the attempt's reason, cut>; not restarted: <words>`` (``words``: the failed
    probe's ``_cuda_probe.message``); the supervisor cuts the whole to 300 characters (``_job_end.one_line``)."""
    before = " ".join(str(end.get("reason") or f"exit status {end.get('exit_status')}").split())
    if len(before) > ATTEMPT_WORDS:
        before = before[:ATTEMPT_WORDS - 1].rstrip() + "\u2026"
    return dict(end, cause=CUDA_PROBE, reason=f"{before}; not restarted: {words}")
