# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""``_tmux_job.launch``: start, stop and restart real jobs in tmux sessions on this host.

Each test has a tmux server of its own (``Tmux.socket_name``, killed at teardown) and its run root in
the test's temp dir, so nothing touches ``/run/trainops`` or the default tmux server. The jobs report
their environment as hex so that byte-exact arrival can be checked.

Jobs that are stopped ``exec`` their last command: a process its shell leaves behind is reaped by PID 1,
which in some containers takes a second, and until then its process group (a zombie) counts as alive.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import typing as t
import uuid
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_process, _job_stage, _supervisor_entry, _tmux_cli, _tmux_job
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import CLEAN_PATH, read_exit_record
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_target import JobError
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_job import launch
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import LaunchSpec, spec_from_params, spec_hash
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_outcome import result

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None or os.geteuid() != 0, reason="needs tmux and root")
SUPERVISOR_TEXT = Path(_supervisor_entry.__file__).read_text(encoding="utf-8")

HOSTILE = [
    "it's", 'say "hi"', "$(touch pwned)", "`touch pwned`", "new\nline", "trailing\n\n", "ünïcödé ✓", "back\\slash",
    "\\", "semi;colon", "100%d %s", "tab\there", " lead space", "a\x01b\x7f", "ends with;", "not utf-8 \udcff\udcfe",
]
# The job: its environment (as exec gave it) as hex JSON in argv[1], then it sleeps.
DUMP_ENV = (
    "import json, os, time, sys\n"
    "with open('/proc/self/environ', 'rb') as handle:\n"
    "    env = dict(item.split(b'=', 1) for item in handle.read().split(b'\\0') if item)\n"
    "with open(sys.argv[1] + '.tmp', 'w') as handle:\n"
    "    json.dump({k.hex(): v.hex() for k, v in env.items()}, handle)\n"
    "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "time.sleep(30)\n"
)


class Host:
    """The test's tmux server and the specs of its sessions."""

    def __init__(self, tmp_path: Path, socket: str) -> None:
        self.tmp_path = tmp_path
        self.socket = socket
        self.run_root = tmp_path / "run"
        self.logs = tmp_path / "logs"
        self.logs.mkdir()

    def spec(self, **params: t.Any) -> LaunchSpec:
        """A spec with a unique session name, its log in the test's logs folder, its run dir in the test's run root."""
        values: dict[str, t.Any] = {"session_name": f"ut-{uuid.uuid4().hex[:10]}"}
        values["log_path"] = str(self.logs / f"{values['session_name']}.log")
        values.update(params)
        return spec_from_params(values)._replace(run_root=str(self.run_root))

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        # the environment Tmux gives tmux, so that both reach the same server whatever TMUX_TMPDIR says here
        env = {"PATH": CLEAN_PATH, "HOME": pwd.getpwuid(os.geteuid()).pw_dir or "/"}
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=env, check=False)

    def has_session(self, name: str) -> bool:
        return self.tmux("has-session", "-t", f"={name}").returncode == 0

    def option(self, name: str, option: str) -> str:
        return self.tmux("show-options", "-v", "-t", f"={name}:", option).stdout.rstrip("\n")

    def server_running(self) -> bool:
        return self.tmux("list-sessions").returncode == 0


@pytest.fixture()
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> t.Iterator[Host]:
    """A tmux server of the test's own (killed at the end, with any job it left)."""
    socket = f"trainops-ut-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", socket)
    box = Host(tmp_path, socket)
    try:
        yield box
    finally:
        box.tmux("kill-server")
        # tmux 3.3 leaves the socket of a killed server behind (Tmux runs tmux without TMUX_TMPDIR: /tmp)
        Path("/tmp", f"tmux-{os.geteuid()}", socket).unlink(missing_ok=True)
        for pgid_file in box.run_root.glob("*/pgid"):  # a job the server's end did not stop
            try:
                os.killpg(int(pgid_file.read_text(encoding="ascii")), signal.SIGKILL)
            except (OSError, ValueError):
                pass


