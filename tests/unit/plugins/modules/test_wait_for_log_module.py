# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the module half of trainops.pct_launch.wait_for_log: one chunk of waiting on this host.

The chunk (``_log_poll.poll``, tested in test_log_poll.py) runs for real against logs the tests write
and a tmux server of the test's own; its calls are recorded (the module makes exactly one per run).
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

from ansible_collections.trainops.pct_launch.plugins.module_utils import _log_chunk, _log_poll, _tmux_cli
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import CLEAN_PATH
from ansible_collections.trainops.pct_launch.plugins.modules import wait_for_log

HEADER = b"### trainops.pct_launch: session=train started_at=2025-01-01T00:00:00Z host=ct command=python train.py\n"
needs_tmux = pytest.mark.skipif(shutil.which("tmux", path=CLEAN_PATH) is None, reason="needs tmux")


class Polls:
    """The real chunk, its parameters recorded."""

    def __init__(self) -> None:
        self.calls: list[dict[str, t.Any]] = []

    def __call__(self, params: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        self.calls.append(dict(params))
        return _log_poll.poll(params)


@pytest.fixture()
def polls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> t.Iterator[Polls]:
    """A tmux server of the test's own, the run root in the test's temp dir, and the chunks recorded."""
    socket = f"trainops-ut-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", socket)
    monkeypatch.setattr(_log_poll, "run_root", lambda: str(tmp_path / "run"))
    recorder = Polls()
    monkeypatch.setattr(_log_chunk, "poll", recorder)
    try:
        yield recorder
    finally:
        _tmux_cli.Tmux().run("kill-server")
        Path("/tmp", f"tmux-{os.geteuid()}", socket).unlink(missing_ok=True)


def run_module(capsys: pytest.CaptureFixture[str], **args: t.Any) -> dict[str, t.Any]:
    """Run the module's main() with these arguments; return its JSON result."""
    with patch_module_args(args), pytest.raises(SystemExit):
        wait_for_log.main()
    return json.loads(capsys.readouterr().out)


def test_the_options_have_no_container() -> None:
    assert not {"vmid", "pct_path"} & set(wait_for_log.ARGUMENT_SPEC)


