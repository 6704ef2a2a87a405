# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The shipped playbooks (launch, status, stop, logs; preflight and prepare through launch) end to end.

Each test runs ``ansible-playbook`` as a user does, with the example job (examples/standin/job.yml)
and a temporary inventory, against real containers on the Proxmox VE stand-in, and checks the real
outcome: the exit status, the files and tmux sessions inside the container (read with ``pct exec``),
and every task result, written as JSON by a small test callback (files/playbooks/callback_plugins:
ansible-core no longer ships a json callback) next to the default screen output.

VMIDs: 230 (prepared by the first launch, shared: the roles install tmux and a venv with numpy there
once), 231 (fresh, for check mode), 232 (stopped). Every run but the first (healthy) launch enables
pipelining, which the pct connection supports, to keep the module short.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import typing as t
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, StandinNode
from .playbook_results import ansible_playbook, launch_proof, report_msg, task_results

pytestmark = pytest.mark.integration

CT, CT_FRESH, CT_STOPPED = 230, 231, 232
EXAMPLE_JOB = REPO / "examples" / "standin" / "job.yml"
CALLBACK_DIR = Path(__file__).resolve().parent / "files" / "playbooks" / "callback_plugins"
HANDLER = "Wait for the job's log to prove it started"
LAUNCH = "Start the job in its detached tmux session"
HEADER = "### trainops.pct_launch: "
# The healthy job: fewer steps than the example, slow enough to outlive the tests that need it running.
HEALTHY_COMMAND = "python3 /workspace/train.py --steps 250 --sleep 0.8"
HEALTHY_SESSION, HEALTHY_LOG = "train-example", "/workspace/train.log"


@dataclasses.dataclass
class Run:
    """One ansible-playbook run: its process and the results the callback wrote."""

    proc: subprocess.CompletedProcess[str]
    results: dict[str, t.Any]

    @property
    def rc(self) -> int:
        """The exit status of ansible-playbook."""
        return self.proc.returncode

    @property
    def output(self) -> str:
        """stdout and stderr, for assertion messages."""
        return f"rc={self.proc.returncode}\n--- stdout\n{self.proc.stdout}\n--- stderr\n{self.proc.stderr}"

    def tasks(self, name: str) -> list[dict[str, t.Any]]:
        """Every run of the task (or handler) called ``name``, in order."""
        return [task for play in self.results.get("plays", []) for task in play["tasks"] if task["name"] == name]

    def result(self, name: str, host: str) -> dict[str, t.Any]:
        """The result of the last run of task ``name`` on ``host``."""
        runs = [task["hosts"][host] for task in self.tasks(name) if host in task["hosts"]]
        assert runs, f"task {name!r} has no result for {host}\n{self.output}"
        return runs[-1]

    def proof(self, host: str) -> dict[str, t.Any]:
        """The proof of the last start on ``host``: the launch task's wait, or the handler's result (``launch_proof``)."""
        found = launch_proof(self.results, host)
        assert found is not None, f"no proof of a start on {host}\n{self.output}"
        return found

    def no_proof_awaited(self, host: str) -> bool:
        """Whether no proof of a start was awaited on ``host`` (neither the launch task's wait nor the handler)."""
        return launch_proof(self.results, host) is None and not any(host in task["hosts"] for task in self.tasks(HANDLER))

    def stats(self, host: str) -> dict[str, int]:
        """The play recap of ``host``."""
        assert "stats" in self.results, f"no results file: ansible-playbook ended early\n{self.output}"
        return self.results["stats"][host]

    def hosts_of_play(self, play_name: str) -> set[str]:
        """The hosts that have any task result in the play(s) called ``play_name``."""
        return {host for play in self.results.get("plays", []) if play["name"] == play_name
                for task in play["tasks"] for host in task["hosts"]}


