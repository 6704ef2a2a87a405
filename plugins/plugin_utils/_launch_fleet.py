# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: what launch.yml's play decides about its fleet, from the results each container registered.

Pure Python, no Ansible import: ``fleet`` reads, per host of the play (``ansible_play_hosts_all``, inventory order),
the results launch.yml registers there (``job_launch``: tmux_session, ``job_wait``: the proof's handler,
``job_reproof``: the proof of a job found running, ``job_launch_failure``: ``ansible_failed_result`` of the launch's
rescue, ``job_fleet_stop``: the stop of job_all_or_nothing; and preflight.yml's ``preflight_backup``, the backups that
stop or suspend the container during the job, for the report) and says for each one its status and reason, which
containers are at fault (the one that failed first in a fleet-wide wait comes first), whether job_all_or_nothing
must undo the launch and where, what fails, the summary and the report. The filter ``trainops.pct_launch.launch_fleet``
is its face in the playbooks.
"""

from __future__ import annotations

import dataclasses
import typing as t

RUNNING = ("started", "already running", "would start")
LOST_DURING = "lost during the launch (unreachable?): see above"


@dataclasses.dataclass(frozen=True)
class Launch:
    """What the play knows of the launch as a whole: its options and the containers that failed before it."""

    session_name: str
    lost: tuple[str, ...] = ()
    all_or_nothing: bool = False
    check_mode: bool = False
    log_path: str = ""
    multinode: bool = False
    master_port: int = 29500

    @property
    def refused(self) -> bool:
        """job_all_or_nothing, and a container failed before the launch: nothing is launched."""
        return self.all_or_nothing and bool(self.lost)


def _result(value: t.Any) -> dict[str, t.Any]:
    """A registered result as a dict; {} when it is not there or the task was skipped."""
    if not isinstance(value, t.Mapping) or value.get("skipped"):
        return {}
    return dict(value)


def first_line(value: t.Any, limit: int = 400) -> str:
    """The first line of a message, at most ``limit`` characters (``...`` at the cut)."""
    lines = str(value if value is not None else "").strip().split("\n")
    text = lines[0].strip() if lines else ""
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def _why(result: t.Mapping[str, t.Any]) -> t.Any:
    return result.get("reason") or result.get("msg")


def _cut_short(wait: t.Mapping[str, t.Any], reproof: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The fleet failure that ended this container's proof (another container failed first), or {}."""
    for proof in (wait, reproof):
        if proof.get("verdict") == "fleet_failed" and isinstance(proof.get("fleet_failure"), t.Mapping):
            return dict(proof["fleet_failure"])
    return {}


def _found_proven(launch: t.Mapping[str, t.Any]) -> bool:
    """A job found running (nothing started) whose start was proven already."""
    return bool(launch) and not launch.get("changed") and launch.get("proven") is True


def _failed_outcome(launch: dict[str, t.Any], wait: dict[str, t.Any], reproof: dict[str, t.Any],
                    failure: t.Mapping[str, t.Any]) -> dict[str, str]:
    """The outcome of a launch whose block went to its rescue."""
    cut = _cut_short(wait, reproof)
    if cut.get("host"):
        status = "already running" if not launch.get("changed") else "cut short"
        return {"status": status, "reason": first_line(f"its proof was cut short when {cut['host']} failed first")}
    for result in (launch, wait, reproof):
        if result.get("failed"):
            return {"status": "failed", "reason": first_line(_why(result))}
    return {"status": "failed", "reason": first_line(_why(failure) or "see its error above")}


def launch_outcome(variables: t.Mapping[str, t.Any], check_mode: bool) -> dict[str, str]:
    """``{status, reason}`` of one container's launch from what it registered (``variables``: its host variables)."""
    launch = _result(variables.get("job_launch"))
    wait, reproof = _result(variables.get("job_wait")), _result(variables.get("job_reproof"))
    failure = variables.get("job_launch_failure")
    if isinstance(failure, t.Mapping):
        return _failed_outcome(launch, wait, reproof, failure)
    if not launch:
        return {"status": "failed", "reason": LOST_DURING}
    if not launch.get("changed"):
        status = "already running"
    else:
        status = "would start" if check_mode else "started"
    verdicts = [dict(launch.get("wait") or {}).get("verdict"), wait.get("verdict"), reproof.get("verdict")]
    reason = ""
    if "finished" in verdicts:
        reason = "finished (exit status 0)"
    elif reproof and not reproof.get("failed") and not _found_proven(launch):
        reason = "start proven now"
    return {"status": status, "reason": reason}


