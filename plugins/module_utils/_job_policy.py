# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The supervision options of ``tmux_session``: their argument spec and their checks (docs/job-life.md).

``ARGUMENT_SPEC`` is merged into the module's; ``supervise_from_params`` checks the values and returns
the ``supervise`` settings the supervisor reads from job.json, as sorted (key, value) pairs (hashable,
for ``LaunchSpec``). It raises ``ValueError`` naming the option; ``_tmux_launch`` turns it into ``SpecError``.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_notify import STATES, validate
from ansible_collections.trainops.pct_launch.plugins.module_utils._notify_format import FORMATS
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_restart import RESTART_ON
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_supervise import DEFAULTS

SIGNALS = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "KILL")
DAY = 86400
ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = {
    "restart": {"type": "str", "choices": ["never", "on_failure", "always"], "default": "never"},
    "restart_limit": {"type": "int", "default": 3},
    "restart_delay": {"type": "float", "default": 10.0},
    "restart_backoff": {"type": "float", "default": 2.0},
    "restart_max_delay": {"type": "float", "default": 300.0},
    "no_restart_exit_codes": {"type": "list", "elements": "int", "default": []},
    "restart_on": {"type": "list", "elements": "str", "choices": list(RESTART_ON), "default": ["any"]},
    "restart_limit_window": {"type": "float", "default": 0},
    "time_limit": {"type": "float", "default": 0},
    "time_limit_signal": {"type": "str", "choices": list(SIGNALS), "default": "TERM"},
    "time_limit_grace": {"type": "float", "default": 30},
    "stall_timeout": {"type": "float", "default": 0},
    "stall_pattern": {"type": "str"},
    "stall_action": {"type": "str", "choices": ["record", "stop", "restart"], "default": "record"},
    "gpu_idle_timeout": {"type": "float", "default": 0},
    "gpu_idle_utilization": {"type": "float", "default": 5},
    "notify_command": {"type": "list", "elements": "str"},
    "notify_url": {"type": "str", "no_log": True},
    "notify_states": {"type": "list", "elements": "str", "choices": list(STATES), "default": list(STATES)},
    "notify_lines": {"type": "int", "default": 10},
    "notify_format": {"type": "str", "choices": list(FORMATS), "default": "json"},
    "notify_url_keep": {"type": "bool", "default": False},
    "restart_on_boot": {"type": "bool", "default": False},
}
# option: (lowest, highest, what it counts)
_RANGES = {
    "restart_limit": (0, 1000, "restarts"), "restart_delay": (0, DAY, "seconds"), "restart_backoff": (1, 10, "as a factor"),
    "restart_max_delay": (0, DAY, "seconds"), "restart_limit_window": (0, 366 * DAY, "seconds (0: every restart counts)"),
    "time_limit": (0, 366 * DAY, "seconds (0: no limit)"),
    "time_limit_grace": (0, DAY, "seconds"), "stall_timeout": (0, 366 * DAY, "seconds (0: no watchdog)"),
    "gpu_idle_timeout": (0, 366 * DAY, "seconds (0: no GPU idle watchdog)"), "gpu_idle_utilization": (0, 100, "percent"),
    "notify_lines": (0, 200, "lines"),
}


def _value(params: t.Mapping[str, t.Any], key: str) -> t.Any:
    value = params.get(key)
    return DEFAULTS[key] if value is None else value


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _range_errors(settings: t.Mapping[str, t.Any]) -> list[str]:
    errors = []
    for key, (low, high, unit) in _RANGES.items():
        if not low <= settings[key] <= high:
            errors.append(f"Invalid {key} {_num(settings[key])}: use {_num(low)} to {_num(high)} {unit}")
    for code in settings["no_restart_exit_codes"]:
        if not 0 <= code <= 255:
            errors.append(f"Invalid no_restart_exit_codes {code}: exit statuses are 0 to 255")
    if settings["restart_on_boot"] and settings["restart_limit"] == 0:
        errors.append("Invalid restart_limit 0 with restart_on_boot: a start at the container's boot is a restart, counted "
                      "against restart_limit; give restart_limit 1 or more, or drop restart_on_boot")
    if settings["notify_url_keep"] and settings["notify_url"] is None:
        errors.append("Invalid notify_url_keep without notify_url: it keeps the notify_url for the lost event; give notify_url")
    if settings["time_limit"] and settings["time_limit_grace"] >= settings["time_limit"]:
        errors.append(f"Invalid time_limit_grace {_num(settings['time_limit_grace'])}: the signal is sent that many seconds before "
                      f"the time_limit {_num(settings['time_limit'])}, so it must be less than time_limit")
    return errors