@dataclasses.dataclass
class Containers:
    """Where the playbooks run: the stand-in and a temporary folder with the inventories."""

    node: StandinNode
    folder: Path
    counter: int = 0

    def inventory(self, vmid: int) -> Path:
        """An inventory with the one container ``ct<vmid>`` in group ``training``."""
        path = self.folder / f"inventory-{vmid}.yml"
        if not path.exists():
            inventory = {"training": {"hosts": {f"ct{vmid}": {"pct_vmid": vmid}},
                                      "vars": {"ansible_connection": "trainops.pct_launch.pct",
                                               "ansible_python_interpreter": "/usr/bin/python3"}}}
            path.write_text(json.dumps(inventory, indent=1), encoding="utf-8")
        return path

    def run(self, playbook: str, vmid: int, extra: dict[str, t.Any] | None = None, *options: str,
            job: Path | None = EXAMPLE_JOB, pipelining: bool = True) -> Run:
        """ansible-playbook PLAYBOOK (a path in the checkout or an FQCN) with the job description, ``extra`` vars and ``options``."""
        self.counter += 1
        results = self.folder / f"results-{self.counter}.json"
        argv = [ansible_playbook(), "-i", str(self.inventory(vmid))]
        if job is not None:
            argv += ["-e", f"@{job}"]
        if extra:
            argv += ["-e", json.dumps(extra)]
        argv += [*options, str(REPO / playbook) if playbook.endswith(".yml") else playbook]
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0",
                   ANSIBLE_CALLBACK_PLUGINS=str(CALLBACK_DIR), ANSIBLE_CALLBACKS_ENABLED="trainops_results",
                   TRAINOPS_RESULTS_FILE=str(results), ANSIBLE_PIPELINING="1" if pipelining else "0")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, stdin=subprocess.DEVNULL,
                              cwd=self.folder, check=False)
        return Run(proc, json.loads(results.read_text(encoding="utf-8")) if results.exists() else {})

    def sh(self, vmid: int, script: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        """A sh script inside the container (not checked)."""
        return self.node.sh(vmid, script, *args, check=False)

    def read(self, vmid: int, path: str) -> bytes:
        """The bytes of a file inside the container."""
        out = self.sh(vmid, 'cat -- "$1"', path)
        assert out.returncode == 0, f"cannot read {path} in CT {vmid}: {out.stderr!r}"
        return out.stdout

    def exists(self, vmid: int, path: str) -> bool:
        """Whether ``path`` exists inside the container."""
        return self.sh(vmid, 'test -e "$1"', path).returncode == 0

    def session_alive(self, vmid: int, name: str) -> bool:
        """Whether tmux has the session ``name`` inside the container."""
        return self.sh(vmid, 'tmux has-session -t "=$1" 2>/dev/null', name).returncode == 0

    def wait_for_file(self, vmid: int, path: str) -> None:
        """Poll (inside the container, up to 2 minutes) until ``path`` exists: a job's end, not a timing."""
        out = self.sh(vmid, 'i=0; while [ ! -e "$1" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; test -e "$1"', path)
        assert out.returncode == 0, f"{path} never appeared in CT {vmid}"


def job(name: str, command: str, **extra: t.Any) -> dict[str, t.Any]:
    """Extra vars for a job of the example description with its own session, log and command."""
    return {"job_session_name": name, "job_log_path": f"/workspace/{name}.log", "job_command": command, **extra}


@pytest.fixture(scope="module")
def containers(standin: StandinNode, tmp_path_factory: pytest.TempPathFactory) -> Containers:
    """The stand-in and a folder for inventories and results."""
    return Containers(standin, tmp_path_factory.mktemp("playbooks"))


@pytest.fixture(scope="module")
def ct(containers: Containers) -> int:
    """Container 230, fresh: the first launch prepares it."""
    vmid = containers.node.create(CT)
    status = containers.node.pct("status", vmid)
    assert status.stdout == b"status: running\n", f"CT {vmid} did not stay up after pct create --start 1: {status.stdout!r} {status.stderr!r}"
    return vmid


@pytest.fixture(scope="module")
def healthy(containers: Containers, ct: int) -> Run:
    """The example job launched with launch.yml on the fresh container (roles install tmux, venv, numpy)."""
    return containers.run("playbooks/launch.yml", ct, {"job_command": HEALTHY_COMMAND}, pipelining=False)


@pytest.fixture(scope="module")
def stopped_ct(containers: Containers) -> int:
    """Container 232, created and not started."""
    return containers.node.create(CT_STOPPED, start=False)


@pytest.fixture()
def running(containers: Containers, ct: int, healthy: Run) -> Run:
    """The healthy launch, still running (its job lasts over 200 s; test 7 stops it)."""
    assert healthy.rc == 0, healthy.output
    assert containers.session_alive(ct, HEALTHY_SESSION), "the healthy job ended before this test: it must outlive it"
    return healthy


# 1. A healthy launch.
def test_healthy_launch(containers: Containers, ct: int, healthy: Run) -> None:
    host = f"ct{ct}"
    assert healthy.rc == 0, healthy.output
    assert healthy.stats(host)["failures"] == 0 and healthy.stats(host)["changed"] > 0
    launch = healthy.result(LAUNCH, host)
    assert launch["status"] == "changed" and launch["state"] == "running" and launch["pane_pid"] > 1
    assert launch["log_path"] == HEALTHY_LOG and launch["rotated_log"] is None and launch["tmux_version"]
    wait = healthy.proof(host)
    assert not healthy.tasks(HANDLER), "a launch that is no fleet-wide wait is proven in its own task (tmux_session's wait)"
    assert launch["proven"] is True and not wait.get("failed") and wait["verdict"] == "started" and wait["session_alive"], wait
    assert wait["matched_line"].startswith("step ") and " loss " in wait["matched_line"], wait
    assert containers.session_alive(ct, HEALTHY_SESSION)
    log = containers.read(ct, HEALTHY_LOG).decode().splitlines()
    assert log[0].startswith(f"{HEADER}session={HEALTHY_SESSION} started_at="), log[:2]
    assert f"command={HEALTHY_COMMAND}" in log[0]
    assert log[1].startswith("training: numpy ") and log[2].startswith("step 1 loss "), log[:4]
    assert not containers.exists(ct, HEALTHY_LOG + ".exit")
    report = str(report_msg(healthy.results, host))
    assert f"{HEALTHY_SESSION} in CT {ct}: started, pane_pid {launch['pane_pid']}, log {HEALTHY_LOG}" in report


def healthy_prepare_needs(run: Run, host: str) -> list[str]:
    """What prepare_info found missing in the first launch."""
    return list(run.result("Find out what the container lacks for the job", host)["needs"])


# 2. The same launch again changes nothing.
def test_rerun_changes_nothing(containers: Containers, ct: int, running: Run) -> None:
    host = f"ct{ct}"
    again = containers.run("playbooks/launch.yml", ct, {"job_command": HEALTHY_COMMAND})
    assert again.rc == 0, again.output
    assert again.stats(host)["changed"] == 0, again.output
    assert re.search(rf"^{host} +: ok=[1-9][0-9]* +changed=0 +unreachable=0 +failed=0 ", again.proc.stdout, re.MULTILINE), again.output
    launch = again.result(LAUNCH, host)
    assert launch["status"] == "ok" and launch["state"] == "running"
    assert launch["pane_pid"] == running.result(LAUNCH, host)["pane_pid"]
    assert again.no_proof_awaited(host), "nothing was started: nothing to prove"
    assert "already running" in str(report_msg(again.results, host))
    assert not containers.exists(ct, HEALTHY_LOG + ".1")
    # prepared already: one module run found nothing to do, so no role ran (issue: launch at the floor)
    prepared = again.result("Find out what the container lacks for the job", host)
    assert prepared["status"] == "ok" and prepared["prepared"] is True and prepared["needs"] == [], prepared
    # nothing to do: the include of what a container lacks is skipped as a whole (no role run)
    assert again.result("Do what the container lacks", host)["status"] == "skipped"
    for task in ("Install tmux in the container", "Create the job's venv and install its requirements", "Create the job's working directory"):
        assert not task_results(again.results, task, host), task
    assert healthy_prepare_needs(running, host), "the first launch found the fresh container lacking everything"


# 7. status, stop and logs on the healthy job.
def test_status_stop_and_fetch_logs(containers: Containers, ct: int, running: Run, tmp_path: Path) -> None:
    host = f"ct{ct}"
    status = containers.run("playbooks/status.yml", ct)
    assert status.rc == 0, status.output
    session = status.result("Read the sessions from the container", host)["session"]
    assert session["name"] == HEALTHY_SESSION and session["state"] == "running" and session["managed"]
    assert session["pane_pid"] == running.result(LAUNCH, host)["pane_pid"] and session["exit_status"] is None
    assert session["log_path"] == HEALTHY_LOG and any(line.startswith("step ") for line in session["log_tail"])
    shown = status.result("Show each session", host)["results"][0]["msg"]
    assert shown[0].startswith(f"CT {ct} session {HEALTHY_SESSION}: running pane_pid ") and shown[1:] == session["log_tail"]

    stop = containers.run("playbooks/stop.yml", ct)
    assert stop.rc == 0, stop.output
    stopped = stop.result("Stop the job and end its tmux session", host)
    assert stopped["status"] == "changed" and stopped["state"] == "finished" and stopped["exit_status"] == 143
    assert not containers.session_alive(ct, HEALTHY_SESSION)
    exit_file = containers.read(ct, HEALTHY_LOG + ".exit").decode().splitlines()
    assert "exit_status=143" in exit_file and "stopped_by=trainops" in exit_file and "stop_signal=TERM" in exit_file

    after = containers.run("playbooks/status.yml", ct)
    assert after.rc == 0, after.output
    session = after.result("Read the sessions from the container", host)["session"]
    assert session["state"] == "finished" and session["exit_status"] == 143 and session["stopped_by"] == "trainops"
    assert session["log_tail"][-1].startswith(f"{HEADER}session={HEALTHY_SESSION} exit_status=143 ended_at=")
    headline = after.result("Show each session", host)["results"][0]["msg"][0]
    assert f"session {HEALTHY_SESSION}: finished" in headline and "exit_status 143 at " in headline

    dest = tmp_path / "fetched"
    logs = containers.run("playbooks/logs.yml", ct, {"job_logs_fetch": True, "job_logs_dest": str(dest)})
    assert logs.rc == 0, logs.output
    assert (dest / host / "train.log").read_bytes() == containers.read(ct, HEALTHY_LOG)
    assert (dest / host / "train.log.exit").read_bytes() == containers.read(ct, HEALTHY_LOG + ".exit")

    tail = containers.run("playbooks/logs.yml", ct, {"job_logs_lines": 3})
    assert tail.rc == 0, tail.output
    assert tail.result("Show the tail of the log", host)["results"][0]["msg"] == session["log_tail"][-3:]


# 3. A job that crashes at once.
def test_crash_at_start_is_reported_fast(containers: Containers, ct: int, healthy: Run) -> None:
    assert healthy.rc == 0, healthy.output
    host = f"ct{ct}"
    run = containers.run("playbooks/launch.yml", ct, job("crash", "python3 -c 'import sys; sys.exit(3)'", job_wait_timeout=300))
    assert run.rc != 0, run.output
    wait = run.proof(host)
    assert run.result(LAUNCH, host)["status"] == "failed", "the launch task fails with its proof"
    assert wait["failed"] and wait["verdict"] == "died" and wait["exit_status"] == 3, wait
    assert "exit status 3" in wait["msg"] and "exit status 3" in run.proc.stdout
    assert wait["elapsed"] < 5, f"a crash must be reported within a poll, not after the 300 s timeout: {wait['elapsed']} s"
    assert run.stats(host)["failures"] == 1 and report_msg(run.results, host) is None
    assert "exit_status=3" in containers.read(ct, "/workspace/crash.log.exit").decode().splitlines()


# 4. The script does not exist: nothing starts.
def test_missing_script_starts_nothing(containers: Containers, ct: int, healthy: Run) -> None:
    assert healthy.rc == 0, healthy.output
    host = f"ct{ct}"
    run = containers.run("playbooks/launch.yml", ct, job("nope", "python3 /workspace/nope.py"))
    assert run.rc != 0, run.output
    launch = run.result(LAUNCH, host)
    assert launch["status"] == "failed" and launch["error"] == "script_missing", launch
    assert "/workspace/nope.py" in launch["msg"] and "nothing was started" in launch["msg"], launch["msg"]
    assert run.no_proof_awaited(host)
    assert not containers.session_alive(ct, "nope")
    assert not containers.exists(ct, "/workspace/nope.log") and not containers.exists(ct, "/run/trainops/nope/run.sh")


# 5. A line matching job_fail_pattern (Traceback, from the example job description).
def test_fail_pattern_reports_the_line(containers: Containers, ct: int, healthy: Run) -> None:
    assert healthy.rc == 0, healthy.output
    host = f"ct{ct}"
    run = containers.run("playbooks/launch.yml", ct, job("failpat", "echo 'Traceback (most recent call last):'; sleep 300"))
    assert run.rc != 0, run.output
    wait = run.proof(host)
    assert wait["verdict"] == "fail_pattern" and wait["matched_line"] == "Traceback (most recent call last):", wait
    assert "fail_pattern 'Traceback'" in wait["msg"] and "'Traceback (most recent call last):'" in wait["msg"]
    containers.run("playbooks/stop.yml", ct, {"job_session_name": "failpat", "job_stop_timeout": 5})


# 6. The pattern never appears: a timeout that says what the log shows.
def test_timeout_says_what_was_seen(containers: Containers, ct: int, healthy: Run) -> None:
    assert healthy.rc == 0, healthy.output
    host = f"ct{ct}"
    slow = job("slow", "echo 'warming up the data loader'; sleep 300", job_wait_pattern="^never printed$", job_wait_timeout=3)
    run = containers.run("playbooks/launch.yml", ct, slow)
    assert run.rc != 0, run.output
    wait = run.proof(host)
    assert wait["verdict"] == "timeout" and wait["session_alive"] and wait["log_exists"], wait
    assert wait["msg"].startswith("Timed out after 3 s"), wait["msg"]
    assert "warming up the data loader" in wait["msg"] and "the session is alive" in wait["msg"], wait["msg"]
    containers.run("playbooks/stop.yml", ct, {"job_session_name": "slow", "job_stop_timeout": 5})


# 8. Launching again after the job finished rotates the log.
def test_relaunch_after_finish_rotates_the_log(containers: Containers, ct: int, healthy: Run) -> None:
    assert healthy.rc == 0, healthy.output
    host = f"ct{ct}"
    first = containers.run("playbooks/launch.yml", ct, job("rotate", "python3 /workspace/train.py --steps 3"))
    assert first.rc == 0, first.output
    containers.wait_for_file(ct, "/workspace/rotate.log.exit")
    old_log, old_exit = containers.read(ct, "/workspace/rotate.log"), containers.read(ct, "/workspace/rotate.log.exit")
    assert b"\nstep 3 loss " in old_log and b"exit_status=0" in old_exit

    second = containers.run("playbooks/launch.yml", ct, job("rotate", "python3 /workspace/train.py --steps 4 --seed 1"))
    assert second.rc == 0, second.output
    launch = second.result(LAUNCH, host)
    assert launch["status"] == "changed" and launch["rotated_log"] == "/workspace/rotate.log.1"
    assert second.proof(host)["verdict"] == "started"
    assert containers.read(ct, "/workspace/rotate.log.1") == old_log
    assert containers.read(ct, "/workspace/rotate.log.1.exit") == old_exit
    containers.wait_for_file(ct, "/workspace/rotate.log.exit")
    new_log = containers.read(ct, "/workspace/rotate.log").decode()
    assert new_log.startswith(f"{HEADER}session=rotate ") and "--steps 4 --seed 1" in new_log.splitlines()[0]
    assert "\nstep 4 loss " in new_log and new_log.encode() != old_log

    # Check mode on the finished job: it would start, but nothing starts, nothing rotates, and no old log is taken as proof.
    check = containers.run("playbooks/launch.yml", ct, job("rotate", "python3 /workspace/train.py --steps 4 --seed 1"), "--check")
    assert check.rc == 0, check.output
    assert check.result(LAUNCH, host)["status"] == "changed" and check.no_proof_awaited(host)
    assert "would start" in str(report_msg(check.results, host))
    assert not containers.exists(ct, "/workspace/rotate.log.2") and containers.read(ct, "/workspace/rotate.log").decode() == new_log
    assert not containers.session_alive(ct, "rotate")


# 9. The playbook by its FQCN.
def test_launch_by_fqcn(containers: Containers, ct: int, healthy: Run) -> None:
    assert healthy.rc == 0, healthy.output
    host = f"ct{ct}"
    run = containers.run("trainops.pct_launch.launch", ct, job("fqcn", "python3 /workspace/train.py --steps 50 --sleep 0.2"))
    assert run.rc == 0, run.output
    assert run.result(LAUNCH, host)["status"] == "changed" and run.proof(host)["verdict"] == "started"
    # playbook_dir resolves in the collection: prepare_info found the source of job_files there (its checksum is the one
    # the container's copy has, so nothing is copied again); an unresolved source would be reported as a file to copy
    assert run.result("Find out what the container lacks for the job", host)["files_to_copy"] == []
    assert run.result("Do what the container lacks", host)["status"] == "skipped"
    assert not task_results(run.results, "Copy the job's files into the container", host)
    assert containers.read(ct, "/workspace/fqcn.log").decode().startswith(f"{HEADER}session=fqcn ")


# 10. --check on a fresh container.
def test_check_mode_on_fresh_container_changes_nothing(containers: Containers) -> None:
    vmid = containers.node.create(CT_FRESH)
    host = f"ct{vmid}"
    run = containers.run("playbooks/launch.yml", vmid, {"job_command": HEALTHY_COMMAND}, "--check")
    # The roles predict their changes; the launch cannot be checked before prepare.yml has really run (no tmux,
    # venv, workdir or script yet): launch.yml predicts a start, says why, and does not wait for a proof.
    assert run.rc == 0, run.output
    launch = run.result(LAUNCH, host)
    assert launch["status"] == "changed" and launch["error"] == "tmux_missing", launch
    assert run.no_proof_awaited(host)
    report = str(report_msg(run.results, host))
    assert "would start" in report and "check mode: not checked before prepare.yml has run" in report
    assert "tmux is not installed" in report
    for path in ("/workspace", "/opt/train", "/run/trainops", "/usr/bin/tmux"):
        assert not containers.exists(vmid, path), f"{path} exists after --check"
    assert containers.sh(vmid, "ls /tmp/tmux-* 2>/dev/null").stdout == b""


# 11. Preflight refuses a stopped container and an incomplete job description.
def test_preflight_stopped_container(containers: Containers, stopped_ct: int) -> None:
    vmid = stopped_ct
    host = f"ct{vmid}"
    run = containers.run("playbooks/launch.yml", vmid)
    assert run.rc != 0, run.output
    # the preflight asks the node only (it has no GPU: no pct call); the first pct exec, prepare.yml's, says it
    failed = run.result("Find out what the container lacks for the job", host)
    assert failed["status"] == "unreachable", failed
    assert f"container {vmid}" in failed["msg"] and "the container is not running; start it with" in failed["msg"], failed["msg"]
    assert f"pct start {vmid}" in failed["msg"] and f"pct start {vmid}" in run.proc.stdout
    assert run.hosts_of_play("Launch the job in the containers and prove it started") == set()
    tasks = [task["name"] for play in run.results["plays"] for task in play["tasks"] if host in task["hosts"]]
    assert tasks[-1] == "Find out what the container lacks for the job", tasks
    assert run.result("Ask the node which processes hold the GPUs the container can open", host)["container_checked"] is False
    assert containers.node.pct("status", vmid).stdout == b"status: stopped\n"


def test_preflight_incomplete_job(containers: Containers, stopped_ct: int, tmp_path: Path) -> None:
    description = yaml.safe_load(EXAMPLE_JOB.read_text(encoding="utf-8"))
    del description["job_log_path"]
    incomplete = tmp_path / "job.json"
    incomplete.write_text(json.dumps(description), encoding="utf-8")
    host = f"ct{stopped_ct}"
    run = containers.run("playbooks/launch.yml", stopped_ct, job=incomplete)
    assert run.rc != 0, run.output
    failed = run.result("Check that the job description is complete", host)
    assert failed["status"] == "failed" and failed["msg"].startswith(f"Incomplete job description for {host}: "), failed
    assert "job_log_path" in failed["msg"] and failed["msg"] in run.proc.stdout
    ran = [(task["name"], task["hosts"][host]["status"]) for play in run.results["plays"] for task in play["tasks"] if host in task["hosts"]]
    assert ran == [("Use community.proxmox's proxmox_vmid and proxmox_node as pct_vmid and pct_node", "skipped"),  # controller only
                   ("Check that the job description is complete", "failed")], ran
