# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The backup jobs of a Proxmox VE node (plugin_utils/_pve_backup.py) and the backup windows of a container
(plugin_utils/_pve_backup_window.py), from files as Proxmox VE writes them: ``jobs.cfg`` as pve-common's
``SectionConfig::write_config`` lays it out (comment first, then the required ``schedule``, then the other keys
sorted, a tab before each, an empty line after each section), ``vzdump.cron`` as pve-guest-common's
``write_vzdump_cron_config`` writes it, ``user.cfg``'s ``pool:`` lines as pve-access-control writes them; which guests a
job takes follows pve-manager's ``test/vzdump_guest_included_test.pl``."""

from __future__ import annotations

import datetime as dt
import typing as t

import pytest

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pve_backup import (
    BackupJob,
    covers,
    default_mode,
    parse_dow,
    parse_jobs_cfg,
    parse_pools,
    parse_vzdump_cron,
)
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pve_backup_window import duration, evaluate, node_zone

JOBS_CFG = """\
vzdump: backup-4ec7b1e2-9c47
\tcomment nightly all guests
\tschedule sun 01:00
\tall 1
\tcompress zstd
\tenabled 1
\texclude 105,106
\tfleecing 0
\tmode stop
\tnode pve1
\tnotes-template {{guestname}}
\tnotification-mode notification-system
\tprune-backups keep-last=3
\tstorage local

# the GPU pool, frozen on weekdays
vzdump: backup-9a1f03c2-77d0
\tschedule mon..fri 21:00
\tcompress zstd
\tenabled 1
\tmode suspend
\tpool gpu
\tstorage pbs

realm-sync: realmsync-ldap
\tschedule daily
\tenabled 1
\trealm ldap
\tscope both

vzdump: backup-0c3d2e11-4b5a
\tschedule */2:00
\tenabled 0
\tmode stop
\tstorage local
\tvmid 200,201

vzdump: backup-5d8e2b1f-01a2
\tschedule 02:30
\tcompress zstd
\tstorage local
\tvmid 200
"""

VZDUMP_CRON = """\
# cluster wide vzdump cron schedule
# Automatically generated file - do not edit

PATH="/usr/sbin:/usr/bin:/sbin:/bin"

0 1 * * 6           root vzdump 100 101 --mailnotification always --quiet 1 --mode snapshot --storage local
30 21 * * 1,2,3,4,5 root vzdump --all 1 --exclude 102 --mode stop --node pve1 --quiet 1 --storage backup
0 3 * * *           root #vzdump 200 --mode suspend --quiet 1
15 2 * * mon-fri    root /usr/bin/vzdump --pool=gpu --mode stop --quiet
5 4 * * 1-5         root vzdump 200 --mode stop
"""

USER_CFG_POOLS = """\
pool:gpu:GPU%20jobs:200,201,212::
pool:cpu::300,200:local:
pool:empty::::
"""


def test_jobs_cfg_as_proxmox_ve_writes_it() -> None:
    jobs = parse_jobs_cfg(JOBS_CFG, "/etc/pve/jobs.cfg")
    assert [job.job_id for job in jobs] == ["backup-4ec7b1e2-9c47", "backup-9a1f03c2-77d0", "backup-0c3d2e11-4b5a",
                                            "backup-5d8e2b1f-01a2"]  # the realm-sync job is no backup
    nightly, gpu, disabled, plain = jobs
    assert nightly == BackupJob("backup-4ec7b1e2-9c47", "/etc/pve/jobs.cfg", "sun 01:00", "stop", True, frozenset(), True,
                                frozenset({105, 106}), None, "pve1")
    assert (gpu.mode, gpu.pool, gpu.all, gpu.schedule) == ("suspend", "gpu", False, "mon..fri 21:00")
    assert (disabled.enabled, disabled.vmids) == (False, frozenset({200, 201}))
    assert (plain.mode, plain.enabled, plain.vmids) == (None, True, frozenset({200}))  # enabled defaults to 1
    assert nightly.name == "backup job backup-4ec7b1e2-9c47"


def test_jobs_cfg_sections_end_only_at_an_empty_line() -> None:
    """SectionConfig: a header inside a section is an ignored line; a duplicate key keeps the first value; ``exclude``
    without ``pool`` means ``all`` (verify_vzdump_parameters); whitespace-only lines do not end a section."""
    text = "vzdump: a\n\tschedule 01:00\n\tmode stop\n\tmode snapshot\n   \nvzdump: b\n\texclude 7\n\nvzdump: c\n\tschedule 3:00\n\tenabled no"
    [job_a, job_c] = parse_jobs_cfg(text)
    assert (job_a.job_id, job_a.mode, job_a.all, job_a.exclude) == ("a", "stop", True, frozenset({7}))
    assert (job_c.job_id, job_c.enabled) == ("c", False)
    assert not parse_jobs_cfg(None) and not parse_jobs_cfg("")


