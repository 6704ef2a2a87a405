# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What a launch as root leaves for the container's next boot (``_boot_stage.py``), and the unit that uses it.

The recorder is staged into a temporary ``BOOT_DIR`` and imported from that copy alone; the live record is written
into a temporary ``LIVE_DIR``. The unit file (``roles/boot_recorder/files/trainops-boot.service``) is read as systemd
reads it, checked against the layout (``_job_layout``) and, where ``systemd-analyze`` is installed, verified by it.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import stat
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.trainops.pct_launch.plugins.module_utils import _boot_entry, _boot_stage, _job_layout, _job_live, _job_stage
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import LaunchSpec, spec_from_params, spec_hash, spec_summary

COLLECTION = Path(__file__).resolve().parents[4]
ROLE = COLLECTION / "roles" / "boot_recorder"
UNIT_FILE = ROLE / "files" / "trainops-boot.service"
URL = "https://hooks.example/services/T0KEN"


def _spec(tmp_path: Path, **params: t.Any) -> LaunchSpec:
    values = {"session_name": "train", "command": "python train.py", "log_path": str(tmp_path / "train.log"), **params}
    return spec_from_params(values)._replace(run_root=_job_layout.RUN_ROOT)


def _job(spec: LaunchSpec) -> dict[str, t.Any]:
    """``job.json`` as ``_tmux_job`` writes it."""
    return {"session_name": spec.session_name, "log_path": spec.log_path, "argv": ["sh", "-c", "python train.py"], "chdir": None,
            "venv": None, "user": None, "started_at": "2026-03-01T10:00:00Z", "host": "ct200", "supervise": dict(spec.supervise),
            "history_path": "/var/lib/trainops/history.jsonl", "gpus": []}


@pytest.fixture()
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The live records and the recorder in the test's temp dir, as for a launch by root."""
    live, boot = tmp_path / "var/lib/trainops/jobs", tmp_path / "var/lib/trainops/boot"
    monkeypatch.setattr(_boot_stage, "places", lambda spec: (str(live), str(boot)))
    return live, boot


def test_only_a_launch_by_root_in_the_run_root_keeps_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert _boot_stage.places(spec) == (_job_layout.LIVE_DIR, _job_layout.BOOT_DIR)
    assert _boot_stage.places(spec._replace(run_root=str(tmp_path))) is None, "a test's run root"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert _boot_stage.places(spec) is None, "another user: nothing for the boot"


def test_keep_stages_the_recorder_and_writes_a_record_without_secrets(tmp_path: Path, places: tuple[Path, Path]) -> None:
    live, boot = places
    spec = _spec(tmp_path, notify_url=URL, notify_command=["logger", "-t", "train"])
    path, failed = _boot_stage.keep(spec, _job(spec), {}, "{}", None)
    assert (path, failed) == (str(live / "train.json"), None)
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    assert URL not in Path(path).read_text(encoding="utf-8") and "T0KEN" not in json.dumps(record)
    assert (record["session_name"], record["started_at"], record["run_dir"], record["state"], record["attempt"]) == (
        "train", "2026-03-01T10:00:00Z", "/run/trainops/train", "starting", 0)
    assert record["boot"] == _job_live.boot_key() and record["boot_at"].endswith("Z")
    assert (record["notify_url_set"], record["notify_url_kept"], record["restart_on_boot"]) == (True, False, False)
    assert record["job"]["supervise"]["notify_url"] is None and record["job"]["supervise"]["notify_command"] == ["logger", "-t", "train"]
    assert "env" not in record and "tmux" not in record, "what only a start at boot needs is kept only for one"
    assert not (live / "train.notify").exists()
    assert stat.S_IMODE(live.stat().st_mode) == 0o700 and stat.S_IMODE(boot.stat().st_mode) == 0o700
    assert os.readlink(boot / _job_layout.BOOT_PYTHON) == sys.executable
    assert (boot / _job_layout.BOOT_ENTRY).read_text(encoding="utf-8") == Path(_boot_entry.__file__).read_text(encoding="utf-8")


def test_the_url_is_kept_apart_only_with_notify_url_keep(tmp_path: Path, places: tuple[Path, Path]) -> None:
    live, _boot = places
    spec = _spec(tmp_path, notify_url=URL, notify_url_keep=True)
    path, _failed = _boot_stage.keep(spec, _job(spec), {}, "{}", URL)
    assert json.loads(Path(str(path)).read_text(encoding="utf-8"))["notify_url_kept"] is True
    assert (live / "train.notify").read_text(encoding="utf-8") == URL + "\n"
    assert stat.S_IMODE((live / "train.notify").stat().st_mode) == 0o600
    again = _spec(tmp_path, notify_url=URL)  # the next launch of the session does not keep it: the file goes
    _boot_stage.keep(again, _job(again), {}, "{}", URL)
    assert not (live / "train.notify").exists()


def test_restart_on_boot_keeps_what_a_start_at_boot_needs(tmp_path: Path, places: tuple[Path, Path]) -> None:
    spec = _spec(tmp_path, public_env={"EPOCHS": "3"}, restart_on_boot=True)
    summary = json.dumps(spec_summary(spec), sort_keys=True)
    path, _failed = _boot_stage.keep(spec, _job(spec), {"EPOCHS": "3", "CUDA_VISIBLE_DEVICES": "GPU-1"}, summary, None)
    record = json.loads(Path(str(path)).read_text(encoding="utf-8"))
    assert record["restart_on_boot"] is True and record["env"] == {"EPOCHS": "3", "CUDA_VISIBLE_DEVICES": "GPU-1"}
    assert record["tmux"] == {"spec": spec_hash(spec), "command": "python train.py", "summary": summary}


