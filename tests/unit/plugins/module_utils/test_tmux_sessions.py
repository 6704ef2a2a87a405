# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""``_tmux_sessions`` (the report of ``tmux_session_info``) and the one state decision ``_tmux_cli.session_state``.

``session_state`` runs against real files in the test's temp dir. ``report`` runs against a tmux server of
the test's own (``Tmux.socket_name``, killed at teardown) and a run root in the test's temp dir, so nothing
touches ``/run/trainops`` or the default tmux server.
"""

from __future__ import annotations

import datetime
import json
import os
import pwd
import shutil
import subprocess
import time
import typing as t
import uuid
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_cli, _tmux_sessions
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_history import append
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import CLEAN_PATH, exit_record_text
from ansible_collections.trainops.pct_launch.plugins.module_utils._proc_tree import SHOW
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import session_state
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_sessions import (
    MAX_HISTORY,
    MAX_LINE_BYTES,
    MAX_LINES,
    age,
    check_info_options,
    launch_history,
    report,
    session_entry,
    to_int,
)

needs_tmux = pytest.mark.skipif(shutil.which("tmux", path=CLEAN_PATH) is None, reason="needs tmux")
RECORD = exit_record_text("job", 3, "2025-01-01T00:00:00Z", "2025-01-01T00:00:09Z")
# The supervisor's keys of a session (docs/job-life.md), all null for a launch made before it.
LIFE_KEYS = ("attempts", "end_state", "cause", "reason", "signal", "since", "supervisor_state", "last_output_at", "last_progress_at",
             "last_progress_age")
NO_LIFE = dict.fromkeys(LIFE_KEYS)


# ---- _tmux_cli.session_state: every branch, with real files ----


class Files:
    """A log, its ``LOG.exit`` and a run dir (``RUN_DIR/log_path``, ``RUN_DIR/exit``) in the test's temp dir."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = tmp_path / "logs" / "job.log"
        self.log.parent.mkdir()
        self.run_dir = tmp_path / "run" / "job"
        self.run_dir.mkdir(parents=True)

    def log_exit(self, text: str) -> None:
        """Write ``LOG.exit``."""
        Path(f"{self.log}.exit").write_text(text, encoding="utf-8")

    def run_copy(self, text: str, log_path: Path | None = None) -> None:
        """``RUN_DIR/exit`` of the launch that wrote ``log_path`` (the test's log by default)."""
        (self.run_dir / "log_path").write_text(str(log_path or self.log), encoding="utf-8")
        (self.run_dir / "exit").write_text(text, encoding="utf-8")

    def state(self, running: bool = False, in_tmux: bool = False, pane_dead_status: str | None = None, log: bool = True,
              run_dir: bool = True) -> str:
        """``session_state`` of these files (``log``/``run_dir`` False: not given)."""
        return session_state(running, str(self.log) if log else None, str(self.run_dir) if run_dir else None,
                             in_tmux=in_tmux, pane_dead_status=pane_dead_status)


@pytest.fixture()
def files(tmp_path: Path) -> Files:
    """The files of one launch, none of them written yet."""
    return Files(tmp_path)


def test_a_live_pane_with_its_launchs_record_is_finished(files: Files) -> None:
    """The supervisor writes the record first, then the history and its last notifications, its pane alive meanwhile:
    a start rotates or removes any earlier record, so a record next to a live pane is this launch's, and the job is over."""
    files.log.write_text("x\n", encoding="utf-8")
    assert files.state(running=True, in_tmux=True) == "running", "no record: running"
    assert files.state(running=True, log=False, run_dir=False) == "running"
    files.log_exit(RECORD)
    files.run_copy(RECORD)
    assert files.state(running=True, in_tmux=True) == "finished"


def test_log_exit_is_finished(files: Files) -> None:
    files.log.write_text("x\n", encoding="utf-8")
    files.log_exit(RECORD)
    assert files.state() == "finished"
    assert files.state(in_tmux=True) == "finished", "a dead pane with a record is finished"
    assert files.state(run_dir=False) == "finished", "LOG.exit needs no run dir"
    files.log.unlink()
    assert files.state() == "finished", "the record decides, not the log"


def test_an_empty_log_exit_without_a_copy_in_run_is_still_finished(files: Files) -> None:
    files.log.write_text("x\n", encoding="utf-8")
    files.log_exit("")
    assert files.state() == "finished"