def test_vzdump_cron_of_older_nodes() -> None:
    jobs = parse_vzdump_cron(VZDUMP_CRON, "/etc/pve/vzdump.cron")
    assert [(job.schedule, job.mode, job.enabled) for job in jobs] == [
        ("sat 01:00", "snapshot", True), ("mon,tue,wed,thu,fri 21:30", "stop", True), ("03:00", "suspend", False),
        ("mon,tue,wed,thu,fri 02:15", "stop", True)]  # "1-5" is no day of week pve-guest-common reads: line skipped
    first, every, disabled, pool = jobs
    assert first.vmids == frozenset({100, 101}) and first.where == "line 6 of /etc/pve/vzdump.cron"
    assert (every.all, every.exclude, every.node) == (True, frozenset({102}), "pve1")
    assert disabled.vmids == frozenset({200}) and pool.pool == "gpu"
    assert first.job_id.endswith(":1") and pool.job_id.endswith(":4") and len(first.job_id) == 42  # sha1 of the file:N
    assert first.name == "the backup job on line 6 of /etc/pve/vzdump.cron"


@pytest.mark.parametrize(("dow", "days"), [
    ("*", [0, 1, 2, 3, 4, 5, 6]), ("0", [6]), ("7", [6]), ("1", [0]), ("6,0", [5, 6]), ("mon-fri", [0, 1, 2, 3, 4]),
    ("SAT,sun", [5, 6]), ("1-5", None), ("fri-mon", []), ("8", None)])
def test_parse_dow(dow: str, days: list[int] | None) -> None:
    assert parse_dow(dow) == days


def test_pools_and_the_default_mode() -> None:
    pools = parse_pools(USER_CFG_POOLS + "user:root@pam:1:0::::::\n")
    assert pools == {"gpu": frozenset({200, 201, 212}), "cpu": frozenset({300}), "empty": frozenset()}  # 200 counts once
    assert default_mode("# vzdump default settings\n\n#tmpdir: DIR\nmode: stop\n") == "stop"
    assert default_mode("#mode: suspend\n") == "snapshot" and default_mode(None) == "snapshot"


# pve-manager test/vzdump_guest_included_test.pl: node1 holds 100, 101, 112, 113; node2 200, 201, 212, 213;
# testpool holds 100, 101, 200, 201
POOLS = {"testpool": frozenset({100, 101, 200, 201})}
GUESTS = {100: "node1", 101: "node1", 112: "node1", 113: "node1", 200: "node2", 201: "node2", 212: "node2", 213: "node2"}
INCLUDED = [
    ("all guests", {"all": True}, {100, 101, 112, 113, 200, 201, 212, 213}),
    ("all guests with node limit", {"all": True, "node": "node2"}, {200, 201, 212, 213}),
    ("exclude", {"all": True, "exclude": frozenset({100, 102, 200, 202})}, {101, 112, 113, 201, 212, 213}),
    ("exclude with node limit", {"all": True, "exclude": frozenset({100, 102, 200, 202}), "node": "node1"}, {101, 112, 113}),
    ("pool members", {"pool": "testpool"}, {100, 101, 200, 201}),
    ("pool members with node limit", {"pool": "testpool", "node": "node2"}, {200, 201}),
    ("selected VMIDs", {"vmids": frozenset({100, 201, 212})}, {100, 201, 212}),
    ("selected VMIDs with node limit", {"vmids": frozenset({100, 201, 212}), "node": "node1"}, {100}),
    ("selected VMIDs on other nodes", {"vmids": frozenset({201, 212}), "node": "node1"}, set()),
    ("nothing selected", {}, set()),
]


@pytest.mark.parametrize(("name", "fields", "expected"), INCLUDED, ids=[case[0] for case in INCLUDED])
def test_which_guests_a_job_takes(name: str, fields: dict[str, t.Any], expected: set[int]) -> None:
    job = BackupJob("job", "jobs.cfg", "daily", "stop", **fields)
    assert {vmid for vmid, node in GUESTS.items() if covers(job, vmid, node, POOLS)} == expected, name


def test_a_pool_that_cannot_be_resolved_is_said_so() -> None:
    job = BackupJob("job", "jobs.cfg", "daily", "stop", pool="gpu")
    assert covers(job, 200, "pve1", None) == "pool gpu, if CT 200 is in it (user.cfg could not be read)"
    assert covers(job, 200, "pve1", {"gpu": frozenset({200})}) == "pool gpu"


