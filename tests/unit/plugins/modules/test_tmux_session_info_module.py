# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for trainops.pct_launch.tmux_session_info: main() reports the sessions of this host.

The report runs for real (tested in test_tmux_sessions.py) against a tmux server of the test's own
(``Tmux.socket_name``) and a run root in the test's temp dir.
"""

from __future__ import annotations

import json
import os
import shutil
import typing as t
import uuid
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.trainops.pct_launch.plugins.module_utils import _session_info, _tmux_cli, _tmux_sessions
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_history import append
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import CLEAN_PATH, exit_record_text
from ansible_collections.trainops.pct_launch.plugins.modules import tmux_session_info

needs_tmux = pytest.mark.skipif(shutil.which("tmux", path=CLEAN_PATH) is None, reason="needs tmux")


class Reports:
    """Counts the report's calls (the module must make none when its options are wrong)."""

    def __init__(self) -> None:
        self.calls = 0
        self.real = _tmux_sessions.report

    def __call__(self, *args: t.Any) -> tuple[str, list[dict[str, t.Any]]]:
        self.calls += 1
        return self.real(*args)


@pytest.fixture()
def reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> t.Iterator[Reports]:
    """A tmux server of the test's own, the run root in the test's temp dir, and the report's calls counted."""
    socket = f"trainops-ut-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", socket)
    monkeypatch.setattr(_tmux_sessions, "run_root", lambda: str(tmp_path / "run"))
    counter = Reports()
    monkeypatch.setattr(_session_info, "report", counter)
    try:
        yield counter
    finally:
        _tmux_cli.Tmux().run("kill-server")
        Path("/tmp", f"tmux-{os.geteuid()}", socket).unlink(missing_ok=True)


def run_module(capsys: pytest.CaptureFixture[str], **args: t.Any) -> dict[str, t.Any]:
    """Run main() with these arguments; return its JSON result."""
    with patch_module_args(args), pytest.raises(SystemExit):
        tmux_session_info.main()
    return json.loads(capsys.readouterr().out)


def test_the_options_have_no_container() -> None:
    assert set(tmux_session_info.ARGUMENT_SPEC) == {"session_name", "log_path", "lines", "history", "history_limit", "node_kernel_log"}


