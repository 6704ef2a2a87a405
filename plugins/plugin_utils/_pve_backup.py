# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: the backup jobs of a Proxmox VE node, and whether one covers a container.

Pure Python, no Ansible import. It reads what ``module_utils/_pve_backup_files.py`` brought from the node, as
Proxmox VE reads it:

* ``jobs.cfg``: pve-common's ``PVE::SectionConfig::parse_config`` (``TYPE: ID`` headers, indented ``key value``
  lines, ``#`` comments; an empty line ends a section) and ``PVE::Job::Registry::parse_config`` (``enabled``
  defaults to 1); sections of type ``vzdump`` only (pve-manager ``PVE::Jobs::VZDump``);
* ``vzdump.cron``: pve-guest-common ``PVE::VZDump::Common::parse_vzdump_cron_config`` (``M H * * DOW root
  vzdump ...``, ``#vzdump`` disabled, ``parse_dow``) and pve-manager ``PVE::API2::Backup``'s
  ``$convert_to_schedule`` (the line's days and start time as a calendar event, ``sat 01:00``);
* which guests a job covers: pve-manager ``PVE::VZDump::get_included_guests`` (``pool``, else ``vmid``, else
  ``all`` but ``exclude``; ``node`` restricts it to the guests of that node) after ``verify_vzdump_parameters``
  (``exclude`` without ``pool`` means ``all``); a pool's members are its ``pool:`` line in ``user.cfg``
  (pve-access-control ``parse_user_config``; pve-manager ``PVE::API2Tools::get_resource_pool_guest_members`` takes
  the pool's own guests, not those of pools nested in it);
* the mode: the job's, else the node's ``/etc/vzdump.conf`` (``PVE::VZDump::new`` merges ``read_vzdump_defaults``),
  else ``snapshot`` (pve-guest-common's ``$confdesc``).

When a job is due, and what it means for a container's job, is ``_pve_backup_window``'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shlex
import typing as t

DEFAULT_MODE = "snapshot"
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_CRON = re.compile(r"^(\d+)\s+(\d+)\s+\*\s+\*\s+(\S+)\s+root\s+(/\S+/)?(#)?vzdump(\s+(.*))?$")
_HEADER = re.compile(r"^(\S+):\s*(\S+)\s*$")
_PROPERTY = re.compile(r"^\s+(\S+)(\s+(.*\S))?\s*$")


@dataclasses.dataclass(frozen=True)
class BackupJob:  # pylint: disable=too-many-instance-attributes
    """One backup job as vzdump runs it."""

    job_id: str
    where: str  # jobs.cfg, or "line N of vzdump.cron"
    schedule: str
    mode: str | None = None
    enabled: bool = True
    vmids: frozenset[int] = frozenset()
    all: bool = False
    exclude: frozenset[int] = frozenset()
    pool: str | None = None
    node: str | None = None

    @property
    def name(self) -> str:
        """``backup job ID`` or ``the backup job on line N of vzdump.cron``."""
        return f"backup job {self.job_id}" if self.where.endswith("jobs.cfg") else f"the backup job on {self.where}"


def split_list(text: str | None) -> list[str]:
    """pve-common ``PVE::ParseUtils::split_list``: items separated by ``,``, ``;`` or white space."""
    return re.sub(r"[,;]", " ", text or "").split()


def parse_boolean(text: str | None) -> bool | None:
    """pve-common ``PVE::JSONSchema::parse_boolean``."""
    value = (text or "").lower()
    return True if value in ("1", "on", "yes", "true") else False if value in ("0", "off", "no", "false") else None


def vmid_set(text: str | None) -> frozenset[int]:
    """pve-manager ``PVE::VZDump::check_vmids`` over ``split_list``: numbers, 0 and what is no number left out."""
    return frozenset(int(item) for item in split_list(text) if item.isdigit() and int(item))


def _job(job_id: str, where: str, options: t.Mapping[str, str], schedule: str, enabled: bool) -> BackupJob:
    pool = options.get("pool") or None
    return BackupJob(job_id, where, schedule, options.get("mode") or None, enabled, vmid_set(options.get("vmid")),
                     bool(parse_boolean(options.get("all"))) or ("exclude" in options and not pool),
                     vmid_set(options.get("exclude")), pool, options.get("node") or None)


def parse_jobs_cfg(text: str | None, where: str = "jobs.cfg") -> list[BackupJob]:
    """The ``vzdump`` sections of ``jobs.cfg``, in their order."""
    jobs: list[BackupJob] = []
    section: tuple[str, str] | None = None
    options: dict[str, str] = {}
    for line in [*(text or "").split("\n"), ""]:
        if re.match(r"^\s*#", line):
            continue
        if section is not None:
            prop = _PROPERTY.match(line)
            if prop is not None:
                options.setdefault(prop.group(1), prop.group(3) or "")  # a duplicate is refused: the first stays
            elif not line:  # only an empty line ends a section; other lines in it are ignored
                if section[0] == "vzdump":
                    jobs.append(_job(section[1], where, options, options.get("schedule", ""),
                                     parse_boolean(options.get("enabled", "1")) is not False))
                section, options = None, {}
            continue
        header = _HEADER.match(line)
        if header is not None:
            section = (header.group(1), header.group(2))
    return jobs


def parse_dow(text: str) -> list[int] | None:
    """pve-guest-common ``parse_dow``: cron's day of week (``*``, ``0``-``7``, names, ``mon-fri``), 0 = Monday."""
    days: set[int] = set()
    for item in split_list("1,2,3,4,5,6,7" if text == "*" else text):
        found = re.match(r"^(mon|tue|wed|thu|fri|sat|sun)-(mon|tue|wed|thu|fri|sat|sun)$", item, re.IGNORECASE)
        if found:
            days.update(range(DAYS.index(found.group(1).lower()), DAYS.index(found.group(2).lower()) + 1))
        elif item.lower() in DAYS:
            days.add(DAYS.index(item.lower()))
        elif re.match(r"^[0-7]$", item):
            days.add((int(item) + 6) % 7)
        else:
            return None
    return sorted(days)


def _cron_options(args: str) -> dict[str, str]:
    """vzdump's options on a cron line (``--key value``, ``--key=value``; other words are VMIDs)."""
    words, options, vmids = shlex.split(args), {}, []
    while words:
        word = words.pop(0)
        if re.match(r"^--?[a-z]", word):
            key, _eq, value = word.lstrip("-").partition("=")
            if not _eq and words and not words[0].startswith("-"):
                value = words.pop(0)
            options[key] = value
        else:
            vmids.append(word)
    if vmids:
        options["vmid"] = ",".join(vmids)
    return options


def parse_vzdump_cron(text: str | None, where: str = "vzdump.cron") -> list[BackupJob]:
    """The jobs of the older ``vzdump.cron``, each with its schedule as Proxmox VE converts it; ids as it gives them."""
    digest, jobs = hashlib.sha1((text or "").encode(), usedforsecurity=False).hexdigest(), []  # the id Proxmox VE gives
    for number, line in enumerate((text or "").split("\n"), 1):
        found = _CRON.match(line)
        days = parse_dow(found.group(3)) if found else None
        if not found or days is None:
            continue
        start = f"{int(found.group(2)):02d}:{int(found.group(1)):02d}"
        schedule = start if len(days) == 7 else f"{','.join(DAYS[day] for day in days)} {start}"
        try:
            options = _cron_options(found.group(7) or "")
        except ValueError:
            continue
        jobs.append(_job(f"{digest}:{len(jobs) + 1}", f"line {number} of {where}", options, schedule, not found.group(5)))
    return jobs


def parse_pools(text: str | None) -> dict[str, frozenset[int]]:
    """``pool:NAME:COMMENT:VMIDS:STORAGES:`` lines of ``user.cfg``: each pool's own guests (a VMID counts once)."""
    pools: dict[str, frozenset[int]] = {}
    seen: set[int] = set()
    for line in (text or "").splitlines():
        fields = [field.strip() for field in line.strip().split(":")]
        if len(fields) > 1 and fields[0] == "pool":
            members = {vmid for vmid in vmid_set(fields[3] if len(fields) > 3 else "") if vmid not in seen}
            seen |= members
            pools[fields[1]] = pools.get(fields[1], frozenset()) | members
    return pools


def default_mode(text: str | None) -> str:
    """The ``mode:`` of ``/etc/vzdump.conf`` (``PVE::JSONSchema::parse_config``), else ``snapshot``."""
    found = re.search(r"^\s*mode\s*:\s*(\S+)\s*$", text or "", re.MULTILINE)
    return found.group(1) if found else DEFAULT_MODE


def covers(job: BackupJob, vmid: int, node: str | None, pools: t.Mapping[str, frozenset[int]] | None) -> str | None:
    """How ``job`` takes container ``vmid`` of ``node`` (its pool, its VMIDs, all guests); None when it does not."""
    if job.node and node and job.node != node:
        return None
    if job.pool:
        if pools is None:
            return f"pool {job.pool}, if CT {vmid} is in it (user.cfg could not be read)"
        return f"pool {job.pool}" if vmid in pools.get(job.pool, frozenset()) else None
    if job.vmids:
        return "its VMIDs" if vmid in job.vmids else None
    return "all guests" if job.all and vmid not in job.exclude else None
