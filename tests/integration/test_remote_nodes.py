# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The collection with Proxmox VE nodes reached over SSH: simulated nodes with real sshd and real containers.

Nodes pve-a (127.0.0.11) and pve-b (127.0.0.12) come from the ``remote_nodes`` fixture
(tests/integration/nodes.py, tools/pve_standin/node.sh); containers 320 (on pve-a) and 321 (on pve-b)
get tmux with apt. Containers are inventory hosts with ``pct_vmid`` and ``pct_node`` reached with the
trainops.pct_launch.pct connection (OpenSSH client, ``pct_ssh_args: -F <ssh_config>``), and the collection's
modules run on them: each module task (each chunk of wait_for_log) is one ``ssh ... NODE -- 'env -i ...
pct exec VMID --keep-env 1 -- /bin/sh -c CMD'`` with the module on stdin (pipelining). The nodes are inventory hosts
reached with Ansible's ssh connection, for the tasks delegated to the node.

Covered: ping, copy and fetch through the connection; ``pct_node_address`` and ProxyJump; a launch with
playbooks/launch.yml on two containers on two nodes, then status.yml and stop.yml, with the pct calls
counted in the nodes' call logs and ``ps`` sampled for the job's ``env`` value; tmux_session,
wait_for_log and tmux_session_info on a container of a remote node; clear errors, from the connection and
from the modules, for an unreachable node, a wrong or missing key, a changed or unknown host key and a
container asked of the wrong node; ControlPersist.
Measurements are printed (``pytest -s``); nothing is asserted about time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, knob_pct
from .nodes import RemoteNodes, host_block
from .playbook_results import LAUNCH_TASK, exec_calls, launch_proof, launch_results, task_results

pytestmark = pytest.mark.integration

CT_A, CT_B = 320, 321
PYTHON = "/usr/bin/python3"
BIN = Path(sys.executable).parent
CALLBACKS = Path(__file__).resolve().parent / "files" / "playbooks" / "callback_plugins"
DEAD_ADDRESS = "127.0.0.19"  # no sshd listens there
STEP = r"^step \d+ loss"
JOB_SCRIPT = """#!/bin/sh
printf 'secret-sha256 %s\\n' "$(printf %s "$RN_SECRET" | sha256sum | cut -d' ' -f1)"
i=0
while [ "$i" -lt 900 ]; do i=$((i + 1)); echo "step $i loss 0.$((1000 - i))"; sleep 0.2; done
"""

Results = t.Dict[str, t.Any]


@pytest.fixture(scope="module")
def fleet(remote_nodes: RemoteNodes) -> RemoteNodes:
    """Container 320 on pve-a and 321 on pve-b, running, with tmux."""
    for node, vmid in (("pve-a", CT_A), ("pve-b", CT_B)):
        remote_nodes.create(node, vmid)
        remote_nodes[node].apt_install(vmid, "tmux")
    return remote_nodes


class Runner:
    """Runs ansible-playbook with the results callback and a ControlPath folder of its own."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        # Short: a control socket path must fit in 108 bytes; own folder: no master of another test is reused.
        self.cp_dir = Path(tempfile.mkdtemp(prefix="rn-cp-", dir="/tmp"))

    def env(self, results: Path) -> dict[str, str]:
        """The environment of an Ansible run: host key checking at its default (on)."""
        kept = ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH", "ANSIBLE_PCT_SSH_CONTROL_PATH_DIR")
        env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_") or key in kept}
        env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_RETRY_FILES_ENABLED="0",
                   ANSIBLE_SSH_CONTROL_PATH_DIR=str(self.cp_dir), ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
                   ANSIBLE_CALLBACKS_ENABLED="trainops_results", TRAINOPS_RESULTS_FILE=str(results))
        return env

    def playbook(self, inventory: Path, playbook: Path, *extra: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess[str], Results]:
        """Run ``playbook``; returns the process (text output) and the results file's data."""
        results = self.tmp_path / f"results-{uuid.uuid4().hex[:8]}.json"
        argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *extra]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env(results), stdin=subprocess.DEVNULL,
                              cwd=self.tmp_path, check=False)
        data = json.loads(results.read_text(encoding="utf-8")) if results.exists() else {"plays": [], "stats": {}}
        return proc, data

    def play(self, inventory: Path, tasks: list[dict[str, t.Any]], hosts: str = "training", *extra: str) -> tuple[subprocess.CompletedProcess[str], Results]:
        """Run one play of ``tasks`` (no facts) on ``hosts``."""
        path = self.tmp_path / f"play-{uuid.uuid4().hex[:8]}.yml"
        path.write_text(json.dumps([{"name": "Remote nodes", "hosts": hosts, "gather_facts": False, "tasks": tasks}]), encoding="utf-8")
        return self.playbook(inventory, path, *extra)

    def close(self) -> None:
        """Stop the ssh control masters Ansible left behind, and remove their folder."""
        for sock in self.cp_dir.iterdir():
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "node"], capture_output=True, timeout=30, check=False)
        shutil.rmtree(self.cp_dir, ignore_errors=True)


@pytest.fixture()
def runner(tmp_path: Path) -> Iterator[Runner]:
    """An Ansible runner for one test."""
    run = Runner(tmp_path)
    yield run
    run.close()


