# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A launch that was never proven gets proven on the re-run; the exit status survives a full log file system.

Against real containers behind the Proxmox VE stand-in (tmux installed with apt once per container), the
modules running in the container, an inventory host reached with the collection's pct connection
(``playbook_results.container_host`` and ``run_tasks`` for single tasks; playbooks/launch.yml on a group of one):

* Proof on the re-run: a job launched with trainops.pct_launch.tmux_session alone (as a launch whose
  controller died before wait_for_log said "started"; one ``pct exec``, counted by a ``pct_path`` wrapper
  that logs every call), then playbooks/launch.yml with
  ``job_prepare: false``: tmux_session returns ``proven: false``, the task "Prove the start of a job
  that runs unproven" runs wait_for_log and passes, the summary says "already running: start proven
  now", and ``@trainops_proven`` is set on the session. A second re-run makes no proof: one
  ``pct exec`` for the launch part (the ``EXEC`` lines of the ``-vvv`` output per task), tmux_session
  returns ``proven: true``, changed=0. The same for a job that launch.yml started and its handler proved.
* An unproven hung job (never prints the pattern): the re-run fails on the timeout of the proof
  (short ``job_wait_timeout``), with the usual message, and leaves the job running.
* Full log file system: a 64 KiB tmpfs in the container is the log's directory; the job fills it and
  exits 3. LOG.exit is missing (no room for it), ``/run/trainops/NAME/exit`` (mode 0600) has the record,
  and wait_for_log (verdict died) and tmux_session_info (state finished) report exit status 3 (the
  job's parent loses its trailer line to ENOSPC, never the record).

VMIDs: 640 (proof), 641 (full file system).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import REPO, STANDIN_PCT, StandinNode
from .playbook_results import PlayRun, container_host, exec_calls, report_msg, run_tasks, summary_lines, task_results

pytestmark = pytest.mark.integration

CT_PROOF, CT_FULL = 640, 641
FULL = "/w/full"
PYTHON = "/usr/bin/python3"
CALLBACK_DIR = Path(__file__).resolve().parent / "files" / "playbooks" / "callback_plugins"
BIN = Path(sys.executable).parent
LAUNCH = "Start the job in its detached tmux session"
REPROOF = "Prove the start of a job found running, or wait for its end"
HANDLER = "Wait for the job's log to prove it started"
PATTERN = r"^step \d+ loss"


def prepare(node: StandinNode, vmid: int) -> int:
    """Create the container, install tmux in it with apt, make /w for the logs."""
    node.create(vmid)
    node.install_tmux(vmid, "/w")
    return vmid


@pytest.fixture(scope="module")
def ct_proof(standin: StandinNode) -> Iterator[int]:
    """Container 640 with tmux; destroyed at the end of the module."""
    yield prepare(standin, CT_PROOF)
    standin.pct("destroy", CT_PROOF, "--force")


@pytest.fixture(scope="module")
def ct_full(standin: StandinNode) -> Iterator[int]:
    """Container 641 with tmux and a 64 KiB tmpfs on /w/full; destroyed at the end of the module."""
    prepare(standin, CT_FULL)
    standin.sh(CT_FULL, 'mkdir -p "$1" && mount -t tmpfs -o size=64k,mode=0755 tmpfs "$1"', FULL)
    yield CT_FULL
    standin.sh(CT_FULL, 'tmux kill-server 2>/dev/null; sleep 0.2; umount "$1"', FULL, check=False)
    standin.pct("destroy", CT_FULL, "--force")


@pytest.fixture()
def counting(tmp_path: Path) -> tuple[str, Path]:
    """A pct_path wrapper for the stand-in that records each call (its call log, one JSON object a line)."""
    calls = tmp_path / "calls.jsonl"
    wrapper = tmp_path / "pct"
    wrapper.write_text(f"#!/bin/sh\nexport PVE_STANDIN_CALL_LOG={shlex.quote(str(calls))}\n"
                       f"exec {shlex.quote(str(STANDIN_PCT))} \"$@\"\n", encoding="utf-8")
    wrapper.chmod(0o755)
    return str(wrapper), calls


def module_calls(calls: Path, vmid: int) -> int:
    """The recorded ``pct exec VMID --keep-env 1 -- /bin/sh -c`` calls (one per pipelined module task), then forget them."""
    if not calls.exists():
        return 0
    count = 0
    for line in calls.read_text(encoding="utf-8").splitlines():
        argv = json.loads(line)["argv"] if line.strip() else []
        if "exec" in argv:
            at = argv.index("exec")
            count += argv[at + 1:at + 7] == [str(vmid), "--keep-env", "1", "--", "/bin/sh", "-c"]
    calls.unlink()
    return count


def name_for(test: str) -> str:
    """A fresh session name."""
    return f"{test}-{uuid.uuid4().hex[:6]}"


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment of ansible-playbook: no colour, no deprecation warnings."""
    return dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0", **extra)


def in_container(tmp_path: Path, vmid: int, tasks: list[dict[str, t.Any]], **host_vars: t.Any) -> PlayRun:
    """Run tasks in container ``vmid`` (inventory host ct<vmid>, the pct connection) with ansible-playbook."""
    return run_tasks(tmp_path, {f"ct{vmid}": container_host(vmid, **host_vars)}, tasks, timeout=900)


def launch_only(tmp_path: Path, vmid: int, name: str, command: str, log: str, pct_path: str = "pct") -> dict[str, t.Any]:
    """Start a job with tmux_session alone: no proof (as when the controller died before wait_for_log said started)."""
    run = in_container(tmp_path, vmid, [{"name": "Launch", "trainops.pct_launch.tmux_session": {
        "session_name": name, "command": command, "log_path": log}}], pct_path=pct_path)
    launch = run.result("Launch", f"ct{vmid}")
    assert run.proc.returncode == 0 and launch["changed"] is True, run.proc.stdout[-3000:] + run.proc.stderr[-2000:]
    assert launch["state"] == "running" and launch["proven"] is False, launch
    return launch


class LaunchRun:
    """One run of playbooks/launch.yml: its process and the results of every task (test callback trainops_results)."""

    def __init__(self, proc: subprocess.CompletedProcess[str], results: dict[str, t.Any]) -> None:
        self.proc, self.results = proc, results

    @property
    def output(self) -> str:
        """What the run printed, for assertion messages."""
        return f"rc={self.proc.returncode}\n--- stdout\n{self.proc.stdout[-8000:]}\n--- stderr\n{self.proc.stderr[-3000:]}"

    def module_calls(self, host: str) -> int:
        """The pct calls of the launch part (tmux_session, and wait_for_log as task or handler) on ``host``."""
        counts = exec_calls(self.proc.stdout, host)
        return sum(counts.get(task, 0) for task in (LAUNCH, REPROOF, HANDLER))

    def task(self, name: str, host: str) -> dict[str, t.Any] | None:
        """The result of task ``name`` on ``host`` (its last run), None when it did not run there."""
        found = task_results(self.results, name, host)
        return found[-1] if found else None

    def summary(self) -> list[str]:
        """The lines of the fleet summary."""
        return summary_lines(self.results)


def launch_playbook(tmp_path: Path, vmid: int, pct_path: str, job: dict[str, t.Any]) -> LaunchRun:
    """playbooks/launch.yml with job_prepare: false on one container (inventory host ct<vmid>)."""
    inventory = tmp_path / f"inventory-{vmid}.json"
    inventory.write_text(json.dumps({"training": {"hosts": {f"ct{vmid}": {"pct_vmid": vmid}}, "vars": {
        "ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": PYTHON, "pct_path": pct_path}}}),
        encoding="utf-8")
    results = tmp_path / f"results-{uuid.uuid4().hex[:8]}.json"
    argv = [str(BIN / "ansible-playbook"), "-vvv", "-i", str(inventory), "-e", json.dumps({"job_prepare": False, **job}),
            str(REPO / "playbooks" / "launch.yml")]
    env = ansible_env(ANSIBLE_CALLBACK_PLUGINS=str(CALLBACK_DIR), ANSIBLE_CALLBACKS_ENABLED="trainops_results",
                      TRAINOPS_RESULTS_FILE=str(results), ANSIBLE_PIPELINING="1")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, stdin=subprocess.DEVNULL, cwd=tmp_path, check=False)
    return LaunchRun(proc, json.loads(results.read_text(encoding="utf-8")) if results.exists() else {})


def proven_option(node: StandinNode, vmid: int, name: str) -> str:
    """The session's @trainops_proven inside the container ("" when unset)."""
    out = node.sh(vmid, 'tmux show-options -v -t "=$1:" @trainops_proven 2>/dev/null || :', name)
    return out.stdout.decode().strip()


def session_alive(node: StandinNode, vmid: int, name: str) -> bool:
    """Whether the tmux session runs in the container."""
    return node.sh(vmid, 'tmux has-session -t "=$1"', name, check=False).returncode == 0


def test_unproven_running_job_is_proven_on_the_rerun(ct_proof: int, standin: StandinNode, tmp_path: Path,
                                                     counting: tuple[str, Path]) -> None:
    pct_path, calls = counting
    name = name_for("unproven")
    log = f"/w/{name}.log"
    command = "echo warming up; sleep 2; echo 'step 1 loss 2.5'; exec sleep 600"
    job = {"job_hosts": "training", "job_session_name": name, "job_command": command, "job_log_path": log,
           "job_wait_pattern": PATTERN, "job_wait_timeout": 120, "job_min_free_mb": 1}
    host = f"ct{ct_proof}"
    launch_only(tmp_path, ct_proof, name, command, log, pct_path)
    assert module_calls(calls, ct_proof) == 1 and proven_option(standin, ct_proof, name) == ""

    run = launch_playbook(tmp_path, ct_proof, pct_path, job)
    assert run.proc.returncode == 0, run.output
    launch = run.task(LAUNCH, host)
    assert launch and launch["changed"] is False and launch["proven"] is False, run.output
    proof = run.task(REPROOF, host)
    assert proof and proof.get("verdict") == "started" and proof["proof_recorded"] is True, run.output
    assert proof["matched_line"] == "step 1 loss 2.5"
    assert run.task(HANDLER, host) is None, "nothing changed: the handler is not notified"
    report = report_msg(run.results, host)
    assert report and "already running, start proven now, pane_pid" in " ".join(report.split()), report
    line = [ln for ln in run.summary() if ln.startswith(host)]
    assert line and line[0].endswith(": already running: start proven now"), run.summary()
    assert run.module_calls(host) == 1 + proof["pct_calls"], run.output
    assert proven_option(standin, ct_proof, name).endswith("Z")

    again = launch_playbook(tmp_path, ct_proof, pct_path, job)
    assert again.proc.returncode == 0, again.output
    launch = again.task(LAUNCH, host)
    assert launch and launch["changed"] is False and launch["proven"] is True, again.output
    skipped = again.task(REPROOF, host)
    assert skipped is not None and skipped.get("status") == "skipped", again.output
    assert again.module_calls(host) == 1, "a proven job: tmux_session only"
    assert again.results["stats"][host]["changed"] == 0, again.results["stats"]
    line = [ln for ln in again.summary() if ln.startswith(host)]
    assert line and line[0].endswith(": already running"), again.summary()
    print(f"re-run of an unproven job: {run.summary()}; then {again.summary()}")
    standin.sh(ct_proof, 'tmux kill-session -t "=$1"', name, check=False)


@pytest.mark.both_privileges
def test_a_launch_proven_in_its_task_is_not_proven_again(
        ct_proof: int, standin: StandinNode, tmp_path: Path, counting: tuple[str, Path]) -> None:
    pct_path, calls = counting
    name = name_for("fresh")
    job = {"job_hosts": "training", "job_session_name": name, "job_command": "echo 'step 1 loss 1.0'; exec sleep 600",
           "job_log_path": f"/w/{name}.log", "job_wait_pattern": PATTERN, "job_wait_timeout": 120, "job_min_free_mb": 1}
    host = f"ct{ct_proof}"
    run = launch_playbook(tmp_path, ct_proof, pct_path, job)
    assert run.proc.returncode == 0, run.output
    launch = run.task(LAUNCH, host)
    assert launch and launch["proven"] is True and launch["status"] == "changed", run.output
    wait = launch["wait"]
    assert wait["verdict"] == "started" and wait["proof_recorded"] is True and wait["pct_calls"] == 0, run.output
    assert run.task(HANDLER, host) is None, "a launch that is no fleet-wide wait is proven in its own task"
    assert run.task(REPROOF, host)["status"] == "skipped", "a job this run started is proven by its launch task"
    assert run.module_calls(host) == 1, "the launch and its proof: one pct exec"
    assert proven_option(standin, ct_proof, name).endswith("Z")
    again = launch_playbook(tmp_path, ct_proof, pct_path, job)
    assert again.proc.returncode == 0 and again.task(LAUNCH, host)["proven"] is True, again.output
    assert again.module_calls(host) == 1 and again.results["stats"][host]["changed"] == 0, again.output
    assert [ln for ln in again.summary() if ln.startswith(host)] == [f"{host} (CT {ct_proof} on localhost): already running"]
    standin.sh(ct_proof, 'tmux kill-session -t "=$1"', name, check=False)


def test_unproven_hung_job_fails_on_timeout_at_the_rerun(ct_proof: int, standin: StandinNode, tmp_path: Path,
                                                         counting: tuple[str, Path]) -> None:
    pct_path, calls = counting
    name = name_for("hung")
    log = f"/w/{name}.log"
    command = "echo warming up; exec sleep 600"
    host = f"ct{ct_proof}"
    launch_only(tmp_path, ct_proof, name, command, log, pct_path)
    assert module_calls(calls, ct_proof) == 1 and proven_option(standin, ct_proof, name) == ""
    job = {"job_hosts": "training", "job_session_name": name, "job_command": command, "job_log_path": log,
           "job_wait_pattern": PATTERN, "job_wait_timeout": 6, "job_min_free_mb": 1}
    run = launch_playbook(tmp_path, ct_proof, pct_path, job)
    assert run.proc.returncode != 0, run.output
    assert run.task(LAUNCH, host)["proven"] is False
    proof = run.task(REPROOF, host)
    assert proof and proof.get("status") == "failed" and proof["verdict"] == "timeout", run.output
    assert proof["msg"].startswith(f"Timed out after 6 s waiting for a log line matching {PATTERN!r} in session {name} "
                                   f"in container {ct_proof}: log {log} exists"), proof["msg"]
    assert "the session is alive" in proof["msg"] and "warming up" in proof["msg"], proof["msg"]
    line = [ln for ln in run.summary() if ln.startswith(host)]
    assert line and ": failed: Timed out after 6 s" in line[0], run.summary()
    assert session_alive(standin, ct_proof, name), "a job that ran before the launch is left running"
    assert proven_option(standin, ct_proof, name) == ""
    assert run.module_calls(host) >= 2
    print(f"unproven hung job: {line[0]}")
    standin.sh(ct_proof, 'tmux kill-session -t "=$1"', name, check=False)


def test_exit_status_survives_a_full_log_fs(ct_full: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_for("fills")
    log = f"{FULL}/{name}.log"
    command = "echo started; sleep 1; head -c 200000 /dev/zero | tr '\\000' x; exit 3"
    host = f"ct{ct_full}"
    run = in_container(tmp_path, ct_full, [
        {"name": "Launch", "trainops.pct_launch.tmux_session": {"session_name": name, "command": command, "log_path": log}},
        {"name": "Wait", "ignore_errors": True, "trainops.pct_launch.wait_for_log": {
            "session_name": name, "pattern": "^NEVER$", "timeout": 120}},
        {"name": "Info", "trainops.pct_launch.tmux_session_info": {"session_name": name}},
    ])
    assert run.proc.returncode == 0, run.proc.stdout[-4000:] + run.proc.stderr[-2000:]
    launch, wait, info = run.result("Launch", host), run.result("Wait", host), run.result("Info", host)
    assert launch["changed"] is True and launch["state"] == "running", launch
    assert wait["status"] == "failed" and wait["verdict"] == "died" and wait["pct_calls"] == 1, wait
    df = standin.sh(ct_full, 'df -Pk "$1" | awk "NR == 2 { print \\$4 }"', FULL).stdout.decode().strip()
    assert df == "0", f"the job did not fill {FULL}: {df} KiB free"
    files = standin.sh(ct_full, 'ls -A "$1"', FULL).stdout.decode().split()
    assert f"{name}.log.exit" not in files and not [f for f in files if ".tmp." in f], files
    run_dir = standin.sh(ct_full, 'ls -A "$1"', f"/run/trainops/{name}").stdout.decode().split()
    assert "exit" in run_dir and "pgid" not in run_dir, run_dir
    assert wait["exit_status"] == 3 and wait["session_state"] == "finished", wait
    assert wait["msg"].startswith(f"Job did not start in session {name} in container {ct_full}: the job ended with exit status 3")
    assert info["session"]["state"] == "finished" and info["session"]["exit_status"] == 3, info
    record = standin.sh(ct_full, 'stat -c %a "$1" && cat "$1"', f"/run/trainops/{name}/exit").stdout.decode().splitlines()
    assert record[:3] == ["600", f"session_name={name}", "exit_status=3"], record
    stop = in_container(tmp_path, ct_full, [{"name": "Stop", "trainops.pct_launch.tmux_session": {
        "session_name": name, "log_path": log, "state": "stopped"}}]).result("Stop", host)
    assert stop["changed"] is False and stop["state"] == "finished", stop
    print(f"full log fs: wait says {wait['msg']!r}; info says {info['session']['state']} {info['session']['exit_status']}")


def test_a_ci_wait_for_a_job_found_running_and_proven_waits_for_its_end(ct_proof: int, tmp_path: Path) -> None:
    """job_wait_until finished on a re-run: the job already runs and its start is proven, so the launch and the proof
    have nothing to do, and the play still waits for its end, from where its log ended (earlier lines not shown again)."""
    name = name_for("ci-rerun")
    job = {"job_hosts": "training", "job_session_name": name, "job_log_path": f"/w/{name}.log", "job_min_free_mb": 1,
           "job_command": "echo 'step 1 loss 2.5'; sleep 6; echo 'eval done'; exit 3", "job_wait_pattern": PATTERN,
           "job_wait_timeout": 120}
    first = launch_playbook(tmp_path, ct_proof, "pct", job)
    assert first.proc.returncode == 0, first.output
    again = launch_playbook(tmp_path, ct_proof, "pct", dict(job, job_wait_until="finished"))
    assert again.proc.returncode != 0, again.output
    waited = again.task(REPROOF, f"ct{ct_proof}")  # one task: no stat of the log first (tmux_session gives its log_size)
    assert waited is not None and waited["verdict"] == "failed" and waited["exit_status"] == 3, again.output
    shown = again.proc.stdout.splitlines()
    assert "eval done" in shown, again.output
    assert "step 1 loss 2.5" not in shown, "a line from before the wait began is not shown again"
    assert any("failed" in line and "exit status 3" in line for line in again.summary()), again.summary()


def test_a_ci_launch_waits_for_the_end_in_its_launch_task(ct_proof: int, tmp_path: Path) -> None:
    """job_wait_until finished on a start: tmux_session's wait shows the log's lines and waits for the end (exit status 0)."""
    name = name_for("ci-start")
    job = {"job_hosts": "training", "job_session_name": name, "job_log_path": f"/w/{name}.log", "job_min_free_mb": 1,
           "job_command": "echo 'step 1 loss 2.5'; sleep 3; echo 'eval done'", "job_wait_pattern": PATTERN,
           "job_wait_timeout": 120, "job_wait_until": "finished"}
    host = f"ct{ct_proof}"
    run = launch_playbook(tmp_path, ct_proof, "pct", job)
    assert run.proc.returncode == 0, run.output
    launch = run.task(LAUNCH, host)
    assert launch and launch["status"] == "changed" and run.task(HANDLER, host) is None, run.output
    wait = launch["wait"]
    assert wait["verdict"] == "finished" and wait["exit_status"] == 0 and wait["proven_line"] == "step 1 loss 2.5", wait
    shown = run.proc.stdout.splitlines()
    assert "step 1 loss 2.5" in shown and "eval done" in shown, run.output
    assert [ln for ln in run.summary() if ln.startswith(host)] == [f"{host} (CT {ct_proof} on localhost): started: finished (exit status 0)"]
    assert run.module_calls(host) == 1 + wait["pct_calls"], run.output
