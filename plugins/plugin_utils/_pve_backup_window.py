# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: the backups that stop or suspend a container while a job would run there (backup windows).

Pure Python, no Ansible import. ``evaluate`` judges what ``module_utils/_pve_backup_files.py`` read on the node
(``read_node``) for one container: the jobs that cover it (``_pve_backup``), each with when it is next due, and the
windows, those in mode ``stop`` or ``suspend`` due within the job's ``time_limit`` (a day without one; a backup due
exactly at the limit counts), with a message that names the job, its schedule, its mode and when it is due.

When: the job's ``schedule`` from now, as pve-manager's ``PVE::API2::Backup`` index computes the GUI's "Next Run"
(``compute_next_event`` from ``time()``: ``pvescheduler``'s ``PVE::Jobs::run_jobs`` counts from the last run, which is
the same unless a run was missed), in the node's local time (``_pve_calendar``; the node's zone by name when the
controller knows it with the node's offset, else the node's offset now, which is an hour off across a change of
summer time). What a mode does to a container: pve-container's ``PVE::VZDump::LXC`` ``stop_vm`` (``vm_stop``, a clean
shutdown, and a start after the backup: the job ends) and ``suspend_vm`` (``PVE::LXC::freeze`` until the second rsync
is done: the job pauses); pve-manager's ``PVE::VZDump::exec_backup_task`` falls back from ``snapshot`` to ``suspend``
when a volume has no snapshots, which is not known here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import typing as t
import zoneinfo

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pve_backup import (
    BackupJob,
    covers,
    default_mode,
    parse_jobs_cfg,
    parse_pools,
    parse_vzdump_cron,
)
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pve_calendar import CalendarError, next_due, parse

DAY = 86400
EFFECTS = {
    "stop": ("stops", "vzdump shuts the container down for the backup and starts it again, which ends the job"),
    "suspend": ("suspends", "vzdump freezes the container's processes while it copies what changed (the job pauses; "
                            "a distributed job's timeouts and deadlines can fire)"),
}
JOB_FILES = ("jobs.cfg", "vzdump.cron")