@pytest.mark.parametrize("log_exit", [None, ""])
def test_the_copy_in_run_is_finished_when_log_exit_is_missing_or_empty(files: Files, log_exit: str | None) -> None:
    files.log.write_text("x\n", encoding="utf-8")
    if log_exit is not None:
        files.log_exit(log_exit)
    files.run_copy(RECORD)
    assert files.state() == "finished"


def test_the_copy_in_run_of_another_log_is_not_this_logs_record(files: Files, tmp_path: Path) -> None:
    files.log.write_text("x\n", encoding="utf-8")
    files.run_copy(RECORD, log_path=tmp_path / "logs" / "other.log")
    assert files.state() == "vanished"
    assert files.state(run_dir=False) == "vanished", "without the run dir there is no copy to read"
    files.log.unlink()
    assert files.state() == "absent"


def test_an_empty_copy_in_run_is_no_record(files: Files) -> None:
    files.log.write_text("x\n", encoding="utf-8")
    files.run_copy("")
    assert files.state() == "vanished"


@pytest.mark.parametrize("status", ["0", "3", "137"])
def test_a_dead_pane_status_tmux_kept_is_finished(files: Files, status: str) -> None:
    assert files.state(in_tmux=True, pane_dead_status=status, log=False, run_dir=False) == "finished"


@pytest.mark.parametrize("status", [None, "", "x", "-1", " 3"])
def test_a_dead_pane_without_a_status_is_vanished(files: Files, status: str | None) -> None:
    assert files.state(in_tmux=True, pane_dead_status=status, log=False, run_dir=False) == "vanished"


def test_only_the_log_is_vanished(files: Files) -> None:
    files.log.write_text("", encoding="utf-8")
    assert files.state() == "vanished", "an empty log counts"
    files.log.unlink()
    files.log.symlink_to(files.log.parent / "gone-target")
    assert files.state() == "vanished", "a dangling link is still the log's name"


def test_nothing_is_absent(files: Files) -> None:
    assert files.state() == "absent"
    assert files.state(log=False, run_dir=False) == "absent"
    assert session_state(False, "", None) == "absent"
    (files.run_dir / "log_path").write_text(str(files.log), encoding="utf-8")
    assert files.state() == "absent", "a run dir naming a log that is not there is nothing"


# ---- session_entry, to_int, check_info_options ----


def test_session_entry_finished() -> None:
    facts = {"session": "train", "state": "finished", "in_tmux": "0", "managed": "1", "exit_file": "1", "exit.exit_status": "137",
             "exit.ended_at": "2025-01-01T00:00:09Z", "exit.started_at": "2025-01-01T00:00:00Z",
             "exit.stopped_by": "trainops", "log_path": "/w/t.log", "log_size": "10", "line": ["a\r", "b"]}
    assert session_entry(facts) == {
        "name": "train", "state": "finished", "managed": True, "pane_pid": None, "command": None,
        "started_at": "2025-01-01T00:00:00Z", "exit_status": 137, "ended_at": "2025-01-01T00:00:09Z",
        "stopped_by": "trainops", "log_path": "/w/t.log", "log_size": 10, "log_tail": ["a", "b"],
        "attempt_started_at": None, "gpu_bus_ids": [],
        "attempts": None, "end_state": None, "cause": None, "reason": None, "signal": None, "since": "2025-01-01T00:00:09Z",
        "supervisor_state": None, "last_output_at": None, "last_progress_at": None, "last_progress_age": None,
        "notify_failures": 0, "notify_failure": None,
    }
    failed = session_entry(dict(facts, notify=(2, "notify_url, event failed, at T: HTTP status 400")))
    assert (failed["notify_failures"], failed["notify_failure"]) == (2, "notify_url, event failed, at T: HTTP status 400")


def test_session_entry_running_unmanaged() -> None:
    entry = session_entry({"session": "x", "state": "running", "in_tmux": "1", "pane_dead": "0", "pane_pid": "42", "created": "0",
                           "managed": "0", "command": "sleep 9"})
    assert entry["state"] == "running" and entry["pane_pid"] == 42 and entry["exit_status"] is None
    assert entry["started_at"] == "1970-01-01T00:00:00Z" and entry["log_path"] is None and not entry["managed"]
    assert entry["command"] == "sleep 9" and entry["log_tail"] == [] and entry["log_size"] is None


def test_session_entry_takes_the_state_from_the_facts() -> None:
    """The state is decided once (``session_state``), never again from the other facts."""
    facts = {"session": "x", "in_tmux": "1", "pane_dead": "0", "pane_pid": "42", "exit.exit_status": "3", "exit.ended_at": "E"}
    assert session_entry(dict(facts, state="vanished"))["state"] == "vanished"
    running = session_entry(dict(facts, state="running"))
    assert running["pane_pid"] == 42 and running["exit_status"] is None and running["ended_at"] is None
    finished = session_entry(dict(facts, state="finished"))
    assert finished["pane_pid"] is None and finished["exit_status"] == 3 and finished["ended_at"] == "E"
    with pytest.raises(KeyError):
        session_entry(facts)


