# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the tmux_session_info report: record parsing, states, and the sh program run locally.

The sh program is run on this machine with ``sh -c`` (standing in for the container); tmux tests use
a private tmux server (``TMUX_TMPDIR`` in a temporary directory) and are skipped without tmux.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_report import (
    INFO_ARGUMENT_SPEC,
    build_info_program,
    check_info_options,
    decode_value,
    epoch_to_iso,
    group_sessions,
    parse_records,
    session_entry,
    session_state,
    sessions_from_output,
)

HAVE_TMUX = shutil.which("tmux") is not None


def private_tmux(program: str) -> str:
    """The program with tmux talking to the test's private server (TMUX_TMPDIR) instead of root's default one."""
    patched = (program.replace('tm() { env -i PATH="$PATH" HOME=/root tmux -u "$@"; }', 'tm() { tmux -u "$@"; }')
               .replace('TMUX_ENV = {"PATH": PATH, "HOME": "/root"}', 'TMUX_ENV = None'))
    assert 'env -i PATH="$PATH" HOME=/root tmux' not in patched and '"HOME": "/root"}' not in patched
    return patched


def run_program(program: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run an in-container program here, as pct would run it in the container (output as _pct decodes it)."""
    full_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", **(env or {})}
    return subprocess.run(["/bin/sh", "-c", private_tmux(program)], capture_output=True, env=full_env, encoding="utf-8",
                          errors="surrogateescape", stdin=subprocess.DEVNULL, timeout=60, check=False)


def tools_only(tmp_path: Path, *names: str) -> str:
    """A PATH with only these programs of this machine (to hide tmux or python3)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        found = shutil.which(name)
        if found:
            (bin_dir / name).symlink_to(found)
    return str(bin_dir)


def params(**kwargs: object) -> dict[str, object]:
    """Module options with their defaults."""
    values = {name: spec.get("default") for name, spec in INFO_ARGUMENT_SPEC.items()}
    values["vmid"] = 250
    values.update(kwargs)
    return values


@pytest.mark.parametrize("raw, text", [
    ("plain", "plain"),
    ("a%25b", "a%b"),
    ("tab%09nl%0Acr%0D", "tab\tnl\ncr\r"),
    ("%C3%A9", "é"),
    ("é", "é"),
    ("bad%FFbyte", "bad\ufffdbyte"),
    ("%zz", "%zz"),
])
def test_decode_value(raw: str, text: str) -> None:
    assert decode_value(raw) == text


def test_parse_records_ignores_other_output() -> None:
    out = "noise\ntrainops:a=1\ntrainops:b=x=y\ntrainops:novalue\nTRAINOPS:c=3\ntrainops:d=%41\n"
    assert parse_records(out) == [("a", "1"), ("b", "x=y"), ("d", "A")]


def test_group_sessions() -> None:
    records = [("tmux", "running"), ("session", "a"), ("line", "1"), ("line", "2"), ("session", "b"), ("done", "1")]
    header, sessions = group_sessions(records)
    assert header == {"tmux": "running", "done": "1"}
    assert sessions == [{"session": "a", "line": ["1", "2"]}, {"session": "b", "line": []}]


@pytest.mark.parametrize("facts, state", [
    ({"in_tmux": "1", "pane_dead": "0"}, "running"),
    ({"in_tmux": "1", "pane_dead": "0", "exit_file": "1"}, "running"),
    ({"in_tmux": "1", "pane_dead": "1", "exit_file": "1"}, "finished"),
    ({"in_tmux": "0", "exit_file": "1", "log_size": "3"}, "finished"),
    ({"in_tmux": "1", "pane_dead": "1", "pane_dead_status": "3", "managed": "0"}, "finished"),
    ({"in_tmux": "1", "pane_dead": "1", "pane_dead_status": "3", "managed": "1"}, "vanished"),
    ({"in_tmux": "0", "log_size": "0"}, "vanished"),
    ({"in_tmux": "0"}, "absent"),
])
def test_session_state(facts: dict[str, str], state: str) -> None:
    assert session_state(facts) == state


def test_session_entry_finished() -> None:
    facts = {"session": "train", "in_tmux": "0", "managed": "1", "exit_file": "1", "exit.exit_status": "137",
             "exit.ended_at": "2025-01-01T00:00:09Z", "exit.started_at": "2025-01-01T00:00:00Z",
             "exit.stopped_by": "trainops", "log_path": "/w/t.log", "log_size": "10", "line": ["a\r", "b"]}
    entry = session_entry(facts)
    assert entry == {
        "name": "train", "state": "finished", "managed": True, "pane_pid": None, "command": None,
        "started_at": "2025-01-01T00:00:00Z", "exit_status": 137, "ended_at": "2025-01-01T00:00:09Z",
        "stopped_by": "trainops", "log_path": "/w/t.log", "log_size": 10, "log_tail": ["a", "b"],
    }


def test_session_entry_running_unmanaged() -> None:
    entry = session_entry({"session": "x", "in_tmux": "1", "pane_dead": "0", "pane_pid": "42", "created": "0",
                           "managed": "0", "command": "sleep 9"})
    assert entry["state"] == "running" and entry["pane_pid"] == 42 and entry["exit_status"] is None
    assert entry["started_at"] == "1970-01-01T00:00:00Z" and entry["log_path"] is None and not entry["managed"]


def test_epoch_to_iso() -> None:
    assert epoch_to_iso("1700000000") == "2023-11-14T22:13:20Z"
    assert epoch_to_iso("") is None and epoch_to_iso(None) is None and epoch_to_iso("x") is None


@pytest.mark.parametrize("kwargs, fragment", [
    ({"vmid": 99}, "option vmid 99"),
    ({"session_name": "a.b"}, "option session_name 'a.b'"),
    ({"session_name": "a", "log_path": "rel.log"}, "option log_path 'rel.log'"),
    ({"log_path": "/w/a.log"}, "log_path without session_name"),
    ({"lines": -1}, "option lines -1"),
])
def test_check_info_options(kwargs: dict[str, object], fragment: str) -> None:
    errors = check_info_options(params(**kwargs))
    assert len(errors) == 1 and fragment in errors[0] and errors[0].startswith("Cannot use option")


def test_check_info_options_ok() -> None:
    assert not check_info_options(params(session_name="train-1_x", log_path="/w/a b.log"))


def test_program_quotes_hostile_values(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    log = tmp_path / "it's $(touch pwned) `x`.log"
    log.write_bytes(b"### trainops.pct_launch: session=a\n" + b"\n".join(b"line %d" % i for i in range(30)) + b"\n")
    out = run_program(build_info_program("a", str(log), 3), env={"TMUX_TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    _tmux, sessions, complete = sessions_from_output(out.stdout)
    assert complete and not marker.exists()
    assert sessions[0]["log_path"] == str(log)
    assert sessions[0]["log_tail"] == ["line 27", "line 28", "line 29"]
    assert sessions[0]["state"] == "vanished"


def test_program_encodes_log_bytes(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"pct % sign\ttab\rcr \x1b[0m \xc3\xa9 \xff\x7f end\n" + b"x" * 5000 + b"\nlast")
    (tmp_path / "a.log.exit").write_text("session_name=a\nexit_status=2\nbad key=1\nended_at=2025-01-01T00:00:01Z\n")
    out = run_program(build_info_program("a", str(log), 5), env={"TMUX_TMPDIR": str(tmp_path)})
    _tmux, sessions, _complete = sessions_from_output(out.stdout)
    tail = sessions[0]["log_tail"]
    assert tail[0] == "pct % sign\ttab\rcr \x1b[0m é \ufffd\x7f end"
    assert tail[1] == "x" * 4000 and tail[2] == "last"
    assert sessions[0]["state"] == "finished" and sessions[0]["exit_status"] == 2
    assert sessions[0]["ended_at"] == "2025-01-01T00:00:01Z"


def test_program_absent_without_tmux_server(tmp_path: Path) -> None:
    out = run_program(build_info_program("nothing", "/nonexistent/x.log", 5), env={"TMUX_TMPDIR": str(tmp_path)})
    tmux, sessions, complete = sessions_from_output(out.stdout)
    assert complete and tmux in ("no_server", "missing")
    assert [s["state"] for s in sessions] == ["absent"]


def test_program_tmux_missing(tmp_path: Path) -> None:
    path = tools_only(tmp_path, "sh", "awk", "tail", "cut", "wc", "tr", "cat", "basename")
    out = run_program(build_info_program(None, None, 5), env={"PATH": path, "TMUX_TMPDIR": str(tmp_path)})
    assert sessions_from_output(out.stdout) == ("missing", [], True)


@pytest.fixture()
def tmux_env(tmp_path: Path):
    """A private tmux server for one test; killed at the end."""
    if not HAVE_TMUX:
        pytest.skip("tmux is not installed")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMUX_TMPDIR": str(tmp_path), "LANG": "C.UTF-8"}
    yield env
    subprocess.run(["tmux", "kill-server"], env=env, capture_output=True, check=False)


def tmux(env: dict[str, str], *args: str) -> None:
    """Run a tmux command against the private server."""
    subprocess.run(["tmux", *args], env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)


def test_program_reports_tmux_sessions(tmp_path: Path, tmux_env: dict[str, str]) -> None:
    log = tmp_path / "train.log"
    log.write_text("### trainops.pct_launch: session=train\nEpoch 1\n")
    tmux(tmux_env, "new-session", "-d", "-s", "train", "sleep 60")
    tmux(tmux_env, "set-option", "-t", "=train:", "@trainops_log", str(log))
    tmux(tmux_env, "set-option", "-t", "=train:", "@trainops_command", "python train.py\n--x é")
    tmux(tmux_env, "set-option", "-t", "=train:", "@trainops_started_at", "2025-01-01T00:00:00Z")
    tmux(tmux_env, "new-session", "-d", "-s", "train2", "sleep 60")
    tmux(tmux_env, "new-session", "-d", "-s", "dead", "sleep 0.3; exit 3", ";", "set-option", "-w", "-t", "=dead:", "remain-on-exit", "on")
    time.sleep(1)
    out = run_program(build_info_program(None, None, 5), env=tmux_env)
    tmux_state, sessions, complete = sessions_from_output(out.stdout)
    by_name = {s["name"]: s for s in sessions}
    assert complete and tmux_state == "running" and set(by_name) == {"train", "train2", "dead"}
    train = by_name["train"]
    assert train["state"] == "running" and train["managed"] and train["pane_pid"] > 1
    assert train["command"] == "python train.py\n--x é" and train["started_at"] == "2025-01-01T00:00:00Z"
    assert train["log_tail"] == ["### trainops.pct_launch: session=train", "Epoch 1"] and train["log_size"] == log.stat().st_size
    assert by_name["train2"]["state"] == "running" and not by_name["train2"]["managed"]
    # a dead pane: tmux 3.3a sometimes does not record pane_dead_status, then the status is unknown
    assert (by_name["dead"]["state"], by_name["dead"]["exit_status"]) in (("finished", 3), ("vanished", None))
    one = sessions_from_output(run_program(build_info_program("train", None, 1), env=tmux_env).stdout)[1]
    assert [(s["name"], s["log_tail"]) for s in one] == [("train", ["Epoch 1"])]


def test_program_reads_the_exit_record_in_run_when_log_exit_is_missing(tmp_path: Path) -> None:
    """A session whose log's file system was full: LOG.exit is missing or empty, /run/trainops/NAME/exit has the status."""
    log = tmp_path / "full.log"
    log.write_text("### trainops.pct_launch: session=full\nfilling\n")
    run = tmp_path / "run" / "full"
    run.mkdir(parents=True)
    (run / "log_path").write_text(str(log))
    (run / "exit").write_text("session_name=full\nexit_status=3\nstarted_at=S\nended_at=E\n")
    program = build_info_program("full", None, 2).replace("/run/trainops/", f"{tmp_path}/run/")
    for exit_file in (None, ""):
        if exit_file is not None:
            Path(f"{log}.exit").write_text(exit_file)
        entry = sessions_from_output(run_program(program).stdout)[1][0]
        assert (entry["state"], entry["exit_status"], entry["ended_at"]) == ("finished", 3, "E")
    Path(f"{log}.exit").write_text("session_name=full\nexit_status=0\nstarted_at=S\nended_at=E0\n")
    entry = sessions_from_output(run_program(program).stdout)[1][0]
    assert (entry["exit_status"], entry["ended_at"]) == (0, "E0"), "LOG.exit stays the primary record"
    Path(f"{log}.exit").unlink()
    (run / "log_path").write_text(str(tmp_path / "other.log"))
    entry = sessions_from_output(run_program(build_info_program("full", str(log), 2).replace("/run/trainops/", f"{tmp_path}/run/")).stdout)[1][0]
    assert (entry["state"], entry["exit_status"]) == ("vanished", None), "the record belongs to another log"


def test_program_reads_the_exit_record_of_a_dead_pane(tmp_path: Path, tmux_env: dict[str, str]) -> None:
    log = tmp_path / "dead.log"
    log.write_text("x\n")
    run = tmp_path / "run" / "dead"
    run.mkdir(parents=True)
    (run / "log_path").write_text(str(log))
    (run / "exit").write_text("session_name=dead\nexit_status=3\n")
    tmux(tmux_env, "new-session", "-d", "-s", "dead", "sleep 0.2; exit 3", ";", "set-option", "-w", "-t", "=dead:", "remain-on-exit", "on")
    tmux(tmux_env, "set-option", "-t", "=dead:", "@trainops_log", str(log))
    time.sleep(1)
    program = build_info_program(None, None, 0).replace("/run/trainops/", f"{tmp_path}/run/")
    entry = {s["name"]: s for s in sessions_from_output(run_program(program, env=tmux_env).stdout)[1]}["dead"]
    assert (entry["state"], entry["exit_status"]) == ("finished", 3)