@pytest.fixture()
def host(server: Host) -> Host:
    """``server``; the parent copied into the run dir is the one ``_job_stage.source_of`` reads (as AnsiballZ gives it)."""
    return server


def _wait_for(predicate: t.Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def _text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _ended(host: Host, spec: LaunchSpec) -> None:
    """Until the job's exit record is there and its session is gone."""
    _wait_for(lambda: Path(str(spec.log_path) + ".exit").exists() and not host.has_session(spec.session_name))


def _stopped(spec: LaunchSpec, **changes: t.Any) -> LaunchSpec:
    return spec._replace(state="stopped", **changes)


def _assert_nothing_started(host: Host, spec: LaunchSpec) -> None:
    assert not host.has_session(spec.session_name)
    assert not Path(str(spec.log_path)).exists() and not Path(str(spec.log_path) + ".exit").exists()
    assert not Path(spec.run_dir).exists()


@needs_tmux
def test_start_runs_the_job_and_records_the_session(host: Host) -> None:
    spec = host.spec(command="echo first-line; sleep 30")
    facts = launch(spec)
    assert facts["result"] == "started" and facts["state"] == "running", facts
    assert facts["before_state"] == "absent" and facts["rotated_log"] == "" and facts["tmux_version"]
    assert facts["pane_pid"].isdigit() and facts["job_pgid"].isdigit()
    assert host.has_session(spec.session_name)
    _wait_for(lambda: "first-line" in _text(spec.log_path).splitlines())
    lines = _text(spec.log_path).splitlines()
    assert re.fullmatch(rf"### trainops\.pct_launch: session={spec.session_name} started_at={facts['started_at']} "
                        r"host=\S+ command=echo first-line; sleep 30", lines[0]), lines[0]
    assert lines[1] == "first-line"
    assert host.option(spec.session_name, "@trainops_spec") == spec_hash(spec)
    assert host.option(spec.session_name, "@trainops_log") == spec.log_path
    assert host.option(spec.session_name, "@trainops_started_at") == facts["started_at"]
    assert host.option(spec.session_name, "@trainops_command") == "echo first-line; sleep 30"
    assert host.tmux("display-message", "-p", "-t", f"={spec.session_name}:", "#{pane_pid}").stdout.strip() == facts["pane_pid"]
    run_dir = Path(spec.run_dir)
    assert (run_dir / "supervisor.py").read_text(encoding="utf-8") == SUPERVISOR_TEXT
    assert (run_dir / "log_path").read_text(encoding="utf-8") == spec.log_path
    assert json.loads((run_dir / "spec").read_text(encoding="utf-8"))["command"] == "echo first-line; sleep 30"
    assert (run_dir / "pgid").read_text(encoding="ascii").strip() == facts["job_pgid"]
    assert run_dir.stat().st_mode & 0o777 == 0o700


@needs_tmux
def test_a_second_launch_of_the_same_spec_is_unchanged(host: Host) -> None:
    spec = host.spec(command="sleep 30")
    first = launch(spec)
    assert first["result"] == "started"
    again = launch(spec)
    assert again["result"] == "unchanged" and again["state"] == "running", again
    assert again["pane_pid"] == first["pane_pid"] and again["started_at"] == first["started_at"]
    assert again["before_state"] == "running" and again["before_proven"] == "0" and again["proven"] == "0"
    # where a wait for the end of the job found running starts (launch.yml with job_wait_until finished)
    assert again["log_size"] == str(Path(str(spec.log_path)).stat().st_size) and int(again["log_size"]) > 0, again
    assert "log_size" not in first
    sessions = host.tmux("list-sessions", "-F", "#{session_name}").stdout.split()
    assert sessions == [spec.session_name]
    assert _text(spec.log_path).count("### trainops.pct_launch: session=") == 1, "no second header"


@needs_tmux
def test_launches_at_once_start_one_job(host: Host) -> None:
    spec = host.spec(command="sleep 30")
    results: list[dict[str, str]] = []
    threads = [threading.Thread(target=lambda: results.append(launch(spec))) for _index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(facts["result"] for facts in results) == ["started", "unchanged", "unchanged", "unchanged"]
    assert host.tmux("list-sessions", "-F", "#{session_name}").stdout.split() == [spec.session_name]
    assert len({facts["pane_pid"] for facts in results}) == 1


@needs_tmux
def test_check_mode_on_a_fresh_name_writes_nothing(host: Host) -> None:
    spec = host.spec(command="sleep 30", env={"SECRET": "x"})
    facts = launch(spec, True)
    assert facts["would"] == "start" and facts["before_state"] == "absent", facts
    assert "result" not in facts
    _assert_nothing_started(host, spec)
    assert not host.run_root.exists()
    assert not host.server_running(), "check mode did not even start a tmux server"


@needs_tmux
def test_check_mode_on_a_running_session_plans_without_acting(host: Host) -> None:
    spec = host.spec(command="sleep 30")
    pane = launch(spec)["pane_pid"]
    assert launch(spec, True)["would"] == "none"
    assert launch(_stopped(spec), True)["would"] == "stop"
    assert launch(spec._replace(state="restarted"), True)["would"] == "restart"
    assert not Path(spec.run_dir, "stop_requested").exists()
    assert host.tmux("display-message", "-p", "-t", f"={spec.session_name}:", "#{pane_pid}").stdout.strip() == pane


@needs_tmux
def test_a_different_spec_while_running_is_a_conflict(host: Host) -> None:
    spec = host.spec(command="sleep 30")
    pane = launch(spec)["pane_pid"]
    other = spec._replace(command="sleep 31")
    for check_mode in (False, True):
        with pytest.raises(JobError) as caught:
            launch(other, check_mode)
        assert caught.value.code == "spec_conflict"
        assert json.loads(caught.value.facts["running_summary"])["command"] == "sleep 30"
        assert caught.value.facts["running_spec"] == spec_hash(spec)
        assert caught.value.facts["before_state"] == "running"
    assert host.tmux("display-message", "-p", "-t", f"={spec.session_name}:", "#{pane_pid}").stdout.strip() == pane
    assert "command=sleep 31" not in _text(spec.log_path)


@needs_tmux
def test_stop_ends_the_job_with_its_signal(host: Host) -> None:
    spec = host.spec(command="echo ready; exec sleep 30")
    launch(spec)
    _wait_for(lambda: "ready" in _text(spec.log_path).splitlines())
    started = time.monotonic()
    facts = launch(_stopped(spec))
    assert time.monotonic() - started < 3
    assert facts["result"] == "stopped" and facts["exit_status"] == "143" and facts["killed"] == "0", facts
    assert facts["stopped_log"] == spec.log_path
    assert not host.has_session(spec.session_name)
    record = read_exit_record(str(spec.log_path), spec.run_dir)
    assert record is not None
    assert (record["exit_status"], record["stopped_by"], record["stop_signal"]) == ("143", "trainops", "TERM")
    assert Path(spec.run_dir, "exit").read_bytes() == Path(str(spec.log_path) + ".exit").read_bytes()
    again = launch(_stopped(spec))
    assert again["result"] == "unchanged" and again["before_state"] == "finished" and again["exit_status"] == "143", again


@needs_tmux
def test_stop_kills_a_job_that_ignores_its_signal(host: Host) -> None:
    spec = host.spec(command="trap '' TERM; echo ready; exec sleep 60", stop_timeout=1)
    launch(spec)
    _wait_for(lambda: "ready" in _text(spec.log_path).splitlines())
    started = time.monotonic()
    facts = launch(_stopped(spec))
    assert 1 <= time.monotonic() - started < 4
    assert facts["result"] == "stopped" and facts["killed"] == "1" and facts["exit_status"] == "137", facts
    record = read_exit_record(str(spec.log_path), spec.run_dir)
    assert record is not None and record["stopped_by"] == "trainops" and record["stop_signal"] == "TERM"
    assert not host.has_session(spec.session_name)


@needs_tmux
def test_restart_replaces_a_running_job(host: Host) -> None:
    spec = host.spec(command="echo one; exec sleep 30")
    first = launch(spec)
    _wait_for(lambda: "one" in _text(spec.log_path).splitlines())
    facts = launch(spec._replace(state="restarted", command="echo two; exec sleep 30"))
    assert facts["result"] == "started" and facts["state"] == "running", facts
    assert facts["exit_status"] == "143" and facts["killed"] == "0"
    assert facts["pane_pid"].isdigit() and facts["pane_pid"] != first["pane_pid"]
    assert facts["rotated_log"] == spec.log_path + ".1"
    assert host.tmux("display-message", "-p", "-t", f"={spec.session_name}:", "#{pane_pid}").stdout.strip() == facts["pane_pid"]
    _wait_for(lambda: "two" in _text(spec.log_path).splitlines())
    assert "command=echo two; exec sleep 30" in _text(spec.log_path).splitlines()[0]
    old = read_exit_record(spec.log_path + ".1", None)
    assert old is not None and old["exit_status"] == "143" and old["stopped_by"] == "trainops"
    assert "one" in _text(spec.log_path + ".1").splitlines()


@needs_tmux
def test_rotation_keeps_log_keep_logs_with_their_records(host: Host) -> None:
    marker = host.tmp_path / "marker"
    spec = host.spec(command=f"cat {marker}; exit 3", log_keep=2)
    log = str(spec.log_path)
    for run, expected_rotated in (("first", ""), ("second", log + ".1"), ("third", log + ".1")):
        marker.write_text(f"run-{run}\n", encoding="utf-8")
        facts = launch(spec)
        assert facts["result"] == "started" and facts["rotated_log"] == expected_rotated, facts
        _ended(host, spec)
    names = sorted(p.name for p in host.logs.iterdir())
    base = Path(log).name
    assert names == [base, f"{base}.1", f"{base}.1.exit", f"{base}.2", f"{base}.2.exit", f"{base}.exit"]
    for suffix, run in (("", "third"), (".1", "second"), (".2", "first")):
        lines = _text(log + suffix).splitlines()
        assert lines[0].startswith(f"### trainops.pct_launch: session={spec.session_name} started_at=")
        assert lines[1] == f"run-{run}" and "exit_status=3 ended_at=" in lines[2] and len(lines) == 3, (suffix, lines)
        record = read_exit_record(log + suffix, None)
        assert record is not None and record["exit_status"] == "3"
    marker.write_text("run-fourth\n", encoding="utf-8")
    launch(spec)
    _ended(host, spec)
    assert sorted(p.name for p in host.logs.iterdir()) == names, "log_keep 2: the oldest goes"
    assert [_text(log + suffix).splitlines()[1] for suffix in ("", ".1", ".2")] == ["run-fourth", "run-third", "run-second"]


@needs_tmux
def test_fail_if_exists_refuses_an_existing_log(host: Host) -> None:
    spec = host.spec(command="echo run", log_mode="fail_if_exists")
    content = b"old \x00 content \xff\nno newline at the end"
    Path(str(spec.log_path)).write_bytes(content)
    Path(str(spec.log_path) + ".exit").write_bytes(b"exit_status=0\n")
    for check_mode in (True, False):
        with pytest.raises(JobError) as caught:
            launch(spec, check_mode)
        assert caught.value.code == "log_exists"
    assert Path(str(spec.log_path)).read_bytes() == content
    assert Path(str(spec.log_path) + ".exit").read_bytes() == b"exit_status=0\n"
    assert sorted(p.name for p in host.logs.iterdir()) == [Path(str(spec.log_path)).name, Path(str(spec.log_path)).name + ".exit"]
    assert not host.has_session(spec.session_name)


@needs_tmux
@pytest.mark.parametrize("option, value, code", [
    ("chdir", "{tmp}/no-such-dir", "chdir_missing"),
    ("venv", "{tmp}/no-such-venv", "venv_missing"),
    ("command", "./missing.sh --flag", "script_missing"),
    ("log_path", "{tmp}/no-such-dir/job.log", "log_dir_missing"),
    ("user", "no-such-user-trainops", "user_missing"),
])
def test_preflight_errors_start_nothing(host: Host, option: str, value: str, code: str) -> None:
    params: dict[str, t.Any] = {"command": "echo must-not-run", "chdir": str(host.tmp_path)}
    params[option] = value.format(tmp=host.tmp_path)
    spec = host.spec(**params)
    for check_mode in (True, False):
        with pytest.raises(JobError) as caught:
            launch(spec, check_mode)
        assert caught.value.code == code, caught.value
    _assert_nothing_started(host, spec)
    assert not host.run_root.exists()
    assert list(host.logs.iterdir()) == []


@needs_tmux
def test_env_values_reach_the_job_and_appear_nowhere_else(host: Host) -> None:
    token = uuid.uuid4().hex
    env = {f"V{index}": f"{token}{index}-{value}" for index, value in enumerate(HOSTILE)}
    out = host.tmp_path / "env.json"
    spec = host.spec(argv=[sys.executable, "-c", DUMP_ENV, str(out)], env=env)
    facts = launch(spec)
    assert facts["result"] == "started" and facts["state"] == "running", facts
    assert not Path(spec.run_dir, "env").exists(), "the env file is deleted once the job runs"
    _wait_for(out.exists)
    received = {bytes.fromhex(k): bytes.fromhex(v) for k, v in json.loads(out.read_text(encoding="utf-8")).items()}
    for key, value in env.items():
        assert received[key.encode()] == value.encode("utf-8", "surrogateescape"), key
    seen: dict[str, bytes] = {path.name: path.read_bytes() for path in Path(spec.run_dir).rglob("*") if path.is_file()}
    assert {"supervisor.py", "job.json", "spec", "log_path"} <= set(seen)
    seen["log"] = Path(str(spec.log_path)).read_bytes()
    seen["ps"] = subprocess.run(["ps", "-eo", "args"], capture_output=True, check=True).stdout
    seen["tmux options"] = host.tmux("show-options", "-t", f"={spec.session_name}:").stdout.encode()
    seen["tmux environment"] = host.tmux("show-environment", "-t", f"={spec.session_name}").stdout.encode()
    seen["facts"] = json.dumps(facts).encode()
    for where, data in seen.items():
        assert token.encode() not in data, f"an env value is in {where}"
    assert not (host.tmp_path / "pwned").exists()


@needs_tmux
def test_a_job_that_exits_at_once_is_finished_with_its_status(host: Host) -> None:
    spec = host.spec(command="exit 3", env={"SOME": "value"})
    facts = launch(spec)
    assert facts["result"] == "started", facts
    # Mostly finished; on a loaded host the session can outlive the record for a moment and the start says running
    # (test_a_job_that_ended_in_a_dead_pane_is_finished below makes that moment last).
    assert (facts["state"], facts.get("exit_status")) in (("finished", "3"), ("running", None)), facts
    assert not Path(spec.run_dir, "env").exists()
    _ended(host, spec)
    assert not Path(spec.run_dir, "pgid").exists()
    record = read_exit_record(str(spec.log_path), spec.run_dir)
    assert record is not None and record["exit_status"] == "3" and "stopped_by" not in record
    assert launch(spec, True)["before_state"] == "finished"
    again = launch(_stopped(spec))
    assert again["result"] == "unchanged" and again["exit_status"] == "3"


@needs_tmux
def test_a_job_that_ended_in_a_dead_pane_is_finished(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression (found by these tests, fixed): _tmux_job._wait_started says state=running (no exit_status) for a job whose exit record is there while its
    # session still exists: it asks has-session, not whether the pane is alive, unlike probe() and the protocol's
    # states ("running: the pane is alive"; "finished: no session (or a dead pane), LOG.exit exists"). remain-on-exit
    # (a tmux.conf setting) keeps the dead pane; without it the same happens on a loaded host while tmux closes it.
    assert host.tmux("new-session", "-d", "-s", "keeper", "sleep 30").returncode == 0
    assert host.tmux("set-option", "-g", "remain-on-exit", "on").returncode == 0
    # The start's first look comes 0.2 s after it began waiting: `exit 3` has ended by then, so the start sees its
    # record (at START_TICK's 0.01 s it may look while the job still runs, and rightly say running: 1 run in 8).
    monkeypatch.setattr(_tmux_job, "START_TICK", 0.2)
    spec = host.spec(command="exit 3")
    facts = launch(spec)
    record = read_exit_record(str(spec.log_path), spec.run_dir)
    assert record is not None and record["exit_status"] == "3"
    assert launch(spec, True)["before_state"] == "finished", "the next probe calls it finished"
    assert (facts["state"], facts.get("exit_status")) == ("finished", "3"), facts


def test_an_attempt_is_over_once_its_leader_is_a_zombie_not_yet_reaped() -> None:
    # Regression (found by CI, fixed): _wait_started stopped waiting for the exit record as soon as the job's group
    # answered killpg(0), which a zombie leader does: between the job's end and its supervisor's reap the start said
    # state=running with no exit record (test_a_job_that_ended_in_a_dead_pane_is_finished failed 1 time in 20).
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert not _tmux_job._attempt_over(str(proc.pid)), "a running leader: not over"
    finally:
        proc.kill()
    deadline = time.monotonic() + 10
    while not _tmux_job._attempt_over(str(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.path.exists(f"/proc/{proc.pid}"), "still unreaped"
    assert _tmux_job._attempt_over(str(proc.pid)), "a zombie leader: over"
    proc.wait()
    assert _tmux_job._attempt_over(str(proc.pid)), "its group gone: over"
    assert not _tmux_job._attempt_over(""), "no pgid file yet: nothing to wait for"


def test_source_of_is_the_text_of_each_staged_module() -> None:
    # Regression (found by these tests, fixed): parent_source() (now _job_stage.source_of) returned bytes when the parent was imported through
    # Ansible's collection loader (ansible-test units, tests/conftest.py): _AnsibleCollectionLoader.get_source() gives the file's bytes, and
    # write_whole() then fails with AttributeError: 'bytes' object has no attribute 'encode' (zipimport, as in
    # AnsiballZ, and SourceFileLoader give str).
    for module in _job_stage.PROGRAM:
        source = _job_stage.source_of(module)
        assert isinstance(source, str), type(source)
        assert source == Path(str(module.__file__)).read_text(encoding="utf-8")


@needs_tmux
def test_launch_starts_a_job_with_the_supervisor_as_loaded(server: Host) -> None:
    # Regression (found by these tests, fixed): the same as test_source_of_is_the_text_of_each_staged_module, seen by launch(): without the text of
    # the supervisor's entry every start fails, here with AttributeError from write_whole (parent_source() gave bytes).
    spec = server.spec(command="sleep 30")
    facts = launch(spec)
    assert facts["result"] == "started" and facts["state"] == "running", facts
    assert Path(spec.run_dir, "supervisor.py").read_text(encoding="utf-8") == SUPERVISOR_TEXT


# ---- ported from the tests of the removed in-container sh launch program: the same behaviour, on this host ----


@needs_tmux
def test_append_adds_the_launch_to_the_log(host: Host) -> None:
    spec = host.spec(command="echo run", log_mode="append")
    Path(str(spec.log_path)).write_text("old\n", encoding="utf-8")
    Path(str(spec.log_path) + ".exit").write_text("session_name=earlier\nexit_status=9\n", encoding="utf-8")
    facts = launch(spec)
    assert facts["result"] == "started" and facts["rotated_log"] == "", facts
    _ended(host, spec)
    lines = _text(spec.log_path).splitlines()
    assert lines[0] == "old" and lines[1].startswith(f"### trainops.pct_launch: session={spec.session_name} started_at="), lines
    assert lines[2] == "run" and len(lines) == 4
    record = read_exit_record(str(spec.log_path), spec.run_dir)
    assert record is not None and record["session_name"] == spec.session_name and record["exit_status"] == "0", "the new record only"
    assert sorted(p.name for p in host.logs.iterdir()) == [Path(str(spec.log_path)).name, Path(str(spec.log_path)).name + ".exit"]


@needs_tmux
def test_tmux_missing_starts_nothing_and_a_stop_is_unchanged(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tmux_cli, "CLEAN_PATH", str(host.tmp_path / "no-tools"))
    spec = host.spec(command="echo must-not-run")
    for check_mode in (True, False):
        with pytest.raises(JobError) as caught:
            launch(spec, check_mode)
        assert caught.value.code == "tmux_missing", caught.value
    _assert_nothing_started(host, spec)
    facts = launch(_stopped(spec, command=None, log_path=None))
    assert facts["result"] == "unchanged" and "tmux_version" not in facts, facts


@needs_tmux
def test_a_stop_of_a_finished_job_reports_its_exit_status_with_or_without_log_path(host: Host) -> None:
    spec = host.spec(command="echo done; exit 3")
    launch(spec)
    _ended(host, spec)
    for log_path in (None, spec.log_path):
        stop = _stopped(spec, log_path=log_path, command=None)
        facts = launch(stop)
        assert facts["before_state"] == "finished" and facts["exit_status"] == "3" and facts["result"] == "unchanged", facts
        out = result(stop, facts, False)
        assert out["state"] == "finished" and out["exit_status"] == 3 and out["log_path"] == spec.log_path and not out["changed"], out


@needs_tmux
def test_a_stop_with_int_reaches_a_python_job_as_keyboard_interrupt(host: Host) -> None:
    code = "import time\ntry:\n    print('ready', flush=True); time.sleep(60)\nexcept KeyboardInterrupt:\n    print('graceful'); raise SystemExit(5)\n"
    spec = host.spec(argv=[sys.executable, "-c", code])
    launch(spec)
    # the line the job prints, not the log's header, whose command holds the word too: a signal before the job's
    # try block (Python still starting) would end it otherwise
    _wait_for(lambda: "ready" in _text(spec.log_path).splitlines())
    facts = launch(_stopped(spec, stop_signal="INT", stop_timeout=10))
    assert facts["result"] == "stopped" and facts["exit_status"] == "5" and facts["killed"] == "0", facts
    assert "graceful" in _text(spec.log_path).splitlines()
    record = read_exit_record(str(spec.log_path), spec.run_dir)
    assert record is not None and record["stop_signal"] == "INT" and record["stopped_by"] == "trainops"


@needs_tmux
def test_a_script_without_execute_bit_says_how_to_fix(host: Host) -> None:
    script = host.tmp_path / "start.sh"
    script.write_text("#!/bin/sh\necho started\n", encoding="utf-8")
    script.chmod(0o644)
    spec = host.spec(argv=[str(script)])
    with pytest.raises(JobError) as caught:
        launch(spec)
    assert caught.value.code == "script_missing"
    assert str(caught.value) == (f"script {script} is not executable: make it executable (chmod +x {script}) "
                                 f"or run it through its interpreter (argv: [sh, {script}])")
    _assert_nothing_started(host, spec)


@needs_tmux
def test_a_started_job_says_whether_its_start_was_proven(host: Host) -> None:
    spec = host.spec(command="echo up; exec sleep 30")
    facts = launch(spec)
    assert facts["result"] == "started" and "proven" not in facts, facts
    assert launch(spec)["proven"] == "0"
    assert host.tmux("set-option", "-t", f"={spec.session_name}:", "@trainops_proven", "2025-01-01T00:00:00Z").returncode == 0
    facts = launch(spec)
    assert facts["result"] == "unchanged" and facts["proven"] == "1" and facts["before_proven"] == "1", facts
    assert result(spec, facts, False)["proven"] is True
    facts = launch(spec._replace(state="restarted"))
    assert facts["result"] == "started" and result(spec, facts, False)["proven"] is False
    assert launch(spec)["proven"] == "0", "a restarted job is a new session: not proven"


@needs_tmux
def test_values_ending_in_a_semicolon_reach_the_tmux_options_whole(host: Host) -> None:
    """tmux ends a command at an argument ending in ';': the launch's options must keep it as written."""
    spec = host.spec(command="sleep 30;", log_path=str(host.logs / "job;"))
    launch(spec)
    assert host.option(spec.session_name, "@trainops_command") == "sleep 30;"
    assert host.option(spec.session_name, "@trainops_log") == spec.log_path


@needs_tmux
def test_the_exit_record_in_run_stands_in_for_an_empty_log_exit_and_moves_with_its_log(host: Host) -> None:
    spec = host.spec(command="echo run; exit 4")
    launch(spec)
    _ended(host, spec)
    Path(str(spec.log_path) + ".exit").write_bytes(b"")  # as a full file system leaves it
    facts = launch(spec, True)
    assert facts["before_state"] == "finished" and facts["would"] == "start", facts
    other = spec._replace(log_path=str(host.logs / "other.log"))
    Path(str(other.log_path)).write_text("x\n", encoding="utf-8")
    assert launch(other, True)["before_state"] == "vanished", "the record in the run dir belongs to another log"
    record = Path(spec.run_dir, "exit").read_bytes()
    assert b"\nexit_status=4\n" in record
    facts = launch(spec)  # the next launch removes the old record before it starts
    assert facts["result"] == "started" and facts["rotated_log"] == spec.log_path + ".1", facts
    assert Path(str(spec.log_path) + ".1.exit").read_bytes() == record, "the record only the run dir kept moves with its log"
    _ended(host, spec)
    assert Path(str(spec.log_path) + ".exit").read_bytes() == Path(spec.run_dir, "exit").read_bytes()
    assert not list(host.logs.glob("*.tmp.*")) and not list(Path(spec.run_dir).glob("*.tmp.*"))


@needs_tmux
def test_a_full_log_file_system_is_named_and_the_earlier_log_kept(host: Host, small_empty_fs: Path) -> None:
    log = small_empty_fs / "job.log"
    log.write_bytes(b"precious\n" * 100)
    subprocess.run(["dd", "if=/dev/zero", f"of={small_empty_fs / 'filler'}", "bs=1k"], capture_output=True, check=False)
    spec = host.spec(command="echo started; sleep 30", log_path=str(log))
    for attempt in range(3):
        with pytest.raises(JobError) as caught:
            launch(spec)
        message = str(caught.value)
        assert caught.value.code == "start_failed"
        assert message.startswith(f"cannot write the log header to {log}: No space left on device, the file system of {small_empty_fs} is full"), message
        assert (f"(the earlier log is kept as {log}.1)" in message) is (attempt == 0), message
        assert sorted(p.name for p in small_empty_fs.iterdir()) == ["filler", "job.log.1"]
        assert (small_empty_fs / "job.log.1").read_bytes() == b"precious\n" * 100
    assert not host.has_session(spec.session_name)


@needs_tmux
def test_a_session_whose_supervisor_is_ending_is_finished_and_a_start_replaces_it(host: Host) -> None:
    """The supervisor writes the exit record, then the history and its last notifications (up to 10 s for a webhook)
    with its pane alive: the probe calls that finished, and a start ends the old session (its supervisor goes on alone)."""
    spec = host.spec(command="echo second; sleep 30")
    # as at the old job's end: its record is there, its pane (a supervisor still notifying) lives
    assert host.tmux("new-session", "-d", "-s", spec.session_name, "sleep 30").returncode == 0
    Path(spec.run_dir).mkdir(parents=True)
    Path(spec.run_dir, "log_path").write_text(str(spec.log_path), encoding="utf-8")
    Path(str(spec.log_path)).write_text("old job\n", encoding="utf-8")
    _job_process.write_exit_record(spec.run_dir, str(spec.log_path), _job_process.exit_record_text(spec.session_name, 0, "S", "E"))
    planned = launch(spec, True)
    assert (planned["before_state"], planned["would"]) == ("finished", "start"), planned
    facts = launch(spec)
    assert facts["result"] == "started" and facts["state"] == "running", facts
    assert facts["pane_pid"] != planned["before_pane_pid"]
    assert host.tmux("display-message", "-p", "-t", f"={spec.session_name}:", "#{pane_pid}").stdout.strip() == facts["pane_pid"]