def write_inventory(path: Path, ssh_config: Path, containers: dict[str, dict[str, t.Any]], nodes: t.Iterable[str] = ("pve-a", "pve-b"),
                    container_vars: dict[str, t.Any] | None = None) -> Path:
    """Nodes reached with Ansible's ssh, containers with the pct connection, both through ``ssh_config``."""
    data = {"all": {"children": {
        "nodes": {"hosts": {name: {} for name in nodes},
                  "vars": {"ansible_connection": "ssh", "ansible_user": "root", "ansible_ssh_common_args": f"-F {ssh_config}",
                           "ansible_python_interpreter": PYTHON}},
        "training": {"hosts": containers,
                     "vars": {"ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": PYTHON,
                              "pct_ssh_args": f"-F {ssh_config}", **(container_vars or {})}},
    }}}
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def task_result(results: Results, name: str, host: str) -> dict[str, t.Any]:
    """The result of the last task called ``name`` on ``host``."""
    found = task_results(results, name, host)
    assert found, f"no result of task {name!r} on {host}: {[task['name'] for play in results['plays'] for task in play['tasks']]}"
    return found[-1]


def message(result: dict[str, t.Any]) -> str:
    """A result's msg without the "Task failed: " that ansible-core 2.19 puts before it."""
    return str(result.get("msg", "")).removeprefix("Task failed: ")


def output(proc: subprocess.CompletedProcess[str]) -> str:
    """Everything an Ansible run printed, for assertion messages."""
    return proc.stdout[-6000:] + proc.stderr[-3000:]


def module_task(module: str, args: dict[str, t.Any], name: str, **extra: t.Any) -> dict[str, t.Any]:
    """A task of the collection's modules, run on the container host (through its node)."""
    return {"name": name, f"trainops.pct_launch.{module}": args, "register": "r", **extra}


# ---------------------------------------------------------------------------- connection


def test_ping_copy_fetch_through_remote_node(fleet: RemoteNodes, runner: Runner, tmp_path: Path) -> None:
    """Without pipelining every module goes through put_file, exec_command and fetch_file over ssh (pipelining: the other tests)."""
    node = fleet["pve-a"]
    data = bytes(range(256)) * 1024 + os.urandom(2 * 1024 * 1024 + 77)
    (tmp_path / "blob.bin").write_bytes(data)
    dest = f"/root/rn-blob-{uuid.uuid4().hex[:8]}.bin"
    inventory = write_inventory(tmp_path / "inventory.yml", fleet.ssh_config, {"ct320": {"pct_vmid": CT_A, "pct_node": "pve-a"}},
                                container_vars={"ansible_pipelining": False})
    proc, results = runner.play(inventory, [
        {"name": "Ping", "ansible.builtin.ping": {}},
        {"name": "Copy", "ansible.builtin.copy": {"src": str(tmp_path / "blob.bin"), "dest": dest, "mode": "0600"}},
        {"name": "Fetch", "ansible.builtin.fetch": {"src": dest, "dest": str(tmp_path / "back.bin"), "flat": True}},
    ], "training", "-vvv")
    assert proc.returncode == 0, output(proc)
    assert task_result(results, "Ping", "ct320")["ping"] == "pong"
    assert task_result(results, "Copy", "ct320")["checksum"] == hashlib.sha1(data).hexdigest()
    assert (tmp_path / "back.bin").read_bytes() == data
    inside = node.sh(CT_A, 'sha256sum < "$1"; stat -c %a "$1"; rm -f -- "$1"', dest).stdout.decode().split()
    assert inside == [hashlib.sha256(data).hexdigest(), "-", "600"]
    assert "ESTABLISH PCT CONNECTION TO container 320 on node pve-a" in proc.stdout
    exec_lines = [line for line in proc.stdout.splitlines() if line.startswith("<ct320> EXEC ")]
    assert exec_lines and all(line.startswith("<ct320> EXEC ssh -T -o BatchMode=yes ") and " pve-a -- " in line for line in exec_lines)
    assert not any(" -t " in line or " -tt " in line for line in exec_lines)


def test_node_address_and_proxyjump(fleet: RemoteNodes, runner: Runner, tmp_path: Path) -> None:
    """The user's ssh configuration applies (Host entries, ProxyJump); pct_node_address overrides HostName only."""
    node_a, node_b = fleet["pve-a"], fleet["pve-b"]
    config = tmp_path / "ssh_config"
    config.write_text(
        host_block("pve-a", node_a.ssh_options(HostName=DEAD_ADDRESS))  # pve-a's entry points to an address without sshd
        + host_block("jump-a", node_a.ssh_options())
        + host_block("pve-z", node_a.ssh_options(HostName=DEAD_ADDRESS, HostKeyAlias="pve-z"))
        + host_block("pve-b-via-a", node_b.ssh_options(ProxyJump="jump-a"))
        + host_block("pve-b-via-z", node_b.ssh_options(ProxyJump="pve-z")),
        encoding="utf-8")
    containers = {
        "by_address": {"pct_vmid": CT_A, "pct_node": "pve-a", "pct_node_address": node_a.address},
        "by_config": {"pct_vmid": CT_A, "pct_node": "pve-a"},
        "via_jump": {"pct_vmid": CT_B, "pct_node": "pve-b-via-a"},
        "via_dead_jump": {"pct_vmid": CT_B, "pct_node": "pve-b-via-z"},
    }
    inventory = write_inventory(tmp_path / "inventory.yml", config, containers, nodes=())
    proc, results = runner.play(inventory, [{"name": "Ping", "ansible.builtin.ping": {}}])
    assert proc.returncode != 0
    for host in ("by_address", "via_jump"):
        result = task_result(results, "Ping", host)
        assert result["status"] == "ok" and result["ping"] == "pong", (host, result, output(proc))
    by_config = task_result(results, "Ping", "by_config")
    assert by_config["status"] == "unreachable"
    expected = "Cannot run a command in container 320 on node pve-a: ssh could not run pct on node pve-a (exit status 255): node pve-a cannot be reached: "
    assert message(by_config).startswith(expected), by_config["msg"]
    assert f"{DEAD_ADDRESS} port 22: Connection refused" in by_config["msg"]
    dead_jump = task_result(results, "Ping", "via_dead_jump")
    assert dead_jump["status"] == "unreachable" and "node pve-b-via-z cannot be reached" in dead_jump["msg"], dead_jump


