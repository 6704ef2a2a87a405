# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A job whose container goes away without a clean shutdown (docs/job-life.md, "A container that goes away"), on
real stand-in containers with systemd as their init.

``pct stop`` is ``lxc-stop --kill``: the job, its supervisor and tmux are SIGKILLed together, as in a crash or power
loss of the node, and nothing in the container writes the end. At the next ``pct start`` the boot unit of role
``boot_recorder`` (installed by ``prepare.yml``) does:

* ``prepare.yml`` installs and enables the unit once (check mode writes nothing, a second run changes nothing) and
  ``systemd-analyze verify`` accepts it (CT 745);
* a job with a webhook on 127.0.0.1 and ``notify_url_keep``, and a job of another user whose launch did not keep
  its URL: after ``pct stop`` and ``pct start``, with no controller in between, the receiver gets the first one's
  ``lost`` event within seconds of the boot; the second is recorded and nobody is called. ``tmux_session_info``,
  ``wait_for_log``, ``status.yml`` and ``history.yml`` say ``lost`` with the restart named, in unprivileged and
  privileged containers (the boot is told by LXC's boot id and PID 1's start);
* ``restart_on_boot``: the boot starts the job again as attempt 2, marked in its log and history, and a
  ``wait_for_log`` proves that start from the new attempt's lines;
* a clean ``pct shutdown`` keeps the end its supervisor wrote (``stopped``, ``shutdown``), not ``lost``.
"""

from __future__ import annotations

import json
import time
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import StandinNode
from .playbook_results import PlayRun, container_host, run_playbook, run_tasks

pytestmark = pytest.mark.integration

CT = 745
HOST = f"ct{CT}"
USER = "trainer"
UNIT = "/etc/systemd/system/trainops-boot.service"
WANTS = "/etc/systemd/system/multi-user.target.wants/trainops-boot.service"
LIVE_DIR = "/var/lib/trainops/jobs"
JOB = 'echo "attempt $TRAINOPS_ATTEMPT"; echo "Epoch 1/9 loss=0.93"; while :; do sleep 0.2; done'
# the boot unit's lost event comes within seconds of pct start here (measured: about 1 s); a generous bound
PROMPT = 30.0


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> Iterator[int]:
    """Container 745 (systemd) with tmux and a user of its own; destroyed at the end of the module."""
    standin.create(CT)
    standin.install_tmux(CT, "/w")
    standin.sh(CT, f"useradd -m {USER} && chown {USER} /w")
    yield CT
    standin.pct("destroy", CT, "--force")


@pytest.fixture()
def prepared(ct: int, standin: StandinNode, tmp_path: Path) -> int:
    """Container 745 running, the boot unit installed by prepare.yml (nothing to do once it is)."""
    if b"running" not in standin.pct("status", ct).stdout:
        standin.pct("start", ct, check=True)
    proc, _results = prepare(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return ct


def prepare(tmp_path: Path, *options: str) -> tuple[t.Any, dict[str, t.Any]]:
    return run_playbook(tmp_path, "prepare.yml", {HOST: container_host(CT)}, {"job_hosts": HOST}, *options)


def play(tmp_path: Path, tasks: list[dict[str, t.Any]]) -> PlayRun:
    return run_tasks(tmp_path, {HOST: container_host(CT)}, tasks, timeout=600)


def launch(name: str, **options: t.Any) -> dict[str, t.Any]:
    return {"name": "Launch", "trainops.pct_launch.tmux_session": {
        "session_name": name, "command": JOB, "log_path": f"/w/{name}.log", "chdir": "/w", **options}}


def wait(name: str, **options: t.Any) -> dict[str, t.Any]:
    return {"name": "Wait", "ignore_errors": True,
            "trainops.pct_launch.wait_for_log": {"session_name": name, "timeout": 120, "pattern": "^Epoch", **options}}


def info(name: str) -> dict[str, t.Any]:
    return {"name": "Report", "trainops.pct_launch.tmux_session_info": {"session_name": name, "history": True}}


def fresh(test: str) -> str:
    return f"{test}-{uuid.uuid4().hex[:6]}"


def in_ct(node: StandinNode, script: str, *args: str) -> str:
    return node.sh(CT, script, *args, check=False).stdout.decode(errors="replace")


def exit_record(node: StandinNode, name: str) -> dict[str, str]:
    text = in_ct(node, 'cat "$1" 2>/dev/null', f"/w/{name}.log.exit")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def boot_of(node: StandinNode) -> str:
    """The container's boot as the recorder tells it: LXC's boot id and PID 1's start (field 22 of /proc/1/stat)."""
    return in_ct(node, "cat /proc/sys/kernel/random/boot_id; cut -d' ' -f22 /proc/1/stat").strip()


