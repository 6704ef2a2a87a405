# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A job launched for real, cut off as ``pct stop`` cuts it off, and the next boot (``_job_boot``, ``_job_resume``).

Each test launches with ``_tmux_job.launch`` (a tmux server of its own; ``LIVE_DIR``, ``BOOT_DIR``, the run root and
the history in its temp dir), then "stops the container": SIGKILL to the supervisor and the job at once, the tmux
server gone, the run root emptied. The boot is the recorder's ``main`` with a fake ``/proc`` of another boot id.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import time
import typing as t
import uuid
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import (
    _boot_stage,
    _job_boot,
    _job_history,
    _job_live,
    _log_chunk,
    _log_poll,
    _tmux_cli,
    _tmux_job,
    _tmux_sessions,
)
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import CLEAN_PATH, read_exit_record
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_target import JobError
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_job import launch
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import LaunchSpec, spec_from_params

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None or os.geteuid() != 0, reason="needs tmux and root")
BOOT_AT = "2026-03-01T12:00:00Z"
# the job: says its attempt, proves its start, then runs until stopped
JOB = 'echo "attempt $TRAINOPS_ATTEMPT epochs $EPOCHS"; echo "training started"; exec sleep 60'
WAIT = {"fail_pattern": None, "timeout": 10.0, "sleep": 0.1, "tail_lines": 5, "offset": 0, "wait_until": "started", "show_lines": None}


class Container:
    """The test's container: its tmux server, its folders, and a boot."""

    def __init__(self, root: Path, socket: str) -> None:
        self.root, self.socket = root, socket
        self.run_root, self.live, self.boot_dir = root / "run/trainops", root / "var/lib/trainops/jobs", root / "var/lib/trainops/boot"
        self.history, self.logs, self.proc = root / "var/lib/trainops/history.jsonl", root / "workspace", root / "proc"
        self.logs.mkdir()
        (self.proc / "sys/kernel/random").mkdir(parents=True)
        (self.proc / "1").mkdir()
        (self.proc / "sys/kernel/random/boot_id").write_text(f"{uuid.uuid4()}\n", encoding="ascii")
        (self.proc / "1/stat").write_text("1 (systemd) S" + " 0" * 18 + " 42 0 0\n", encoding="ascii")

    def spec(self, **params: t.Any) -> LaunchSpec:
        values = {"session_name": f"ut-{uuid.uuid4().hex[:8]}", "command": JOB, **params}
        values.setdefault("log_path", str(self.logs / f"{values['session_name']}.log"))
        return spec_from_params(values)._replace(run_root=str(self.run_root))

    def tmux(self, *args: str) -> str:
        env = {"PATH": CLEAN_PATH, "HOME": pwd.getpwuid(os.geteuid()).pw_dir or "/"}
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=env, check=False).stdout

    def pull_the_plug(self, spec: LaunchSpec) -> None:
        """``pct stop``: every process killed at once (no exit record), and ``/run`` empty at the next boot."""
        pane = int(self.tmux("display-message", "-p", "-t", f"={spec.session_name}:", "#{pane_pid}").strip())
        pgid = int(Path(spec.run_dir, "pgid").read_text(encoding="ascii"))
        os.kill(pane, signal.SIGKILL)
        os.killpg(pgid, signal.SIGKILL)
        self.tmux("kill-server")
        shutil.rmtree(self.run_root)

    def boot(self) -> int:
        return _job_boot.main(str(self.live), str(self.proc))

    def history_lines(self) -> list[dict[str, t.Any]]:
        return [json.loads(line) for line in self.history.read_text(encoding="utf-8").splitlines()]