@dataclasses.dataclass(frozen=True)
class Situation:
    """What one container's judgement needs: the container, its node's defaults, the time and how far to look."""

    vmid: int
    node: str | None
    pools: t.Mapping[str, frozenset[int]] | None
    mode: str
    now: int
    zone: dt.tzinfo
    time_limit: float = 0

    @property
    def horizon(self) -> int:
        """Seconds looked ahead: the job's time_limit, else a day."""
        return int(-(-self.time_limit // 1)) if self.time_limit > 0 else DAY


def node_zone(name: str | None, offset: str | None, now: int) -> tuple[dt.tzinfo, str]:
    """The node's time zone: ``name`` when the controller knows it with the node's offset now (summer time included),
    else the fixed offset the node gave (``+0100``, as ``date +%z``); and how to name it."""
    found = re.match(r"^([+-])(\d\d)(\d\d)$", offset or "")
    sign = -1 if found and found.group(1) == "-" else 1
    fixed = dt.timezone(sign * dt.timedelta(hours=int(found.group(2)), minutes=int(found.group(3)))) if found else dt.timezone.utc
    try:
        zone = zoneinfo.ZoneInfo(name) if name else None
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is not None and (not found or dt.datetime.fromtimestamp(now, zone).utcoffset() == fixed.utcoffset(None)):
        return zone, str(name)
    return fixed, f"UTC{offset}" if found else "UTC"


def duration(seconds: float) -> str:
    """``5 h 12 min``, ``2 d 3 h``, ``40 min``, ``under a minute``."""
    minutes = int(seconds // 60)
    if minutes < 1:
        return "under a minute"
    days, rest = divmod(minutes, 1440)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} d"] if days else []
    parts += [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes and not days else []
    return " ".join(parts)


def local_time(epoch: int | None, zone: dt.tzinfo) -> str | None:
    """``Sun 2026-12-06 01:00 +0100`` in the node's time zone."""
    return None if epoch is None else dt.datetime.fromtimestamp(epoch, zone).strftime("%a %Y-%m-%d %H:%M %z")


def _fix(how: str, vmid: int) -> str:
    if how.startswith("pool "):
        take = f"take CT {vmid} out of {how.split(',')[0]}"
    elif how == "its VMIDs":
        take = f"take CT {vmid} out of its VMIDs"
    else:
        take = f"add CT {vmid} to its exclude list"
    return f"{take}, give it mode snapshot, or launch the job after the backup"


def window_message(job: BackupJob, entry: t.Mapping[str, t.Any], situation: Situation, where: str) -> str:
    """The warning: the job, what it does to the container and when, and what to do about it."""
    verb, effect = EFFECTS[entry["mode"]]
    within = (f"before the job's time_limit of {duration(situation.time_limit)} is up" if situation.time_limit > 0
              else "within the next 24 h (the job has no time_limit)")
    return (f"{job.name[0].upper()}{job.name[1:]} {verb} CT {situation.vmid} in {duration(entry['due_in'])}: mode "
            f"{entry['mode']}, schedule '{job.schedule}' (node time, {where}), next due {entry['next_due_local']}, "
            f"{within}, and it takes CT {situation.vmid} as {entry['selects']}; {effect}: {_fix(entry['selects'], situation.vmid)}")


def judge(job: BackupJob, situation: Situation, where: str) -> dict[str, t.Any] | str | None:
    """The entry of a job that covers the container (with ``message`` when it stops or suspends it within the horizon),
    the problem of one whose schedule cannot be read, or None for a job that does not cover it."""
    how = covers(job, situation.vmid, situation.node, situation.pools)
    if how is None:
        return None
    mode = job.mode or situation.mode
    try:
        due = next_due(parse(job.schedule), situation.now, situation.zone) if job.enabled else None
    except CalendarError as exc:
        return (f"Cannot read the schedule '{job.schedule}' of {job.name}: {exc}: not known when it backs up CT "
                f"{situation.vmid} in mode {mode}")
    entry: dict[str, t.Any] = {
        "id": job.job_id, "source": job.where, "schedule": job.schedule, "mode": mode, "enabled": job.enabled,
        "selects": how, "next_due": due, "next_due_local": local_time(due, situation.zone),
        "due_in": None if due is None else due - situation.now}
    entry["in_window"] = mode in EFFECTS and due is not None and due - situation.now <= situation.horizon
    if entry["in_window"]:
        entry["message"] = window_message(job, entry, situation, where)
        entry["summary"] = (f"{job.name} {EFFECTS[mode][0]} it at {entry['next_due_local']} (in {duration(entry['due_in'])}, "
                            f"mode {mode}, schedule '{job.schedule}')")
    return entry


def read_problem(name: str, error: str, report: t.Mapping[str, t.Any]) -> str:
    """Why a file of the node was not read, and what that leaves unknown."""
    path = "/etc/vzdump.conf" if name == "vzdump.conf" else f"{report.get('pve_dir')}/{name}"
    what = {"vzdump.conf": "a job without a mode is taken as mode snapshot",
            "user.cfg": "which guests its pools hold is not known",
            }.get(name, "its backup jobs were not checked")
    fix = ("" if name == "vzdump.conf" else "; pmxcfs lets root and the group www-data read it: reach the node as root, "
           f"or add {report.get('login')} to the group www-data there")
    return f"Cannot read {path} on node {report.get('nodename')} as {report.get('login')}: {error}: {what}{fix}"


def evaluate(report: t.Mapping[str, t.Any], vmid: int, time_limit: float = 0) -> dict[str, t.Any]:
    """``checked``, ``reason``, ``node``, ``timezone``, ``now``, ``horizon``, ``jobs``, ``windows`` and ``problems`` of
    container ``vmid`` from the node's ``read_node`` (or a report with ``error`` when the node could not be asked)."""
    now = int(report.get("now") or 0)
    zone, zone_name = node_zone(report.get("timezone"), report.get("utc_offset"), now)
    node = report.get("node") or report.get("nodename")
    situation = Situation(int(vmid), node, None, "", now, zone, float(time_limit or 0))
    result: dict[str, t.Any] = {"checked": False, "reason": None, "node": node, "timezone": zone_name, "now": report.get("now"),
                                "horizon": situation.horizon, "jobs": [], "windows": [], "problems": []}
    if report.get("error"):
        return dict(result, reason=report["error"], problems=[report["error"]])
    if not report.get("is_pve"):
        return dict(result, reason=f"the node has no {report.get('pve_dir')}: no Proxmox VE backup jobs to check")
    files, errors = report.get("files") or {}, report.get("errors") or {}
    problems = [read_problem(name, str(error), report) for name, error in sorted(errors.items())]
    situation = dataclasses.replace(situation, pools=None if "user.cfg" in errors else parse_pools(files.get("user.cfg")),
                                    mode=default_mode(files.get("vzdump.conf")))
    jobs = (parse_jobs_cfg(files.get("jobs.cfg"), f"{report.get('pve_dir')}/jobs.cfg")
            + parse_vzdump_cron(files.get("vzdump.cron"), f"{report.get('pve_dir')}/vzdump.cron"))
    for job in jobs:
        found = judge(job, situation, zone_name)
        if isinstance(found, str):
            problems.append(found)
        elif found is not None:
            result["jobs"].append(found)
    windows = sorted((entry for entry in result["jobs"] if entry["in_window"]), key=lambda entry: entry["next_due"])
    unread = [name for name in JOB_FILES if name in errors]
    return dict(result, checked=not unread, reason=f"{' and '.join(unread)} could not be read" if unread else None,
                windows=windows, problems=problems)