def test_session_entry_exit_status_of_a_dead_pane() -> None:
    facts = {"session": "x", "state": "finished", "in_tmux": "1", "pane_dead": "1", "pane_dead_status": "3", "managed": "0"}
    assert session_entry(facts)["exit_status"] == 3
    assert session_entry(dict(facts, **{"exit.exit_status": "5"}))["exit_status"] == 5, "the exit record comes first"
    assert session_entry(dict(facts, state="vanished"))["exit_status"] is None


def test_session_entry_started_at_sources_in_order() -> None:
    base = {"session": "x", "state": "finished", "created": "1700000000"}
    assert session_entry(base)["started_at"] == "2023-11-14T22:13:20Z"
    assert session_entry(dict(base, **{"exit.started_at": "E"}))["started_at"] == "E"
    assert session_entry(dict(base, started_at="S", **{"exit.started_at": "E"}))["started_at"] == "S"
    for created in ("", "x", None):
        assert session_entry(dict(base, created=created))["started_at"] is None


# ---- the supervisor's keys (docs/job-life.md): state.json while running, the exit record once ended ----


NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
LIVE = {"state": "stalled", "since": "2025-12-31T23:50:00Z", "attempt": 2, "restarts": 1, "pid": 4242,
        "last_output_at": "2025-12-31T23:59:00Z", "last_progress_at": "2025-12-31T23:40:00Z", "next_restart_at": None,
        "stalled": True, "end_state": None, "reason": "no progress line for 600 s"}
END = {"exit.exit_status": "137", "exit.started_at": "S", "exit.ended_at": "2026-01-01T00:00:00Z", "exit.attempts": "3",
       "exit.end_state": "oom_killed", "exit.cause": "oom_kill", "exit.signal": "KILL", "exit.reason": "killed by the kernel's OOM killer"}