def test_a_record_that_cannot_be_written_leaves_no_earlier_one(tmp_path: Path, places: tuple[Path, Path]) -> None:
    live, boot = places
    spec = _spec(tmp_path)
    assert _boot_stage.keep(spec, _job(spec), {}, "{}", None)[1] is None
    shutil.rmtree(boot)
    boot.write_text("a file where the folder should be", encoding="utf-8")
    later = dict(_job(spec), started_at="2026-03-02T10:00:00Z")
    assert _boot_stage.keep(spec, later, {}, "{}", None) == (None, f"cannot write {boot}")
    assert not (live / "train.json").exists(), "the earlier launch's record must not speak for this one"


def test_a_second_keep_leaves_the_staged_files_as_they_are(tmp_path: Path, places: tuple[Path, Path]) -> None:
    _live, boot = places
    spec = _spec(tmp_path)
    _boot_stage.keep(spec, _job(spec), {}, "{}", None)
    staged = _job_stage.program_files(str(boot), (_job_layout.BOOT_ENTRY, _boot_entry), _boot_stage.boot_program()[1])
    first = {path: os.lstat(path).st_mtime_ns for path, _text in staged}
    _boot_stage.keep(spec, _job(spec), {}, "{}", None)
    assert {path: os.lstat(path).st_mtime_ns for path in first} == first


def test_the_staged_recorder_holds_every_module_it_imports(tmp_path: Path) -> None:
    # the unit runs it outside Ansible: what it imports of the collection must be staged
    assert _boot_stage.stage_recorder(str(tmp_path)) is None
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "import ansible_collections.trainops.pct_launch.plugins.module_utils._job_boot; "
             "print(' '.join(sorted(name for name in sys.modules if name.startswith('ansible_collections.trainops.pct_launch.plugins.module_utils.'))))")
    run = subprocess.run([sys.executable, "-I", "-c", probe, str(tmp_path / "lib")], capture_output=True, text=True, check=True)
    assert set(run.stdout.split()) == {module.__name__ for module in _boot_stage.boot_program()[1]}, run.stdout


def test_the_staged_entry_point_runs_the_recorder_of_its_own_folder(tmp_path: Path) -> None:
    # the entry runs before BOOT_DIR/lib is on sys.path: it cannot import _job_layout and spells the name itself
    assert _boot_entry.LIB_DIR == _job_layout.LIB_DIR
    boot = tmp_path / "boot"
    assert _boot_stage.stage_recorder(str(boot)) is None
    live = tmp_path / "jobs"  # as the unit runs it, with the test's live folder: nothing to settle
    run = subprocess.run([str(boot / "python"), "-I", str(boot / "boot.py"), str(live)], capture_output=True, text=True, check=False)
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")
    (live / "x.json").parent.mkdir()
    (live / "x.json").write_text('{"session_name": "x", "boot": "another/1"}', encoding="utf-8")  # settling it fails: no run_dir
    run = subprocess.run([str(boot / "python"), "-I", str(boot / "boot.py"), str(live)], capture_output=True, text=True, check=False)
    assert run.returncode == 1 and run.stderr.startswith("session x: not recorded: KeyError"), run.stderr


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    parser.read(UNIT_FILE, encoding="utf-8")
    return parser


def test_the_unit_runs_the_staged_recorder_once_at_boot() -> None:
    unit = _unit()
    boot = _job_layout.BOOT_DIR
    assert UNIT_FILE.name == _job_layout.BOOT_UNIT
    assert unit["Service"]["ExecStart"] == f"{boot}/{_job_layout.BOOT_PYTHON} -I {boot}/{_job_layout.BOOT_ENTRY}"
    assert unit["Unit"]["ConditionPathExists"] == f"{boot}/{_job_layout.BOOT_ENTRY}", "skipped until a first launch staged it"
    assert unit["Service"]["Type"] == "oneshot" and unit["Service"]["RemainAfterExit"] == "yes"
    assert unit["Service"]["KillMode"] == "process", "a job started again outlives the recorder and is not stopped with the unit"
    assert {"local-fs.target", "network-online.target"} <= set(unit["Unit"]["After"].split())
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert _job_layout.BOOT_UNIT_WANTS == "multi-user.target.wants"


def test_the_roles_paths_are_the_layouts() -> None:
    names = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    assert names == {"__boot_recorder_unit_dir": _job_layout.SYSTEMD_UNIT_DIR, "__boot_recorder_unit": _job_layout.BOOT_UNIT,
                     "__boot_recorder_wants": _job_layout.BOOT_UNIT_WANTS}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_finds_nothing_wrong_with_the_unit(tmp_path: Path) -> None:
    # verify also wants the program to exist: the same unit with a program of this host (the rest as it is)
    text = UNIT_FILE.read_text(encoding="utf-8")
    program = f"{_job_layout.BOOT_DIR}/{_job_layout.BOOT_PYTHON}"
    assert f"ExecStart={program} " in text
    copy = tmp_path / _job_layout.BOOT_UNIT
    copy.write_text(text.replace(f"ExecStart={program} ", f"ExecStart={sys.executable} "), encoding="utf-8")
    run = subprocess.run(["systemd-analyze", "verify", "--man=no", str(copy)], capture_output=True, text=True, check=False)
    complaints = [line for line in (run.stdout + run.stderr).splitlines() if line.strip() and "sysinit.target" not in line]
    assert not complaints, complaints
