# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""``_log_poll.poll``: one chunk of ``wait_for_log`` on this host, against logs the tests write.

Most cases need no job: the test writes the log (and ``LOG.exit``) itself. Session cases start a real
tmux session on a private server (``Tmux.socket_name``, killed at teardown) and set ``@trainops_log``
as ``tmux_session`` does; the run root is the test's temp dir.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import threading
import time
import typing as t
import uuid
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _log_poll, _tmux_cli
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import CLEAN_PATH, exit_record_text
from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import poll_parameters, result_from_facts
from ansible_collections.trainops.pct_launch.plugins.module_utils._proc_tree import SHOW

HEADER = b"### trainops.pct_launch: session=train started_at=2025-01-01T00:00:00Z host=h command=python train.py READY ERROR\n"
TRAILER = b"### trainops.pct_launch: session=train exit_status=0 ended_at=2025-01-01T00:00:09Z READY\n"
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
needs_tmux = pytest.mark.skipif(shutil.which("tmux", path=CLEAN_PATH) is None, reason="needs tmux")


class Watch:
    """The test's log folder, run root and tmux server, and one poll chunk."""

    def __init__(self, tmp_path: Path, socket: str) -> None:
        self.tmp_path = tmp_path
        self.socket = socket
        self.run_root = tmp_path / "run"
        self.log = tmp_path / "train.log"

    def write(self, data: bytes, path: Path | None = None) -> Path:
        target = path or self.log
        target.write_bytes(data)
        return target

    def append(self, data: bytes) -> None:
        with open(self.log, "ab") as handle:
            handle.write(data)

    def poll(self, duration: float = 0.5, offset: int = 0, log_path: str | None | bool = True, **options: t.Any) -> dict[str, t.Any]:
        """One chunk; ``log_path`` True is the test's log, None or a path as given."""
        params: dict[str, t.Any] = {"session_name": None, "pattern": None, "fail_pattern": None, "sleep": 0.1,
                                    "tail_lines": 5, "record_proof": True}
        params["log_path"] = str(self.log) if log_path is True else log_path
        params.update(options)
        return _log_poll.poll(poll_parameters(params, duration, offset))

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        # the environment Tmux gives tmux, so that both reach the same server whatever TMUX_TMPDIR says here
        env = {"PATH": CLEAN_PATH, "HOME": pwd.getpwuid(os.geteuid()).pw_dir or "/"}
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=env, check=False)

    def session(self, command: str = "sleep 30", log: Path | None = None) -> str:
        """A live session running ``command`` with ``@trainops_log`` set, as ``tmux_session`` leaves one."""
        name = f"ut-{uuid.uuid4().hex[:10]}"
        assert self.tmux("new-session", "-d", "-s", name, command).returncode == 0
        assert self.tmux("set-option", "-t", f"={name}:", "@trainops_log", str(log or self.log)).returncode == 0
        return name

    def option(self, name: str, option: str) -> str:
        return self.tmux("show-options", "-v", "-t", f"={name}:", option).stdout.rstrip("\n")


@pytest.fixture()
def watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> t.Iterator[Watch]:
    socket = f"trainops-ut-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", socket)
    monkeypatch.setattr(_log_poll, "run_root", lambda: str(tmp_path / "run"))
    box = Watch(tmp_path, socket)
    try:
        yield box
    finally:
        box.tmux("kill-server")
        # tmux 3.3 leaves the socket of a killed server behind (Tmux runs tmux without TMUX_TMPDIR: /tmp)
        Path("/tmp", f"tmux-{os.geteuid()}", socket).unlink(missing_ok=True)


def _elapsed(facts: dict[str, t.Any]) -> float:
    return float(facts["chunk_elapsed"])


def test_a_pattern_matches_only_whole_lines(watch: Watch) -> None:
    watch.write(HEADER + b"loading\nREADY, almost")
    facts = watch.poll(pattern="READY")
    assert facts["verdict"] == "pending", facts
    assert int(facts["offset"]) == len(HEADER + b"loading\n"), "the partial line is read again next time"
    assert "matched_line" not in facts
    watch.append(b" done\n")
    facts = watch.poll(pattern="READY", offset=int(facts["offset"]))
    assert facts["verdict"] == "started" and facts["matched_line"] == "READY, almost done", facts
    assert int(facts["offset"]) == watch.log.stat().st_size


def test_a_line_completed_during_the_chunk_matches(watch: Watch) -> None:
    watch.write(HEADER + b"READY")
    timer = threading.Timer(0.3, watch.append, args=(b"\n",))
    timer.start()
    try:
        facts = watch.poll(duration=5, pattern="^READY$")
    finally:
        timer.cancel()
    assert facts["verdict"] == "started" and facts["matched_line"] == "READY"
    assert 0.25 <= _elapsed(facts) < 2