def test_started_in_one_chunk(tmp_path: Path, polls: Polls, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1/3\n")
    result = run_module(capsys, log_path=str(log), pattern=r"Epoch \d", timeout=5)
    assert not result.get("failed") and result["changed"] is False and result["verdict"] == "started"
    assert result["matched_line"] == "Epoch 1/3" and result["log_tail"][-1] == "Epoch 1/3" and "engine" not in result
    assert result["msg"] == f"Job started in log {log}: pattern 'Epoch \\\\d' matched after {result['elapsed']:.1f} s: 'Epoch 1/3'"
    assert result["pct_calls"] == 1 and result["offset"] == log.stat().st_size
    [params] = polls.calls
    assert params["duration"] == 5.0 and params["offset"] == 0 and params["log_path"] == str(log) and params["record_proof"] is True


def test_timeout_chunk_fails_with_state(tmp_path: Path, polls: Polls, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"warming up\n")
    result = run_module(capsys, log_path=str(log), pattern="Epoch", timeout=0.5, offset=3)
    assert result["failed"] and result["verdict"] == "timeout" and result["offset"] == log.stat().st_size
    assert "exists (%d bytes) and has no such line" % log.stat().st_size in result["msg"]
    assert len(polls.calls) == 1 and polls.calls[0]["duration"] == 0.5 and polls.calls[0]["offset"] == 3


def test_a_died_job_fails_with_its_exit_status(tmp_path: Path, polls: Polls, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Traceback\n")
    Path(f"{log}.exit").write_text("session_name=train\nexit_status=3\nended_at=E\n", encoding="utf-8")
    result = run_module(capsys, session_name="train", log_path=str(log), pattern="Epoch", timeout=30)
    assert result["failed"] and result["verdict"] == "died" and result["exit_status"] == 3 and result["session_state"] == "finished"
    assert result["msg"].startswith("Job did not start in session train: the job ended with exit status 3") and len(polls.calls) == 1


@pytest.mark.parametrize("args, fragment", [
    ({"session_name": "t", "fail_pattern": "(unclosed"}, "Cannot use option fail_pattern '(unclosed'"),
    ({"session_name": "t:1"}, "Invalid session_name 't:1'"),
    ({"log_path": "t.log"}, "Invalid log_path 't.log'"),
    ({}, "one of the following is required: session_name, log_path"),
    ({"session_name": "t", "vmid": 250}, "Unsupported parameters for (basic.py) module: vmid."),
    ({"log_path": "/w/t.log", "vmid": 250, "pct_path": "pct"}, "Unsupported parameters for (basic.py) module: pct_path, vmid."),
    ({"session_name": "t", "wait_until": "ended"}, "value of wait_until must be one of: started, finished, got: ended"),
    ({"session_name": "t", "show_lines": "sometimes"}, "argument 'show_lines' is of type"),
])
def test_bad_options_wait_for_nothing(polls: Polls, capsys: pytest.CaptureFixture[str], args: dict[str, t.Any], fragment: str) -> None:
    result = run_module(capsys, **args)
    assert result["failed"] and fragment in result["msg"], result["msg"]
    assert polls.calls == []


def test_tmux_missing_never_proves_a_start_with_an_old_log(tmp_path: Path, polls: Polls, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1/3\n")
    monkeypatch.setattr(_tmux_cli, "CLEAN_PATH", str(tmp_path / "no-tools"))
    result = run_module(capsys, session_name="train", log_path=str(log), pattern="Epoch", timeout=5)
    assert result["failed"] and result["verdict"] == "died" and result["tmux_missing"] is True, result
    assert result["log_size"] == log.stat().st_size and result["matched_line"] is None
    assert result["msg"].startswith("Cannot watch session train: tmux is not installed there") and len(polls.calls) == 1


@needs_tmux
@pytest.mark.parametrize("check_mode", [False, True], ids=["normal", "check"])
@pytest.mark.parametrize("wait_until", ["started", "finished"])
def test_the_proof_is_recorded_on_the_session_except_in_check_mode(tmp_path: Path, polls: Polls, capsys: pytest.CaptureFixture[str],
                                                                   check_mode: bool, wait_until: str) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1/3\n")
    tmux = _tmux_cli.Tmux()
    assert tmux.run("new-session", "-d", "-s", "proofcheck", "sleep 60")[0] == 0
    run_dir = tmp_path / "run" / "proofcheck"
    run_dir.mkdir(parents=True)
    result = run_module(capsys, session_name="proofcheck", log_path=str(log), pattern="Epoch", timeout=0.5, wait_until=wait_until,
                        _ansible_check_mode=check_mode)
    shown = tmux.run("show-options", "-v", "-t", "=proofcheck:", "@trainops_proven")[1].strip()
    assert result["verdict"] == ("started" if wait_until == "started" else "timeout"), result
    assert result["session_state"] == "running" and result["session_alive"] is True, result
    assert result["proof_recorded"] is (not check_mode), result
    assert bool(shown) is (not check_mode), f"@trainops_proven is {shown!r} after a wait with check mode {check_mode}"
    assert (run_dir / "proven").exists() is (not check_mode), "check mode writes nothing, RUN_DIR/proven neither"
    if not check_mode:
        assert (run_dir / "proven").read_text(encoding="utf-8") == shown + "\n"
    assert polls.calls[0]["record_proof"] is (not check_mode)


def test_waiting_for_the_end_of_a_job_that_finished(tmp_path: Path, polls: Polls, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1/3\nEpoch 3/3\n### trainops.pct_launch: session=train exit_status=0 ended_at=E\n")
    Path(f"{log}.exit").write_text("session_name=train\nexit_status=0\nended_at=E\nattempts=2\nend_state=finished\n", encoding="utf-8")
    result = run_module(capsys, session_name="train", log_path=str(log), wait_until="finished", timeout=30)
    assert not result.get("failed") and result["changed"] is False and result["verdict"] == "finished", result
    assert result["exit_status"] == 0 and result["attempts"] == 2 and result["end_state"] == "finished" and result["proven_line"] == "Epoch 1/3"
    assert result["msg"].startswith("Job finished in session train: exit status 0 after ") and result["msg"].endswith(" s (2 attempts)")
    assert result["new_lines"] == ["Epoch 1/3", "Epoch 3/3"] and result["lines_omitted"] == 0, "show_lines is on by default"
    [params] = polls.calls
    assert params["wait_until"] == "finished" and params["show_lines"] is True


def test_waiting_for_the_end_of_a_job_that_failed(tmp_path: Path, polls: Polls, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1/3\n\xffValueError: NaN\n")
    Path(f"{log}.exit").write_text("session_name=train\nexit_status=3\nended_at=E\ncause=python_exception\nreason=ValueError: NaN\n",
                                   encoding="utf-8")
    result = run_module(capsys, session_name="train", log_path=str(log), wait_until="finished", show_lines=False, timeout=30)
    assert result["failed"] and result["verdict"] == "failed" and result["exit_status"] == 3 and result["cause"] == "python_exception"
    assert result["end_reason"] == "ValueError: NaN" and result["signal"] is None and "new_lines" not in result, result
    assert result["msg"].startswith("Job failed in session train: exit status 3 after ") and "(reason: ValueError: NaN)" in result["msg"]
    assert "\ufffdValueError: NaN" in result["msg"], "bytes that are not UTF-8 are U+FFFD"


def test_show_lines_returns_them_as_valid_utf8(tmp_path: Path, polls: Polls, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"loss \xff\xfe 2.1\nEpoch 1/3\n")
    result = run_module(capsys, log_path=str(log), pattern="Epoch", show_lines=True, timeout=5)
    assert result["verdict"] == "started" and result["new_lines"] == ["loss \ufffd\ufffd 2.1", "Epoch 1/3"], result
