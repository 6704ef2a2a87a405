# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A job whose container shuts down cleanly, or is killed, and a job near its memory limit (docs/job-life.md), on
real stand-in containers.

``pct shutdown`` and ``pct reboot`` stop the container as pve-container does (``lxc-stop`` without ``--kill``):
LXC sends systemd SIGRTMIN+3, systemd stops its services, then systemd-shutdown SIGTERMs every process left, the
job, its supervisor and tmux among them. ``pct stop`` is ``lxc-stop --kill``: everything is SIGKILLed at once.

* ``pct shutdown`` and ``pct reboot`` (VMID 735): the job ends ``stopped`` / ``shutdown`` in its exit record and
  the history, the webhook on 127.0.0.1 gets the end event, ``restart: on_failure`` does not start it again, and a
  wait_for_log waiting meanwhile fails within seconds naming the shutdown;
* ``pct stop``: no exit record, the history's entry stays without an end (not called a shutdown);
* a container of 64 MB (VMID 736, ``pct create --memory 64``): a job over it is OOM-killed (``oom_killed``), and the
  counters its supervisor compares, read in the container, grow: PSI's stall time while the container reclaims its
  page cache to stay under the limit, and ``oom_kill`` (the limit itself is out of the container's sight, as on
  Proxmox VE: see _job_memory.py).
"""

from __future__ import annotations

import json
import threading
import time
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import StandinNode
from .playbook_results import PlayRun, container_host, run_playbook, run_tasks

pytestmark = pytest.mark.integration

CT, CT_SMALL = 735, 736
HOST, HOST_SMALL = f"ct{CT}", f"ct{CT_SMALL}"
JOB = "echo Epoch 1; while :; do sleep 0.2; done"
# every process of a container that shuts down gets SIGTERM within a second here; the wait's answer comes with it
PROMPT = 30.0


def _prepare(node: StandinNode, vmid: int, *create: str) -> int:
    if node.pct("config", vmid).returncode == 0:
        node.pct("destroy", vmid, "--force", check=True)
    node.pct("create", vmid, "--release", "bookworm", "--start", "1", *create, check=True)
    node.created.append(vmid)
    node.install_tmux(vmid, "/w")
    return vmid


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> Iterator[int]:
    """Container 735 with tmux; destroyed at the end of the module."""
    yield _prepare(standin, CT)
    standin.pct("destroy", CT, "--force")


@pytest.fixture()
def running(ct: int, standin: StandinNode) -> int:
    """Container 735, started again if an earlier test shut it down."""
    if b"running" not in standin.pct("status", ct).stdout:
        standin.pct("start", ct, check=True)
    return ct


def play(tmp_path: Path, tasks: list[dict[str, t.Any]], host: str = HOST, vmid: int = CT) -> PlayRun:
    return run_tasks(tmp_path, {host: container_host(vmid)}, tasks, timeout=600)


def launch(name: str, command: str, **options: t.Any) -> dict[str, t.Any]:
    return {"name": "Launch", "trainops.pct_launch.tmux_session": {
        "session_name": name, "command": command, "log_path": f"/w/{name}.log", "chdir": "/w", **options}}


def wait(name: str, **options: t.Any) -> dict[str, t.Any]:
    return {"name": "Wait", "ignore_errors": True,
            "trainops.pct_launch.wait_for_log": {"session_name": name, "timeout": 300, **options}}


def info(name: str) -> dict[str, t.Any]:
    return {"name": "Report", "trainops.pct_launch.tmux_session_info": {"session_name": name, "log_path": f"/w/{name}.log",
                                                                        "history": True}}


def record(node: StandinNode, vmid: int, name: str) -> dict[str, str]:
    text = node.sh(vmid, 'cat "$1" 2>/dev/null', f"/w/{name}.log.exit", check=False).stdout.decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def fresh(test: str) -> str:
    return f"{test}-{uuid.uuid4().hex[:6]}"


def _in_ct(node: StandinNode, vmid: int, condition: str, timeout: float = 60) -> None:
    script = f'i=0; until {condition}; do i=$((i+1)); [ "$i" -gt {int(timeout * 10)} ] && exit 1; sleep 0.1; done'
    assert node.sh(vmid, script, check=False, timeout=timeout + 60).returncode == 0, f"CT {vmid}: {condition} never held"


def _during_the_wait(node: StandinNode, vmid: int, verb: str, seen: dict[str, t.Any]) -> None:
    """Once the wait's chunk runs in the container (python3 reading its module from stdin), stop the container so."""
    _in_ct(node, vmid, "pgrep -xf /usr/bin/python3 >/dev/null")
    time.sleep(1)
    seen["at"] = time.monotonic()
    seen["pct"] = node.pct(verb, vmid, timeout=180)


