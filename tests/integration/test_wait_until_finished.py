# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""wait_for_log's ``wait_until: finished`` and ``show_lines``, and ``playbooks/logs.yml -e job_logs_follow=true``,
against real containers behind the Proxmox VE stand-in.

Every run is a real ansible-playbook on this machine (the Proxmox node), the modules running in real LXC
containers (tmux installed by apt) reached with the collection's pct connection (pipelined). Jobs are
launched with trainops.pct_launch.tmux_session, as users do.

That lines are shown *as the log grows*, not at the end of the wait, is proven without any timing: the
test reads ansible-playbook's output while it runs, and a job waits at a gate (a file in its container)
that the test opens only once it has seen the job's first line in that output. A job that passed its
gate says so in its log (``gate: open``); without live lines it would wait out its gate (``gate: shut``).

VMIDs: 650 and 651 (two containers for logs.yml's follow), 652 (the CI-style waits and the proof).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import typing as t
import uuid
from pathlib import Path

import pytest

from .conftest import REPO, StandinNode
from .playbook_results import CALLBACKS, ansible_playbook, container_host, task_results

pytestmark = pytest.mark.integration

CT_A, CT_B, CT_CI = 650, 651, 652
PROTOCOL = "### trainops.pct_launch: "
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
# A gate waits at most this long (0.1 s steps) for the test to open it.
GATE_STEPS = 1200


def prepare(node: StandinNode, vmid: int) -> int:
    """Create the container, install tmux in it with apt, make /w for the logs."""
    node.create(vmid)
    node.install_tmux(vmid, "/w")
    return vmid


@pytest.fixture(scope="module")
def ci_ct(standin: StandinNode) -> int:
    """Container 652 with tmux."""
    return prepare(standin, CT_CI)


@pytest.fixture(scope="module")
def two_cts(standin: StandinNode) -> tuple[int, int]:
    """Containers 650 and 651 with tmux."""
    return prepare(standin, CT_A), prepare(standin, CT_B)


def host_of(vmid: int) -> str:
    """The inventory name of a container."""
    return f"ct{vmid}"


def name_for(test: str) -> str:
    """A fresh session name."""
    return f"{test}-{uuid.uuid4().hex[:6]}"


def gate(name: str) -> str:
    """Shell code that waits until /w/NAME.go exists (at most GATE_STEPS / 10 s), then logs whether it opened."""
    return (f"i=0; while [ ! -e /w/{name}.go ] && [ $i -lt {GATE_STEPS} ]; do sleep 0.1; i=$((i+1)); done; "
            f"if [ -e /w/{name}.go ]; then echo 'gate: open'; else echo 'gate: shut'; fi")


def launch_task(name: str, command: str) -> dict[str, t.Any]:
    """A tmux_session task starting ``command`` with its log at /w/NAME.log."""
    return {"name": "Launch", "trainops.pct_launch.tmux_session": {"session_name": name, "command": command, "log_path": f"/w/{name}.log"}}


def wait_task(**args: t.Any) -> dict[str, t.Any]:
    """A wait_for_log task (named ``wait``)."""
    return {"name": "wait", "trainops.pct_launch.wait_for_log": args}


class LiveRun:
    """One ansible-playbook run whose output the test reads while it runs (``on_line`` for each line)."""

    def __init__(self, proc: subprocess.CompletedProcess[str], lines: list[str], results: dict[str, t.Any]) -> None:
        self.proc, self.lines, self.results = proc, lines, results

    @property
    def output(self) -> str:
        """The whole output, for assertion messages."""
        return "\n".join(self.lines)[-8000:] + "\n--- stderr\n" + self.proc.stderr[-3000:]

    def result(self, task: str, host: str) -> dict[str, t.Any]:
        """The last result of ``task`` on ``host``."""
        found = task_results(self.results, task, host)
        assert found, f"no result of {task!r} on {host}:\n{self.output}"
        return found[-1]

    def index(self, line: str, start: int = 0) -> int:
        """Where the output has exactly this line (a ValueError when it has not)."""
        return self.lines.index(line, start)


def run_live(folder: Path, hosts: t.Mapping[str, t.Mapping[str, t.Any]], playbook: Path | list[dict[str, t.Any]],
             on_line: t.Callable[[str], None] = lambda line: None, extra: dict[str, t.Any] | None = None,
             options: t.Sequence[str] = (), timeout: float = 600) -> LiveRun:
    """Run ``playbook`` (a path, or the tasks of one play on every host) on ``hosts``, reading its output live."""
    folder.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    inventory, results = folder / f"inventory-{tag}.json", folder / f"results-{tag}.json"
    inventory.write_text(json.dumps({"all": {"hosts": {name: dict(v) for name, v in hosts.items()}}}), encoding="utf-8")
    if isinstance(playbook, list):
        path = folder / f"play-{tag}.yml"
        path.write_text(json.dumps([{"name": "tasks of a test", "hosts": "all", "gather_facts": False, "tasks": playbook}]),
                        encoding="utf-8")
        playbook = path
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0",
               ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS), ANSIBLE_CALLBACKS_ENABLED="trainops_results",
               ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_HOST_KEY_CHECKING="0", TRAINOPS_RESULTS_FILE=str(results),
               PYTHONUNBUFFERED="1")  # read live: Ansible does not flush its output, a pipe gets it in blocks without this
    argv = [ansible_playbook(), "-i", str(inventory), *(["-e", json.dumps(extra)] if extra else []), *options, str(playbook)]
    lines: list[str] = []
    with open(folder / f"stderr-{tag}.txt", "w+", encoding="utf-8") as stderr, \
         subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True, env=env, cwd=folder) as proc:
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            for line in t.cast(t.IO[str], proc.stdout):
                lines.append(line.rstrip("\n"))
                on_line(lines[-1])
            proc.wait()
        finally:
            killer.cancel()
        stderr.seek(0)
        done = subprocess.CompletedProcess(argv, proc.returncode, "\n".join(lines), stderr.read())
    data = json.loads(results.read_text(encoding="utf-8")) if results.exists() else {}
    return LiveRun(done, lines, data)


