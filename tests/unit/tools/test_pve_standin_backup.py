# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The stand-in's backup jobs (tools/pve_standin/standin_backup.py): ``jobs.cfg`` and ``vzdump.cron`` in a node's state
root as Proxmox VE writes them, and read back as the collection reads a real node's (plugin_utils/_pve_backup.py).
tests/integration/test_backup_window.py runs the preflight against them."""
from __future__ import annotations

import stat
import sys
from pathlib import Path

STANDIN = Path(__file__).resolve().parents[3] / "tools" / "pve_standin"
sys.path.insert(0, str(STANDIN))

# pylint: disable=wrong-import-position
from standin_backup import (  # noqa: E402
    BackupJob,
    encode_text,
    jobs_cfg_text,
    remove_backup_jobs,
    sample_jobs,
    write_jobs_cfg,
    write_vzdump_cron,
)

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pve_backup import parse_jobs_cfg, parse_vzdump_cron  # noqa: E402

REALM_SYNC = "realm-sync: realmsync-ldap\n\tschedule daily\n\trealm ldap\n\n"


def test_jobs_cfg_in_the_state_root_as_proxmox_ve_writes_it(tmp_path: Path) -> None:
    path = write_jobs_cfg(tmp_path, sample_jobs(740, "testnode"), REALM_SYNC)
    assert path == tmp_path / "jobs.cfg" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.read_text(encoding="utf-8") == (
        "vzdump: backup-4ec7b1e2-9c47\n\tcomment nightly%3A every guest\n\tschedule 21:00\n\tall 1\n\tcompress zstd\n"
        "\tenabled 1\n\tmode snapshot\n\tstorage local\n\n"
        "vzdump: backup-5d8e2b1f-01a2\n\tcomment weekly, consistent\n\tschedule sun 01:00\n\tcompress zstd\n\tenabled 1\n"
        "\tmode stop\n\tnode testnode\n\tstorage local\n\tvmid 740\n\n" + REALM_SYNC)
    nightly, weekly = parse_jobs_cfg(path.read_text(encoding="utf-8"))
    assert (nightly.all, nightly.mode, weekly.vmids, weekly.node, weekly.mode) == (True, "snapshot", frozenset({740}), "testnode", "stop")


def test_selections_and_a_disabled_job() -> None:
    jobs = [BackupJob("backup-a", "*/2:00", "suspend", exclude=(1, 2)),
            BackupJob("backup-b", "mon..fri 21:00", "stop", pool="gpu", enabled=False)]
    first, second = parse_jobs_cfg(jobs_cfg_text(jobs))
    assert (first.all, first.exclude, first.mode) == (True, frozenset({1, 2}), "suspend")
    assert (second.pool, second.enabled, second.schedule) == ("gpu", False, "mon..fri 21:00")


def test_vzdump_cron_of_an_older_node(tmp_path: Path) -> None:
    path = write_vzdump_cron(tmp_path, [(30, 1, "sat,sun", BackupJob("x", "", "stop", vmids=(740, 741))),
                                        (0, 3, "*", BackupJob("y", "", "suspend", all=True, enabled=False))])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[5] == "30 1 * * 6,7         root vzdump 740 741 --mode stop --storage local --compress zstd --quiet 1"
    assert lines[6].startswith("0 3 * * *           root #vzdump --mode suspend ")
    first, second = parse_vzdump_cron(path.read_text(encoding="utf-8"))
    assert (first.schedule, first.vmids, first.mode) == ("sat,sun 01:30", frozenset({740, 741}), "stop")
    assert (second.schedule, second.all, second.enabled) == ("03:00", True, False)
    remove_backup_jobs(tmp_path)
    remove_backup_jobs(tmp_path)
    assert not list(tmp_path.iterdir())


def test_encode_text() -> None:
    assert encode_text("a: 100% b\n") == "a%3A 100%25 b%0A" and encode_text("ü") == "%C3%BC"