@pytest.mark.parametrize("verb", ["shutdown", "reboot"])
def test_a_clean_shutdown_ends_the_job_recorded_notified_not_restarted_and_the_wait_names_it(
        running: int, standin: StandinNode, tmp_path: Path, webhook: tuple[str, list[dict[str, t.Any]]], verb: str) -> None:
    url, events = webhook
    name = fresh(verb)
    run = play(tmp_path, [launch(name, JOB, restart="on_failure", restart_delay=0.2, notify_url=url), wait(name, pattern="^Epoch")])
    assert run.result("Wait", HOST)["verdict"] == "started", run.proc.stdout[-3000:]
    seen: dict[str, t.Any] = {}
    stopper = threading.Thread(target=_during_the_wait, args=(standin, running, verb, seen))
    stopper.start()
    try:
        waited = play(tmp_path, [wait(name, wait_until="finished")])
        ended = time.monotonic()
    finally:
        stopper.join()
    assert seen["pct"].returncode == 0, seen["pct"].stderr
    result = waited.result("Wait", HOST)
    assert result.get("verdict") != "finished" and ended - seen["at"] < PROMPT, (ended - seen["at"], result)
    assert "shut down" in result["msg"], result["msg"]  # the chunk's answer, or the chunk's SIGTERM and the stopped container
    if verb == "shutdown":
        assert b"status: stopped" in standin.pct("status", running).stdout
        standin.pct("start", running, check=True)
    end = record(standin, running, name)
    assert (end["end_state"], end["cause"], end["attempts"]) == ("stopped", "shutdown", "1"), end
    assert end["reason"].startswith("the container shut down (its init stopped every process; PID 1 was systemd-shutdown): ")
    report = play(tmp_path, [info(name)]).result("Report", HOST)
    session, history = report["session"], report["history"][-1]
    assert (session["state"], session["end_state"], session["cause"]) == ("finished", "stopped", "shutdown"), session
    assert (history["end_state"], history["cause"], history["reason"]) == ("stopped", "shutdown", end["reason"]), history
    assert "attempt=2" not in standin.sh(running, 'cat "$1"', f"/w/{name}.log").stdout.decode()
    status, _results = run_playbook(tmp_path, "status.yml", {HOST: container_host(running)},
                                    {"job_hosts": HOST, "job_session_name": name, "job_log_path": f"/w/{name}.log", "job_status_lines": 0})
    row = [line for line in status.stdout.splitlines() if name in line and "CT 735" in line]
    assert status.returncode == 0 and row and " stopped " in row[0] and end["reason"] in row[0], status.stdout[-3000:]
    deadline = time.monotonic() + 20
    while not any(e["event"] == "failed" for e in events) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [e["event"] for e in events] == ["started", "proven", "failed"], events
    assert (events[-1]["end_state"], events[-1]["cause"], events[-1]["reason"]) == ("stopped", "shutdown", end["reason"])


