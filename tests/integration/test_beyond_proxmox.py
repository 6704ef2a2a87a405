# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The same playbooks and modules on hosts that are no container: localhost, and a host reached over ssh.

The modules run on the host they target; nothing here has a ``pct_vmid``. The ssh host is node
pve-a of the ``remote_nodes`` fixture (a real sshd on 127.0.0.11 on this machine), reached with
Ansible's own ssh connection. A launch is also run from ``ansible-playbook`` inside a real terminal
(``script``) into a container: the pct connection never hands that terminal on to ``pct exec``, so
the job starts, is proven and is reported as from a pipeline.

Each launch: launch.yml (without the prepare step: tmux is installed here), a second launch that
finds the job running, status.yml, a job that dies (the play fails with its exit status), stop.yml.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import typing as t
import uuid
from pathlib import Path

import pytest

from .conftest import REPO, StandinNode
from .nodes import RemoteNodes
from .playbook_results import ansible_playbook, launch_proof, task_results

pytestmark = pytest.mark.integration

PYTHON = "/usr/bin/python3"
CALLBACKS = Path(__file__).resolve().parent / "files" / "playbooks" / "callback_plugins"
CT_TTY = 396
LAUNCH = "Start the job in its detached tmux session"
HANDLER = "Wait for the job's log to prove it started"
JOB = "i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo \"step $i loss 0.$((1000-i))\"; sleep 0.2; done"


class Host:
    """One inventory host in group ``training`` and how to look at it from the test."""

    def __init__(self, folder: Path, name: str, host_vars: dict[str, t.Any], shell: t.Callable[[str], subprocess.CompletedProcess[str]]):
        self.folder, self.name, self.shell = folder, name, shell
        self.inventory = folder / f"inventory-{name}.json"
        self.inventory.write_text(json.dumps({"training": {"hosts": {name: host_vars}}}), encoding="utf-8")
        self.session = f"beyond-{uuid.uuid4().hex[:8]}"
        self.log = str(folder / f"{self.session}.log") if host_vars.get("ansible_connection") != "trainops.pct_launch.pct" \
            else f"/root/{self.session}.log"

    def playbook(self, name: str, *extra: str, wrap: t.Callable[[list[str]], list[str]] | None = None) -> tuple[int, str, dict[str, t.Any]]:
        """Run playbooks/NAME with this host's job; (rc, output, results)."""
        results = self.folder / f"results-{uuid.uuid4().hex[:8]}.json"
        job = {"job_session_name": self.session, "job_log_path": self.log, "job_command": JOB, "job_prepare": False,
               "job_wait_pattern": r"^step \d+ loss", "job_wait_timeout": 60, "job_stop_timeout": 5}
        argv = [ansible_playbook(), "-i", str(self.inventory), "-e", json.dumps(job), *extra, str(REPO / "playbooks" / name)]
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0",
                   ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS), ANSIBLE_CALLBACKS_ENABLED="trainops_results",
                   TRAINOPS_RESULTS_FILE=str(results), ANSIBLE_HOST_KEY_CHECKING="0")
        argv = wrap(argv) if wrap else argv
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, stdin=subprocess.DEVNULL, cwd=self.folder, check=False)
        data = json.loads(results.read_text(encoding="utf-8")) if results.exists() else {}
        return proc.returncode, proc.stdout[-8000:] + proc.stderr[-3000:], data

    def result(self, results: dict[str, t.Any], task: str) -> dict[str, t.Any]:
        found = task_results(results, task, self.name)
        assert found, f"no result of {task!r} on {self.name}"
        return found[-1]

    def alive(self) -> bool:
        """Whether the host's tmux has the session."""
        return self.shell(f"tmux has-session -t ={shlex.quote(self.session)}").returncode == 0

    def read(self, path: str) -> str:
        out = self.shell(f"cat -- {shlex.quote(path)}")
        assert out.returncode == 0, f"cannot read {path} on {self.name}: {out.stderr}"
        return out.stdout

    def clean(self) -> None:
        """End the session and remove its run folder (the host's /run/trainops is shared with other tests)."""
        self.shell(f"tmux kill-session -t ={self.session} 2>/dev/null; rm -rf /run/trainops/{self.session}")


def local_shell(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=False)