def _lost_outcome(variables: t.Mapping[str, t.Any]) -> dict[str, str]:
    playbook = "prepare.yml" if variables.get("job_prepared") is not None else "preflight.yml"
    return {"status": "failed", "reason": f"{playbook} failed on it before the launch (its error is shown above)"}


def outcomes(hosts: t.Sequence[str], hostvars: t.Mapping[str, t.Mapping[str, t.Any]], launch: Launch) -> dict[str, dict[str, str]]:
    """Every container's ``{status, reason}`` before job_all_or_nothing's stops are taken into account."""
    found: dict[str, dict[str, str]] = {}
    for host in hosts:
        variables = hostvars[host]
        if host in launch.lost:
            found[host] = _lost_outcome(variables)
        elif launch.refused:
            found[host] = {"status": "not started",
                           "reason": f"job_all_or_nothing, and {', '.join(launch.lost)} failed before the launch"}
        else:
            found[host] = launch_outcome(variables, launch.check_mode)
    return found


def culprits(hosts: t.Sequence[str], hostvars: t.Mapping[str, t.Mapping[str, t.Any]], found: t.Mapping[str, t.Mapping[str, str]]) -> list[str]:
    """The containers at fault, the one that failed first in a fleet-wide wait (its ``fleet_failure``) first."""
    failed = [host for host in hosts if found[host]["status"] == "failed"]
    first = ""
    for host in hosts:
        for name in ("job_wait", "job_reproof"):
            failure = _result(hostvars[host].get(name)).get("fleet_failure")
            if not first and isinstance(failure, t.Mapping) and failure.get("host"):
                first = str(failure["host"])
    return sorted(failed, key=lambda host: host != first)


def to_stop(hosts: t.Sequence[str], hostvars: t.Mapping[str, t.Mapping[str, t.Any]], launch: Launch, at_fault: t.Sequence[str]) -> list[str]:
    """Where job_all_or_nothing stops the job: a container failed, and this run started the job there."""
    if not launch.all_or_nothing or not at_fault or launch.check_mode:
        return []
    launched = {host: _result(hostvars[host].get("job_launch")) for host in hosts}
    return [host for host, result in launched.items() if result.get("changed") and not result.get("failed")]


def after_stops(found: dict[str, dict[str, str]], hostvars: t.Mapping[str, t.Mapping[str, t.Any]], at_fault: t.Sequence[str]) -> None:
    """Turn the stops of job_all_or_nothing (``job_fleet_stop``) into the outcomes, in place."""
    because = ", ".join(at_fault)
    for host, outcome in found.items():
        stop = _result(hostvars[host].get("job_fleet_stop"))
        if stop and outcome["status"] != "failed":
            if stop.get("error"):
                why = f"started, then NOT stopped ({stop.get('msg', '?')}) by job_all_or_nothing because {because} failed"
                outcome.update(status="failed", reason=why)
            else:
                outcome.update(status="stopped", reason=f"started, then stopped by job_all_or_nothing because {because} failed")
        elif at_fault and outcome["status"] == "already running":
            outcome["reason"] = (f"left running although {because} failed: it ran before this launch, "
                                 "and job_all_or_nothing stops only what the launch started")


def _where(host: str, variables: t.Mapping[str, t.Any]) -> str:
    """``CT 200`` for a container, ``host NAME`` for any other host."""
    return f"CT {variables['pct_vmid']}" if variables.get("pct_vmid") is not None else f"host {host}"


