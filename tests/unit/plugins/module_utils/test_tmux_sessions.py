# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""``_tmux_sessions`` (the report of ``tmux_session_info``) and the one state decision ``_tmux_cli.session_state``.

``session_state`` runs against real files in the test's temp dir. ``report`` runs against a tmux server of
the test's own (``Tmux.socket_name``, killed at teardown) and a run root in the test's temp dir, so nothing
touches ``/run/trainops`` or the default tmux server.
"""

from __future__ import annotations

import datetime
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
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_parent import CLEAN_PATH, exit_record_text
from ansible_collections.trainops.pct_launch.plugins.module_utils._proc_tree import SHOW
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import session_state
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_sessions import (
    MAX_LINE_BYTES,
    MAX_LINES,
    check_info_options,
    report,
    session_entry,
    to_int,
)

needs_tmux = pytest.mark.skipif(shutil.which("tmux", path=CLEAN_PATH) is None, reason="needs tmux")
RECORD = exit_record_text("job", 3, "2025-01-01T00:00:00Z", "2025-01-01T00:00:09Z")


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


def test_running_wins_over_any_record(files: Files) -> None:
    files.log.write_text("x\n", encoding="utf-8")
    files.log_exit(RECORD)
    files.run_copy(RECORD)
    assert files.state(running=True, in_tmux=True) == "running"
    assert files.state(running=True, log=False, run_dir=False) == "running"


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
    }


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
    values: dict[str, t.Any] = {"session_name": None, "log_path": None, "lines": 20}
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