def life_of(entry: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The supervisor's keys of an entry."""
    return {key: entry[key] for key in LIFE_KEYS}


def test_a_running_session_has_its_supervisors_live_state() -> None:
    entry = session_entry({"session": "t", "state": "running", "live": LIVE, **END}, now=NOW)
    assert life_of(entry) == {"attempts": 2, "end_state": None, "cause": None, "reason": "no progress line for 600 s", "signal": None,
                              "since": "2025-12-31T23:50:00Z", "supervisor_state": "stalled", "last_output_at": "2025-12-31T23:59:00Z",
                              "last_progress_at": "2025-12-31T23:40:00Z", "last_progress_age": 1200}, "while it runs, never the record"


def test_an_ended_session_has_its_exit_records_keys() -> None:
    entry = session_entry({"session": "t", "state": "finished", "live": dict(LIVE, state="ended", attempt=9), **END}, now=NOW)
    assert life_of(entry) == {"attempts": 3, "end_state": "oom_killed", "cause": "oom_kill", "reason": "killed by the kernel's OOM killer",
                              "signal": "KILL", "since": "2026-01-01T00:00:00Z", "supervisor_state": None,
                              "last_output_at": "2025-12-31T23:59:00Z", "last_progress_at": "2025-12-31T23:40:00Z",
                              "last_progress_age": 1200}
    assert entry["exit_status"] == 137 and entry["ended_at"] == entry["since"]


def test_a_record_of_before_the_supervisor_has_none_of_its_keys() -> None:
    facts = {"session": "t", "state": "finished", "exit.exit_status": "0", "exit.started_at": "S", "exit.ended_at": "E"}
    assert life_of(session_entry(facts)) == dict(NO_LIFE, since="E")
    assert life_of(session_entry({"session": "t", "state": "running", "pane_pid": "42"})) == NO_LIFE
    assert life_of(session_entry({"session": "t", "state": "absent"})) == NO_LIFE


def test_a_vanished_session_keeps_its_last_known_attempt_and_output() -> None:
    """The supervisor was killed: state.json says running, but nothing runs; no end, no supervisor state."""
    entry = session_entry({"session": "t", "state": "vanished", "live": dict(LIVE, state="running")}, now=NOW)
    assert life_of(entry) == dict(NO_LIFE, attempts=2, last_output_at="2025-12-31T23:59:00Z", last_progress_at="2025-12-31T23:40:00Z",
                                  last_progress_age=1200)


@pytest.mark.parametrize("live, expected", [
    ({"attempt": "2", "state": "running"}, {"attempts": 2, "supervisor_state": "running"}),
    ({"attempt": True, "state": 5}, {"attempts": None, "supervisor_state": "5"}),
    ({"attempt": "x", "state": ["running"], "since": {"a": 1}}, {"attempts": None, "supervisor_state": None, "since": None}),
    ({"attempt": 1.0, "state": "", "last_progress_at": "yesterday"},
     {"attempts": None, "supervisor_state": None, "last_progress_at": "yesterday", "last_progress_age": None}),
])
def test_odd_values_of_state_json_are_unknown(live: dict[str, t.Any], expected: dict[str, t.Any]) -> None:
    assert life_of(session_entry({"session": "t", "state": "running", "live": live}, now=NOW)) == dict(NO_LIFE, **expected)


def test_odd_values_of_the_exit_record_are_unknown() -> None:
    facts = {"session": "t", "state": "finished", "exit.attempts": "three", "exit.end_state": "", "exit.ended_at": ""}
    assert life_of(session_entry(facts)) == NO_LIFE


@pytest.mark.parametrize("iso, seconds", [
    ("2026-01-01T00:00:00Z", 0), ("2025-12-31T23:59:50Z", 10), ("2025-12-31T23:59:50.900Z", 9), ("2026-01-01T01:00:00+01:00", 0),
    ("2025-12-31T23:00:00", 3600), ("2026-01-01T00:00:30Z", 0), ("2025-12-01T00:00:00Z", 31 * 86400),
    (None, None), ("", None), ("garbage", None), ("2026-13-01T00:00:00Z", None), ("2026-01-01T00:00:00ZZ", None),
])
def test_age(iso: str | None, seconds: int | None) -> None:
    assert age(iso, NOW) == seconds


def test_age_counts_to_the_clock_by_default() -> None:
    stamp = datetime.datetime.fromtimestamp(time.time() - 30, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert 29 <= age(stamp) <= 90


@given(st.integers(min_value=0, max_value=253_402_300_799))  # up to 9999-12-31T23:59:59Z
def test_started_at_from_created_is_that_second_in_utc(seconds: int) -> None:
    started = session_entry({"session": "x", "state": "running", "created": str(seconds)})["started_at"]
    parsed = datetime.datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    assert parsed.timestamp() == seconds


@pytest.mark.parametrize("value, expected", [
    ("0", 0), ("42", 42), (" 7\n", 7), ("-3", -3), (None, None), ("", None), ("x", None), ("4.5", None), ("-", None), ("1e3", None),
])
def test_to_int(value: str | None, expected: int | None) -> None:
    assert to_int(value) == expected


@given(st.integers(), st.sampled_from(["", " ", "\n", "\t "]))
def test_to_int_reads_any_integer(number: int, padding: str) -> None:
    assert to_int(padding + str(number) + padding) == number


@given(st.text(max_size=12))
@example("--5")
@example("\u00b2")
def test_to_int_never_raises(value: str) -> None:
    """Facts come from files and tmux output: "not a number" is None (the docstring), never an exception."""
    number = to_int(value)
    assert number is None or number == int(value.strip())


def params(**kwargs: t.Any) -> dict[str, t.Any]:
    """tmux_session_info options with their defaults."""
    values: dict[str, t.Any] = {"session_name": None, "log_path": None, "lines": 20, "history": False, "history_limit": 100}
    values.update(kwargs)
    return values


@pytest.mark.parametrize("kwargs, fragment", [
    ({"session_name": "a.b"}, "Invalid session_name 'a.b': use 1 to 64 characters"),
    ({"session_name": "x" * 65}, "Invalid session_name 'xxx"),
    ({"session_name": "a", "log_path": "rel.log"}, "Invalid log_path 'rel.log': use an absolute path on the target"),
    ({"session_name": "a", "log_path": "/w/"}, "Invalid log_path '/w/': use the absolute path of a file"),
    ({"session_name": "a", "log_path": "/w/a\nb.log"}, "Invalid log_path '/w/a\\nb.log': it contains a newline"),
    ({"lines": -1}, "Cannot use option lines -1: it must be from 0 to 10000"),
    ({"lines": MAX_LINES + 1}, f"Cannot use option lines {MAX_LINES + 1}"),
    ({"history_limit": 0}, "Cannot use option history_limit 0: it must be from 1 to 1000"),
    ({"history_limit": -3, "history": True}, "Cannot use option history_limit -3: it must be from 1 to 1000"),
    ({"history_limit": MAX_HISTORY + 1}, "Cannot use option history_limit 1001: it must be from 1 to 1000"),
])
def test_check_info_options(kwargs: dict[str, t.Any], fragment: str) -> None:
    errors = check_info_options(params(**kwargs))
    assert len(errors) == 1 and errors[0].startswith(fragment), errors


def test_check_info_options_names_every_problem() -> None:
    errors = check_info_options(params(session_name="a b", log_path="x.log", lines=-5))
    assert [error.split(" ", 2)[:2] for error in errors] == [["Invalid", "session_name"], ["Invalid", "log_path"], ["Cannot", "use"]]


def test_check_info_options_ok() -> None:
    assert not check_info_options(params(session_name="train-1_x", log_path="/w/a b.log"))
    assert not check_info_options(params(lines=0)) and not check_info_options(params(lines=MAX_LINES))
    assert not check_info_options(params(history_limit=1)) and not check_info_options(params(history=True, history_limit=MAX_HISTORY))


# ---- report: a tmux server of the test's own ----


class Host:
    """The test's tmux server and run root."""

    def __init__(self, tmp_path: Path, socket: str) -> None:
        self.tmp_path = tmp_path
        self.socket = socket
        self.run_root = tmp_path / "run"
        self.run_root.mkdir()

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run tmux against the test's server."""
        # the environment Tmux gives tmux, so that both reach the same server whatever TMUX_TMPDIR says here
        env = {"PATH": CLEAN_PATH, "HOME": pwd.getpwuid(os.geteuid()).pw_dir or "/"}
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=env, check=False)

    def session(self, name: str, command: str = "sleep 30", **options: str) -> None:
        """A session running ``command`` with these user options (``@trainops_log`` makes it one tmux_session launched)."""
        assert self.tmux("new-session", "-d", "-s", name, command).returncode == 0
        for option, value in options.items():
            assert self.tmux("set-option", "-t", f"={name}:", f"@{option}", value).returncode == 0

    def dead_session(self, name: str, command: str, **options: str) -> None:
        """A session whose pane ended and stays (``remain-on-exit``)."""
        assert self.tmux("new-session", "-d", "-s", name, command, ";", "set-option", "-w", "-t", f"={name}:",
                         "remain-on-exit", "on").returncode == 0
        for option, value in options.items():
            assert self.tmux("set-option", "-t", f"={name}:", f"@{option}", value).returncode == 0
        deadline = time.monotonic() + 10
        while self.tmux("display-message", "-p", "-t", f"={name}:", "#{pane_dead}").stdout.strip() != "1":
            assert time.monotonic() < deadline, "the pane did not die"
            time.sleep(0.05)

    def run_dir(self, name: str, log: Path, record: str | None = None) -> Path:
        """``RUN_ROOT/NAME`` as a launch leaves it: ``log_path``, and ``exit`` when given."""
        folder = self.run_root / name
        folder.mkdir()
        (folder / "log_path").write_text(str(log), encoding="utf-8")
        if record is not None:
            (folder / "exit").write_text(record, encoding="utf-8")
        return folder


@pytest.fixture()
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> t.Iterator[Host]:
    """A tmux server of the test's own (none runs until a test starts a session)."""
    socket = f"trainops-ut-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", socket)
    monkeypatch.setattr(_tmux_sessions, "run_root", lambda: str(tmp_path / "run"))
    box = Host(tmp_path, socket)
    try:
        yield box
    finally:
        box.tmux("kill-server")
        # tmux 3.3 leaves the socket of a killed server behind (Tmux runs tmux without TMUX_TMPDIR: /tmp)
        Path("/tmp", f"tmux-{os.geteuid()}", socket).unlink(missing_ok=True)