# ------------------------------------------------------------------ windows
NOW = int(dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.timezone.utc).timestamp())  # Friday 12:00 UTC


def node_report(jobs_cfg: str | None = None, **changes: t.Any) -> dict[str, t.Any]:
    """What read_node reports from node pve1 holding CT 200, in UTC."""
    report: dict[str, t.Any] = {"pve_dir": "/etc/pve", "is_pve": True, "now": NOW, "utc_offset": "+0000", "timezone": "Etc/UTC",
                                "nodename": "pve1", "login": "root", "node": "pve1",
                                "files": {"jobs.cfg": jobs_cfg, "vzdump.cron": None, "user.cfg": USER_CFG_POOLS,
                                          "vzdump.conf": None}, "errors": {}}
    report.update(changes)
    return report


def job(schedule: str, mode: str = "stop", *lines: str) -> str:
    return f"vzdump: backup-test\n\tschedule {schedule}\n\tmode {mode}\n\tvmid 200\n" + "".join(f"\t{line}\n" for line in lines)


def test_the_real_jobs_cfg_for_ct_200() -> None:
    result = evaluate(node_report(JOBS_CFG), 200)
    assert result["checked"] is True and result["problems"] == [] and result["horizon"] == 86400
    assert [(entry["id"], entry["mode"], entry["next_due_local"], entry["in_window"]) for entry in result["jobs"]] == [
        ("backup-4ec7b1e2-9c47", "stop", "Sun 2026-12-06 01:00 +0000", False),  # 37 h ahead
        ("backup-9a1f03c2-77d0", "suspend", "Fri 2026-12-04 21:00 +0000", True),
        ("backup-0c3d2e11-4b5a", "stop", None, False),  # disabled
        ("backup-5d8e2b1f-01a2", "snapshot", "Sat 2026-12-05 02:30 +0000", False)]
    [window] = result["windows"]
    assert window["selects"] == "pool gpu" and window["due_in"] == 9 * 3600
    assert window["message"] == (
        "Backup job backup-9a1f03c2-77d0 suspends CT 200 in 9 h: mode suspend, schedule 'mon..fri 21:00' (node time, "
        "Etc/UTC), next due Fri 2026-12-04 21:00 +0000, within the next 24 h (the job has no time_limit), and it takes "
        "CT 200 as pool gpu; vzdump freezes the container's processes while it copies what changed (the job pauses; a "
        "distributed job's timeouts and deadlines can fire): take CT 200 out of pool gpu, give it mode snapshot, or "
        "launch the job after the backup")
    assert window["summary"] == ("backup job backup-9a1f03c2-77d0 suspends it at Fri 2026-12-04 21:00 +0000 (in 9 h, "
                                 "mode suspend, schedule 'mon..fri 21:00')")


def test_with_a_time_limit_the_window_is_the_limit() -> None:
    result = evaluate(node_report(JOBS_CFG), 200, time_limit=2 * 86400)
    assert [entry["id"] for entry in result["windows"]] == ["backup-9a1f03c2-77d0", "backup-4ec7b1e2-9c47"]  # by due time
    assert "before the job's time_limit of 2 d is up" in result["windows"][1]["message"]
    assert "add CT 200 to its exclude list" in result["windows"][1]["message"]
    assert evaluate(node_report(JOBS_CFG), 105, time_limit=2 * 86400)["jobs"] == []  # excluded, and not in pool gpu


@pytest.mark.parametrize(("time_limit", "warned"), [(13 * 3600, True), (13 * 3600 + 0.5, True), (13 * 3600 - 1, False),
                                                    (0, True), (3600, False)])