def test_pct_stop_kills_the_job_and_is_no_shutdown(running: int, standin: StandinNode, tmp_path: Path,
                                                   webhook: tuple[str, list[dict[str, t.Any]]]) -> None:
    url, events = webhook
    name = fresh("killed")
    run = play(tmp_path, [launch(name, JOB, restart="on_failure", notify_url=url), wait(name, pattern="^Epoch")])
    assert run.result("Wait", HOST)["verdict"] == "started", run.proc.stdout[-3000:]
    # the supervisor notes the proof at its next look (TICK) and then sends it: a stop before that loses it
    deadline = time.monotonic() + 20
    while not any(e["event"] == "proven" for e in events) and time.monotonic() < deadline:
        time.sleep(0.1)
    standin.pct("stop", running, check=True)
    standin.pct("start", running, check=True)
    assert record(standin, running, name) == {}
    report = play(tmp_path, [info(name)]).result("Report", HOST)
    assert report["session"]["state"] == "vanished" and report["history"][-1]["end_state"] == "running", report
    time.sleep(1)
    assert [e["event"] for e in events] == ["started", "proven"], events


@pytest.fixture(scope="module")
def small(standin: StandinNode) -> Iterator[int]:
    """Container 736, held to 64 MB (pct create --memory 64), with files larger than that to read."""
    _prepare(standin, CT_SMALL, "--memory", "64")
    standin.sh(CT_SMALL, "for f in big big2; do dd if=/dev/zero of=/w/$f bs=1M count=120 status=none conv=fsync; done")
    yield CT_SMALL
    standin.pct("destroy", CT_SMALL, "--force")


def test_a_job_over_its_memory_limit_is_oom_killed(small: int, tmp_path: Path) -> None:
    name = fresh("oom")
    run = play(tmp_path, [launch(name, "echo loading; python3 -c 'b = bytearray(200 << 20)'"), wait(name, wait_until="finished"),
                          info(name)], host=HOST_SMALL, vmid=small)
    waited = run.result("Wait", HOST_SMALL)
    assert (waited["verdict"], waited["end_state"], waited["cause"]) == ("failed", "oom_killed", "oom_kill"), waited
    history = run.result("Report", HOST_SMALL)["history"][-1]
    assert (history["end_state"], history["exit_status"]) == ("oom_killed", 137) and "OOM killer" in history["reason"], history


SNAPSHOT = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_memory; "
            "print(json.dumps(_job_memory.snapshot()))")


def test_the_supervisors_memory_counters_read_the_containers_cgroup(small: int, standin: StandinNode, tmp_path: Path) -> None:
    """The counters the supervisor compares, read inside the container by its staged code: the stall time of PSI grows
    while the container reclaims its page cache to stay under 64 MB (its limit is out of its sight, as on Proxmox VE),
    and an OOM kill counts. The words they make are unit-tested (test_job_memory.py, test_job_supervise.py): how many
    seconds a job waits depends on what else the container holds (measured: 1 to 3 s in 10 s of reading)."""
    name = fresh("counters")
    assert play(tmp_path, [launch(name, "echo Epoch 1; sleep 300")], host=HOST_SMALL, vmid=small).proc.returncode == 0
    lib = f"/run/trainops/{name}/lib"

    def snapshot() -> dict[str, int]:
        return json.loads(standin.sh(small, 'python3 -c "$1" "$2"', SNAPSHOT, lib).stdout)

    before = snapshot()
    if "stall_us" not in before:
        pytest.skip(f"no PSI (memory.pressure) in the container's cgroup on this host: {before}")
    standin.sh(small, 'end=$(($(date +%s) + 4)); while [ "$(date +%s)" -lt "$end" ]; do cat /w/big /w/big2 > /dev/null; done')
    read = snapshot()
    assert read["stall_us"] > before["stall_us"], (before, read)
    standin.sh(small, "python3 -c 'b = bytearray(200 << 20)'", check=False)
    killed = snapshot()
    assert killed["oom_kill"] == read["oom_kill"] + 1, (read, killed)
