# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The job's whole life under its supervisor (docs/job-life.md), on real stand-in containers.

Every step is an ``ansible-playbook`` run of the collection's modules in the container through the pct
connection (``playbook_results.run_tasks``); the supervisor runs in the container's tmux pane, with
nothing on the controller once a play has ended:

* a job failing twice then running is restarted twice: the proof comes from its third attempt, the
  wait for its end passes, and tmux_session_info reports 3 attempts and ``finished``;
* a job over its time limit (its TERM ignored) is killed and recorded as ``timeout``;
* a job that goes silent is recorded as ``stalled`` by the supervisor within its window plus one poll
  (from the supervisor's own timestamps in state.json: seconds, so the window plus one second);
* a webhook on a real HTTP server on 127.0.0.1 (the stand-in's containers share the host's network)
  receives every state change: started, restarted, proven, stalled, timeout, failed from one job,
  started, proven and finished from another, each with the session, host, exit status, reason and log lines;
* a real OOM kill in a container with a memory limit (``pct create --memory``) is reported as such,
  from the cgroup's counter;
* the history shows every launch after its play has ended.

VMIDs: 655 (most tests), 656 (memory limit 192 MB).
"""

from __future__ import annotations

import calendar
import json
import time
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import StandinNode
from .playbook_results import PlayRun, container_host, run_tasks

pytestmark = pytest.mark.integration

CT, CT_SMALL = 655, 656
HOST, HOST_SMALL = f"ct{CT}", f"ct{CT_SMALL}"
# Fails on its first two attempts (a traceback each), proves its start on the third, then ends well.
FLAKY = ('echo "attempt $TRAINOPS_ATTEMPT"; if [ "$TRAINOPS_ATTEMPT" -lt 3 ]; then '
         'echo "Traceback (most recent call last):"; echo "RuntimeError: flaky $TRAINOPS_ATTEMPT"; exit 3; fi; '
         'echo "Epoch 1/2"; sleep 2; echo "Epoch 2/2"; exit 0')


def _prepare(node: StandinNode, vmid: int, *create: str) -> int:
    if node.pct("config", vmid).returncode == 0:
        node.pct("destroy", vmid, "--force", check=True)
    node.pct("create", vmid, "--release", "bookworm", "--start", "1", *create, check=True)
    node.created.append(vmid)
    node.install_tmux(vmid, "/w")
    return vmid


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> Iterator[int]:
    """Container 655 with tmux; destroyed at the end of the module."""
    yield _prepare(standin, CT)
    standin.pct("destroy", CT, "--force")


def play(tmp_path: Path, tasks: list[dict[str, t.Any]], host: str = HOST, vmid: int = CT) -> PlayRun:
    return run_tasks(tmp_path, {host: container_host(vmid)}, tasks, timeout=600)


def launch(name: str, command: str, **options: t.Any) -> dict[str, t.Any]:
    return {"name": "Launch", "trainops.pct_launch.tmux_session": {
        "session_name": name, "command": command, "log_path": f"/w/{name}.log", "chdir": "/w", **options}}


def wait(name: str, **options: t.Any) -> dict[str, t.Any]:
    return {"name": f"Wait {options.get('wait_until', 'started')}", "ignore_errors": True,
            "trainops.pct_launch.wait_for_log": {"session_name": name, "timeout": 120, **options}}


def info(name: str, **options: t.Any) -> dict[str, t.Any]:
    return {"name": "Report", "trainops.pct_launch.tmux_session_info": {"session_name": name, **options}}


def record(node: StandinNode, vmid: int, name: str) -> dict[str, str]:
    text = node.sh(vmid, 'cat "$1"', f"/w/{name}.log.exit").stdout.decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def fresh(test: str) -> str:
    return f"{test}-{uuid.uuid4().hex[:6]}"


@pytest.mark.both_privileges
def test_a_job_failing_twice_then_running_is_restarted_twice_and_reported_with_3_attempts(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = fresh("flaky")
    run = play(tmp_path, [launch(name, FLAKY, restart="on_failure", restart_delay=0.5),
                          wait(name, pattern="^Epoch 1/"), wait(name, wait_until="finished"), info(name)])
    assert run.proc.returncode == 0, run.proc.stdout[-4000:]
    assert run.result("Wait started", HOST)["verdict"] == "started"
    assert run.result("Wait finished", HOST)["verdict"] == "finished"
    session = run.result("Report", HOST)["sessions"][0]
    assert (session["state"], session["attempts"], session["end_state"], session["exit_status"]) == ("finished", 3, "finished", 0), session
    assert record(standin, ct, name)["attempts"] == "3"
    log = standin.sh(ct, 'cat "$1"', f"/w/{name}.log").stdout.decode().splitlines()
    assert [line for line in log if line.startswith("attempt ")] == ["attempt 1", "attempt 2", "attempt 3"]


@pytest.mark.both_privileges
def test_a_job_over_its_time_limit_is_recorded_as_timeout(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = fresh("limit")
    run = play(tmp_path, [launch(name, "trap '' TERM; echo Epoch 1/9; while :; do sleep 1; done", time_limit=4, time_limit_grace=1),
                          wait(name, wait_until="finished", timeout=60), info(name)])
    waited = run.result("Wait finished", HOST)
    assert waited["verdict"] == "failed" and waited["end_state"] == "timeout", waited
    session = run.result("Report", HOST)["sessions"][0]
    assert (session["end_state"], session["cause"], session["exit_status"], session["signal"]) == ("timeout", "time_limit", 137, "KILL")
    assert "time limit of 4 s" in session["reason"]


@pytest.mark.both_privileges
def test_a_job_that_goes_silent_is_recorded_as_stalled_within_its_window_plus_one_poll(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = fresh("silent")
    run = play(tmp_path, [launch(name, "echo step 1; sleep 600", stall_timeout=3)])
    assert run.proc.returncode == 0, run.proc.stdout[-3000:]
    state_file = f"/run/trainops/{name}/state.json"
    out = standin.sh(ct, 'for i in $(seq 100); do grep -q \'"state": "stalled"\' "$1" && cat "$1" && exit 0; sleep 0.1; done; cat "$1"; exit 1',
                     state_file, check=False)
    assert out.returncode == 0, out.stdout.decode()
    state = json.loads(out.stdout)
    stalled_at, last_output = (_seconds(state[key]) for key in ("since", "last_output_at"))
    assert 3 <= stalled_at - last_output <= 3 + 1, state  # the window, plus one poll (0.25 s) within the record's 1 s resolution
    report = play(tmp_path, [info(name), {"name": "Stop", "trainops.pct_launch.tmux_session": {"session_name": name, "state": "stopped"}}])
    session = report.result("Report", HOST)["sessions"][0]
    assert (session["state"], session["supervisor_state"]) == ("running", "stalled"), session
    assert session["last_progress_age"] is not None and session["last_progress_age"] >= 3


def _seconds(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


def test_the_webhook_receives_every_state_change(ct: int, standin: StandinNode, tmp_path: Path,
                                                 webhook: tuple[str, list[dict[str, t.Any]]]) -> None:
    url, events = webhook
    bad, good = fresh("hooked"), fresh("hooked-ok")
    job = ('echo "attempt $TRAINOPS_ATTEMPT"; [ "$TRAINOPS_ATTEMPT" = 1 ] && exit 1; echo "Epoch 1/9"; sleep 600')
    run = play(tmp_path, [
        launch(bad, job, restart="on_failure", restart_delay=0.2, stall_timeout=2, time_limit=7, time_limit_grace=1, notify_url=url),
        wait(bad, pattern="^Epoch 1/"), wait(bad, wait_until="finished", timeout=60),
        launch(good, "echo Epoch 1/1; sleep 1; exit 0", notify_url=url), wait(good, wait_until="finished", timeout=60)])
    assert run.result("Wait finished", HOST)["verdict"] == "finished", run.proc.stdout[-3000:]
    assert url not in run.proc.stdout, "the webhook URL is a secret"
    _wait_events(events, lambda got: sum(e["event"] in ("finished", "failed") for e in got) == 2)
    of_bad = [e for e in events if e["session_name"] == bad]
    assert [e["event"] for e in of_bad] == ["started", "restarted", "proven", "stalled", "timeout", "failed"], of_bad
    assert [e["event"] for e in events if e["session_name"] == good] == ["started", "proven", "finished"]  # its wait proved it
    failed = of_bad[-1]
    assert (failed["end_state"], failed["exit_status"], failed["attempts"], failed["host"]) == ("timeout", 143, 2, f"CT{CT}"), failed
    assert failed["reason"] and "Epoch 1/9" in failed["log_tail"]


def _wait_events(events: list[dict[str, t.Any]], done: t.Callable[[list[dict[str, t.Any]]], bool]) -> None:
    deadline = time.monotonic() + 20
    while not done(events) and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.mark.both_privileges
def test_a_real_oom_kill_in_a_memory_limited_container_is_reported_as_such(standin: StandinNode, tmp_path: Path) -> None:
    _prepare(standin, CT_SMALL, "--memory", "192")
    try:
        name = fresh("oom")
        run = play(tmp_path, [launch(name, "echo loading; python3 -c 'b = bytearray(1 << 30); print(len(b))'"),
                              wait(name, wait_until="finished", timeout=60), info(name)], host=HOST_SMALL, vmid=CT_SMALL)
        waited = run.result("Wait finished", HOST_SMALL)
        assert waited["verdict"] == "failed" and waited["end_state"] == "oom_killed", waited
        assert "OOM" in waited["msg"]
        session = run.result("Report", HOST_SMALL)["sessions"][0]
        assert (session["end_state"], session["cause"], session["exit_status"]) == ("oom_killed", "oom_kill", 137), session
    finally:
        standin.pct("destroy", CT_SMALL, "--force")


def test_history_shows_every_launch_after_the_play_has_ended(ct: int, tmp_path: Path) -> None:
    first, second = fresh("hist"), fresh("hist")
    play(tmp_path, [launch(first, "echo Epoch 1/1; exit 0"), wait(first, wait_until="finished"),
                    launch(second, "echo Epoch 1/1; exit 4"), wait(second, wait_until="finished")])
    history = play(tmp_path, [info(first, history=True)]).result("Report", HOST)["history"]
    assert [(h["session_name"], h["end_state"], h["exit_status"], h["attempts"]) for h in history] == [(first, "finished", 0, 1)]
    every = play(tmp_path, [{"name": "Report", "trainops.pct_launch.tmux_session_info": {"history": True}}]).result("Report", HOST)["history"]
    mine = [(h["session_name"], h["end_state"], h["exit_status"]) for h in every if h["session_name"] in (first, second)]
    assert mine == [(first, "finished", 0), (second, "failed", 4)]