def test_the_first_looks_come_sooner_than_the_poll_interval(watch: Watch, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gaps between looks start at FIRST_LOOK and double up to the option sleep, never above it."""
    gaps: list[float] = []
    real_sleep = time.sleep

    def recording_sleep(seconds: float) -> None:
        gaps.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(_log_poll.time, "sleep", recording_sleep)
    watch.write(HEADER + b"loading\n")
    facts = watch.poll(duration=1.6, pattern="READY", sleep=0.5)
    assert facts["verdict"] == "pending", facts
    assert [round(gap, 3) for gap in gaps[:4]] == [0.05, 0.1, 0.2, 0.4], gaps
    assert all(round(gap, 3) <= 0.5 for gap in gaps) and round(gaps[4], 3) == 0.5, gaps
    gaps.clear()
    watch.poll(duration=0.5, pattern="READY", sleep=0.03)
    assert gaps and all(round(gap, 3) <= 0.03 for gap in gaps), "a sleep below FIRST_LOOK is the gap from the start"


def test_protocol_lines_never_match(watch: Watch) -> None:
    watch.write(HEADER + TRAILER)
    for pattern in ("READY", None, "trainops"):
        facts = watch.poll(duration=0.3, pattern=pattern, fail_pattern="ERROR")
        assert facts["verdict"] == "pending", (pattern, facts)
    watch.append(b" ### trainops.pct_launch: not at the start, READY\n")
    facts = watch.poll(duration=0.3, pattern="READY")
    assert facts["verdict"] == "started" and facts["matched_line"] == " ### trainops.pct_launch: not at the start, READY"


@pytest.mark.parametrize("lines, verdict, matched", [
    (b"READY but ERROR\n", "fail_pattern", "READY but ERROR"),
    (b"READY\nERROR\n", "started", "READY"),
    (b"ERROR\nREADY\n", "fail_pattern", "ERROR"),
    (b"noise\r\nERROR: out of memory\r\n", "fail_pattern", "ERROR: out of memory"),
])
def test_fail_pattern_wins_on_its_line_and_earlier_lines_win(watch: Watch, lines: bytes, verdict: str, matched: str) -> None:
    watch.write(HEADER + lines)
    facts = watch.poll(pattern="READY", fail_pattern="ERROR")
    assert facts["verdict"] == verdict and facts["matched_line"] == matched, facts
    result = result_from_facts(facts, 0.1)
    assert result["verdict"] == verdict and result["matched_line"] == matched


def test_without_a_pattern_the_first_output_line_after_the_header_is_started(watch: Watch) -> None:
    watch.write(HEADER)
    assert watch.poll(duration=0.3)["verdict"] == "pending", "the header is no output of the job"
    watch.append(b"Epoch 1/10\nEpoch 2/10\n")
    facts = watch.poll()
    assert facts["verdict"] == "started" and facts["matched_line"] == "Epoch 1/10", facts
    assert _elapsed(facts) < 0.4, "a verdict ends the chunk at once"


def test_an_exit_record_is_died_with_the_record(watch: Watch) -> None:
    watch.write(HEADER + b"Traceback (most recent call last):\n" + TRAILER)
    watch.write(exit_record_text("train", 3, "2025-01-01T00:00:00Z", "2025-01-01T00:00:09Z").encode(), Path(f"{watch.log}.exit"))
    facts = watch.poll(duration=5, pattern="READY")
    assert facts["verdict"] == "died" and facts["exit"]["exit_status"] == "3", facts
    assert _elapsed(facts) < 1, "an exit record ends the chunk at once"
    result = result_from_facts(facts, _elapsed(facts))
    assert result["exit_status"] == 3 and result["session_state"] == "finished" and result["ended_at"] == "2025-01-01T00:00:09Z"
    assert result["log_tail"][-1].startswith("### trainops.pct_launch: session=train exit_status=0")


def test_a_match_before_the_exit_is_still_started(watch: Watch) -> None:
    watch.write(HEADER + b"READY\n" + TRAILER)
    watch.write(exit_record_text("train", 0, "2025-01-01T00:00:00Z", "2025-01-01T00:00:09Z").encode(), Path(f"{watch.log}.exit"))
    facts = watch.poll(pattern="READY")
    assert facts["verdict"] == "started" and facts["matched_line"] == "READY"


def test_pending_when_the_chunk_is_over(watch: Watch) -> None:
    watch.write(HEADER + b"loading\n")
    started = time.monotonic()
    facts = watch.poll(duration=0.5, pattern="READY", tail_lines=1)
    assert facts["verdict"] == "pending", facts
    assert 0.5 <= time.monotonic() - started < 1.5 and 0.5 <= _elapsed(facts) < 1.5
    assert facts["tail"] == ["loading"] and facts["log_size"] == str(watch.log.stat().st_size)
    result = result_from_facts(facts, _elapsed(facts))
    assert result["verdict"] == "timeout" and result["log_exists"] is True and result["process_tree"] == []


def test_the_offset_resumes_without_reading_again(watch: Watch) -> None:
    first = HEADER + b"warmup\nREADY 1\nafter\n"
    watch.write(first)
    facts = watch.poll(pattern="READY")
    assert facts["verdict"] == "started" and facts["matched_line"] == "READY 1"
    offset = int(facts["offset"])
    assert offset == len(first), "the offset is after the last whole line read"
    facts = watch.poll(duration=0.3, pattern="READY", offset=offset)
    assert facts["verdict"] == "pending" and int(facts["offset"]) == offset, "READY 1 is not read again"
    watch.append(b"READY 2\n")
    facts = watch.poll(pattern="READY", offset=offset)
    assert facts["verdict"] == "started" and facts["matched_line"] == "READY 2"
    assert int(facts["offset"]) == len(first) + len(b"READY 2\n")


def test_an_offset_skips_older_content(watch: Watch) -> None:
    old = HEADER + b"READY from an earlier run\n"
    watch.write(old + HEADER + b"loading\n")
    facts = watch.poll(duration=0.3, pattern="READY", offset=len(old))
    assert facts["verdict"] == "pending" and int(facts["offset"]) == watch.log.stat().st_size


def test_a_truncated_log_is_read_from_the_start(watch: Watch) -> None:
    watch.write(HEADER + b"READY\n")
    facts = watch.poll(pattern="READY", offset=100000)
    assert facts["verdict"] == "started" and facts["matched_line"] == "READY", facts
    assert int(facts["offset"]) == len(HEADER + b"READY\n")


def test_a_missing_log_is_pending_until_it_appears(watch: Watch) -> None:
    facts = watch.poll(duration=0.3, pattern="READY")
    assert facts["verdict"] == "pending" and facts["log_exists"] == "0" and "log_size" not in facts
    assert result_from_facts(facts, 0.3)["log_exists"] is False


def test_a_session_that_is_gone_is_died(watch: Watch) -> None:
    watch.write(HEADER + b"loading\n")
    facts = watch.poll(duration=5, pattern="READY", session_name="ut-no-such-session")
    assert facts["verdict"] == "died" and facts["session"] in ("absent", "tmux_missing"), facts
    assert _elapsed(facts) < 1
    result = result_from_facts(facts, _elapsed(facts))
    assert result["session_alive"] is False and result["exit_status"] is None


def test_a_gone_session_finds_its_log_and_record_in_its_run_dir(watch: Watch) -> None:
    run_dir = watch.run_root / "train"
    run_dir.mkdir(parents=True)
    (run_dir / "log_path").write_text(str(watch.log), encoding="utf-8")
    watch.write(HEADER + b"loading\n" + TRAILER)
    (run_dir / "exit").write_text(exit_record_text("train", 137, "2025-01-01T00:00:00Z", "2025-01-01T00:00:09Z", "TERM"), encoding="utf-8")
    Path(f"{watch.log}.exit").write_bytes(b"")  # as a full file system leaves it
    facts = watch.poll(duration=5, pattern="READY", session_name="train", log_path=None)
    assert facts["verdict"] == "died" and facts["log_path"] == str(watch.log), facts
    assert facts["exit"]["exit_status"] == "137" and facts["exit"]["stopped_by"] == "trainops"
    result = result_from_facts(facts, _elapsed(facts))
    assert result["session_state"] == "finished" and result["stopped_by"] == "trainops"


def test_no_log_at_all_is_died(watch: Watch) -> None:
    facts = watch.poll(duration=5, log_path=None, session_name="ut-nothing")
    assert facts["verdict"] == "died" and facts["log_path"] == "" and facts["tail"] == []
    assert _elapsed(facts) < 1


@needs_tmux
def test_a_live_session_reads_its_log_from_trainops_log(watch: Watch) -> None:
    name = watch.session()
    watch.write(HEADER + b"READY\n")
    facts = watch.poll(pattern="READY", session_name=name, log_path=None, record_proof=False)
    assert facts["verdict"] == "started" and facts["session"] == "alive" and facts["log_path"] == str(watch.log), facts
    pane = watch.tmux("display-message", "-p", "-t", f"={name}:", "#{pane_pid}").stdout.strip()
    assert facts["pane_pid"] == pane
    assert result_from_facts(facts, 0.1)["session_state"] == "running"


@needs_tmux
def test_record_proof_marks_a_live_session_and_check_mode_does_not(watch: Watch) -> None:
    watch.write(HEADER + b"READY\n")
    name = watch.session()
    facts = watch.poll(pattern="READY", session_name=name, record_proof=False)
    assert facts["verdict"] == "started" and "proof_recorded" not in facts, facts
    assert watch.option(name, "@trainops_proven") == "", "check mode writes nothing"
    facts = watch.poll(pattern="READY", session_name=name, record_proof=True)
    assert facts["verdict"] == "started" and facts["proof_recorded"] == "1", facts
    assert STAMP.fullmatch(watch.option(name, "@trainops_proven")), watch.option(name, "@trainops_proven")
    assert result_from_facts(facts, 0.1)["proof_recorded"] is True


@needs_tmux
def test_record_proof_needs_the_match(watch: Watch) -> None:
    watch.write(HEADER + b"ERROR\n")
    name = watch.session()
    facts = watch.poll(pattern="READY", fail_pattern="ERROR", session_name=name, record_proof=True)
    assert facts["verdict"] == "fail_pattern" and "proof_recorded" not in facts
    assert watch.option(name, "@trainops_proven") == ""


@needs_tmux
def test_pending_on_a_live_session_shows_its_process_tree(watch: Watch) -> None:
    watch.write(HEADER + b"loading\n")
    name = watch.session("sh -c 'sleep 31; true'")
    facts = watch.poll(duration=0.5, pattern="READY", session_name=name)
    assert facts["verdict"] == "pending" and facts["session"] == "alive", facts
    assert facts["ps"][0] == "    PID    PPID STAT     TIME   RSS_KB COMMAND"
    rows = [line.split(None, 5) for line in facts["ps"][1:]]
    assert rows[0][0] == facts["pane_pid"] and rows[0][5].startswith("sh -c")
    assert any(row[5].strip() == "sleep 31" and row[1] == facts["pane_pid"] for row in rows), facts["ps"]
    assert "proof_recorded" not in facts and watch.option(name, "@trainops_proven") == ""
    result = result_from_facts(facts, _elapsed(facts))
    assert result["verdict"] == "timeout" and result["session_alive"] is True and result["process_tree"] == facts["ps"]


@needs_tmux
def test_a_session_that_ends_during_the_chunk_is_died(watch: Watch) -> None:
    watch.write(HEADER + b"loading\n")
    name = watch.session()
    timer = threading.Timer(0.3, watch.tmux, args=("kill-session", "-t", f"={name}"))
    timer.start()
    try:
        facts = watch.poll(duration=5, pattern="READY", session_name=name)
    finally:
        timer.cancel()
    assert facts["verdict"] == "died", facts
    assert _elapsed(facts) < 2
    assert result_from_facts(facts, _elapsed(facts))["session_alive"] is False


@needs_tmux
def test_a_dead_pane_is_died(watch: Watch) -> None:
    watch.write(HEADER + b"loading\n")
    keeper = watch.session()
    assert watch.tmux("set-option", "-g", "remain-on-exit", "on").returncode == 0
    name = watch.session("true")
    deadline = time.monotonic() + 5
    while watch.tmux("display-message", "-p", "-t", f"={name}:", "#{pane_dead}").stdout.strip() != "1":
        assert time.monotonic() < deadline, "the pane did not die"
        time.sleep(0.05)
    facts = watch.poll(duration=5, pattern="READY", session_name=name)
    assert facts["verdict"] == "died" and facts["session"] == "ended" and "pane_pid" not in facts, facts
    assert _elapsed(facts) < 1
    assert watch.tmux("has-session", "-t", f"={keeper}").returncode == 0


def test_a_log_that_appears_during_the_chunk_is_read(watch: Watch) -> None:
    timer = threading.Timer(0.3, watch.write, args=(HEADER + b"READY\n",))
    timer.start()
    try:
        facts = watch.poll(duration=5, pattern="READY")
    finally:
        timer.cancel()
    assert facts["verdict"] == "started" and facts["matched_line"] == "READY" and facts["log_exists"] == "1", facts
    assert 0.25 <= _elapsed(facts) < 2


def test_long_and_odd_lines(watch: Watch) -> None:
    watch.write(HEADER + b"pct % \x1b[1m\xff\r\n" + b"y" * 300000 + b"\nREADY %1\n")
    facts = watch.poll(pattern="READY %1", tail_lines=3)
    assert facts["verdict"] == "started" and facts["matched_line"] == "READY %1", facts["tail"]
    assert facts["tail"][0] == "pct % \x1b[1m\ufffd" and facts["tail"][2] == "READY %1"
    assert facts["tail"][1] == "y" * SHOW, "a long line is shortened for the result"
    watch.write(HEADER + b"y" * 300000 + b" READY\n")
    facts = watch.poll(pattern="READY$")
    assert facts["verdict"] == "started" and len(facts["matched_line"]) == SHOW, "a long line matches as a whole"


def test_the_exit_record_in_run_of_another_launch_is_not_this_logs(watch: Watch) -> None:
    run_dir = watch.run_root / "train"
    run_dir.mkdir(parents=True)
    (run_dir / "log_path").write_text(str(watch.tmp_path / "another.log"), encoding="utf-8")
    (run_dir / "exit").write_text(exit_record_text("train", 3, "S", "E"), encoding="utf-8")
    watch.write(HEADER + b"loading\n")
    facts = watch.poll(duration=5, pattern="READY", session_name="train")
    assert facts["verdict"] == "died" and facts["exit"] == {} and facts["state"] == "vanished", facts
    result = result_from_facts(facts, _elapsed(facts))
    assert result["exit_status"] is None and result["session_state"] == "vanished"


# ---- facts["state"]: the one state decision (_tmux_cli.session_state) for the session waited for ----


def test_state_of_a_gone_session(watch: Watch) -> None:
    facts = watch.poll(duration=5, pattern="READY", session_name="ut-nothing", log_path=None)
    assert facts["state"] == "absent", facts
    facts = watch.poll(duration=5, pattern="READY", session_name="ut-nothing")
    assert facts["state"] == "absent", "neither a log nor a record"
    watch.write(HEADER + b"loading\n")
    facts = watch.poll(duration=5, pattern="READY", session_name="ut-nothing")
    assert facts["state"] == "vanished", facts
    watch.write(exit_record_text("ut-nothing", 3, "S", "E").encode(), Path(f"{watch.log}.exit"))
    facts = watch.poll(duration=5, pattern="READY", session_name="ut-nothing")
    assert facts["state"] == "finished" and facts["exit"]["exit_status"] == "3", facts


def test_state_without_a_session_name_is_unknown(watch: Watch) -> None:
    watch.write(HEADER + b"loading\n")
    facts = watch.poll(duration=0.3, pattern="READY")
    assert facts["verdict"] == "pending" and facts["state"] == "unknown", facts


@needs_tmux
def test_state_of_a_live_session_is_running_and_of_a_started_job_too(watch: Watch) -> None:
    name = watch.session()
    watch.write(HEADER + b"loading\n")
    assert watch.poll(duration=0.3, pattern="READY", session_name=name)["state"] == "running"
    watch.append(b"READY\n")
    facts = watch.poll(pattern="READY", session_name=name, record_proof=False)
    assert facts["verdict"] == "started" and facts["state"] == "running", facts


@needs_tmux
def test_a_session_killed_without_an_exit_record_is_vanished(watch: Watch) -> None:
    watch.write(HEADER + b"hi\n")
    name = watch.session()
    assert watch.tmux("kill-session", "-t", f"={name}").returncode == 0
    facts = watch.poll(duration=5, pattern="READY", session_name=name)
    assert facts["verdict"] == "died" and facts["session"] == "absent" and facts["exit"] == {}, facts
    result = result_from_facts(facts, _elapsed(facts))
    assert result["session_state"] == "vanished" and result["exit_status"] is None


@needs_tmux
def test_a_dead_pane_without_a_record_is_vanished_and_with_one_finished(watch: Watch) -> None:
    watch.write(HEADER + b"loading\n")
    watch.session()
    assert watch.tmux("set-option", "-g", "remain-on-exit", "on").returncode == 0
    name = watch.session("true")
    deadline = time.monotonic() + 5
    while watch.tmux("display-message", "-p", "-t", f"={name}:", "#{pane_dead}").stdout.strip() != "1":
        assert time.monotonic() < deadline, "the pane did not die"
        time.sleep(0.05)
    facts = watch.poll(duration=5, pattern="READY", session_name=name)
    assert facts["verdict"] == "died" and facts["state"] == "vanished", facts
    watch.write(exit_record_text(name, 0, "S", "E").encode(), Path(f"{watch.log}.exit"))
    facts = watch.poll(duration=5, pattern="READY", session_name=name)
    assert facts["verdict"] == "died" and facts["state"] == "finished" and facts["exit"]["exit_status"] == "0", facts


# ---- wait_until finished: the wait goes on after the start, until the job ends ----


def record(status: int, **extra: str) -> bytes:
    """An exit record, with the supervisor's extra keys (docs/job-life.md)."""
    text = exit_record_text("train", status, "2025-01-01T00:00:00Z", "2025-01-01T00:00:09Z")
    return (text + "".join(f"{key}={value}\n" for key, value in extra.items())).encode()


def test_finished_at_once_for_a_job_that_ended_with_status_0(watch: Watch) -> None:
    watch.write(HEADER + b"READY\nstep 2\n" + TRAILER)
    watch.write(record(0, attempts="1", end_state="finished", cause="exit_status", reason="exit status 0"), Path(f"{watch.log}.exit"))
    facts = watch.poll(duration=5, pattern="READY", wait_until="finished")
    assert facts["verdict"] == "finished" and facts["proven_line"] == "READY", facts
    assert _elapsed(facts) < 1, "a job that already ended gives its verdict at once"
    assert "proof_recorded" not in facts, "no live session: nothing to record the proof on"
    result = result_from_facts(facts, _elapsed(facts))
    assert result["verdict"] == "finished" and result["exit_status"] == 0 and result["session_state"] == "finished"
    assert (result["attempts"], result["end_state"], result["cause"], result["end_reason"], result["signal"]) == (
        1, "finished", "exit_status", "exit status 0", None)


@pytest.mark.parametrize("status, extra", [
    (3, {}),
    (137, {"attempts": "3", "end_state": "oom_killed", "cause": "oom_kill", "signal": "KILL", "reason": "killed by the OOM killer"}),
    (0, {"end_state": "timeout", "cause": "time_limit", "reason": "time limit"}),  # exit status 0, but the time limit ended it
    (0, {"end_state": "stopped", "cause": "stop"}),  # exit status 0, but stopped
], ids=["exit-3", "oom", "time-limit-0", "stopped-0"])
def test_failed_for_any_other_end(watch: Watch, status: int, extra: dict[str, str]) -> None:
    watch.write(HEADER + b"loading\n")
    watch.write(record(status, **extra), Path(f"{watch.log}.exit"))
    facts = watch.poll(duration=5, pattern="READY", wait_until="finished")
    assert facts["verdict"] == "failed" and facts["proven_line"] is None and _elapsed(facts) < 1, facts
    result = result_from_facts(facts, 1)
    assert result["session_alive"] is False and result["exit_status"] == status and result["end_state"] == extra.get("end_state")


def test_finished_needs_no_pattern_and_the_pattern_does_not_end_the_wait(watch: Watch) -> None:
    watch.write(HEADER + b"loading\nREADY\nstep 2\n")
    facts = watch.poll(duration=0.4, pattern="READY", wait_until="finished")
    assert facts["verdict"] == "pending" and facts["proven_line"] == "READY" and "matched_line" not in facts, facts
    assert int(facts["offset"]) == watch.log.stat().st_size
    assert result_from_facts(facts, 0.4)["verdict"] == "timeout"
    watch.append(b"step 3\n" + TRAILER)
    watch.write(record(0), Path(f"{watch.log}.exit"))
    facts = watch.poll(duration=5, pattern="READY", wait_until="finished", offset=int(facts["offset"]))
    assert facts["verdict"] == "finished" and facts["proven_line"] is None, "READY was before the offset"


def test_without_a_pattern_the_first_output_is_the_proof_while_waiting_for_the_end(watch: Watch) -> None:
    watch.write(HEADER)
    facts = watch.poll(duration=0.3, wait_until="finished")
    assert facts["verdict"] == "pending" and facts["proven_line"] is None, "the header is no output"
    watch.append(b"Epoch 1/10\nEpoch 2/10\n")
    facts = watch.poll(duration=0.3, wait_until="finished")
    assert facts["verdict"] == "pending" and facts["proven_line"] == "Epoch 1/10", facts


def test_fail_pattern_ends_the_wait_for_the_end_at_once(watch: Watch) -> None:
    watch.write(HEADER + b"READY\nTraceback (most recent call last):\nmore\n")
    facts = watch.poll(duration=5, pattern="READY", fail_pattern="^Traceback", wait_until="finished")
    assert facts["verdict"] == "fail_pattern" and facts["matched_line"] == "Traceback (most recent call last):", facts
    assert facts["proven_line"] == "READY" and _elapsed(facts) < 1
    watch.write(HEADER + b"Traceback first\nREADY\n")
    facts = watch.poll(duration=5, pattern="READY", fail_pattern="^Traceback", wait_until="finished")
    assert facts["verdict"] == "fail_pattern" and facts["proven_line"] is None, "lines after the failure are not judged"


def test_a_gone_session_without_a_record_is_failed(watch: Watch) -> None:
    watch.write(HEADER + b"loading\n")
    facts = watch.poll(duration=5, session_name="ut-no-such-session", wait_until="finished")
    assert facts["verdict"] == "failed" and facts["state"] == "vanished" and facts["exit"] == {}, facts
    assert _elapsed(facts) < 1 and "proof_recorded" not in facts, "the session is gone: no proof recorded"


def test_no_log_at_all_is_failed_while_waiting_for_the_end(watch: Watch) -> None:
    facts = watch.poll(duration=5, log_path=None, session_name="ut-nothing", wait_until="finished")
    assert facts["verdict"] == "failed" and facts["state"] == "absent" and _elapsed(facts) < 1, facts


def test_tmux_missing_gives_the_verdict_of_the_exit_record(watch: Watch, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tmux_cli, "CLEAN_PATH", str(watch.tmp_path / "no-tools"))
    watch.write(HEADER + b"READY\n")
    facts = watch.poll(duration=5, pattern="READY", session_name="train", wait_until="finished")
    assert facts["verdict"] == "failed" and facts["session"] == "tmux_missing", facts
    watch.write(record(0), Path(f"{watch.log}.exit"))
    facts = watch.poll(duration=5, pattern="READY", session_name="train", wait_until="finished")
    assert facts["verdict"] == "finished" and facts["proven_line"] is None, "an old log's lines prove nothing without tmux"


def test_scan_to_end() -> None:
    lines = [HEADER.rstrip(b"\n"), b"loading", b"READY 1", b"READY 2", b"ERROR here", b"READY 3"]
    ready, error = re.compile("READY"), re.compile("ERROR")
    assert _log_poll.scan_to_end(lines, ready, None, False) == (None, None, b"READY 1")
    assert _log_poll.scan_to_end(lines, None, None, False) == (None, None, b"loading"), "without a pattern: the first output"
    assert _log_poll.scan_to_end(lines, ready, error, False) == ("fail_pattern", b"ERROR here", b"READY 1")
    assert _log_poll.scan_to_end(lines, ready, error, True) == ("fail_pattern", b"ERROR here", None), "proven already"
    assert _log_poll.scan_to_end(lines, ready, None, True) == (None, None, None)
    assert _log_poll.scan_to_end([HEADER.rstrip(b"\n")], None, None, False) == (None, None, None), "the header is no output"


def test_end_verdict() -> None:
    assert _log_poll.end_verdict({"exit_status": "0"}) == "finished"
    assert _log_poll.end_verdict({"exit_status": "0", "end_state": "finished"}) == "finished"
    assert _log_poll.end_verdict({"exit_status": "0", "end_state": "stopped"}) == "failed"
    assert _log_poll.end_verdict({"exit_status": "1", "end_state": "finished"}) == "failed"
    assert _log_poll.end_verdict({}) == "failed" and _log_poll.end_verdict(None) == "failed"


# ---- show_lines: the chunk's new lines, and an early return so that they are shown soon ----


def test_show_lines_returns_the_new_whole_lines_without_protocol_lines(watch: Watch) -> None:
    watch.write(HEADER + b"one\r\ntwo \xff\n### trainops.pct_launch: session=train attempt=2 started_at=X\nthree, partial")
    facts = watch.poll(duration=0.3, show_lines=True)
    assert facts["new_lines"] == ["one", "two \ufffd"] and facts["lines_omitted"] == "0", facts
    watch.append(b" done\n")
    facts = watch.poll(duration=0.3, show_lines=True, offset=int(facts["offset"]), pattern="NEVER")
    assert facts["new_lines"] == ["three, partial done"], "a line is shown once, when it is whole"
    assert "new_lines" not in watch.poll(duration=0.1, offset=int(facts["offset"])), "without show_lines: no lines"
    result = result_from_facts(facts, 0.3)
    assert result["new_lines"] == ["three, partial done"] and result["lines_omitted"] == 0


def test_show_lines_of_the_chunk_that_gives_the_verdict(watch: Watch) -> None:
    watch.write(HEADER + b"loading\nREADY\nafter\n" + TRAILER)
    facts = watch.poll(pattern="READY", show_lines=True)
    assert facts["verdict"] == "started" and facts["new_lines"] == ["loading", "READY", "after"], "every line read is shown"
    watch.write(record(3), Path(f"{watch.log}.exit"))
    facts = watch.poll(duration=5, wait_until="finished", show_lines=True)
    assert facts["verdict"] == "failed" and facts["new_lines"] == ["loading", "READY", "after"], facts


def test_show_lines_keeps_the_last_lines_within_the_limits(watch: Watch, monkeypatch: pytest.MonkeyPatch) -> None:
    watch.write(HEADER + b"".join(b"line %d\n" % number for number in range(1, 1201)))
    facts = watch.poll(duration=0.2, show_lines=True, wait_until="finished")
    assert len(facts["new_lines"]) == 1000 and facts["new_lines"][0] == "line 201" and facts["new_lines"][-1] == "line 1200"
    assert facts["lines_omitted"] == "200"
    watch.write(HEADER + b"".join(b"%04d" % number + b"x" * 1996 + b"\n" for number in range(200)))  # 2000 characters each
    facts = watch.poll(duration=0.2, show_lines=True)
    assert sum(len(line) for line in facts["new_lines"]) <= 256 << 10 and len(facts["new_lines"]) == (256 << 10) // 2000
    assert facts["new_lines"][-1].startswith("0199") and int(facts["lines_omitted"]) == 200 - len(facts["new_lines"])
    watch.write(HEADER + b"y" * 300000 + b"\n")
    facts = watch.poll(duration=0.2, show_lines=True)
    assert facts["new_lines"] == ["y" * SHOW], "a long line is shortened as in the results"
    monkeypatch.setattr(_log_poll, "NEW_LINES_MAX", 2)
    watch.write(HEADER + b"a\nb\nc\n")
    facts = watch.poll(duration=0.2, show_lines=True)
    assert facts["new_lines"] == ["b", "c"] and facts["lines_omitted"] == "1"


def test_show_lines_ends_the_chunk_soon_after_the_first_new_line(watch: Watch, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_log_poll, "LINES_FLUSH", 0.4)
    watch.write(HEADER + b"step 1\n")
    facts = watch.poll(duration=5, show_lines=True, wait_until="finished")
    assert facts["verdict"] == "pending" and facts["new_lines"] == ["step 1"], facts
    assert 0.4 <= _elapsed(facts) < 2, "it returns LINES_FLUSH after the first line read, not at the end of the chunk"
    timer = threading.Timer(0.3, watch.append, args=(b"step 2\n",))
    timer.start()
    try:
        facts = watch.poll(duration=5, show_lines=True, wait_until="finished", offset=int(facts["offset"]))
    finally:
        timer.cancel()
    assert facts["new_lines"] == ["step 2"] and 0.65 <= _elapsed(facts) < 2.5, facts
    facts = watch.poll(duration=0.5, show_lines=True, wait_until="finished", offset=int(facts["offset"]))
    assert facts["new_lines"] == [] and _elapsed(facts) >= 0.5, "no new line: the whole chunk"
    watch.append(TRAILER)
    facts = watch.poll(duration=0.5, show_lines=True, wait_until="finished", offset=int(facts["offset"]))
    assert facts["new_lines"] == [] and _elapsed(facts) >= 0.5, "protocol lines are not shown, so they do not end the chunk"


# ---- the proof while waiting for the end, and RUN_DIR/proven ----


@needs_tmux
@pytest.mark.parametrize("wait_until", ["started", "finished"])
def test_a_recorded_proof_also_writes_run_dir_proven(watch: Watch, wait_until: str) -> None:
    watch.write(HEADER + b"READY\n")
    name = watch.session()
    run_dir = watch.run_root / name
    run_dir.mkdir(parents=True)
    facts = watch.poll(duration=0.3, pattern="READY", session_name=name, wait_until=wait_until)
    assert facts["verdict"] == ("started" if wait_until == "started" else "pending") and facts["proof_recorded"] == "1", facts
    proven = run_dir / "proven"
    assert STAMP.fullmatch(proven.read_text(encoding="utf-8").rstrip("\n")) and proven.read_text(encoding="utf-8").endswith("Z\n")
    assert proven.stat().st_mode & 0o777 == 0o600 and not list(run_dir.glob("proven.tmp.*"))
    assert proven.read_text(encoding="utf-8").rstrip("\n") == watch.option(name, "@trainops_proven"), "the same time in both"
    assert result_from_facts(facts, 0.3)["proof_recorded"] is True


@needs_tmux
@pytest.mark.parametrize("wait_until", ["started", "finished"])
def test_check_mode_writes_no_run_dir_proven(watch: Watch, wait_until: str) -> None:
    watch.write(HEADER + b"READY\n")
    name = watch.session()
    (watch.run_root / name).mkdir(parents=True)
    facts = watch.poll(duration=0.3, pattern="READY", session_name=name, wait_until=wait_until, record_proof=False)
    assert "proof_recorded" not in facts and (wait_until == "started" or facts["proven_line"] == "READY"), facts
    assert not (watch.run_root / name / "proven").exists() and watch.option(name, "@trainops_proven") == ""


@needs_tmux
def test_a_proof_without_a_run_dir_is_still_recorded_on_the_session(watch: Watch) -> None:
    watch.write(HEADER + b"READY\n")
    name = watch.session()
    facts = watch.poll(pattern="READY", session_name=name)
    assert facts["proof_recorded"] == "1" and STAMP.fullmatch(watch.option(name, "@trainops_proven")), facts
    assert not (watch.run_root / name).exists(), "the proven file needs the session's RUN_DIR; it is not created"


@needs_tmux
def test_waiting_for_the_end_of_a_live_session_records_its_proof_once_and_ends_with_it(watch: Watch) -> None:
    watch.write(HEADER + b"loading\n")
    name = watch.session()
    (watch.run_root / name).mkdir(parents=True)
    facts = watch.poll(duration=0.3, pattern="READY", session_name=name, wait_until="finished")
    assert facts["verdict"] == "pending" and facts["proven_line"] is None and "proof_recorded" not in facts
    assert facts["state"] == "running" and facts["ps"], "a pending chunk shows the process tree"
    watch.append(b"READY\n")
    timer = threading.Timer(0.4, watch.write, args=(record(0), Path(f"{watch.log}.exit")))
    timer.start()
    try:
        facts = watch.poll(duration=5, pattern="READY", session_name=name, wait_until="finished", offset=int(facts["offset"]))
    finally:
        timer.cancel()
    assert facts["verdict"] == "finished" and facts["proven_line"] == "READY" and facts["proof_recorded"] == "1", facts
    assert watch.option(name, "@trainops_proven") and (watch.run_root / name / "proven").exists()
    assert 0.35 <= _elapsed(facts) < 2.5, "the proof does not end the chunk: the exit record does"
    assert result_from_facts(facts, 1)["session_alive"] is False


@needs_tmux
def test_a_session_killed_while_waiting_for_the_end_is_failed(watch: Watch) -> None:
    watch.write(HEADER + b"step 1\n")
    name = watch.session()
    timer = threading.Timer(0.3, watch.tmux, args=("kill-session", "-t", f"={name}"))
    timer.start()
    try:
        facts = watch.poll(duration=5, session_name=name, wait_until="finished", show_lines=True)
    finally:
        timer.cancel()
    assert facts["verdict"] == "failed" and facts["state"] == "vanished" and facts["new_lines"] == ["step 1"], facts
    assert facts["proof_recorded"] == "1", "the start was seen while the session lived"


# --- the container shuts down during the wait ------------------------------------------------------------------------

SHUTDOWN = "PID 1 was systemd-shutdown"


@pytest.mark.parametrize(("wait_until", "verdict"), [("started", "died"), ("finished", "failed")])
def test_a_shutdown_ends_the_wait_with_the_exit_record_written_meanwhile(watch: Watch, monkeypatch: pytest.MonkeyPatch,
                                                                         wait_until: str, verdict: str) -> None:
    """The supervisor writes the record a moment after the job's end: the wait reads it, and names the shutdown."""
    watch.write(HEADER + b"loading\n")
    monkeypatch.setattr(_log_poll, "shutting_down", lambda **kw: SHUTDOWN)
    reason = "the container shut down (its init stopped every process; PID 1 was systemd-shutdown): signal TERM"
    record = exit_record_text("train", 143, "2025-01-01T00:00:00Z", "2025-01-01T00:00:09Z",
                              end={"end_state": "stopped", "cause": "shutdown", "reason": reason}).encode()
    writer = threading.Timer(0.5, lambda: watch.write(record, Path(f"{watch.log}.exit")))
    writer.start()
    try:
        facts = watch.poll(duration=20, pattern="READY", wait_until=wait_until)
    finally:
        writer.cancel()
    assert (facts["verdict"], facts["shutdown"], facts["exit"]["cause"]) == (verdict, SHUTDOWN, "shutdown"), facts
    assert 0.5 <= _elapsed(facts) < _log_poll.SHUTDOWN_GRACE + 1
    result = result_from_facts(facts, _elapsed(facts))
    assert (result["shutdown"], result["exit_status"], result["end_state"]) == (SHUTDOWN, 143, "stopped")


def test_a_shutdown_without_an_exit_record_ends_the_wait_after_the_grace(watch: Watch, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job slow to end on SIGTERM: the wait does not stay for it (the container is about to stop)."""
    watch.write(HEADER + b"loading\n")
    monkeypatch.setattr(_log_poll, "shutting_down", lambda **kw: SHUTDOWN)
    monkeypatch.setattr(_log_poll, "SHUTDOWN_GRACE", 0.3)
    facts = watch.poll(duration=20, pattern="READY")
    assert (facts["verdict"], facts["shutdown"], facts["exit"]) == ("died", SHUTDOWN, {}), facts
    assert 0.3 <= _elapsed(facts) < 2


def test_a_record_of_an_earlier_shutdown_is_named_without_a_shutdown_now(watch: Watch) -> None:
    """The container shut down and runs again: the record says why the job ended."""
    reason = "the container shut down (its init stopped every process; PID 1 was systemd-shutdown): signal TERM"
    watch.write(HEADER + b"loading\n" + TRAILER)
    watch.write(exit_record_text("train", 143, "2025-01-01T00:00:00Z", "2025-01-01T00:00:09Z",
                                 end={"end_state": "stopped", "cause": "shutdown", "reason": reason}).encode(), Path(f"{watch.log}.exit"))
    facts = watch.poll(duration=5, pattern="READY", wait_until="finished")
    assert facts["verdict"] == "failed" and "shutdown" not in facts, facts
    assert result_from_facts(facts, _elapsed(facts))["shutdown"] == reason
