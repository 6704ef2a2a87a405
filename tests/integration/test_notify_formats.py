# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Notifications that reach people, and restarts that know why the job ended (docs/job-life.md), from a real stand-in
container (CT 747) to receivers on 127.0.0.1 that take or refuse a request as each service does
(``notify_receivers.py``, written from the services' documentation):

* a job per ``notify_format``: each service's stand-in takes every event; the JSON event, which Slack refuses
  (``400 no_text``), is a failure ``tmux_session_info`` and ``status.yml`` show;
* no file of the container holds the webhook URL, while the job runs or after it ended;
* ``restart_on: [nccl, oom_kill, signal]``: a ``ValueError`` ends the job at once, a KILL is restarted;
* ``apprise`` (from PyPI, in a venv of the container) as a ``notify_command``, its URL in its own configuration.
"""

from __future__ import annotations

import json
import time
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils._notify_format import FORMATS

from .conftest import StandinNode
from .notify_receivers import receiver, serve
from .playbook_results import PlayRun, container_host, run_playbook, run_tasks

pytestmark = pytest.mark.integration

CT = 747
HOST = f"ct{CT}"
JOB = 'echo "Epoch 1/9 loss=0.93"; sleep 0.5; exit 3'


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> Iterator[int]:
    """Container 747 with tmux; destroyed at the end of the module."""
    standin.create(CT)
    standin.install_tmux(CT, "/w")
    yield CT
    standin.pct("destroy", CT, "--force")


def play(tmp_path: Path, tasks: list[dict[str, t.Any]]) -> PlayRun:
    return run_tasks(tmp_path, {HOST: container_host(CT)}, tasks, timeout=600)


def launch(name: str, command: str = JOB, title: str = "Launch", **options: t.Any) -> dict[str, t.Any]:
    return {"name": title, "trainops.pct_launch.tmux_session": {
        "session_name": name, "command": command, "log_path": f"/w/{name}.log", "chdir": "/w", **options}}


def fresh(test: str) -> str:
    return f"{test}-{uuid.uuid4().hex[:6]}"


def until(condition: t.Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def files_holding(node: StandinNode, needle: str) -> str:
    """The files of the container's file systems (root, /run, /tmp, /dev/shm) that hold ``needle``."""
    script = 'for d in / /run /tmp /dev/shm; do grep -rlsF --exclude-dir=proc --exclude-dir=sys -e "$1" "$d" 2>/dev/null; done; true'
    return node.sh(CT, script, needle, check=False, timeout=300).stdout.decode(errors="replace").strip()


def test_each_format_reaches_its_service_and_no_file_holds_the_url(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    served = {fmt: serve(fmt) for fmt in FORMATS}
    try:
        names = {fmt: fresh(fmt) for fmt in served}
        run = play(tmp_path, [launch(names[fmt], title=f"Launch {fmt}", command='echo "Epoch 1/9"; exec sleep 600',
                                     notify_url=served[fmt][0], notify_format=fmt) for fmt in served])
        assert run.proc.returncode == 0, run.proc.stdout[-3000:]
        token = served["discord"][0]  # the whole URL: its path alone is a fixed sample
        assert files_holding(standin, token) == "", "a file of the container holds the webhook URL while the job runs"
        stop = play(tmp_path, [{"name": f"Stop {fmt}", "trainops.pct_launch.tmux_session": {"session_name": names[fmt], "state": "stopped"}}
                               for fmt in served])
        assert stop.proc.returncode == 0, stop.proc.stdout[-3000:]
        for fmt, (_url, received, _server) in served.items():
            until(lambda received=received: len(received) >= 2)  # started, failed (stopped)
        for fmt, (_url, received, _server) in served.items():
            bodies = [item["body"].decode("utf-8") for item in received]
            assert len(bodies) == 2 and all(names[fmt] in body for body in bodies), (fmt, bodies)
        assert "Epoch 1/9" in served["discord"][1][-1]["body"].decode() and "stopped" in served["slack"][1][-1]["body"].decode()
        assert files_holding(standin, token) == "", "a file of the container holds the webhook URL after the job ended"
    finally:
        for _url, _received, server in served.values():
            server.shutdown()
            server.server_close()


def test_a_refused_notification_shows_in_tmux_session_info_and_status(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = fresh("refused")
    with receiver("slack") as (url, received):
        run = play(tmp_path, [launch(name, notify_url=url)])  # notify_format json: Slack answers 400 no_text
        assert run.proc.returncode == 0, run.proc.stdout[-3000:]
        until(lambda: b"failed failed" in standin.sh(CT, f"cat /run/trainops/{name}/notify.log 2>/dev/null", check=False).stdout)
    assert received == []
    report = play(tmp_path, [{"name": "Report", "trainops.pct_launch.tmux_session_info": {"session_name": name}}])
    session = report.result("Report", HOST)["session"]
    assert session["notify_failures"] == 2 and session["notify_failure"].startswith("notify_url, event failed, at "), session
    assert session["notify_failure"].endswith(": HTTP status 400") and url not in json.dumps(session), session
    status, _results = run_playbook(tmp_path, "status.yml", {HOST: container_host(CT)}, {"job_hosts": HOST, "job_session_name": name})
    row = [line for line in status.stdout.splitlines() if name in line and f"CT {CT}" in line]
    assert status.returncode == 0 and row and " 2 failed " in row[0], status.stdout[-3000:]
    assert "notifications: 2 failed, the last: notify_url, event failed, at " in status.stdout, status.stdout[-3000:]


def test_restart_on_restarts_a_kill_and_ends_a_value_error_at_once(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    crash, killed = fresh("valueerror"), fresh("killed")
    policy = {"restart": "on_failure", "restart_on": ["nccl", "oom_kill", "signal"], "restart_limit": 2, "restart_delay": 0.2}
    raises = "python3 -c 'raise ValueError(\"bad config: lr=-1\")'"
    kills = 'echo "attempt $TRAINOPS_ATTEMPT"; [ "$TRAINOPS_ATTEMPT" = 1 ] && kill -KILL $$; echo done'
    run = play(tmp_path, [launch(crash, command=raises, **policy), launch(killed, command=kills, title="Launch 2", **policy)])
    assert run.proc.returncode == 0, run.proc.stdout[-3000:]

    def record(name: str) -> dict[str, str]:
        text = standin.sh(CT, f'cat "/w/{name}.log.exit" 2>/dev/null', check=False).stdout.decode()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    until(lambda: bool(record(crash)) and bool(record(killed)))
    ended, again = record(crash), record(killed)
    assert (ended["attempts"], ended["cause"]) == ("1", "python_exception"), ended
    assert ended["reason"].endswith("; not restarted: cause python_exception is not in restart_on"), ended
    assert (again["attempts"], again["end_state"], again["exit_status"]) == ("2", "finished", "0"), again


def test_apprise_as_a_notify_command_keeps_its_url_in_its_own_configuration(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    standin.apt_install(CT, "python3-venv")
    standin.sh(CT, "python3 -m venv /w/apprise && /w/apprise/bin/pip install -q apprise >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 1; }",
               timeout=600)
    name = fresh("apprise")
    with receiver("json") as (url, received):
        apprise_url = url.replace("http://", "json://", 1)
        standin.sh(CT, 'umask 077; printf "urls:\\n  - %s\\n" "$1" > /root/apprise.yml', apprise_url)
        run = play(tmp_path, [launch(name, notify_command=["/w/apprise/bin/apprise", "--config", "/root/apprise.yml", "-t", "trainops"],
                                     notify_states=["failed"])])
        assert run.proc.returncode == 0, run.proc.stdout[-3000:]
        until(lambda: bool(received), timeout=60)
    message = json.loads(received[0]["body"])
    assert message["title"] == "trainops" and json.loads(message["message"])["event"] == "failed", message