def _restart_on_errors(settings: t.Mapping[str, t.Any]) -> list[str]:
    """``restart_on``: known causes, ``any`` alone, and only where a failure may be restarted."""
    causes = [str(cause) for cause in settings["restart_on"]]
    shown = ", ".join(causes) or "[]"
    unknown = [cause for cause in causes if cause not in RESTART_ON]
    if unknown:
        return [f"Invalid restart_on {', '.join(unknown)}: use any (the default) or some of {', '.join(RESTART_ON[1:])}, the causes of "
                "docs/job-life.md's classification of the end"]
    if not causes:
        return ["Invalid restart_on []: give the causes to restart, or any (the default); to restart nothing, set restart never"]
    if "any" in causes and len(set(causes)) > 1:
        return [f"Invalid restart_on {shown}: any already restarts every cause; give any alone, or only the causes"]
    errors = []
    restarts_stalls = settings["stall_action"] == "restart"
    if causes != ["any"] and settings["restart"] == "never" and not restarts_stalls:
        errors.append(f"Invalid restart_on {shown} with restart never: restart_on chooses which failures are restarted; set restart "
                      "on_failure or always, or leave restart_on out")
    if "stall" in causes and not restarts_stalls:
        errors.append("Invalid restart_on stall without stall_action restart: only the stall watchdog's restart ends an attempt with "
                      "cause stall that can be started again; set stall_action restart, or leave stall out")
    if restarts_stalls and not {"any", "stall"} & set(causes):
        errors.append(f"Invalid stall_action restart with restart_on {shown}: a stall would never be restarted; add stall to "
                      "restart_on, or set stall_action stop")
    return errors


def _gpu_idle_errors(settings: t.Mapping[str, t.Any], gpus: t.Any) -> list[str]:
    """``gpu_idle_timeout`` watches the GPUs ``gpus`` gives the job, and only a utilisation above 0 % can be undercut."""
    timeout = settings["gpu_idle_timeout"]
    if not timeout or timeout < 0:
        return []
    if gpus is None or gpus == "" or gpus == []:
        return [f"Invalid gpu_idle_timeout {_num(timeout)} without gpus: the GPU idle watchdog watches the GPUs gpus gives the job; "
                "set gpus, or leave gpu_idle_timeout 0"]
    if settings["gpu_idle_utilization"] == 0:
        return ["Invalid gpu_idle_utilization 0 with gpu_idle_timeout: no utilisation is below 0 %, so the GPUs would never idle; "
                "give 1 to 100 (percent), or leave gpu_idle_timeout 0"]
    return []


def supervise_from_params(params: t.Mapping[str, t.Any]) -> tuple[tuple[str, t.Any], ...]:
    """The checked settings; raises ValueError with every problem, each naming its option."""
    settings = {key: _value(params, key) for key in DEFAULTS}
    settings["restart_on"] = list(dict.fromkeys(settings["restart_on"]))  # each cause once
    errors = _range_errors(settings)
    if settings["stall_pattern"] is not None:
        try:
            re.compile(settings["stall_pattern"])
        except re.error as exc:
            errors.append(f"Invalid stall_pattern {settings['stall_pattern']!r}: it is not a valid Python regular expression ({exc})")
    errors += _restart_on_errors(settings)
    errors += _gpu_idle_errors(settings, params.get("gpus"))
    errors += validate(settings)
    if errors:
        raise ValueError("; ".join(errors))
    return tuple(sorted((key, tuple(value) if isinstance(value, list) else value) for key, value in settings.items()))


def changed_settings(supervise: t.Iterable[tuple[str, t.Any]]) -> dict[str, t.Any]:
    """The settings that differ from the defaults (what the spec hash and summary include)."""
    return {key: list(value) if isinstance(value, tuple) else value for key, value in supervise
            if (list(value) if isinstance(value, tuple) else value) != DEFAULTS[key]}