def entries(session_name: str | None = None, log_path: str | None = None, lines: int = 5) -> tuple[str, dict[str, dict[str, t.Any]]]:
    """(tmux status, the module's ``sessions`` by name)."""
    status, found = report(session_name, log_path, lines)
    sessions = [session_entry(facts) for facts in found]
    by_name = {entry["name"]: entry for entry in sessions}
    assert len(by_name) == len(sessions), "each session is reported once"
    return status, by_name


@needs_tmux
def test_no_server_reports_nothing_running(host: Host) -> None:
    status, sessions = entries()
    assert status == "no_server" and sessions == {}
    status, sessions = entries("nothing", "/nonexistent/x.log")
    assert status == "no_server" and sessions["nothing"]["state"] == "absent" and sessions["nothing"]["log_size"] is None


def test_tmux_missing_still_reports_launches_from_their_files(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tmux_cli, "CLEAN_PATH", str(host.tmp_path / "no-tools"))
    assert report(None, None, 5) == ("missing", [])
    log = host.tmp_path / "done.log"
    log.write_text("out\n", encoding="utf-8")
    Path(f"{log}.exit").write_text(exit_record_text("done", 0, "S", "E"), encoding="utf-8")
    host.run_dir("done", log)
    status, sessions = entries()
    assert status == "missing" and sessions["done"]["state"] == "finished" and sessions["done"]["exit_status"] == 0


