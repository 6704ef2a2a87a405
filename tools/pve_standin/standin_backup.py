# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Backup jobs of a stand-in node: ``jobs.cfg`` (and the older ``vzdump.cron``) as Proxmox VE writes them.

A real node keeps its backup jobs in pmxcfs, ``/etc/pve/jobs.cfg``; the stand-in's ``/etc/pve`` is its state root
(``PVE_STANDIN_ROOT``, where ``nodes/<node>/lxc/<vmid>.conf`` live), so its ``jobs.cfg`` sits beside ``nodes/``. The
collection's preflight reads it there when ``job_node_pve_dir`` (``backup_window_info``'s ``pve_dir``) names the
state root. Nothing runs the jobs: the stand-in has no ``vzdump`` and no ``pvescheduler``.

The layout is pve-common's ``PVE::SectionConfig::write_config``: ``TYPE: ID``, then the comment (``encode_text``:
``%``, ``:`` and control characters escaped as ``%XX``), then the required keys sorted (``schedule``), then the
optional ones sorted, each as ``\\tKEY VALUE`` (booleans as 0/1), and an empty line after each section. ``vzdump.cron``
is pve-guest-common's ``PVE::VZDump::Common::write_vzdump_cron_config``: ``MINUTE HOUR * * DOW root [#]vzdump ...``.
"""
from __future__ import annotations

import dataclasses
import os
import typing as t
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

CRON_DAYS = {"mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6, "sun": 7}


@dataclasses.dataclass(frozen=True)
class BackupJob:  # pylint: disable=too-many-instance-attributes
    """One ``vzdump`` job: whom it backs up (``vmids``, ``all`` but ``exclude``, or ``pool``), when and how."""

    job_id: str
    schedule: str
    mode: str = "snapshot"
    vmids: Sequence[int] = ()
    all: bool = False
    exclude: Sequence[int] = ()
    pool: str | None = None
    node: str | None = None
    enabled: bool = True
    storage: str = "local"
    comment: str | None = None

    def options(self) -> dict[str, str]:
        """The job's keys and values, without the schedule and the comment."""
        found: dict[str, t.Any] = {"mode": self.mode, "enabled": int(self.enabled), "storage": self.storage,
                                   "compress": "zstd", "node": self.node, "pool": self.pool}
        if self.vmids:
            found["vmid"] = ",".join(str(vmid) for vmid in self.vmids)
        elif self.all or self.exclude:
            found["all"] = 1
        if self.exclude:
            found["exclude"] = ",".join(str(vmid) for vmid in self.exclude)
        return {key: str(value) for key, value in found.items() if value is not None}


def encode_text(text: str) -> str:
    """pve-common ``PVE::ParseUtils::encode_text``: all but ``\\x20-\\x24\\x26-\\x39\\x3b-\\x7e`` as ``%XX``."""
    return "".join(char if 0x20 <= ord(char) <= 0x7E and char not in "%:" else quote(char, safe="") for char in text)


def jobs_cfg_text(jobs: Sequence[BackupJob], others: str = "") -> str:
    """``jobs.cfg`` holding ``jobs`` (and ``others``, sections of other job types as they are)."""
    out = []
    for job in jobs:
        lines = [f"vzdump: {job.job_id}"]
        lines += [f"\tcomment {encode_text(job.comment)}"] if job.comment else []
        lines += [f"\tschedule {job.schedule}"]
        lines += [f"\t{key} {value}" for key, value in sorted(job.options().items())]
        out.append("\n".join(lines) + "\n\n")
    return "".join(out) + others


def vzdump_cron_text(lines: Sequence[tuple[int, int, str, BackupJob]]) -> str:
    """``vzdump.cron`` of an older node: each (minute, hour, days of week or ``*``, job) as a cron line."""
    out = ["# cluster wide vzdump cron schedule\n# Automatically generated file - do not edit\n\n",
           'PATH="/usr/sbin:/usr/bin:/sbin:/bin"\n\n']
    for minute, hour, days, job in lines:
        dow = days if days == "*" else ",".join(str(CRON_DAYS[day]) for day in days.split(","))
        vmids = "".join(f" {vmid}" for vmid in job.vmids)
        options = "".join(f" --{key} {value}" for key, value in job.options().items() if key not in ("vmid", "enabled"))
        out.append(f"{minute} {hour} * * {dow:<11} root {'' if job.enabled else '#'}vzdump{vmids}{options} --quiet 1\n")
    return "".join(out)


def _write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (mode 0640, as pmxcfs shows its files)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o640)
    tmp.replace(path)
    return path


def write_jobs_cfg(root: Path | str, jobs: Sequence[BackupJob], others: str = "") -> Path:
    """Write ``ROOT/jobs.cfg`` (``ROOT``: the node's state root, its ``/etc/pve``); returns its path."""
    return _write(Path(root) / "jobs.cfg", jobs_cfg_text(jobs, others))


def write_vzdump_cron(root: Path | str, lines: Sequence[tuple[int, int, str, BackupJob]]) -> Path:
    """Write ``ROOT/vzdump.cron`` (see ``vzdump_cron_text``); returns its path."""
    return _write(Path(root) / "vzdump.cron", vzdump_cron_text(lines))


def remove_backup_jobs(root: Path | str) -> None:
    """Remove the node's ``jobs.cfg`` and ``vzdump.cron``, if any."""
    for name in ("jobs.cfg", "vzdump.cron"):
        (Path(root) / name).unlink(missing_ok=True)


def sample_jobs(vmid: int, node: str | None = None, stop_schedule: str = "sun 01:00") -> list[BackupJob]:
    """A sample node's jobs: a nightly snapshot of every guest, and a weekly stop-mode backup of container ``vmid``
    (only on ``node`` when given, as the GUI's "Node" field of a backup job)."""
    return [BackupJob("backup-4ec7b1e2-9c47", "21:00", "snapshot", all=True, comment="nightly: every guest"),
            BackupJob("backup-5d8e2b1f-01a2", stop_schedule, "stop", vmids=(vmid,), node=node, comment="weekly, consistent")]