@pytest.fixture()
def container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> t.Iterator[Container]:
    socket = f"trainops-ut-{uuid.uuid4().hex[:12]}"
    box = Container(tmp_path, socket)
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", socket)
    monkeypatch.setattr(_boot_stage, "places", lambda spec: (str(box.live), str(box.boot_dir)))
    monkeypatch.setattr(_tmux_job, "history_path", lambda: str(box.history))
    monkeypatch.setattr(_job_live, "boot_time", lambda proc_root="/proc", now=None, since_boot=None: BOOT_AT)
    for module in (_tmux_sessions, _log_poll):
        monkeypatch.setattr(module, "run_root", lambda: str(box.run_root))
    try:
        yield box
    finally:
        box.tmux("kill-server")
        Path("/tmp", f"tmux-{os.geteuid()}", socket).unlink(missing_ok=True)
        for pgid_file in box.run_root.glob("*/pgid"):
            try:
                os.killpg(int(pgid_file.read_text(encoding="ascii")), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def _wait_for(predicate: t.Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _proven(spec: LaunchSpec) -> dict[str, t.Any]:
    return _log_chunk.chunk(dict(WAIT, session_name=spec.session_name, log_path=None, pattern="training started"), check_mode=False)


def _live(container: Container, spec: LaunchSpec) -> dict[str, t.Any]:
    return _job_live.read(str(container.live / f"{spec.session_name}.json")) or {}


@needs_tmux
def test_a_launch_keeps_its_record_while_the_job_runs_and_drops_it_at_the_end(container: Container) -> None:
    spec = container.spec()
    assert launch(spec)["result"] == "started"
    _wait_for(lambda: _live(container, spec).get("state") == "running")
    live = _live(container, spec)
    assert (live["attempt"], live["boot"], live["run_dir"]) == (1, _job_live.boot_key(), spec.run_dir)
    assert json.loads(Path(spec.run_dir, "job.json").read_text(encoding="utf-8"))["live"] == str(container.live / f"{spec.session_name}.json")
    assert launch(spec._replace(state="stopped"))["result"] == "stopped"
    _wait_for(lambda: not (container.live / f"{spec.session_name}.json").exists())
    assert container.boot() == 0 and (read_exit_record(str(spec.log_path), None) or {})["end_state"] == "stopped"


@needs_tmux
def test_a_job_cut_off_is_lost_at_the_next_boot_and_every_reader_says_so(container: Container) -> None:
    spec = container.spec()
    launch(spec)
    assert _proven(spec)["verdict"] == "started"
    container.pull_the_plug(spec)
    status, (facts,) = _tmux_sessions.report(spec.session_name, spec.log_path, 0)
    assert (status, facts["state"]) == ("no_server", "vanished"), "before the boot: what a kill always left"
    assert container.boot() == 0
    record = read_exit_record(str(spec.log_path), None) or {}
    assert (record["end_state"], record["cause"], record["attempts"], record["exit_status"]) == ("lost", "container_restart", "1", "")
    assert record["reason"].startswith(f"lost: the container restarted at {BOOT_AT}; the job was running (attempt 1), its last log "
                                       "line at ") and record["reason"].endswith(": training started")
    entry = _tmux_sessions.session_entry(_tmux_sessions.report(spec.session_name, None, 0)[1][0])
    assert (entry["state"], entry["end_state"], entry["reason"]) == ("finished", "lost", record["reason"])
    (launched,) = _job_history.read(str(container.history))
    assert (launched["end_state"], launched["reason"], launched["attempts"]) == ("lost", record["reason"], 1)


@needs_tmux
def test_restart_on_boot_runs_the_job_again_as_its_next_attempt_and_a_wait_proves_it(container: Container) -> None:
    events = container.root / "events.jsonl"
    spec = container.spec(restart_on_boot=True, restart_limit=2, public_env={"EPOCHS": "3"},
                          notify_command=["sh", "-c", f"cat >> {events}; echo >> {events}"])
    launch(spec)
    assert _proven(spec)["verdict"] == "started"
    _wait_for(lambda: events.exists() and '"proven"' in events.read_text(encoding="utf-8"))
    container.pull_the_plug(spec)
    assert container.boot() == 0
    _wait_for(lambda: "attempt 2 epochs 3" in Path(str(spec.log_path)).read_text(encoding="utf-8"))
    proof = _proven(spec)
    assert (proof["verdict"], proof["session_alive"]) == ("started", True)
    assert proof["offset"] > len(Path(str(spec.log_path)).read_text(encoding="utf-8").split("lost=container_restart")[0]), (
        "proven by the new attempt's line, not by the first one's")
    lines = Path(str(spec.log_path)).read_text(encoding="utf-8").splitlines()
    assert lines[1:3] == ["attempt 1 epochs 3", "training started"]
    assert lines[3] == f"### trainops.pct_launch: session={spec.session_name} attempt=1 lost=container_restart boot_at={BOOT_AT}"
    assert lines[4].startswith(f"### trainops.pct_launch: session={spec.session_name} attempt=2 started_at=")
    assert lines[5:7] == ["attempt 2 epochs 3", "training started"]
    history = container.history_lines()
    assert [line["event"] for line in history] == ["start", "boot_restart"], "the same launch goes on"
    assert (history[1]["attempts"], history[1]["boot_restarts"]) == (2, 1)
    assert history[1]["reason"].endswith("; started again as attempt 2 (restart_on_boot)")
    live = _live(container, spec)
    assert (live["boot"], live["attempt"], live["state"]) == (_job_live.boot_key(str(container.proc)), 2, "running")
    assert launch(spec)["result"] == "unchanged", "a launch of the same job finds it running"
    assert launch(spec._replace(state="stopped"))["result"] == "stopped"
    (launched,) = _job_history.read(str(container.history))
    assert (launched["end_state"], launched["attempts"], launched["boot_restarts"]) == ("stopped", 2, 1)
    _wait_for(lambda: events.exists() and '"failed"' in events.read_text(encoding="utf-8"))
    sent = [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [(event["event"], event["attempt"]) for event in sent] == [("started", 1), ("proven", 1), ("lost", 1), ("restarted", 2),
                                                                      ("proven", 2), ("failed", 2)]
    assert sent[2]["end_state"] is None and sent[2]["reason"] == history[1]["reason"]


@needs_tmux
def test_restart_on_boot_after_a_clean_shutdown_runs_the_job_again(container: Container) -> None:
    spec = container.spec(restart_on_boot=True, public_env={"EPOCHS": "3"})
    launch(spec)
    _wait_for(lambda: _live(container, spec).get("state") == "running")
    started_at = _live(container, spec)["started_at"]
    container.pull_the_plug(spec)  # what the supervisor leaves after a clean shutdown, written for it:
    ended = (f"session_name={spec.session_name}\nexit_status=143\nstarted_at={started_at}\nended_at=2026-03-01T11:00:00Z\n"
             "attempts=1\nend_state=stopped\ncause=shutdown\nreason=the container shut down\n")
    Path(f"{spec.log_path}.exit").write_text(ended, encoding="utf-8")
    _job_history.append(str(container.history), {"event": "end", "session_name": spec.session_name, "started_at": started_at,
                                                 "ended_at": "2026-03-01T11:00:00Z", "end_state": "stopped", "cause": "shutdown",
                                                 "exit_status": 143, "attempts": 1})
    _job_live.ended(str(container.live / f"{spec.session_name}.json"), started_at, 1, again=True)
    assert container.boot() == 0
    _wait_for(lambda: "attempt 2 epochs 3" in Path(str(spec.log_path)).read_text(encoding="utf-8"))
    assert not Path(f"{spec.log_path}.exit").exists(), "it runs again: no exit record says otherwise"
    entry = _tmux_sessions.session_entry(_tmux_sessions.report(spec.session_name, None, 0)[1][0])
    assert (entry["state"], entry["attempts"]) == ("running", 2)
    (launched,) = _job_history.read(str(container.history))
    assert (launched["end_state"], launched["boot_restarts"], launched["ended_at"]) == ("running", 1, None)
    assert launched["reason"] == ("the container shut down at 2026-03-01T11:00:00Z and restarted at 2026-03-01T12:00:00Z; the job had "
                                  "ended (attempt 1, shutdown); started again as attempt 2 (restart_on_boot)")
    assert f"attempt=1 ended=shutdown boot_at={BOOT_AT}" in Path(str(spec.log_path)).read_text(encoding="utf-8")


@needs_tmux
def test_a_launch_that_starts_nothing_leaves_no_record_for_the_next_boot(container: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tmux_cli.Tmux, "new_session", lambda self, name, command, options: (1, "", "no server"))
    spec = container.spec()
    with pytest.raises(JobError, match="tmux new-session failed: no server"):
        launch(spec)
    assert not (container.live / f"{spec.session_name}.json").exists()