def test_example_inventory(fleet: RemoteNodes, runner: Runner, tmp_path: Path) -> None:
    """examples/remote/inventory.yml, with the simulated nodes' addresses and this session's containers, works as it is written."""
    example = yaml.safe_load((REPO / "examples" / "remote" / "inventory.yml").read_text(encoding="utf-8"))
    groups = example["all"]["children"]
    nodes_group = next(group for group in groups.values() if group["vars"].get("ansible_connection") == "ssh")
    containers_group = groups["training"]
    real = {"pve-a": fleet["pve-a"], "pve-b": fleet["pve-b"]}
    assert set(nodes_group["hosts"]) == set(real)
    config = tmp_path / "ssh_config"
    config.write_text("".join(host_block(f"{name} {node.address}", node.ssh_options()) for name, node in real.items()), encoding="utf-8")
    for name, node in real.items():
        nodes_group["hosts"][name]["ansible_host"] = node.address
    nodes_group["vars"]["ansible_ssh_common_args"] = f"-F {config}"
    containers_group["vars"]["pct_ssh_args"] = f"-F {config} " + containers_group["vars"].get("pct_ssh_args", "")
    containers_group["hosts"] = {"ct320": {"pct_vmid": CT_A, "pct_node": "pve-a"}, "ct321": {"pct_vmid": CT_B, "pct_node": "pve-b"}}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(example), encoding="utf-8")
    proc, results = runner.play(inventory, [
        {"name": "Ping", "ansible.builtin.ping": {}},
        {"name": "Where", "ansible.builtin.command": "cat /var/lib/pve-standin/node", "delegate_to": "{{ pct_node }}", "changed_when": False},
        module_task("tmux_session_info", {}, "Info"),
    ], "training", "-vvv")
    assert proc.returncode == 0, output(proc)
    for host, node in (("ct320", "pve-a"), ("ct321", "pve-b")):
        assert task_result(results, "Ping", host)["ping"] == "pong"
        assert task_result(results, "Where", host)["stdout"] == node
        assert task_result(results, "Info", host)["tmux"] in ("running", "no_server")
        assert re.search(rf"<{host}> EXEC ssh -T .*-o HostName={re.escape(real[node].address)} -l root .* {node} -- ", proc.stdout)
        assert exec_calls(proc.stdout, host).get("Info") == 1, exec_calls(proc.stdout, host)  # the module ran in the container


# ---------------------------------------------------------------------------- launch on two nodes


class PsSampler(threading.Thread):
    """Samples ``ps -eo args`` (the whole machine: every node and container shares this kernel) until stopped."""

    def __init__(self, needle: str) -> None:
        super().__init__(daemon=True)
        self.needle = needle
        self.samples = 0
        self.hits: list[str] = []
        self.seen: set[str] = set()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False).stdout
            self.samples += 1
            self.hits += [line for line in listing.splitlines() if self.needle in line]
            self.seen.update(line for line in listing.splitlines() if re.search(r"exec 32[01] --keep-env 1 -- /bin/sh -c|lxc-attach .* -- /bin/sh -c", line))
            self.halt.wait(0.05)

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self.halt.set()
        self.join(30)