def summary(hosts: t.Sequence[str], hostvars: t.Mapping[str, t.Mapping[str, t.Any]], launch: Launch,
            found: t.Mapping[str, t.Mapping[str, str]], at_fault: t.Sequence[str]) -> list[str]:
    """The headline (how many run, which failed), then a line per container: its status and reason."""
    running = sum(1 for outcome in found.values() if outcome["status"] in RUNNING)
    failed = f", failed: {', '.join(at_fault)}" if at_fault else ""
    lines = [f"{launch.session_name}: {running} of {len(found)} containers {'would run' if launch.check_mode else 'run'}{failed}"]
    for host in hosts:
        variables, outcome = hostvars[host], found[host]
        where = f" (CT {variables['pct_vmid']} on {variables.get('pct_node') or 'localhost'})" if variables.get("pct_vmid") is not None else ""
        reason = f": {outcome['reason']}" if outcome["reason"] else ""
        lines.append(f"{host}{where}: {outcome['status']}{reason}")
    return lines


def report(hosts: t.Sequence[str], hostvars: t.Mapping[str, t.Mapping[str, t.Any]], launch: Launch,
           found: t.Mapping[str, t.Mapping[str, str]]) -> dict[str, str]:
    """A line per container where the job runs: its pane_pid, log, the earlier log kept, GPUs, a multi-node job's rank,
    the backups that stop or suspend it during the job."""
    lines: dict[str, str] = {}
    for rank, host in enumerate(hosts):
        variables, outcome = hostvars[host], found[host]
        if outcome["status"] not in RUNNING:
            continue
        started = _result(variables.get("job_launch"))
        proven = ", start proven now" if outcome["reason"] == "start proven now" else ""
        parts = [f"{launch.session_name} in {_where(host, variables)}: {outcome['status']}{proven},",
                 f"pane_pid {started.get('pane_pid') or '?'}, log {started.get('log_path') or launch.log_path}"]
        if started.get("rotated_log"):
            parts.append(f"(earlier log kept as {started['rotated_log']})")
        if started.get("gpus"):
            parts.append("on GPUs " + ",".join(str(gpu) for gpu in started["gpus"]))
        if started.get("error"):
            parts.append(f"(check mode: not checked before prepare.yml has run: {started.get('msg')})")
        if launch.multinode:
            parts.append(f"(NODE_RANK {rank} of {len(hosts)}, MASTER_ADDR {variables.get('job_fleet_master_addr') or ''}:{launch.master_port})")
        windows = backup_windows(variables)
        if windows:
            parts.append(f"(backup ahead: {'; '.join(windows)})")
        lines[host] = " ".join(parts)
    return lines


def backup_windows(variables: t.Mapping[str, t.Any]) -> list[str]:
    """The short lines of the backups that stop or suspend the container during the job (preflight.yml's
    ``preflight_backup``, backup_window_info's ``windows``)."""
    windows = _result(variables.get("preflight_backup")).get("windows")
    return [str(item.get("summary") or item.get("message")) for item in windows or [] if isinstance(item, t.Mapping)]


def fleet(hosts: t.Sequence[str], hostvars: t.Mapping[str, t.Mapping[str, t.Any]], launch: Launch) -> dict[str, t.Any]:
    """Everything launch.yml's play decides about its fleet (see the filter's documentation for each key)."""
    found = outcomes(hosts, hostvars, launch)
    at_fault = culprits(hosts, hostvars, found)
    undo = launch.all_or_nothing and (launch.refused or bool(at_fault))
    if undo:
        after_stops(found, hostvars, at_fault)
    failures = {}
    for host in hosts:
        outcome = found[host]
        if outcome["status"] not in RUNNING or undo:
            reason = f": {outcome['reason']}" if outcome["reason"] else ""
            blame = f" (job_all_or_nothing: {', '.join(at_fault)} failed)" if outcome["status"] in RUNNING else ""
            failures[host] = f"{launch.session_name} in {_where(host, hostvars[host])}: {outcome['status']}{reason}{blame}"
    return {"results": found, "culprits": at_fault, "undo": undo, "refused": launch.refused,
            "to_stop": to_stop(hosts, hostvars, launch, at_fault) if undo else [],
            "launch_failed": [host for host in hosts if _result(hostvars[host].get("job_launch")).get("failed")],
            "failures": failures, "summary": summary(hosts, hostvars, launch, found, at_fault),
            "report": report(hosts, hostvars, launch, found),
            "backup_windows": {host: windows for host in hosts if (windows := backup_windows(hostvars[host]))}}
