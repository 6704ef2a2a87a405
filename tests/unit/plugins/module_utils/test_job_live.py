# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The live record of a job (``_job_live.py``): the boot it was written in, and its life from the launch to the end.

A fake ``/proc`` (a boot id and PID 1's ``stat``) stands for a container's boot; a temporary folder for ``LIVE_DIR``.
"""

from __future__ import annotations

import calendar
import os
import stat
import time
from pathlib import Path

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_live

BOOT_ID = "6f1c9a2e-0b7d-4c55-9a51-3d2f0e8b7c11"


def fake_proc(root: Path, boot_id: str = BOOT_ID, start: int = 123456, command: str = "systemd") -> Path:
    """A ``/proc`` with the kernel's boot id and PID 1's ``stat`` (its start: field 22, in clock ticks)."""
    (root / "sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "sys/kernel/random/boot_id").write_text(boot_id + "\n", encoding="ascii")
    (root / "1").mkdir(exist_ok=True)
    fields = ["S", "0", "1", "1", "0", "-1", "4194560"] + ["0"] * 12 + [str(start), "170000000", "3000"]
    (root / "1/stat").write_text(f"1 ({command}) " + " ".join(fields) + "\n", encoding="ascii")
    return root


def test_the_boot_is_the_boot_id_and_the_start_of_pid_1(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc")
    assert _job_live.pid1_start(str(proc)) == 123456
    assert _job_live.boot_key(str(proc)) == f"{BOOT_ID}/123456"
    fake_proc(proc, start=999)  # the container started again on a node whose kernel gives no new boot id
    assert _job_live.boot_key(str(proc)) == f"{BOOT_ID}/999"
    fake_proc(proc, boot_id="another", start=999, command="a (strange) name")  # LXC's own boot id for each start
    assert _job_live.boot_key(str(proc)) == "another/999"


def test_an_unreadable_part_of_the_boot_is_a_dash(tmp_path: Path) -> None:
    assert _job_live.boot_key(str(tmp_path)) == "-/-"
    (tmp_path / "1").mkdir()
    (tmp_path / "1/stat").write_text("1 (init) S 0", encoding="ascii")
    assert _job_live.pid1_start(str(tmp_path)) is None


def test_the_boot_time_is_when_pid_1_started(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, start=100 * os.sysconf("SC_CLK_TCK"))  # 100 s after the node's boot
    now = calendar.timegm((2026, 3, 1, 12, 0, 0, 0, 0, 0))
    assert _job_live.boot_time(str(proc), now=now, since_boot=160.0) == "2026-03-01T11:59:00Z"  # 60 s ago
    assert _job_live.boot_time(str(tmp_path / "none"), now=now) == "2026-03-01T12:00:00Z", "unknown: now"
    assert time.strptime(_job_live.boot_time(), "%Y-%m-%dT%H:%M:%SZ")  # this host's own


def test_a_record_is_root_only_and_a_later_launch_is_left_alone(tmp_path: Path) -> None:
    live = tmp_path / "var/lib/trainops/jobs"
    path = _job_live.record_path("train", str(live))
    assert path == str(live / "train.json")
    assert _job_live.write(path, {"session_name": "train", "started_at": "S1", "state": "starting", "attempt": 0})
    assert stat.S_IMODE(os.stat(live).st_mode) == 0o700 and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert _job_live.note(path, "S1", state="running", attempt=1)
    assert _job_live.read(path) == {"session_name": "train", "started_at": "S1", "state": "running", "attempt": 1}
    assert not _job_live.note(path, "S0", state="ended"), "an earlier launch's supervisor never writes a later one's record"
    _job_live.remove(path, "S0")
    assert os.path.exists(path)
    _job_live.remove(path, "S1")
    assert not os.path.exists(path)
    assert not _job_live.note(path, "S1", state="running"), "gone: nothing to note"


def test_the_kept_url_is_root_only_and_goes_with_its_record(tmp_path: Path) -> None:
    path = _job_live.record_path("train", str(tmp_path))
    assert _job_live.write(path, {"session_name": "train", "started_at": "S1"})
    assert _job_live.keep_url(path, "https://hooks.example/T0KEN")
    kept = tmp_path / "train.notify"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and _job_live.kept_url(path) == "https://hooks.example/T0KEN"
    assert "T0KEN" not in Path(path).read_text(encoding="utf-8")
    assert _job_live.keep_url(path, None) and not kept.exists() and _job_live.kept_url(path) is None
    assert _job_live.keep_url(path, "https://hooks.example/T0KEN")
    _job_live.remove(path, "S1")
    assert not kept.exists() and not os.path.exists(path)


def test_records_are_the_valid_ones_named_by_their_session(tmp_path: Path) -> None:
    for name, text in (("a.json", '{"session_name": "a", "started_at": "S1"}'), ("b.json", "{broken"),
                       ("c.json", '{"session_name": "not-c"}'), ("d.notify", "https://x"), ("e.json.tmp.1", "{}")):
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert _job_live.records(str(tmp_path)) == [(str(tmp_path / "a.json"), {"session_name": "a", "started_at": "S1"})]
    assert _job_live.records(str(tmp_path / "missing")) == []


def test_a_folder_that_cannot_be_made_is_false(tmp_path: Path) -> None:
    (tmp_path / "var").write_text("a file where the folder should be", encoding="utf-8")
    assert not _job_live.write(str(tmp_path / "var/jobs/a.json"), {"session_name": "a"})
    assert not _job_live.keep_url(str(tmp_path / "var/jobs/a.json"), "https://x")


def test_an_ended_launch_leaves_its_record_only_for_a_start_at_boot(tmp_path: Path) -> None:
    path = _job_live.record_path("train", str(tmp_path))
    _job_live.write(path, {"session_name": "train", "started_at": "S1", "state": "running", "attempt": 2})
    _job_live.ended(path, "S1", 2, again=True)
    assert ((_job_live.read(path) or {})["state"], (_job_live.read(path) or {})["attempt"]) == ("ended", 2)
    _job_live.ended(path, "S1", 2)
    assert not os.path.exists(path)