def test_the_time_limit_boundary(time_limit: float, warned: bool) -> None:
    """A backup due exactly when the time_limit is up counts (the job is killed then, the container a moment later)."""
    result = evaluate(node_report(job("01:00")), 200, time_limit=time_limit)  # due in 13 h
    assert bool(result["windows"]) is warned, result
    assert result["horizon"] == (int(-(-time_limit // 1)) if time_limit else 86400)


@pytest.mark.parametrize(("schedule", "due_in"), [("12:00", 86400), ("11:59", 86400 - 60), ("*:0/30", 30 * 60)])
def test_the_24_hour_boundary_without_a_time_limit(schedule: str, due_in: int) -> None:
    [window] = evaluate(node_report(job(schedule)), 200)["windows"]
    assert window["due_in"] == due_in


def test_what_is_no_window() -> None:
    for text in (job("13:00", "snapshot"), job("13:00", "stop", "node pve2"), job("13:00", "stop", "enabled 0"),
                 job("sat..sun 13:00"), job("2025-01-01 13:00"), None, ""):
        assert evaluate(node_report(text), 200)["windows"] == [], text
    assert evaluate(node_report(job("13:00")), 201)["jobs"] == []


def test_the_node_default_mode_and_the_cron_file() -> None:
    text = "vzdump: backup-nomode\n\tschedule 18:00\n\tall 1\n"
    files = {"jobs.cfg": text, "vzdump.cron": VZDUMP_CRON, "user.cfg": USER_CFG_POOLS, "vzdump.conf": "mode: stop"}
    result = evaluate(node_report(files=files), 200)
    assert [(entry["source"], entry["mode"]) for entry in result["windows"]] == [
        ("/etc/pve/jobs.cfg", "stop"), ("line 7 of /etc/pve/vzdump.cron", "stop")]  # 18:00 and 21:30 today; not Monday 02:15
    assert result["windows"][0]["message"].startswith("Backup job backup-nomode stops CT 200 in 6 h: mode stop, ")
    monday = evaluate(node_report(files=files), 200, time_limit=3 * 86400)["windows"][-1]
    assert monday["message"].startswith("The backup job on line 9 of /etc/pve/vzdump.cron stops CT 200 in 2 d 14 h: ")


def test_files_that_could_not_be_read() -> None:
    errors = {"jobs.cfg": "Permission denied", "user.cfg": "Permission denied", "vzdump.conf": "Input/output error"}
    result = evaluate(node_report(None, login="trainops", errors=errors), 200)
    assert result["checked"] is False and result["reason"] == "jobs.cfg could not be read"
    assert result["problems"] == [
        "Cannot read /etc/pve/jobs.cfg on node pve1 as trainops: Permission denied: its backup jobs were not checked; pmxcfs "
        "lets root and the group www-data read it: reach the node as root, or add trainops to the group www-data there",
        "Cannot read /etc/pve/user.cfg on node pve1 as trainops: Permission denied: which guests its pools hold is not "
        "known; pmxcfs lets root and the group www-data read it: reach the node as root, or add trainops to the group "
        "www-data there",
        "Cannot read /etc/vzdump.conf on node pve1 as trainops: Input/output error: a job without a mode is taken as mode snapshot"]


def test_a_node_without_proxmox_ve_a_node_that_did_not_answer_and_a_bad_schedule() -> None:
    plain = evaluate(node_report(is_pve=False, pve_dir="/etc/pve"), 200)
    assert (plain["checked"], plain["problems"], plain["reason"]) == (
        False, [], "the node has no /etc/pve: no Proxmox VE backup jobs to check")
    failed = evaluate({"error": "Cannot read the backup jobs of node pve1: python3 is missing"}, 200)
    assert failed["checked"] is False and failed["problems"] == ["Cannot read the backup jobs of node pve1: python3 is missing"]
    bad = evaluate(node_report(job("mon..fri 25:61")), 200)
    assert bad["problems"] == ["Cannot read the schedule 'mon..fri 25:61' of backup job backup-test: unable to parse "
                               "calendar event at ':61': not known when it backs up CT 200 in mode stop"]


def test_the_nodes_local_time() -> None:
    """The schedule is the node's local time: in Vienna (+0100 in December) 21:00 is 20:00 UTC, 8 h after 12:00 UTC; an unknown zone name
    falls back to the offset the node gave."""
    vienna = evaluate(node_report(job("21:00"), utc_offset="+0100", timezone="Europe/Vienna"), 200)
    [window] = vienna["windows"]
    assert vienna["timezone"] == "Europe/Vienna" and window["next_due"] == NOW + 8 * 3600
    assert window["next_due_local"] == "Fri 2026-12-04 21:00 +0100"
    fixed = evaluate(node_report(job("21:00"), utc_offset="-0330", timezone="Nowhere/Atlantis"), 200)
    assert fixed["timezone"] == "UTC-0330" and fixed["windows"][0]["next_due"] == NOW + 12 * 3600 + 30 * 60
    assert node_zone("Europe/Vienna", "+0200", NOW)[1] == "UTC+0200"  # the node says otherwise: its word counts
    assert node_zone(None, None, NOW)[1] == "UTC"


@pytest.mark.parametrize(("seconds", "text"), [(0, "under a minute"), (59, "under a minute"), (60, "1 min"), (3600, "1 h"),
                                               (5 * 3600 + 12 * 60 + 5, "5 h 12 min"), (2 * 86400 + 3 * 3600 + 60, "2 d 3 h")])
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text