def kill_and_start(node: StandinNode) -> float:
    """``pct stop`` (a kill, as a crash of the node) and ``pct start``; when the start returned (monotonic)."""
    node.pct("stop", CT, check=True)
    node.pct("start", CT, check=True)
    return time.monotonic()


def events_until(events: list[dict[str, t.Any]], wanted: t.Callable[[list[dict[str, t.Any]]], bool], timeout: float) -> float:
    """Wait until ``wanted(events)``; the seconds that took."""
    started = time.monotonic()
    while not wanted(events) and time.monotonic() - started < timeout:
        time.sleep(0.1)
    return time.monotonic() - started


def boot_unit_done(node: StandinNode) -> str:
    """Wait until the boot unit ran (it stays active: RemainAfterExit); its journal."""
    script = ('i=0; until [ "$(systemctl is-active trainops-boot.service)" = active ]; do i=$((i+1)); '
              '[ "$i" -gt 600 ] && { systemctl status trainops-boot.service; exit 1; }; sleep 0.1; done; '
              'journalctl -b -u trainops-boot.service --no-pager -o cat')
    out = node.sh(CT, script, check=False, timeout=120)
    assert out.returncode == 0, out.stdout.decode(errors="replace")
    return out.stdout.decode(errors="replace")


def test_prepare_installs_the_boot_unit_once_and_check_mode_writes_nothing(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    checked, _results = prepare(tmp_path, "--check")
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    assert in_ct(standin, 'ls "$1" "$2" 2>&1 >/dev/null | wc -l', UNIT, WANTS).strip() == "2", "check mode wrote the unit"
    first, _results = prepare(tmp_path)
    assert first.returncode == 0 and "changed=0" not in first.stdout, first.stdout[-3000:]
    assert in_ct(standin, "systemctl is-enabled trainops-boot.service").strip() == "enabled"
    again, results = prepare(tmp_path)
    assert again.returncode == 0 and f"{HOST}" in again.stdout and "changed=0" in again.stdout, again.stdout[-3000:]
    assert results, "the results callback wrote nothing"
    # until a first launch stages the recorder, the unit has nothing to run (ConditionPathExists)
    assert "ConditionPathExists=/var/lib/trainops/boot/boot.py" in in_ct(standin, 'cat "$1"', UNIT)


@pytest.mark.both_privileges
def test_a_job_the_container_stop_cut_off_is_lost_at_the_next_boot_and_its_webhook_told(
        prepared: int, standin: StandinNode, tmp_path: Path, webhook: tuple[str, list[dict[str, t.Any]]]) -> None:
    url, events = webhook
    kept, unkept = fresh("kept"), fresh("unkept")
    run = play(tmp_path, [launch(kept, notify_url=url, notify_url_keep=True), wait(kept),
                          {**launch(unkept, notify_url=url, user=USER), "name": "Launch as user"}, {**wait(unkept), "name": "Wait 2"}])
    assert run.result("Wait", HOST)["verdict"] == "started" and run.result("Wait 2", HOST)["verdict"] == "started", run.proc.stdout[-3000:]
    assert url not in in_ct(standin, f'cat {LIVE_DIR}/*.json 2>/dev/null'), "the URL is kept apart from the records"
    assert in_ct(standin, f'stat -c "%a %U" {LIVE_DIR} {LIVE_DIR}/{kept}.notify').split("\n")[:2] == ["700 root", "600 root"]
    assert events_until(events, lambda seen: len(seen) >= 4, 20) < 20, events
    # the launch staged the recorder the unit runs: systemd finds nothing to object to
    verify = standin.sh(prepared, "systemd-analyze verify trainops-boot.service", check=False)
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr.decode(errors="replace")
    before, count = boot_of(standin), len(events)

    started = kill_and_start(standin)
    took = events_until(events, lambda seen: any(e["event"] == "lost" for e in seen), PROMPT)
    assert boot_of(standin) != before
    lost = [e for e in events[count:] if e["event"] == "lost"]
    assert len(lost) == 1 and took < PROMPT, (took, events)
    print(f"lost event {time.monotonic() - started:.1f} s after pct start returned")
    event = lost[0]
    assert (event["session_name"], event["end_state"], event["cause"], event["exit_status"], event["attempt"]) == (
        kept, "lost", "container_restart", None, 1), event
    assert event["reason"].startswith("lost: the container restarted at ") and "Epoch 1/9 loss=0.93" in event["reason"], event
    assert "Epoch 1/9 loss=0.93" in event["log_tail"], event
    journal = boot_unit_done(standin)
    assert f"session {kept}: lost: the container restarted at " in journal and f"session {unkept}: lost" in journal, journal
    time.sleep(1)
    assert [e["session_name"] for e in events[count:]] == [kept], "the launch that did not keep its URL calls nobody"
    assert "not sent: the launch did not keep the URL" in in_ct(standin, 'cat "$1"', f"/run/trainops/{unkept}/notify.log")
    assert in_ct(standin, f"ls -A {LIVE_DIR}").split() == [], "the records of the lost jobs are gone"

    for name in (kept, unkept):
        end = exit_record(standin, name)
        assert (end["end_state"], end["cause"], end["exit_status"]) == ("lost", "container_restart", ""), end
        assert end["reason"].startswith("lost: the container restarted at ") and "(attempt 1)" in end["reason"], end
        assert f"session={name} attempt=1 lost=container_restart boot_at=" in in_ct(standin, 'tail -n 1 "$1"', f"/w/{name}.log")
    report = play(tmp_path, [info(unkept), wait(unkept, wait_until="finished")])
    session, history = report.result("Report", HOST)["session"], report.result("Report", HOST)["history"][-1]
    assert (session["state"], session["end_state"], session["cause"]) == ("finished", "lost", "container_restart"), session
    assert (history["end_state"], history["cause"]) == ("lost", "container_restart") and history["reason"] == session["reason"]
    waited = report.result("Wait", HOST)
    print(f"wait_for_log: {waited['msg']}")
    assert waited["status"] == "failed" and f"in container {CT}: lost: the container restarted at " in waited["msg"], waited["msg"]

    status, _results = run_playbook(tmp_path, "status.yml", {HOST: container_host(CT)}, {"job_hosts": HOST, "job_session_name": kept})
    row = [line for line in status.stdout.splitlines() if kept in line and f"CT {CT}" in line]
    assert status.returncode == 0 and row and " lost " in row[0] and "the container restarted at" in row[0], status.stdout[-3000:]
    assert f"CT {CT} session {kept}: finished (lost) " in status.stdout, status.stdout[-3000:]
    print("status.yml:", *row, sep="\n")
    shown, _results = run_playbook(tmp_path, "history.yml", {HOST: container_host(CT)}, {"job_hosts": HOST})
    rows = {name: [line for line in shown.stdout.splitlines() if name in line] for name in (kept, unkept)}
    assert shown.returncode == 0 and all(len(found) == 1 and " lost " in found[0] and "the container restarted at" in found[0]
                                         for found in rows.values()), shown.stdout[-3000:]
    print("history.yml:", *rows[kept], *rows[unkept], sep="\n")


def test_restart_on_boot_starts_the_job_again_as_attempt_2_and_a_wait_proves_it(
        prepared: int, standin: StandinNode, tmp_path: Path, webhook: tuple[str, list[dict[str, t.Any]]]) -> None:
    url, events = webhook
    name = fresh("again")
    refused = play(tmp_path, [{**launch(name, restart_on_boot=True, env={"TOKEN": "s3cret"}), "ignore_errors": True}])
    result = refused.result("Launch", HOST)
    assert result["status"] == "failed" and "restart_on_boot" in result["msg"] and "env" in result["msg"] and "s3cret" not in result["msg"], result
    assert in_ct(standin, 'ls "$1" 2>/dev/null', f"/w/{name}.log") == "", "a refused launch starts nothing"

    run = play(tmp_path, [launch(name, restart_on_boot=True, restart_limit=2, notify_url=url, notify_url_keep=True,
                                 public_env={"RUN": "r1"}), wait(name)])
    assert run.result("Wait", HOST)["verdict"] == "started", run.proc.stdout[-3000:]
    # the supervisor sends proven at its next look after the proof: a kill before that loses it
    assert events_until(events, lambda seen: [e["event"] for e in seen] == ["started", "proven"], 20) < 20, events
    kill_and_start(standin)
    journal = boot_unit_done(standin)
    assert f"session {name}: lost: the container restarted at " in journal, journal
    proven = play(tmp_path, [wait(name), info(name)])
    waited = proven.result("Wait", HOST)
    assert waited["verdict"] == "started" and waited["matched_line"].startswith("Epoch"), waited
    report = proven.result("Report", HOST)
    session, history = report["session"], report["history"]
    assert session["state"] == "running" and session["attempts"] == 2, session
    log = in_ct(standin, 'cat "$1"', f"/w/{name}.log")
    assert "attempt 1\n" in log and "attempt 2\n" in log and f"session={name} attempt=1 lost=container_restart" in log, log
    assert log.index("lost=container_restart") < log.index("attempt 2\n"), log
    boot_lines = [json.loads(line) for line in in_ct(standin, "cat /var/lib/trainops/history.jsonl").splitlines()
                  if f'"{name}"' in line and '"boot_restart"' in line]
    assert len(boot_lines) == 1 and history[-1]["end_state"] == "running", (boot_lines, history)
    assert events_until(events, lambda seen: [e["event"] for e in seen][-2:] == ["restarted", "proven"], 20) < 20, events
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["started", "proven"] and kinds.index("lost") < kinds.index("restarted"), kinds
    assert next(e for e in events if e["event"] == "lost")["end_state"] is None, "started again: not an end"
    stopped = play(tmp_path, [{"name": "Stop", "trainops.pct_launch.tmux_session": {"session_name": name, "state": "stopped"}}])
    assert stopped.result("Stop", HOST)["changed"], stopped.proc.stdout[-3000:]
    assert in_ct(standin, f"ls -A {LIVE_DIR}").split() == [], "a stopped job leaves nothing for the next boot"


def test_a_clean_shutdown_keeps_its_end_and_is_not_lost(prepared: int, standin: StandinNode, tmp_path: Path) -> None:
    name = fresh("clean")
    run = play(tmp_path, [launch(name), wait(name)])
    assert run.result("Wait", HOST)["verdict"] == "started", run.proc.stdout[-3000:]
    standin.pct("shutdown", CT, check=True, timeout=180)
    standin.pct("start", CT, check=True)
    boot_unit_done(standin)
    end = exit_record(standin, name)
    assert (end["end_state"], end["cause"]) == ("stopped", "shutdown"), end
    assert "lost=" not in in_ct(standin, 'cat "$1"', f"/w/{name}.log")
    history = play(tmp_path, [info(name)]).result("Report", HOST)["history"][-1]
    assert (history["end_state"], history["cause"]) == ("stopped", "shutdown"), history
    assert in_ct(standin, f"ls -A {LIVE_DIR}").split() == []


def test_restart_on_boot_after_a_clean_shutdown_starts_the_job_again(prepared: int, standin: StandinNode, tmp_path: Path) -> None:
    """A vzdump backup in mode stop shuts the container down and starts it again: the end its supervisor wrote stays in
    the history, and the boot starts the job again as attempt 2."""
    name = fresh("backup")
    run = play(tmp_path, [launch(name, restart_on_boot=True), wait(name)])
    assert run.result("Wait", HOST)["verdict"] == "started", run.proc.stdout[-3000:]
    standin.pct("shutdown", CT, check=True, timeout=180)
    standin.pct("start", CT, check=True)
    journal = boot_unit_done(standin)
    assert f"session {name}: the container shut down at " in journal and "started again as attempt 2 (restart_on_boot)" in journal
    proven = play(tmp_path, [wait(name), info(name)])
    assert proven.result("Wait", HOST)["verdict"] == "started", proven.proc.stdout[-3000:]
    report = proven.result("Report", HOST)
    assert report["session"]["state"] == "running" and report["session"]["attempts"] == 2, report["session"]
    log = in_ct(standin, 'cat "$1"', f"/w/{name}.log")
    assert f"session={name} attempt=1 ended=shutdown boot_at=" in log and "attempt 2\n" in log, log
    lines = [json.loads(line) for line in in_ct(standin, "cat /var/lib/trainops/history.jsonl").splitlines() if f'"{name}"' in line]
    assert [line["event"] for line in lines] == ["start", "end", "boot_restart"], lines
    assert (lines[1]["end_state"], lines[1]["cause"]) == ("stopped", "shutdown"), lines[1]
    assert in_ct(standin, 'ls "$1" 2>/dev/null', f"/w/{name}.log.exit") == "", "the job runs again: no exit record"
    play(tmp_path, [{"name": "Stop", "trainops.pct_launch.tmux_session": {"session_name": name, "state": "stopped"}}])