def lifecycle(host: Host) -> None:
    """Launch, launch again, report, a dying job, stop: the whole life through the playbooks."""
    rc, out, results = host.playbook("launch.yml")
    assert rc == 0, out
    launch, proof = host.result(results, LAUNCH), launch_proof(results, host.name)
    assert task_results(results, HANDLER, host.name) == [], "a launch that is no fleet-wide wait is proven in its own task"
    assert proof is not None and launch["proven"] is True, launch
    assert launch["changed"] and launch["state"] == "running" and "vmid" not in launch, launch
    assert proof["verdict"] == "started" and proof["matched_line"].startswith("step "), proof
    assert f"{host.session} in host {host.name}: started" in out, out
    assert host.alive()
    header = host.read(host.log).splitlines()[0]
    assert header.startswith(f"### trainops.pct_launch: session={host.session} started_at="), header

    rc, out, results = host.playbook("launch.yml")
    assert rc == 0, out
    again = host.result(results, LAUNCH)
    assert not again["changed"] and again["proven"] is True and again["pane_pid"] == launch["pane_pid"], again
    assert not task_results(results, HANDLER, host.name), "a proven running job was proven again"

    rc, out, results = host.playbook("status.yml")
    assert rc == 0, out
    assert f"{host.name} session {host.session}: running pane_pid {launch['pane_pid']}" in out, out

    rc, out, results = host.playbook("stop.yml")
    assert rc == 0, out
    stop = host.result(results, "Stop the job and end its tmux session")
    assert stop["changed"] and stop["exit_status"] == 143, stop
    assert not host.alive()
    record = host.read(host.log + ".exit")
    assert "exit_status=143" in record and "stopped_by=trainops" in record, record

    rc, out, results = host.playbook("launch.yml", "-e", json.dumps({"job_command": "echo cannot load data; exit 3"}))
    assert rc != 0, out
    died = launch_proof(results, host.name)
    assert died is not None, out
    assert died["verdict"] == "died" and died["exit_status"] == 3 and died["log_tail"][-2:][0] == "cannot load data", died
    assert "the job ended with exit status 3" in died["msg"], died["msg"]
    assert os.path.basename(host.log) + ".1" in host.shell(f"ls {shlex.quote(os.path.dirname(host.log))}").stdout, "the earlier log was not kept"


@pytest.mark.skipif(shutil.which("tmux") is None or os.geteuid() != 0, reason="needs tmux and root")
def test_launch_on_localhost(tmp_path: Path) -> None:
    """ansible_connection local: the modules run on the controller itself."""
    host = Host(tmp_path, "localhost", {"ansible_connection": "local", "ansible_python_interpreter": PYTHON}, local_shell)
    try:
        lifecycle(host)
    finally:
        host.clean()


def test_launch_on_a_host_over_ssh(remote_nodes: RemoteNodes, tmp_path: Path) -> None:
    """Ansible's ssh connection to a real sshd: a VM or GPU server beside the containers."""
    node = remote_nodes["pve-a"]

    def over_ssh(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(node.ssh_argv(["sh", "-c", command]), capture_output=True, text=True, timeout=60, check=False)

    host_vars = {"ansible_connection": "ssh", "ansible_user": "root", "ansible_python_interpreter": PYTHON,
                 "ansible_ssh_common_args": f"-F {remote_nodes.ssh_config}", "ansible_host": "pve-a"}
    host = Host(tmp_path, "gpu-server", host_vars, over_ssh)
    try:
        lifecycle(host)
    finally:
        host.clean()


def test_launch_from_a_terminal(standin: StandinNode, tmp_path: Path) -> None:
    """ansible-playbook in a real terminal (script(1)): the job still starts, is proven and reported."""
    if shutil.which("script") is None:
        pytest.skip("script(1) is missing (bsdutils)")
    vmid = standin.create(CT_TTY)
    standin.apt_install(vmid, "tmux")

    def in_container(command: str) -> subprocess.CompletedProcess[str]:
        out = standin.sh(vmid, command, check=False)
        return subprocess.CompletedProcess(out.args, out.returncode, out.stdout.decode(), out.stderr.decode())

    host_vars = {"pct_vmid": vmid, "ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": PYTHON}
    host = Host(tmp_path, f"ct{vmid}", host_vars, in_container)
    tty_seen = tmp_path / "tty"

    def in_terminal(argv: list[str]) -> list[str]:
        inner = f"tty > {shlex.quote(str(tty_seen))}; exec {shlex.join(argv)}"
        return ["script", "-qefc", inner, "/dev/null"]

    rc, out, results = host.playbook("launch.yml", wrap=in_terminal)
    try:
        assert tty_seen.read_text(encoding="utf-8").startswith("/dev/pts/"), "ansible-playbook did not run in a terminal"
        assert rc == 0, out
        assert (launch_proof(results, host.name) or {}).get("verdict") == "started", out
        assert f"{host.session} in CT {vmid}: started" in out, out
        assert host.alive()
        rc, out, _results = host.playbook("status.yml", wrap=in_terminal)
        assert rc == 0 and f"CT {vmid} session {host.session}: running" in out, out
    finally:
        host.clean()


@pytest.mark.skipif(shutil.which("tmux") is None or os.geteuid() != 0, reason="needs tmux and root")
def test_env_without_pipelining_is_refused(tmp_path: Path) -> None:
    """Without pipelining the module's arguments would be a file on the target: a launch with env starts nothing."""
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    unpipelined = {"ansible_connection": "local", "ansible_python_interpreter": PYTHON, "ansible_pipelining": False}
    host = Host(tmp_path, "localhost", unpipelined, local_shell)
    try:
        rc, out, results = host.playbook("launch.yml", "-e", json.dumps({"job_env": {"TOKEN": secret}}))
        assert rc != 0, out
        refused = host.result(results, LAUNCH)
        assert refused["status"] == "failed" and "pipelining is off" in refused["msg"] and "with env" in refused["msg"], refused
        assert secret not in out and not host.alive() and not os.path.exists(host.log)
        host.inventory.write_text(json.dumps({"training": {"hosts": {"localhost": dict(unpipelined, ansible_pipelining=True)}}}),
                                  encoding="utf-8")
        rc, out, results = host.playbook("launch.yml", "-e", json.dumps({"job_env": {"TOKEN": secret}}))
        assert rc == 0 and host.alive(), out
        assert secret not in out
    finally:
        host.clean()