def test_hostile_log_path_and_its_last_lines(host: Host) -> None:
    log = host.tmp_path / "it's $(touch pwned) `x`.log"
    log.write_bytes(b"### trainops.pct_launch: session=a\n" + b"\n".join(b"line %d" % i for i in range(30)) + b"\n")
    status, sessions = entries("a", str(log), 3)
    entry = sessions["a"]
    assert entry["log_path"] == str(log) and entry["log_tail"] == ["line 27", "line 28", "line 29"]
    assert entry["state"] == "vanished" and entry["log_size"] == log.stat().st_size and status in ("no_server", "missing")
    assert not (host.tmp_path / "pwned").exists()


def test_log_bytes_are_shown_as_text(host: Host) -> None:
    log = host.tmp_path / "a.log"
    log.write_bytes(b"pct % sign\ttab\rcr \x1b[0m \xc3\xa9 \xff\x7f end\r\n" + b"x" * 5000 + b"\nlast")
    Path(f"{log}.exit").write_text("session_name=a\nexit_status=2\nbad key=1\nended_at=2025-01-01T00:00:01Z\n", encoding="utf-8")
    entry = entries("a", str(log), 5)[1]["a"]
    assert entry["log_tail"][0] == "pct % sign\ttab\rcr \x1b[0m é \ufffd\x7f end"
    assert entry["log_tail"][1] == "x" * min(MAX_LINE_BYTES, SHOW) and entry["log_tail"][2] == "last"
    assert entry["state"] == "finished" and entry["exit_status"] == 2 and entry["ended_at"] == "2025-01-01T00:00:01Z"
    assert entries("a", str(log), 0)[1]["a"]["log_tail"] == []