def read_calls(path: Path) -> list[list[str]]:
    """The argv (after ``pct``) of every call in a stand-in call log."""
    if not path.exists():
        return []
    return [json.loads(line)["argv"][1:] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def call_kind(argv: list[str]) -> str:
    """A pct call by what made it: a module (pipelined python3 through the connection), another command of the connection, or a plain pct verb."""
    if argv[:1] == ["exec"] and argv[2:7] == ["--keep-env", "1", "--", "/bin/sh", "-c"] and len(argv) == 8 and PYTHON in argv[7]:
        return "module (pct exec --keep-env 1 -- /bin/sh -c python3)"
    if argv[:1] == ["exec"]:
        return "connection (pct exec --keep-env 1 -- /bin/sh -c / cat)"
    return f"pct {argv[0] if argv else '?'}"


def test_launch_on_two_nodes(fleet: RemoteNodes, runner: Runner, tmp_path: Path) -> None:
    """playbooks/launch.yml starts the job in both containers (one per node); status.yml reports both; stop.yml stops both."""
    secret = f"rn-secret-{uuid.uuid4().hex}"
    (tmp_path / "train.sh").write_text(JOB_SCRIPT, encoding="utf-8")
    job = {
        "job_hosts": "training",
        "job_session_name": "rn-train",
        "job_workdir": "/workspace/rn",
        "job_files": [{"src": str(tmp_path / "train.sh"), "dest": "/workspace/rn/train.sh", "mode": "0755"}],
        "job_command": "sh /workspace/rn/train.sh",
        "job_env": {"RN_SECRET": secret},
        "job_log_path": "/workspace/rn/train.log",
        "job_wait_pattern": STEP,
        "job_fail_pattern": "Traceback",
        "job_wait_timeout": 120,
        "job_stop_timeout": 10,
    }
    (tmp_path / "job.yml").write_text(json.dumps(job), encoding="utf-8")  # the secret never goes on a command line
    inventory = write_inventory(tmp_path / "inventory.yml", fleet.ssh_config,
                                {"ct320": {"pct_vmid": CT_A, "pct_node": "pve-a"}, "ct321": {"pct_vmid": CT_B, "pct_node": "pve-b"}},
                                container_vars={"ansible_pipelining": True})  # as in examples/remote/inventory.yml
    logs = {name: tmp_path / f"calls-{name}.jsonl" for name in fleet}
    sampler = PsSampler(secret)
    started = time.monotonic()
    with fleet["pve-a"].knobs(call_log=str(logs["pve-a"])), fleet["pve-b"].knobs(call_log=str(logs["pve-b"])):
        sampler.start()
        try:
            proc, results = runner.playbook(inventory, REPO / "playbooks" / "launch.yml", "-e", f"@{tmp_path / 'job.yml'}", "-vvv")
        finally:
            sampler.stop()
    seconds = time.monotonic() - started
    assert proc.returncode == 0, output(proc)
    for host, vmid, node in (("ct320", CT_A, "pve-a"), ("ct321", CT_B, "pve-b")):
        launch = launch_results(results, host)[-1]
        assert launch["changed"] is True and launch["pane_pid"], launch
        wait = launch_proof(results, host)
        assert wait is not None and launch["proven"] is True, output(proc)
        assert wait["verdict"] == "started" and re.match(STEP, wait["matched_line"]), wait
        log = fleet[node].sh(vmid, "cat /workspace/rn/train.log").stdout.decode()
        assert f"secret-sha256 {hashlib.sha256(secret.encode()).hexdigest()}" in log  # the job got its env value
        assert secret not in log
    assert secret not in proc.stdout + proc.stderr
    assert sampler.hits == [], sampler.hits
    assert sampler.samples > 10 and sampler.seen, (sampler.samples, sampler.seen)

    counts: dict[str, dict[str, int]] = {}
    for name, vmid in (("pve-a", CT_A), ("pve-b", CT_B)):
        calls = [argv for argv in read_calls(logs[name]) if str(vmid) in argv[1:2]]
        kinds: dict[str, int] = {}
        for argv in calls:
            kinds[call_kind(argv)] = kinds.get(call_kind(argv), 0) + 1
        counts[name] = kinds
        # launch + verify: one pct exec, tmux_session's, in which its wait's first chunk saw the pattern
        host = f"ct{vmid}"
        per_task = exec_calls(proc.stdout, host)
        assert per_task.get(LAUNCH_TASK) == 1, per_task
        assert "Wait for the job's log to prove it started" not in per_task, per_task
        assert launch_proof(results, host)["pct_calls"] == 0, launch_proof(results, host)
        assert "pct status" not in kinds, kinds  # the preflight's first pct exec proves the container runs (playbooks/preflight.yml)
    print(f"\nremote launch.yml on 2 nodes: {seconds:.1f} s; pct calls per node (container's calls): {json.dumps(counts)}; "
          f"ps sampled {sampler.samples} times, secret never seen")

    proc, results = runner.playbook(inventory, REPO / "playbooks" / "status.yml", "-e", f"@{tmp_path / 'job.yml'}")
    assert proc.returncode == 0, output(proc)
    for host in ("ct320", "ct321"):
        sessions = task_result(results, "Read the sessions from the container", host)["sessions"]
        assert [(item["name"], item["state"]) for item in sessions] == [("rn-train", "running")], sessions
        assert any(re.match(STEP, line) for line in sessions[0]["log_tail"]), sessions
    assert re.search(r"CT 320 session rn-train: running", proc.stdout) and re.search(r"CT 321 session rn-train: running", proc.stdout)

    proc, results = runner.playbook(inventory, REPO / "playbooks" / "stop.yml", "-e", f"@{tmp_path / 'job.yml'}")
    assert proc.returncode == 0, output(proc)
    for host in ("ct320", "ct321"):
        assert task_result(results, "Stop the job and end its tmux session", host)["status"] == "changed"


def test_launch_refuses_container_on_wrong_node(fleet: RemoteNodes, runner: Runner, tmp_path: Path) -> None:
    """Container 320 (on pve-a) asked of the wrong node (pve-b): the preflight's first pct exec stops it with Proxmox's message, nothing launched."""
    job = {"job_session_name": "rn-wrong", "job_command": "sleep 60", "job_log_path": "/tmp/rn-wrong.log"}
    (tmp_path / "job.yml").write_text(json.dumps(job), encoding="utf-8")
    inventory = write_inventory(tmp_path / "inventory.yml", fleet.ssh_config, {"ct320": {"pct_vmid": CT_A, "pct_node": "pve-b"}})
    proc, results = runner.playbook(inventory, REPO / "playbooks" / "launch.yml", "-e", f"@{tmp_path / 'job.yml'}")
    assert proc.returncode != 0
    failed = [(task["name"], res) for play in results["plays"] for task in play["tasks"]
              for host, res in task["hosts"].items() if host == "ct320" and res["status"] in ("failed", "unreachable")]
    assert len(failed) == 1, failed  # the preflight stops the play for that host
    text = message(failed[0][1]) + str(failed[0][1].get("stderr", ""))
    assert ("Cannot run a command in container 320 on node pve-b: the container does not exist on node pve-b "
            "(pct: Configuration file 'nodes/pve-b/lxc/320.conf' does not exist)") in text, failed
    print(f"\nwrong node, launch.yml: {failed[0][0]}: {text}")
    assert b"rn-wrong" not in fleet["pve-a"].sh(CT_A, "tmux ls 2>&1 || true").stdout


# ---------------------------------------------------------------------------- modules on a container of a remote node


def test_modules_on_a_container_of_a_remote_node(fleet: RemoteNodes, runner: Runner, tmp_path: Path) -> None:
    """tmux_session, wait_for_log and tmux_session_info on ct321 (pct_node pve-b): each task one pct exec through ssh to pve-b."""
    inventory = write_inventory(tmp_path / "inventory.yml", fleet.ssh_config, {"ct321": {"pct_vmid": CT_B, "pct_node": "pve-b"}}, nodes=())
    ok_job = 'i=0; while :; do i=$((i + 1)); echo "step $i loss 0.5"; sleep 0.2; done'
    proc, results = runner.play(inventory, [
        module_task("tmux_session", {"session_name": "rn-ok", "command": ok_job, "log_path": "/tmp/rn-ok.log"}, "Start"),
        module_task("wait_for_log", {"session_name": "rn-ok", "pattern": STEP, "timeout": 60}, "Wait"),
        module_task("tmux_session_info", {"session_name": "rn-ok"}, "Info"),
        module_task("tmux_session", {"session_name": "rn-ok", "state": "stopped", "stop_timeout": 10}, "Stop"),
        module_task("tmux_session_info", {"session_name": "rn-ok"}, "Info after stop"),
        module_task("tmux_session", {"session_name": "rn-die", "command": "echo starting; sleep 1; exit 3",
                                     "log_path": "/tmp/rn-die.log"}, "Start dying"),
        module_task("wait_for_log", {"session_name": "rn-die", "pattern": "^never", "timeout": 60}, "Wait dying", ignore_errors=True),
        module_task("tmux_session_info", {"session_name": "rn-die"}, "Info dying"),
    ], "training", "-vvv")
    assert proc.returncode == 0, output(proc)
    started = task_result(results, "Start", "ct321")
    assert started["status"] == "changed" and started["state"] == "running", started
    wait = task_result(results, "Wait", "ct321")
    assert wait["verdict"] == "started" and wait["pct_calls"] == 1, wait
    assert wait["msg"].startswith("Job started in session rn-ok in container 321 on node pve-b: "), wait["msg"]
    assert task_result(results, "Info", "ct321")["session"]["state"] == "running"
    assert task_result(results, "Stop", "ct321")["status"] == "changed"
    stopped = task_result(results, "Info after stop", "ct321")["session"]
    assert stopped["state"] == "finished" and stopped["stopped_by"] == "trainops", stopped
    dying = task_result(results, "Wait dying", "ct321")
    assert dying["status"] == "failed" and dying["verdict"] == "died" and dying["exit_status"] == 3, dying
    assert "container 321" in dying["msg"], dying["msg"]
    info = task_result(results, "Info dying", "ct321")["session"]
    assert (info["state"], info["exit_status"]) == ("finished", 3), info
    # Every module task is one pct exec on pve-b, through ssh, and nothing is delegated.
    per_task = exec_calls(proc.stdout, "ct321")
    tasks = ["Start", "Wait", "Info", "Stop", "Info after stop", "Start dying", "Wait dying", "Info dying"]
    assert {name: per_task.get(name) for name in tasks} == dict.fromkeys(tasks, 1), per_task
    exec_lines = [line for line in proc.stdout.splitlines() if line.startswith("<ct321> EXEC ")]
    assert all(line.startswith("<ct321> EXEC ssh -T -o BatchMode=yes ") and " pve-b -- " in line and " exec 321 --keep-env 1 -- /bin/sh -c " in line
               for line in exec_lines), exec_lines
    assert "[ct321 -> " not in proc.stdout, "a task was delegated"
    log = fleet["pve-b"].sh(CT_B, "cat /tmp/rn-ok.log").stdout.decode()
    assert log.startswith("### trainops.pct_launch: session=rn-ok ") and "\nstep 1 loss 0.5\n" in log, log[:300]


# ---------------------------------------------------------------------------- errors


def _keypair(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rn-test", "-f", str(path)], check=True, capture_output=True, timeout=60)
    return path


def error_case(case: str, fleet: RemoteNodes, tmp_path: Path) -> tuple[Path, dict[str, t.Any], str]:
    """ssh_config, container host vars, and the node for one error case."""
    node_a, node_b = fleet["pve-a"], fleet["pve-b"]
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"{node.name} {node.host_key()}\n" for node in (node_a, node_b)), encoding="utf-8")
    options = {
        "unreachable": {},
        "wrong-key": {"IdentityFile": str(_keypair(tmp_path / "wrong_key"))},
        "no-key": {"IdentityFile": str(tmp_path / "no_such_key")},
        "host-key-changed": {},
        "host-key-unknown": {},
        "wrong-node": {},
    }[case]
    if case == "host-key-changed":
        other = _keypair(tmp_path / "other_host_key").with_suffix(".pub").read_text(encoding="utf-8").split()
        known.write_text(f"pve-a {other[0]} {other[1]}\npve-b {node_b.host_key()}\n", encoding="utf-8")
    if case == "host-key-unknown":
        known.write_text(f"pve-b {node_b.host_key()}\n", encoding="utf-8")
    config = tmp_path / "ssh_config"
    config.write_text(
        host_block("pve-a", node_a.ssh_options(UserKnownHostsFile=str(known), **options))
        + host_block("pve-b", node_b.ssh_options(UserKnownHostsFile=str(known)))
        + host_block("pve-z", node_a.ssh_options(HostName=DEAD_ADDRESS, HostKeyAlias="pve-z", UserKnownHostsFile=str(known))),
        encoding="utf-8")
    node = {"unreachable": "pve-z", "wrong-node": "pve-b"}.get(case, "pve-a")
    return config, {"pct_vmid": CT_A, "pct_node": node}, node