class Opener:
    """Opens a job's gate (``touch /w/NAME.go`` in its container) once its trigger line is in the output."""

    def __init__(self, node: StandinNode, gates: t.Mapping[str, tuple[int, str]]) -> None:
        self.node, self.gates, self.opened = node, dict(gates), {}  # trigger line -> (vmid, name); trigger -> output line number
        self.count = 0

    def __call__(self, line: str) -> None:
        self.count += 1
        target = self.gates.pop(line, None)
        if target is not None:
            vmid, name = target
            self.node.sh(vmid, 'touch "$1"', f"/w/{name}.go")
            self.opened[line] = self.count - 1


def progress_lines(run: LiveRun, host: str, name: str) -> list[int]:
    """Where the output has the wait's progress lines."""
    return [number for number, line in enumerate(run.lines) if line.startswith(f"[{host}] wait_for_log {name} ")]


def test_a_ci_wait_passes_on_exit_0_and_shows_the_lines_as_they_come(ci_ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name, host = name_for("ci-ok"), host_of(ci_ct)
    job = f"echo 'step 1'; {gate(name)}; for n in 2 3 4 5; do sleep 1; echo \"step $n\"; done"
    opener = Opener(standin, {"step 1": (ci_ct, name)})
    run = run_live(tmp_path, {host: container_host(ci_ct)}, [
        launch_task(name, job), wait_task(session_name=name, log_path=f"/w/{name}.log", wait_until="finished", timeout=600)], opener)
    assert run.proc.returncode == 0, run.output
    wait = run.result("wait", host)
    assert wait["status"] == "ok" and wait["verdict"] == "finished" and wait["exit_status"] == 0, wait
    assert wait["msg"].startswith(f"Job finished in session {name} in container {ci_ct}: exit status 0 after "), wait["msg"]
    assert wait["proven_line"] == "step 1" and wait["matched_line"] == "step 1" and wait["proof_recorded"] is True, wait
    assert "new_lines" not in wait and "lines_omitted" not in wait, "shown already, not in the result"
    assert opener.opened, f"the first line never showed in the output while the job waited:\n{run.output}"
    # one host: bare lines, in log order, the header and trailer of the log hidden
    shown = [run.index(line) for line in ("step 1", "gate: open", "step 2", "step 3", "step 4", "step 5")]
    assert shown == sorted(shown) and shown[0] == opener.opened["step 1"], run.output
    assert not any(line.startswith(PROTOCOL) or PROTOCOL in line for line in run.lines), run.output
    # the wait went on after the start: a chunk without a verdict (its progress line) between the first line and the end
    progress = progress_lines(run, host, name)
    assert any(shown[0] < number < shown[-1] for number in progress), run.output
    assert wait["pct_calls"] >= 2 and wait["elapsed"] >= 4


def test_a_ci_wait_fails_on_exit_3_with_its_lines_shown_first(ci_ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name, host = name_for("ci-bad"), host_of(ci_ct)
    job = (f"echo 'loading data'; {gate(name)}; sleep 1; echo 'step 1 loss nan'; "
           "echo 'ValueError: loss is NaN' >&2; exit 3")
    opener = Opener(standin, {"loading data": (ci_ct, name)})
    run = run_live(tmp_path, {host: container_host(ci_ct)}, [
        launch_task(name, job), wait_task(session_name=name, log_path=f"/w/{name}.log", wait_until="finished", timeout=600)], opener)
    assert run.proc.returncode != 0, run.output
    wait = run.result("wait", host)
    assert wait["status"] == "failed" and wait["verdict"] == "failed" and wait["exit_status"] == 3, wait
    assert wait["session_state"] == "finished" and wait["session_alive"] is False
    assert wait["msg"].startswith(f"Job failed in session {name} in container {ci_ct}: exit status 3 after "), wait["msg"]
    assert "last log lines: " in wait["msg"] and "ValueError: loss is NaN" in wait["msg"], wait["msg"]
    assert wait["msg"].endswith("; fix the job and launch it again"), wait["msg"]
    for key in ("attempts", "end_state", "cause", "end_reason", "signal"):
        assert key in wait, key  # from the exit record when the supervisor wrote them, else None
    if wait["end_reason"]:
        assert f"(reason: {wait['end_reason']})" in wait["msg"]
    fatal = next(number for number, line in enumerate(run.lines) if line.startswith(f"fatal: [{host}]"))
    shown = [run.index(line) for line in ("loading data", "gate: open", "step 1 loss nan", "ValueError: loss is NaN")]
    assert shown == sorted(shown) and shown[-1] < fatal, "the lines came before the failure"
    assert shown[0] == opener.opened["loading data"], run.output


def test_a_timeout_leaves_the_job_running_and_the_proof_is_recorded(ci_ct: int, standin: StandinNode, tmp_path: Path) -> None:
    """The start seen while waiting for the end is recorded: @trainops_proven and RUN_DIR/proven (the supervisor's cue)."""
    name, host = name_for("ci-slow"), host_of(ci_ct)
    run = run_live(tmp_path, {host: container_host(ci_ct)}, [
        launch_task(name, "echo 'warming up'; echo 'Epoch 1/100'; sleep 300"),
        wait_task(session_name=name, log_path=f"/w/{name}.log", pattern="^Epoch", wait_until="finished", timeout=4)])
    try:
        assert run.proc.returncode != 0, run.output
        wait = run.result("wait", host)
        assert wait["verdict"] == "timeout" and wait["session_alive"] is True and wait["proof_recorded"] is True, wait
        assert wait["proven_line"] == "Epoch 1/100", wait
        assert wait["msg"].startswith(f"Timed out after 4 s waiting for the job in session {name} in container {ci_ct} to end: "
                                      "the job still runs (pane_pid "), wait["msg"]
        assert "and it was not stopped; its start was proven by 'Epoch 1/100'" in wait["msg"], wait["msg"]
        assert standin.sh(ci_ct, 'tmux has-session -t "=$1"', name, check=False).returncode == 0, "the job was not stopped"
        proven = standin.sh(ci_ct, 'stat -c %a "$1"; cat "$1"; tmux show-options -v -t "=$2:" @trainops_proven',
                            f"/run/trainops/{name}/proven", name).stdout.decode().splitlines()
        assert proven[0] == "600" and STAMP.fullmatch(proven[1]) and proven[1] == proven[2], proven
        assert run.index("warming up") < run.index("Epoch 1/100"), "both lines shown, in order"
    finally:
        standin.sh(ci_ct, 'tmux kill-session -t "=$1"', name, check=False)


def test_check_mode_records_no_proof(ci_ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name, host = name_for("ci-check"), host_of(ci_ct)
    launch = run_live(tmp_path, {host: container_host(ci_ct)}, [launch_task(name, "echo 'Epoch 1/100'; sleep 300")])
    try:
        assert launch.proc.returncode == 0, launch.output
        run = run_live(tmp_path, {host: container_host(ci_ct)}, [
            wait_task(session_name=name, log_path=f"/w/{name}.log", wait_until="finished", timeout=3)], options=["--check"])
        wait = run.result("wait", host)
        assert wait["verdict"] == "timeout" and wait["proven_line"] == "Epoch 1/100" and wait["proof_recorded"] is False, wait
        assert "Epoch 1/100" in run.lines, "check mode shows the lines too"
        assert standin.sh(ci_ct, 'test -e "$1"', f"/run/trainops/{name}/proven", check=False).returncode != 0, "check mode writes nothing"
        unset = standin.sh(ci_ct, 'tmux show-options -v -t "=$1:" @trainops_proven', name, check=False)
        assert unset.stdout.strip() == b"", "no @trainops_proven in check mode"
    finally:
        standin.sh(ci_ct, 'tmux kill-session -t "=$1"', name, check=False)


def test_logs_follow_shows_the_lines_of_two_containers_and_how_each_ended(two_cts: tuple[int, int], standin: StandinNode,
                                                                          tmp_path: Path) -> None:
    ct_a, ct_b = two_cts
    name = name_for("follow")
    hosts = {host_of(vmid): container_host(vmid, job_cmd=command) for vmid, command in (
        (ct_a, f"echo 'a ready'; {gate(name)}; for n in 1 2 3; do sleep 1; echo \"a $n\"; done"),
        (ct_b, f"echo 'b ready'; {gate(name)}; sleep 1; echo 'b 1'; echo 'RuntimeError: b broke' >&2; exit 3"))}
    launch = run_live(tmp_path, hosts, [dict(launch_task(name, "{{ job_cmd }}"))])
    assert launch.proc.returncode == 0, launch.output
    follow_header = "TASK [Follow the log until the job ends] "

    def open_gates(line: str) -> None:
        if line.startswith(follow_header):  # the tail was read: from now on, every line is a followed one
            for vmid in two_cts:
                standin.sh(vmid, 'touch "$1"', f"/w/{name}.go")

    run = run_live(tmp_path, hosts, REPO / "playbooks" / "logs.yml", open_gates,
                   extra={"job_hosts": "all", "job_session_name": name, "job_log_path": f"/w/{name}.log", "job_logs_follow": True})
    assert run.proc.returncode == 0, "neither the failed job nor the follow fails the playbook:\n" + run.output
    a, b = host_of(ct_a), host_of(ct_b)
    follow = next(number for number, line in enumerate(run.lines) if line.startswith(follow_header))
    summary = next(number for number, line in enumerate(run.lines) if line.startswith("TASK [Summarize how the jobs ended] "))
    for host, lines in ((a, ["gate: open", "a 1", "a 2", "a 3"]), (b, ["gate: open", "b 1", "RuntimeError: b broke"])):
        shown = [run.index(f"[{host}] {line}") for line in lines]
        assert follow < shown[0] and shown == sorted(shown) and shown[-1] < summary, (host, shown, run.output)
        assert not any(line.startswith(f"[{host}] {PROTOCOL}") for line in run.lines), "protocol lines are hidden"
    assert f"[{a}] a ready" not in run.lines and f"[{b}] b ready" not in run.lines, "the tail's lines are not shown again"
    assert '        "a ready"' in run.lines and '        "b ready"' in run.lines, "the tail was shown first"
    outcome = run.result("Summarize how the jobs ended", a)["msg"]
    assert outcome[0] == f"session {name} in CT {ct_a}: finished (exit status 0)", outcome
    assert outcome[1].startswith(f"session {name} in CT {ct_b}: failed: exit status 3"), outcome
    assert len(outcome) == 2
    for host, verdict in ((a, "finished"), (b, "failed")):
        followed = run.result("Follow the log until the job ends", host)
        assert followed["verdict"] == verdict and followed["status"] == "ok" and followed["proof_recorded"] is True, followed


def test_logs_follow_says_still_running_after_its_timeout(ci_ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name, host = name_for("follow-slow"), host_of(ci_ct)
    hosts = {host: container_host(ci_ct)}
    launch = run_live(tmp_path, hosts, [launch_task(name, "echo 'Epoch 1'; sleep 300")])
    try:
        assert launch.proc.returncode == 0, launch.output
        run = run_live(tmp_path, hosts, REPO / "playbooks" / "logs.yml",
                       extra={"job_hosts": "all", "job_session_name": name, "job_logs_follow": True, "job_logs_follow_timeout": 3})
        assert run.proc.returncode == 0, run.output
        assert run.result("Summarize how the jobs ended", host)["msg"] == [f"session {name} in CT {ci_ct}: still running after 3 s"]
        assert standin.sh(ci_ct, 'tmux has-session -t "=$1"', name, check=False).returncode == 0, "following never stops the job"
        finished = run_live(tmp_path, hosts, REPO / "playbooks" / "logs.yml",
                            extra={"job_hosts": "all", "job_session_name": "never-launched", "job_logs_follow": True})
        assert finished.proc.returncode == 0, finished.output
        [line] = finished.result("Summarize how the jobs ended", host)["msg"]
        assert line.startswith(f"session never-launched in CT {ci_ct}: failed: Cannot find session never-launched"), line
    finally:
        standin.sh(ci_ct, 'tmux kill-session -t "=$1"', name, check=False)