@needs_tmux
def test_sessions_in_tmux(host: Host) -> None:
    log = host.tmp_path / "train.log"
    log.write_text("### trainops.pct_launch: session=train\nEpoch 1\n", encoding="utf-8")
    host.session("train", trainops_log=str(log), trainops_command="python train.py\n--x é", trainops_started_at="2025-01-01T00:00:00Z")
    host.session("train2")
    host.dead_session("dead", "sleep 0.2; exit 3")
    status, sessions = entries()
    assert status == "running" and set(sessions) == {"train", "train2", "dead"}
    train = sessions["train"]
    assert train["state"] == "running" and train["managed"] and train["pane_pid"] > 1
    pane = host.tmux("display-message", "-p", "-t", "=train:", "#{pane_pid}").stdout.strip()
    assert train["pane_pid"] == int(pane)
    assert train["command"] == "python train.py\n--x é" and train["started_at"] == "2025-01-01T00:00:00Z"
    assert train["log_tail"] == ["### trainops.pct_launch: session=train", "Epoch 1"] and train["log_size"] == log.stat().st_size
    other = sessions["train2"]
    assert other["state"] == "running" and not other["managed"] and "sleep 30" in other["command"] and other["log_path"] is None
    # tmux's session_created: this second, give or take the test's run time
    assert abs(datetime.datetime.strptime(other["started_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()
               - time.time()) < 60
    # a dead pane: tmux 3.3a sometimes does not record pane_dead_status, then the status is unknown
    assert (sessions["dead"]["state"], sessions["dead"]["exit_status"]) in (("finished", 3), ("vanished", None))
    assert sessions["dead"]["pane_pid"] is None
    status, one = entries("train", None, 1)
    assert [(entry["name"], entry["log_tail"]) for entry in one.values()] == [("train", ["Epoch 1"])]


@needs_tmux
def test_a_session_tmux_no_longer_knows_is_reported_from_its_run_dir(host: Host) -> None:
    host.session("keeper")
    log = host.tmp_path / "gone.log"
    log.write_text("started\n", encoding="utf-8")
    host.run_dir("gone", log, exit_record_text("gone", 137, "S", "E", "TERM"))
    (host.run_root / "nolog").mkdir()  # a run dir without log_path is no launch
    status, sessions = entries()
    assert status == "running" and set(sessions) == {"keeper", "gone"}
    gone = sessions["gone"]
    assert gone["state"] == "finished" and gone["managed"] and gone["exit_status"] == 137 and gone["stopped_by"] == "trainops"
    assert gone["log_path"] == str(log) and gone["log_tail"] == ["started"] and gone["started_at"] == "S"
    assert entries("gone")[1]["gone"] == gone, "by name, the log comes from the run dir too"


@pytest.mark.parametrize("log_exit", [None, ""])
def test_the_exit_record_in_run_when_log_exit_is_missing(host: Host, log_exit: str | None) -> None:
    """A session whose log's file system was full: LOG.exit is missing or empty, RUN_DIR/exit has the status."""
    log = host.tmp_path / "full.log"
    log.write_text("### trainops.pct_launch: session=full\nfilling\n", encoding="utf-8")
    if log_exit is not None:
        Path(f"{log}.exit").write_text(log_exit, encoding="utf-8")
    run = host.run_dir("full", log, exit_record_text("full", 3, "S", "E"))
    entry = entries("full", None, 2)[1]["full"]
    assert (entry["state"], entry["exit_status"], entry["ended_at"]) == ("finished", 3, "E")
    Path(f"{log}.exit").write_text(exit_record_text("full", 0, "S", "E0"), encoding="utf-8")
    entry = entries("full", None, 2)[1]["full"]
    assert (entry["exit_status"], entry["ended_at"]) == (0, "E0"), "LOG.exit stays the primary record"
    Path(f"{log}.exit").unlink()
    (run / "log_path").write_text(str(host.tmp_path / "other.log"), encoding="utf-8")
    entry = entries("full", str(log), 2)[1]["full"]
    assert (entry["state"], entry["exit_status"]) == ("vanished", None), "the record belongs to another log"


@needs_tmux
def test_a_dead_pane_of_a_launch_reads_its_exit_record(host: Host) -> None:
    log = host.tmp_path / "dead.log"
    log.write_text("x\n", encoding="utf-8")
    host.run_dir("dead", log, exit_record_text("dead", 3, "S", "E"))
    host.dead_session("dead", "sleep 0.2; exit 5", trainops_log=str(log))
    entry = entries(None, None, 0)[1]["dead"]
    assert (entry["state"], entry["exit_status"], entry["managed"]) == ("finished", 3, True), "the record, not tmux's status"
    (host.run_root / "dead" / "exit").unlink()
    entry = entries(None, None, 0)[1]["dead"]
    assert (entry["state"], entry["exit_status"]) == ("vanished", None), "a launch's dead pane without a record is vanished"


# ---- report: the supervisor's state.json and the exit record's new keys ----


def state_json(run_dir: Path, **values: t.Any) -> None:
    """``RUN_DIR/state.json`` as the supervisor writes it (the docs' example with these values)."""
    (run_dir / "state.json").write_text(json.dumps(dict(LIVE, **values)), encoding="utf-8")


@needs_tmux
def test_a_running_launch_reports_its_state_json(host: Host) -> None:
    log = host.tmp_path / "live.log"
    log.write_text("### trainops.pct_launch: session=live\nstep 1\n", encoding="utf-8")
    run = host.run_dir("live", log)
    state_json(run, state="restarting", attempt=3, last_progress_at="2000-01-01T00:00:00Z")
    host.session("live", trainops_log=str(log))
    entry = entries()[1]["live"]
    assert entry["state"] == "running" and entry["supervisor_state"] == "restarting" and entry["attempts"] == 3
    assert entry["since"] == LIVE["since"] and entry["last_output_at"] == LIVE["last_output_at"] and entry["last_progress_age"] > 8 * 10 ** 8
    assert entries("live")[1]["live"]["supervisor_state"] == "restarting"


@needs_tmux
@pytest.mark.parametrize("content", [b"", b'{"state": "runn', b"not json", b"[1, 2]", b"null", b"\xff\xfe{}", b"[" * 100000],
                         ids=["empty", "partial", "text", "array", "null", "bytes", "deep"])
def test_a_state_json_that_cannot_be_read_is_ignored(host: Host, content: bytes) -> None:
    log = host.tmp_path / "odd.log"
    log.write_text("x\n", encoding="utf-8")
    (host.run_dir("odd", log) / "state.json").write_bytes(content)
    host.session("odd", trainops_log=str(log))
    entry = entries()[1]["odd"]
    assert entry["state"] == "running" and life_of(entry) == NO_LIFE


def test_an_ended_launch_reports_its_exit_records_new_keys(host: Host) -> None:
    log = host.tmp_path / "oom.log"
    log.write_text("step 9\nKilled\n", encoding="utf-8")
    Path(f"{log}.exit").write_text(exit_record_text("oom", 137, "2025-01-01T00:00:00Z", "2025-01-01T00:09:00Z")
                                   + "attempts=3\nend_state=oom_killed\ncause=oom_kill\nsignal=KILL\n"
                                   + "reason=killed by the kernel's OOM killer (memory limit of the container's cgroup reached; 1 OOM kill)\n",
                                   encoding="utf-8")
    state_json(host.run_dir("oom", log), state="ended", end_state="oom_killed", attempt=3)
    entry = entries()[1]["oom"]
    assert (entry["state"], entry["exit_status"], entry["attempts"], entry["end_state"], entry["cause"], entry["signal"]) == (
        "finished", 137, 3, "oom_killed", "oom_kill", "KILL")
    assert entry["reason"].startswith("killed by the kernel's OOM killer (memory limit") and entry["reason"].endswith("1 OOM kill)")
    assert entry["since"] == entry["ended_at"] == "2025-01-01T00:09:00Z" and entry["supervisor_state"] is None
    assert entry["last_progress_at"] == LIVE["last_progress_at"] and isinstance(entry["last_progress_age"], int)


def test_an_old_exit_record_without_the_new_keys(host: Host) -> None:
    log = host.tmp_path / "old.log"
    log.write_text("done\n", encoding="utf-8")
    host.run_dir("old", log, exit_record_text("old", 143, "S", "E", "TERM"))
    entry = entries()[1]["old"]
    assert entry["state"] == "finished" and entry["exit_status"] == 143 and life_of(entry) == dict(NO_LIFE, since="E")


def test_a_vanished_launch_keeps_what_state_json_last_said(host: Host) -> None:
    log = host.tmp_path / "killed.log"
    log.write_text("step 3\n", encoding="utf-8")
    state_json(host.run_dir("killed", log), state="running", attempt=2)
    entry = entries()[1]["killed"]
    assert entry["state"] == "vanished" and entry["attempts"] == 2 and entry["supervisor_state"] is None and entry["since"] is None
    assert entry["last_output_at"] == LIVE["last_output_at"]


def test_the_state_json_of_another_log_is_not_this_logs(host: Host) -> None:
    """Asked about an older log (``log_path``): the run dir's state.json belongs to the launch that writes another log."""
    old, new = host.tmp_path / "old.log", host.tmp_path / "new.log"
    old.write_text("x\n", encoding="utf-8")
    new.write_text("y\n", encoding="utf-8")
    Path(f"{old}.exit").write_text(exit_record_text("job", 0, "S", "E"), encoding="utf-8")
    state_json(host.run_dir("job", new))
    entry = entries("job", str(old))[1]["job"]
    assert entry["log_path"] == str(old) and life_of(entry) == dict(NO_LIFE, since="E")
    assert entries("job")[1]["job"]["attempts"] == 2, "the run dir's own log has it"


def test_the_report_only_reads_the_run_dir(host: Host) -> None:
    log = host.tmp_path / "ro.log"
    log.write_text("x\n", encoding="utf-8")
    run = host.run_dir("ro", log, exit_record_text("ro", 0, "S", "E"))
    state_json(run)
    before = {path.name: path.read_bytes() for path in run.iterdir()}
    entries()
    assert {path.name: path.read_bytes() for path in run.iterdir()} == before


# ---- launch_history ----


def test_launch_history_reads_this_hosts_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "history.jsonl"
    monkeypatch.setattr(_tmux_sessions, "history_path", lambda: str(path))
    assert launch_history(None, 100) == [], "no history yet"
    for record in ({"event": "start", "session_name": "a", "started_at": "S1"}, {"event": "start", "session_name": "b", "started_at": "S2"},
                   {"event": "end", "session_name": "a", "started_at": "S1", "exit_status": 0, "end_state": "finished"},
                   {"event": "start", "session_name": "a", "started_at": "S3"}):
        assert append(str(path), record)
    assert [(e["session_name"], e["end_state"]) for e in launch_history(None, 100)] == [("a", "finished"), ("b", "running"), ("a", "running")]
    assert [e["started_at"] for e in launch_history("a", 100)] == ["S1", "S3"] and [e["started_at"] for e in launch_history("a", 1)] == ["S3"]
    assert len(launch_history("", 100)) == 3, "no session name: every session"
