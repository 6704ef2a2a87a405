# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What module_utils/_pve_backup_files.py reads on a Proxmox VE node, on a folder laid out as /etc/pve is (the
stand-in's state root is one too), and as the node runs it: ``python3 -`` with the file on its standard input."""

from __future__ import annotations

import builtins
import json
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _pve_backup_files
from ansible_collections.trainops.pct_launch.plugins.module_utils._pve_backup_files import read_node

JOBS = "vzdump: backup-1\n\tschedule 21:00\n\tmode stop\n\tvmid 200\n"
USER_CFG = ("user:root@pam:1:0:::root@example.org:::\nuser:ada@pve:1:0:Ada:Lovelace:ada@example.org:::\n"
            "pool:gpu:GPU%20jobs:200,201::\n  pool:cpu::300::\nacl:1:/:ada@pve:PVEAuditor:\n")


@pytest.fixture(name="pve")
def pve_folder(tmp_path: Path) -> Path:
    """An /etc/pve of a two-node cluster: CT 200 on pve2, jobs.cfg, user.cfg, no vzdump.cron."""
    for node, vmid in (("pve1", 100), ("pve2", 200)):
        (tmp_path / "nodes" / node / "lxc").mkdir(parents=True)
        (tmp_path / "nodes" / node / "lxc" / f"{vmid}.conf").write_text("arch: amd64\n", encoding="utf-8")
    (tmp_path / "jobs.cfg").write_text(JOBS, encoding="utf-8")
    (tmp_path / "user.cfg").write_text(USER_CFG, encoding="utf-8")
    return tmp_path


def test_it_reads_the_job_files_the_pools_and_where_the_container_is(pve: Path, tmp_path: Path) -> None:
    conf = tmp_path / "vzdump.conf"
    conf.write_text("# vzdump default settings\n#tmpdir: DIR\nmailto: ops@example.org\nmode: suspend\n", encoding="utf-8")
    report = read_node(str(pve), 200, str(conf))
    assert report["is_pve"] is True and report["node"] == "pve2" and report["errors"] == {}
    assert report["files"] == {"jobs.cfg": JOBS, "vzdump.cron": None, "user.cfg": "pool:gpu:GPU%20jobs:200,201::\n  pool:cpu::300::\n",
                               "vzdump.conf": "mode: suspend"}  # nothing but the pools and the mode leaves the node
    assert isinstance(report["now"], int) and len(report["utc_offset"]) == 5 and report["login"]
    assert read_node(str(pve), 999, str(conf))["node"] is None


def test_a_node_without_proxmox_ve(tmp_path: Path) -> None:
    report = read_node(str(tmp_path / "missing"), 200)
    assert report["is_pve"] is False and report["files"] == {} and report["node"] is None


def test_a_file_it_may_not_read_is_named_with_the_reason(pve: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pmxcfs's files are 0640 root:www-data; the test runs as root, so the refusal is made here."""
    real_open = builtins.open

    def refusing(path: t.Any, *args: t.Any, **kwargs: t.Any) -> t.Any:
        if str(path).endswith(("jobs.cfg", "user.cfg")):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing)
    report = read_node(str(pve), 200, str(pve / "no-vzdump.conf"))
    assert report["errors"] == {"jobs.cfg": "Permission denied", "user.cfg": "Permission denied"}
    assert report["files"]["jobs.cfg"] is None and report["files"]["vzdump.conf"] is None


def test_it_runs_as_the_node_runs_it(pve: Path) -> None:
    """``python3 - --pve-dir DIR --vmid VMID`` with the source on standard input, as backup_window_info's action sends it."""
    source = Path(_pve_backup_files.__file__).read_bytes()
    proc = subprocess.run([sys.executable, "-", "--pve-dir", str(pve), "--vmid", "200"], input=source, capture_output=True,
                          check=True, cwd="/")
    report = json.loads(proc.stdout.decode().splitlines()[-1])
    assert report["node"] == "pve2" and report["files"]["jobs.cfg"] == JOBS