# case: the cause in the pct connection's message
ERRORS = {
    "unreachable": "node pve-z cannot be reached: ssh: connect to host 127.0.0.19 port 22: Connection refused",
    "wrong-key": "ssh could not log in to node pve-a: root@127.0.0.11: Permission denied (publickey)",
    "no-key": "ssh could not log in to node pve-a: ",
    "host-key-changed": "the host key of node pve-a does not match known_hosts, so ssh refused it (host key checking is on): ",
    "host-key-unknown": "the host key of node pve-a is not known, so ssh refused it (host key checking is on): ",
    "wrong-node": "the container does not exist on node pve-b (pct: Configuration file 'nodes/pve-b/lxc/320.conf' does not exist)",
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_name_node_and_container(fleet: RemoteNodes, runner: Runner, tmp_path: Path, case: str) -> None:
    """The connection's error, for a ping and for the collection's modules on the container (wait_for_log's in its own words)."""
    config, host_vars, node = error_case(case, fleet, tmp_path)
    inventory = write_inventory(tmp_path / "inventory.yml", config, {"ct": host_vars}, nodes=())
    go_on = {"ignore_unreachable": True, "ignore_errors": True}
    proc, results = runner.play(inventory, [
        {"name": "Ping", "ansible.builtin.ping": {}, **go_on},
        module_task("tmux_session_info", {}, "Info", **go_on),
        module_task("wait_for_log", {"log_path": "/tmp/rn-errors.log", "timeout": 30}, "Wait", **go_on),
    ])
    cause = ERRORS[case]
    connection_message = f"Cannot run a command in container 320 on node {node}: "
    for task in ("Ping", "Info"):
        result = task_result(results, task, "ct")
        assert result["status"] == "unreachable", (task, result, output(proc))
        assert message(result).startswith(connection_message) and cause in message(result), (task, message(result))
    wait = task_result(results, "Wait", "ct")
    assert wait["status"] == "unreachable" and "verdict" not in wait, (wait, output(proc))
    assert message(wait).startswith(f"Cannot wait for log /tmp/rn-errors.log in container 320 on node {node}: the wait was cut off "), message(wait)
    assert f" s: {connection_message}" in message(wait) and cause in message(wait), message(wait)
    assert "The job's start is not proven" in message(wait), message(wait)
    print(f"\n{case}: pct connection: {message(task_result(results, 'Ping', 'ct'))}\n{case}: wait_for_log: {message(wait)}")


# ---------------------------------------------------------------------------- older pct, pct's own failures over ssh
# The stand-in's knobs reach pct on pve-a through a pct_path wrapper (conftest.knob_pct, a file on this machine, which the
# node shares): other tests on pve-a see none of them.

CT_LOCKED = 322
KEEP_ENV_WARNING = "pct on node pve-a does not know the option --keep-env of pct exec"


def _pct_execs(call_log: Path) -> list[list[str]]:
    """What each pct exec of a call log put between its VMID and ``--``."""
    calls = [json.loads(line)["argv"][1:] for line in call_log.read_text(encoding="utf-8").splitlines()] if call_log.exists() else []
    return [call[2:call.index("--")] for call in calls if call[0] == "exec"]


def test_pve_container_5_0_8_over_ssh(fleet: RemoteNodes, runner: Runner, tmp_path: Path) -> None:
    """Proxmox VE 7.4 to 8.1 over ssh: refused --keep-env, the same command again without it (one ssh call more), one warning
    naming the node; with pct_keep_env false, one pct exec per module task and no warning."""
    calls = tmp_path / "calls.jsonl"
    host = {"pct_vmid": CT_A, "pct_node": "pve-a", "pct_path": knob_pct(tmp_path, pve_container="5.0.8", call_log=str(calls))}
    tasks = [{"name": "Ping", "ansible.builtin.ping": {}}, module_task("tmux_session_info", {}, "Info"),
             {"name": "Environment", "ansible.builtin.command": "env", "register": "r"}]
    for keep_env, per_task in (("auto", [["--keep-env", "1"], []]), ("false", [[]])):
        calls.unlink(missing_ok=True)
        inventory = write_inventory(tmp_path / "inventory.yml", fleet.ssh_config, {"ct320": dict(host, pct_keep_env=keep_env)}, nodes=())
        proc, results = runner.play(inventory, tasks, "training", "-vvv")
        assert proc.returncode == 0, output(proc)
        assert task_result(results, "Ping", "ct320")["ping"] == "pong"
        assert "LANG=C.UTF-8" in task_result(results, "Environment", "ct320")["stdout_lines"]  # kept by the old exec, no option
        assert _pct_execs(calls) == per_task * 3, (keep_env, _pct_execs(calls))
        warnings = " ".join(proc.stderr.split()).count(KEEP_ENV_WARNING)
        assert warnings == (1 if keep_env == "auto" else 0), output(proc)


# case: (stand-in knobs, host vars, the cause in the connection's message)
PCT_FAULTS = {
    "cluster-down": ({"cluster": "down"}, {}, "pve-cluster (pmxcfs, the file system of /etc/pve) is not running on node pve-a, so pct cannot "
                                              "read the configuration (pct: ipcc_send_rec[3] failed: Connection refused | "
                                              "Unable to load access control list: Connection refused); start it there"),
    "cluster-down-255": ({"cluster": "down", "die_status": "255"}, {}, "pve-cluster (pmxcfs, the file system of /etc/pve) is not running"),
    "old-pct-forced-255": ({"pve_container": "5.0.8", "die_status": "255"}, {"pct_keep_env": True},
                           "pct on node pve-a does not know the option --keep-env (pct: Unknown option: keep-env | 400 unable to parse option"),
    "missing-container-2": ({"die_status": "2"}, {"pct_vmid": 999999999}, "the container does not exist on node pve-a"),
}


@pytest.mark.parametrize("case", list(PCT_FAULTS))
def test_pct_failures_over_ssh_are_pct_s(fleet: RemoteNodes, runner: Runner, tmp_path: Path, case: str) -> None:
    """pct's own die over ssh, whatever its exit status (255 too, ssh's own): classified by pct's words, never as ssh's."""
    knobs, host_vars, cause = PCT_FAULTS[case]
    host = {"pct_vmid": CT_A, "pct_node": "pve-a", "pct_path": knob_pct(tmp_path, **knobs), **host_vars}
    inventory = write_inventory(tmp_path / "inventory.yml", fleet.ssh_config, {"ct": host}, nodes=())
    go_on = {"ignore_unreachable": True, "ignore_errors": True}
    proc, results = runner.play(inventory, [{"name": "Ping", "ansible.builtin.ping": {}, **go_on},
                                            module_task("tmux_session_info", {}, "Info", **go_on)])
    for task in ("Ping", "Info"):
        result = task_result(results, task, "ct")
        assert result["status"] == "unreachable", (task, result, output(proc))
        text = " ".join(message(result).split())
        assert text.startswith(f"Cannot run a command in container {host['pct_vmid']} on node pve-a: {cause}"), (task, text)
        assert "ssh could not" not in text, text


@pytest.fixture()
def locked_ct(fleet: RemoteNodes) -> Iterator[Path]:
    """Container 322 on pve-a, running, with ``lock: backup`` in its config; the lock is removed afterwards."""
    fleet.create("pve-a", CT_LOCKED)
    conf = fleet["pve-a"].state_root / "nodes" / "pve-a" / "lxc" / f"{CT_LOCKED}.conf"
    conf.write_text(conf.read_text(encoding="utf-8") + "lock: backup\n", encoding="utf-8")
    try:
        yield conf
    finally:
        conf.write_text("".join(line for line in conf.read_text(encoding="utf-8").splitlines(True) if not line.startswith("lock:")),
                        encoding="utf-8")
        fleet["pve-a"].pct("destroy", CT_LOCKED, "--force", "1")


def test_a_locked_container_over_ssh(fleet: RemoteNodes, runner: Runner, tmp_path: Path, locked_ct: Path) -> None:
    """A backup's lock: modules run in the running container (pct exec checks no lock); pct stop refuses with pve-guest-common's
    words; stopped and still locked (vzdump in stop mode), the connection says a backup holds it."""
    inventory = write_inventory(tmp_path / "inventory.yml", fleet.ssh_config, {"ct": {"pct_vmid": CT_LOCKED, "pct_node": "pve-a"}}, nodes=())
    proc, results = runner.play(inventory, [{"name": "Ping", "ansible.builtin.ping": {}}])
    assert proc.returncode == 0 and task_result(results, "Ping", "ct")["ping"] == "pong", output(proc)
    refused = fleet["pve-a"].pct("stop", CT_LOCKED)
    assert (refused.returncode, refused.stderr) == (255, b"CT is locked (backup)\n")
    fleet["pve-a"].pct("stop", CT_LOCKED, "--skiplock", "1", check=True)
    proc, results = runner.play(inventory, [{"name": "Ping", "ansible.builtin.ping": {}, "ignore_unreachable": True}])
    result = task_result(results, "Ping", "ct")
    text = " ".join(message(result).split())
    assert result["status"] == "unreachable" and text.startswith(
        f"Cannot run a command in container {CT_LOCKED} on node pve-a: the container is not running and is locked (backup) on node pve-a: "
        "a vzdump backup in stop mode stops it and starts it again when it ends; wait for the backup (pvenode task list on node pve-a"), text
    assert text.endswith(f"'pct unlock {CT_LOCKED}', then 'pct start {CT_LOCKED}' (pct: container '{CT_LOCKED}' not running!)"), text


# ---------------------------------------------------------------------------- ControlPersist


def test_control_persist(fleet: RemoteNodes, runner: Runner, tmp_path: Path) -> None:
    """The connection shares ssh connections as shipped, works with the user's own ControlPersist; prints the effect on 5 pings.

    With pipelining, as examples/remote/inventory.yml sets it: one ssh connection per ping.
    """
    pipelining = True
    control_dir = Path(tempfile.mkdtemp(prefix="rn-pct-cp-", dir="/tmp"))
    control_path = f"{control_dir}/%C"
    clock = {"name": "Clock", "ansible.builtin.set_fact": {"clock": "{{ lookup('ansible.builtin.pipe', 'date +%s.%N') }}"}}
    tasks = [{**clock, "name": "Start"}] + [{"name": f"Ping {n}", "ansible.builtin.ping": {}} for n in range(1, 6)] + [{**clock, "name": "End"}]
    plain = f"-F {fleet.ssh_config}"
    persist = f"{plain} -o ControlMaster=auto -o ControlPersist=60 -o ControlPath={control_path}"
    shipped_path = f"{control_dir}/shipped"
    seconds: dict[str, float] = {}
    try:
        for label, ssh_args, sharing in (("plain", plain, {"pct_ssh_control_persist": "no"}),
                                         ("as shipped", plain, {"pct_ssh_control_path_dir": shipped_path}),
                                         ("ControlPersist", persist, {})):
            inventory = write_inventory(tmp_path / f"inventory-{label}.yml", fleet.ssh_config, {"ct320": {"pct_vmid": CT_A, "pct_node": "pve-a"}},
                                        nodes=(), container_vars={"pct_ssh_args": ssh_args, "ansible_pipelining": pipelining, **sharing})
            proc, results = runner.play(inventory, tasks)
            assert proc.returncode == 0, output(proc)
            assert all(task_result(results, f"Ping {n}", "ct320")["ping"] == "pong" for n in range(1, 6))
            start = float(task_result(results, "Start", "ct320")["ansible_facts"]["clock"])
            seconds[label] = float(task_result(results, "End", "ct320")["ansible_facts"]["clock"]) - start
        check = subprocess.run(["ssh", "-F", str(fleet.ssh_config), "-o", f"ControlPath={control_path}", "-O", "check", "pve-a"],
                               capture_output=True, text=True, timeout=30, check=False)
        assert check.returncode == 0, f"no ControlPersist master for pve-a: {check.stderr}"
        # as shipped, the connection shares one itself (pct_ssh_control_persist 60s), in pct_ssh_control_path_dir
        check = subprocess.run(["ssh", "-F", str(fleet.ssh_config), "-o", f"ControlPath={shipped_path}/pct-%C", "-O", "check", "pve-a"],
                               capture_output=True, text=True, timeout=30, check=False)
        assert check.returncode == 0, f"no master of the shipped default for pve-a: {check.stderr}"
        assert (Path(shipped_path).stat().st_mode & 0o777) == 0o700
    finally:
        for path in (control_path, f"{shipped_path}/pct-%C"):
            subprocess.run(["ssh", "-F", str(fleet.ssh_config), "-o", f"ControlPath={path}", "-O", "exit", "pve-a"],
                           capture_output=True, timeout=30, check=False)
        shutil.rmtree(control_dir, ignore_errors=True)
    print(f"\n5 sequential pings (pipelining {pipelining}): plain ssh (pct_ssh_control_persist no) {seconds['plain']:.2f} s, "
          f"as shipped {seconds['as shipped']:.2f} s, the user's ControlPersist {seconds['ControlPersist']:.2f} s, "
          f"ratio plain / shipped {seconds['plain'] / seconds['as shipped']:.2f}")


def test_later_pct_calls_to_a_node_reuse_its_control_master(fleet: RemoteNodes, runner: Runner, tmp_path: Path) -> None:
    """3 hosts of one node, forks 1, no master open: the first call authenticates, every later one goes through its socket.

    ssh's own connection sharing (``pct_ssh_control_persist``, ControlMaster=auto), nothing of the collection's: every
    call is one ssh process with the node and ``--`` (no ``-O check``, no ``-f -N`` opened beforehand). ssh logs every
    call (``-v``, ``-E``, through pct_ssh_executable); a call that authenticated says "Authenticated to", a call
    through the master's socket "mux_client_request_session".
    """
    logs = tmp_path / "ssh-logs"
    logs.mkdir()
    wrapper = tmp_path / "ssh-logged"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{logs}/argv"\nexec ssh -E "{logs}/ssh.$$.log" -v "$@"\n',
                       encoding="utf-8")
    wrapper.chmod(0o755)
    control_dir = Path(tempfile.mkdtemp(prefix="rn-mux-", dir="/tmp"))
    hosts = {f"ct320-{n}": {"pct_vmid": CT_A, "pct_node": "pve-a"} for n in range(3)}
    inventory = write_inventory(tmp_path / "inventory.yml", fleet.ssh_config, hosts, nodes=(),
                                container_vars={"pct_ssh_executable": str(wrapper), "pct_ssh_control_path_dir": str(control_dir)})
    tasks = [{"name": "Ping", "ansible.builtin.ping": {}}, {"name": "Ping again", "ansible.builtin.ping": {}}]
    try:
        proc, results = runner.play(inventory, tasks, "training", "--forks", "1")
        assert proc.returncode == 0, output(proc)
        assert all(task_result(results, "Ping again", host)["ping"] == "pong" for host in hosts)
        calls = (logs / "argv").read_text(encoding="utf-8").splitlines()
        assert len(calls) >= 6 and all(" pve-a -- " in call for call in calls), calls  # 6 module calls, nothing else
        texts = [path.read_text(encoding="utf-8", errors="replace") for path in sorted(logs.glob("ssh.*.log"))]
        authenticated = [text for text in texts if "Authenticated to" in text]
        others = [text for text in texts if "Authenticated to" not in text]
        assert len(authenticated) == 1, f"{len(authenticated)} of {len(texts)} ssh calls authenticated"
        assert others and all("mux_client_request_session" in text for text in others), "an ssh call neither authenticated nor used the master"
        check = subprocess.run(["ssh", "-F", str(fleet.ssh_config), "-o", f"ControlPath={control_dir}/pct-%C", "-O", "check", "pve-a"],
                               capture_output=True, text=True, timeout=30, check=False)
        assert check.returncode == 0, f"no master left for pve-a (ControlPersist): {check.stderr}"
    finally:
        subprocess.run(["ssh", "-F", str(fleet.ssh_config), "-o", f"ControlPath={control_dir}/pct-%C", "-O", "exit", "pve-a"],
                       capture_output=True, timeout=30, check=False)
        shutil.rmtree(control_dir, ignore_errors=True)
    print(f"\n3 hosts of one node, forks 1, cold: {len(texts)} ssh calls, {len(authenticated)} authenticated")