def test_one_finished_session(tmp_path: Path, reports: Reports, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_text("### trainops.pct_launch: session=t\n" + "".join(f"line {i}\n" for i in range(30)), encoding="utf-8")
    Path(f"{log}.exit").write_text("session_name=t\nexit_status=0\nended_at=2025-01-01T00:00:09Z\n", encoding="utf-8")
    result = run_module(capsys, session_name="t", log_path=str(log), _ansible_check_mode=True)
    assert reports.calls == 1 and result["changed"] is False and not result.get("failed")
    session = result["session"]
    assert session["state"] == "finished" and session["exit_status"] == 0 and len(session["log_tail"]) == 20
    assert session["log_tail"][-1] == "line 29" and result["sessions"] == [session] and session["ended_at"] == "2025-01-01T00:00:09Z"
    assert run_module(capsys, session_name="t", log_path=str(log), lines=2)["session"]["log_tail"] == ["line 28", "line 29"]


def test_no_server_is_not_an_error(reports: Reports, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_module(capsys)
    assert not result.get("failed") and result["sessions"] == [] and result["tmux"] in ("no_server", "missing")
    assert "session" not in result and reports.calls == 1


@needs_tmux
def test_a_running_session(reports: Reports, capsys: pytest.CaptureFixture[str]) -> None:
    assert _tmux_cli.Tmux().run("new-session", "-d", "-s", "busy", "sleep 30")[0] == 0
    result = run_module(capsys)
    assert result["tmux"] == "running" and [entry["name"] for entry in result["sessions"]] == ["busy"]
    busy = result["sessions"][0]
    assert busy["state"] == "running" and busy["pane_pid"] > 1 and busy["managed"] is False
    one = run_module(capsys, session_name="busy")
    assert one["session"] == busy and one["sessions"] == [busy] and reports.calls == 2
    assert run_module(capsys, session_name="other")["session"]["state"] == "absent"


@pytest.mark.parametrize("args, fragment", [
    ({"session_name": "bad name"}, "Invalid session_name 'bad name'"),
    ({"session_name": "t", "log_path": "t.log"}, "Invalid log_path 't.log'"),
    ({"lines": -1}, "Cannot use option lines -1"),
    ({"history_limit": 0}, "Cannot use option history_limit 0: it must be from 1 to 1000"),
    ({"history": True, "history_limit": 1001}, "Cannot use option history_limit 1001: it must be from 1 to 1000"),
    ({"history_limit": "many"}, "argument 'history_limit' is of type"),
    ({"history": "maybe"}, "argument 'history' is of type"),
    ({"log_path": "/w/t.log"}, "missing parameter(s) required by 'log_path': session_name"),
    ({"vmid": 250}, "Unsupported parameters for (basic.py) module: vmid."),
    ({"vmid": 250, "pct_path": "pct", "session_name": "t"}, "Unsupported parameters for (basic.py) module: pct_path, vmid."),
])
def test_bad_options_report_nothing(reports: Reports, capsys: pytest.CaptureFixture[str], args: dict[str, t.Any], fragment: str) -> None:
    result = run_module(capsys, **args)
    assert result["failed"] and fragment in result["msg"], result["msg"]
    assert reports.calls == 0


def test_the_report_reads_a_launch_from_its_run_dir(tmp_path: Path, reports: Reports, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "gone.log"
    log.write_text("last words\n", encoding="utf-8")
    run_dir = tmp_path / "run" / "gone"
    run_dir.mkdir(parents=True)
    (run_dir / "log_path").write_text(str(log), encoding="utf-8")
    (run_dir / "exit").write_text(exit_record_text("gone", 2, "S", "E"), encoding="utf-8")
    result = run_module(capsys, session_name="gone")
    assert result["session"]["state"] == "finished" and result["session"]["exit_status"] == 2 and result["session"]["log_path"] == str(log)
    assert result["session"]["log_tail"] == ["last words"] and reports.calls == 1
    assert sorted(p.name for p in run_dir.iterdir()) == ["exit", "log_path"], "the report only reads"


@pytest.fixture()
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host's history of launches, in the test's temp dir (not created)."""
    path = tmp_path / "history" / "history.jsonl"
    monkeypatch.setattr(_tmux_sessions, "history_path", lambda: str(path))
    return path


def test_history_only_when_asked(history: Path, reports: Reports, capsys: pytest.CaptureFixture[str]) -> None:
    assert "history" not in run_module(capsys)
    assert run_module(capsys, history=True)["history"] == [], "no history file yet: no launch"
    assert not history.exists(), "the report only reads"


def test_history_entries_filter_and_limit(history: Path, reports: Reports, capsys: pytest.CaptureFixture[str]) -> None:
    log = b"/w/caf\xe9.log".decode("utf-8", "surrogateescape")
    for number in range(5):
        name = "a" if number % 2 == 0 else "b"
        assert append(str(history), {"event": "start", "session_name": name, "host": "ct200", "started_at": f"S{number}", "log_path": log})
        assert append(str(history), {"event": "end", "session_name": name, "host": "ct200", "started_at": f"S{number}", "log_path": log,
                                     "ended_at": f"E{number}", "end_state": "failed", "exit_status": number, "cause": "exit_status",
                                     "reason": f"exit status {number}", "attempts": 1})
    assert append(str(history), {"event": "start", "session_name": "a", "host": "ct200", "started_at": "S5", "log_path": log})
    result = run_module(capsys, history=True, history_limit=3)
    assert [(e["session_name"], e["started_at"], e["end_state"], e["exit_status"]) for e in result["history"]] == [
        ("b", "S3", "failed", 3), ("a", "S4", "failed", 4), ("a", "S5", "running", None)]
    assert result["history"][0] == {"session_name": "b", "host": "ct200", "started_at": "S3", "ended_at": "E3", "end_state": "failed",
                                    "exit_status": 3, "cause": "exit_status", "reason": "exit status 3", "attempts": 1,
                                    "log_path": "/w/caf\ufffd.log", "boot_restarts": None,
                                    "attempt_started_at": None, "gpu_bus_ids": None}, "bytes that are not UTF-8 are shown as U+FFFD"
    one = run_module(capsys, session_name="b", history=True)
    assert [e["started_at"] for e in one["history"]] == ["S1", "S3"] and one["session"]["state"] == "absent"
    assert len(run_module(capsys, history=True)["history"]) == 6, "100 by default"


def test_a_session_reports_the_supervisors_keys(tmp_path: Path, reports: Reports, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "sup.log"
    log.write_text("Traceback\nValueError: bad batch\n", encoding="utf-8")
    run_dir = tmp_path / "run" / "sup"
    run_dir.mkdir(parents=True)
    (run_dir / "log_path").write_text(str(log), encoding="utf-8")
    (run_dir / "exit").write_text(exit_record_text("sup", 1, "S", "E") + "attempts=2\nend_state=failed\ncause=python_exception\n"
                                  "reason=ValueError: bad batch\n", encoding="utf-8")
    (run_dir / "state.json").write_text('{"state": "ended", "attempt": 2, "last_output_at": "2025-01-01T00:00:00Z"}', encoding="utf-8")
    session = run_module(capsys, session_name="sup")["session"]
    assert {key: session[key] for key in ("state", "exit_status", "attempts", "end_state", "cause", "reason", "signal", "since",
                                          "supervisor_state", "last_output_at", "last_progress_at", "last_progress_age")} == {
        "state": "finished", "exit_status": 1, "attempts": 2, "end_state": "failed", "cause": "python_exception",
        "reason": "ValueError: bad batch", "signal": None, "since": "E", "supervisor_state": None,
        "last_output_at": "2025-01-01T00:00:00Z", "last_progress_at": None, "last_progress_age": None}
