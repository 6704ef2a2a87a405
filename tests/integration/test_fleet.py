# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Fleets: one job across many containers with playbooks/launch.yml, as a user runs it.

* Multi-node: examples/multinode/job.yml (job_multinode: true) on 4 containers spread over two
  simulated remote Proxmox VE nodes (tools/pve_standin/node.sh: pve-e on 127.0.0.15 and pve-f on
  127.0.0.16, each with its own sshd and container set): every rank really meets rank 0 over TCP
  (examples/multinode/rendezvous.py) and its log shows the world of 4. MASTER_ADDR comes from
  job_master_addr, then from ip= in net0 of the first container's pct config; both are 127.0.0.1,
  since the stand-in's containers share the host's network and tests talk to loopback only.
* Fleet failures: 4 containers of the local stand-in, one with a broken job (script missing): the
  summary names it and why, the others run. With job_all_or_nothing, the sessions the run started
  are stopped, one that was already running is left alone, and the play fails; a container lost in
  preflight makes the launch start nothing at all.

VMIDs: 360-363 (remote nodes), 364-368 (local stand-in; 368 stays stopped).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
import typing as t
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import REPO, StandinNode, require_standin
from .playbook_results import ansible_playbook, launch_proof, report_msg, results_by_host, summary_lines

pytestmark = pytest.mark.integration

NODE_SH = REPO / "tools" / "pve_standin" / "node.sh"
CALLBACK_DIR = Path(__file__).resolve().parent / "files" / "playbooks" / "callback_plugins"
MULTINODE_JOB = REPO / "examples" / "multinode" / "job.yml"
NODES = {"pve-e": "127.0.0.15", "pve-f": "127.0.0.16"}
# Inventory order, so NODE_RANK order: the nodes alternate, and VMID order is not rank order.
RANKS = [("ct360", 360, "pve-e"), ("ct362", 362, "pve-f"), ("ct361", 361, "pve-e"), ("ct363", 363, "pve-f")]
FLEET = [364, 365, 366, 367]
BROKEN = 366
STOPPED = 368
LAUNCH = "Start the job in its detached tmux session"
HANDLER = "Wait for the job's log to prove it started"
STOP = "Stop the job where this run started it, because a container failed (job_all_or_nothing)"
FLEET_JOB = """\
import time

for tick in range(1200):
    print(f"tick {tick}", flush=True)
    time.sleep(0.5)
"""


@dataclasses.dataclass
class Run:
    """One ansible-playbook run: its process and every task result (tests' trainops_results callback)."""

    proc: subprocess.CompletedProcess[str]
    results: dict[str, t.Any]
    seconds: float = 0.0

    @property
    def rc(self) -> int:
        """The exit status of ansible-playbook."""
        return self.proc.returncode

    @property
    def output(self) -> str:
        """stdout and stderr, for assertion messages."""
        return f"rc={self.proc.returncode}\n--- stdout\n{self.proc.stdout}\n--- stderr\n{self.proc.stderr}"

    def host_results(self, name: str) -> dict[str, dict[str, t.Any]]:
        """The results of the last run of task ``name``, per host."""
        return results_by_host(self.results, name)

    def result(self, name: str, host: str) -> dict[str, t.Any]:
        """The result of task ``name`` on ``host``."""
        found = self.host_results(name)
        assert host in found, f"task {name!r} has no result for {host}\n{self.output}"
        return found[host]

    def summary(self) -> list[str]:
        """The summary's lines (the task runs once)."""
        return summary_lines(self.results)

    def line(self, host: str) -> str:
        """The summary line of ``host``."""
        lines = [line for line in self.summary() if line.startswith(f"{host} (CT ")]
        assert len(lines) == 1, f"{host}: {lines}\n{self.output}"
        return lines[0]

    def stats(self, host: str) -> dict[str, int]:
        """The play recap of ``host``."""
        assert "stats" in self.results, f"no results file: ansible-playbook ended early\n{self.output}"
        return dict(self.results["stats"][host])


def run_playbook(folder: Path, inventory: Path, *extra: str | dict[str, t.Any], options: t.Sequence[str] = ()) -> Run:
    """ansible-playbook playbooks/launch.yml with these extra vars (a path is loaded with @)."""
    results = folder / f"results-{len(list(folder.glob('results-*.json'))) + 1}.json"
    argv = [ansible_playbook(), "-i", str(inventory)]
    for value in extra:
        argv += ["-e", json.dumps(value) if isinstance(value, dict) else f"@{value}"]
    argv += [*options, str(REPO / "playbooks" / "launch.yml")]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0",
               ANSIBLE_CALLBACK_PLUGINS=str(CALLBACK_DIR), ANSIBLE_CALLBACKS_ENABLED="trainops_results",
               TRAINOPS_RESULTS_FILE=str(results), ANSIBLE_PIPELINING="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200, env=env, stdin=subprocess.DEVNULL,
                          cwd=folder, check=False)
    seconds = time.monotonic() - started
    return Run(proc, json.loads(results.read_text(encoding="utf-8")) if results.exists() else {}, seconds)


# Remote nodes.

class RemoteNode:
    """A simulated remote Proxmox VE node (node.sh), reached with ssh as the playbooks reach it."""

    def __init__(self, name: str, ssh_config: str) -> None:
        self.name = name
        self.ssh_config = ssh_config
        self.created: list[int] = []

    def run(self, *argv: str | int, timeout: float = 600) -> subprocess.CompletedProcess[bytes]:
        """Run a command on the node (quoted for the remote shell), stdin /dev/null, no tty."""
        command = shlex.join(map(str, argv))
        return subprocess.run(["ssh", "-F", self.ssh_config, self.name, command], capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)

    def pct(self, *args: str | int, check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess[bytes]:
        """pct on the node."""
        result = self.run("pct", *args, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{self.name}: pct {' '.join(map(str, args))} exited {result.returncode}: {result.stderr!r}")
        return result

    def sh(self, vmid: int, script: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        """A sh script inside a container of this node (not checked)."""
        return self.pct("exec", vmid, "--", "sh", "-c", script, "sh", *args)

    def create(self, vmid: int) -> int:
        """A fresh running container, replacing one left over from an earlier run."""
        if self.pct("config", vmid).returncode == 0:
            self.pct("destroy", vmid, "--force", check=True)
        self.pct("create", vmid, "--release", "bookworm", "--start", "1", check=True)
        self.created.append(vmid)
        return vmid

    def conf_path(self, vmid: int) -> Path:
        """The Proxmox config of a container of this node, as this host sees it."""
        base = Path(os.environ.get("PVE_STANDIN_NODES", "/var/lib/pve-standin-nodes"))
        return base / self.name / "root" / "nodes" / self.name / "lxc" / f"{vmid}.conf"


def node_sh(*args: str) -> subprocess.CompletedProcess[str]:
    """tools/pve_standin/node.sh with these arguments."""
    return subprocess.run(["bash", str(NODE_SH), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=120, check=False)


def client_config(folder: Path) -> str:
    """An ssh_config (and known_hosts) for pve-e and pve-f only, as node.sh's shared one would say.

    node.sh rewrites its shared client files whenever any node goes up or down; other test sessions
    do that with their own nodes, so this module keeps files of its own. Host key checking stays on.
    """
    base = Path(os.environ.get("PVE_STANDIN_NODES", "/var/lib/pve-standin-nodes"))
    entries, known = [], []
    for name, address in NODES.items():
        key = (base / name / "ssh_host_ed25519_key.pub").read_text(encoding="utf-8").split()
        known.append(f"{name} {key[0]} {key[1]}\n")
        entries.append(f"Host {name}\n  HostName {address}\n  Port 22\n  User root\n  IdentityFile {base / 'client' / 'id_ed25519'}\n"
                       f"  IdentitiesOnly yes\n  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
                       f"  HostKeyAlias {name}\n  BatchMode yes\n\n")
    (folder / "known_hosts").write_text("".join(known), encoding="utf-8")
    (folder / "ssh_config").write_text("".join(entries), encoding="utf-8")
    return str(folder / "ssh_config")


@pytest.fixture(scope="module")
def remote_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RemoteNode]]:
    """pve-e and pve-f up (node.sh), with containers 360-363 running; all taken down at the end."""
    require_standin()
    if not Path("/usr/sbin/sshd").exists() or shutil.which("ssh") is None:
        reason = "remote nodes need openssh-server and openssh-client"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    nodes: dict[str, RemoteNode] = {}
    try:
        for name, address in NODES.items():
            up = node_sh("up", name, address)
            assert up.returncode == 0, f"node.sh up {name} {address}: {up.stdout}{up.stderr}"
        config = client_config(tmp_path_factory.mktemp("ssh"))
        nodes = {name: RemoteNode(name, config) for name in NODES}
        for _host, vmid, node in RANKS:
            nodes[node].create(vmid)
        yield nodes
    finally:
        for node in nodes.values():
            for vmid in node.created:
                node.pct("destroy", vmid, "--force")
        for name in NODES:
            node_sh("down", name)


def ensure_running(nodes: dict[str, RemoteNode]) -> None:
    """Containers of the test that stopped are started again, with a warning: not launch.yml's doing (preflight checks it)."""
    for _host, vmid, node in RANKS:
        status = nodes[node].pct("status", vmid).stdout.decode().strip()
        if status != "status: running":
            warnings.warn(f"CT {vmid} on {node} was found {status!r} before the launch: started again", stacklevel=2)
            nodes[node].pct("start", vmid, check=True)


@pytest.fixture(scope="module")
def multinode_inventory(remote_nodes: dict[str, RemoteNode], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The 4 containers (group training, rank order) and their nodes (for the delegated tasks)."""
    config = remote_nodes["pve-e"].ssh_config
    folder = tmp_path_factory.mktemp("multinode")
    # One ssh connection per node for all the container's tasks, as README suggests for remote nodes.
    multiplex = f"-o ControlMaster=auto -o ControlPersist=60s -o ControlPath={folder}/cm-%C"
    inventory = {
        "training": {
            "hosts": {host: {"pct_vmid": vmid, "pct_node": node} for host, vmid, node in RANKS},
            "vars": {"ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": "/usr/bin/python3",
                     "pct_ssh_args": f"-F {config} {multiplex}"},
        },
        "pve_nodes": {
            "hosts": {name: {} for name in NODES},
            "vars": {"ansible_ssh_common_args": f"-F {config}", "ansible_python_interpreter": "/usr/bin/python3"},
        },
    }
    path = folder / "inventory.yml"
    path.write_text(json.dumps(inventory, indent=1), encoding="utf-8")
    yield path
    for name in NODES:
        subprocess.run(["ssh", "-F", config, *multiplex.split(), "-O", "exit", name], capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=30, check=False)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def read_log(node: RemoteNode, vmid: int, path: str) -> list[str]:
    """The lines of a log in a container of a remote node."""
    out = node.sh(vmid, 'cat -- "$1"', path)
    assert out.returncode == 0, f"cannot read {path} in CT {vmid} on {node.name}: {out.stderr!r}"
    return out.stdout.decode("utf-8", "replace").splitlines()


def check_world(run: Run, nodes: dict[str, RemoteNode], log: str, port: int, world_size: int, nproc: int) -> None:
    """Every rank started, met the others and logged the world of 4."""
    for rank, (host, vmid, node) in enumerate(RANKS):
        assert run.result(HANDLER, host)["verdict"] == "started", run.output
        assert run.line(host) == f"{host} (CT {vmid} on {node}): started", run.summary()
        lines = read_log(nodes[node], vmid, log)
        assert lines[1] == (f"rank {rank} of 4: rendezvous at 127.0.0.1:{port} (WORLD_SIZE={world_size}, "
                            f"NPROC_PER_NODE={nproc})"), lines
        assert f"rank {rank} of 4: world [0, 1, 2, 3]" in lines, lines
        exit_file = nodes[node].sh(vmid, 'i=0; while [ ! -e "$1" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; cat "$1"',
                                   log + ".exit").stdout.decode()
        assert "exit_status=0" in exit_file.splitlines(), f"rank {rank}: {exit_file!r}\n{lines}"
    rank0 = read_log(nodes[RANKS[0][2]], RANKS[0][1], log)
    joined = [line.split()[3] for line in rank0 if line.startswith("rank 0: rank ") and " joined from 127.0.0.1 " in line]
    assert sorted(joined) == ["1", "2", "3"], rank0


def test_multinode_rendezvous_over_two_remote_nodes(remote_nodes: dict[str, RemoteNode], multinode_inventory: Path) -> None:
    folder = multinode_inventory.parent
    ensure_running(remote_nodes)
    port = free_port()
    run = run_playbook(folder, multinode_inventory, MULTINODE_JOB,
                       {"job_master_addr": "127.0.0.1", "job_master_port": port, "job_nproc_per_node": 2})
    assert run.rc == 0, run.output
    print(f"multinode launch (fresh containers, 2 remote nodes): {run.seconds:.1f} s")
    for host, _vmid, _node in RANKS:
        assert run.stats(host)["failures"] == 0 and run.stats(host)["unreachable"] == 0, run.output
        launch = run.result(LAUNCH, host)
        assert launch["status"] == "changed"
        # the ranks' variables are public_env, not env: Ansible hides no value of theirs (NODE_RANK 0, NNODES 4, ...)
        # in the result, where each would mask its digits in every string and number
        assert isinstance(launch["pane_pid"], int) and re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ", launch["started_at"]), launch
        assert "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" not in json.dumps(launch), launch
    assert run.summary()[0] == "rendezvous: 4 of 4 containers run", run.summary()
    check_world(run, remote_nodes, "/workspace/rendezvous.log", port, world_size=8, nproc=2)
    reports = [str(report_msg(run.results, host)) for host, _vmid, _node in RANKS]
    assert all(f"(NODE_RANK {rank} of 4, MASTER_ADDR 127.0.0.1:{port})" in report for rank, report in enumerate(reports)), reports
    results = run.result("Collect the results of the fleet on localhost (job_fleet_results)", RANKS[0][0])
    assert results["ansible_facts"]["job_fleet_results"] == {host: {"status": "started", "reason": ""} for host, _v, _n in RANKS}

    # MASTER_ADDR from ip= in net0 of the first container's pct config (on its node), when job_master_addr is not set.
    first_host, first_vmid, first_node = RANKS[0]
    conf = remote_nodes[first_node].conf_path(first_vmid)
    original = conf.read_text(encoding="utf-8")
    conf.write_text(original + "net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:03:60,ip=127.0.0.1/8,type=veth\n", encoding="utf-8")
    try:
        port = free_port()
        again = run_playbook(folder, multinode_inventory, MULTINODE_JOB,
                             {"job_session_name": "rendezvous2", "job_log_path": "/workspace/rendezvous2.log", "job_master_port": port})
    finally:
        conf.write_text(original, encoding="utf-8")
    assert again.rc == 0, again.output
    print(f"multinode launch (prepared containers): {again.seconds:.1f} s")
    config = again.result("Read the first container's network configuration on its node", first_host)
    assert config["status"] == "ok" and "ip=127.0.0.1/8" in config["stdout"], config
    assert again.result("Read the first container's address from its facts (no ip= in its net0)", first_host)["status"] == "skipped"
    check_world(again, remote_nodes, "/workspace/rendezvous2.log", port, world_size=4, nproc=1)


# The rank that dies: NODE_RANK 2 (ct361 on pve-e), third in inventory order, so "named first" means the
# fleet-wide wait put it first, not the inventory. It writes the moment of its death (the host's clock:
# one kernel) and exits 7 a second after its start; the others wait for a world that never comes.
DYING_RANK = 2
DYING_JOB = ('if [ "$NODE_RANK" = ' + str(DYING_RANK) + ' ]; then sleep 1; date +%s.%N > /workspace/died_at; exit 7; fi; '
             'exec python3 -u /workspace/rendezvous.py --timeout 90')
# Far below the rendezvous' 90 s and the wait's 180 s: the waits ended because of the death, not by
# themselves. Not a speed target (about 4 s here, 5.2 s on a loaded machine): the figure itself is printed
# here and measured in benchmarks/run.sh.
DEATH_TO_FAILED_PLAY_BOUND = 30.0


def test_multinode_fails_as_one_when_a_rank_dies(remote_nodes: dict[str, RemoteNode], multinode_inventory: Path) -> None:
    folder = multinode_inventory.parent
    ensure_running(remote_nodes)
    session, log = "rendezvous3", "/workspace/rendezvous3.log"
    run = run_playbook(folder, multinode_inventory, MULTINODE_JOB,
                       {"job_session_name": session, "job_log_path": log, "job_master_port": free_port(),
                        "job_master_addr": "127.0.0.1", "job_command": DYING_JOB, "job_stop_timeout": 5})
    ended = time.time()
    dead_host, dead_vmid, dead_node = RANKS[DYING_RANK]
    died = float(remote_nodes[dead_node].sh(dead_vmid, "cat /workspace/died_at").stdout.decode() or "nan")
    print(f"a rank died -> the play failed: {ended - died:.2f} s (whole play {run.seconds:.1f} s)")
    assert run.rc != 0, run.output
    assert ended - died < DEATH_TO_FAILED_PLAY_BOUND, run.output
    # The dead rank is named first, with its exit status; the others were stopped because of it.
    assert run.summary()[0] == f"{session}: 0 of 4 containers run, failed: {dead_host}", run.summary()
    dead = run.result(HANDLER, dead_host)
    assert dead["verdict"] == "died" and dead["exit_status"] == 7 and dead["fleet_first"] is True, dead
    assert run.line(dead_host).startswith(f"{dead_host} (CT {dead_vmid} on {dead_node}): failed: "), run.summary()
    assert "exit status 7" in run.line(dead_host), run.summary()
    for host, vmid, node in RANKS:
        if host == dead_host:
            continue
        cut = run.result(HANDLER, host)
        assert cut["verdict"] == "fleet_failed" and cut["fleet_failure"]["host"] == dead_host, cut
        assert cut["fleet_failure"]["exit_status"] == 7 and cut["elapsed"] < 30, cut
        assert run.line(host) == (f"{host} (CT {vmid} on {node}): stopped: started, then stopped by job_all_or_nothing "
                                  f"because {dead_host} failed"), run.summary()
        # stopped, or already ended by itself once a peer it talked to was stopped (then its exit status is known)
        stop = run.result(STOP, host)
        assert stop["state"] in ("stopped", "finished") and stop["exit_status"] is not None, json.dumps(stop)
    # No rank is left running: no session, no rendezvous process.
    for host, vmid, node in RANKS:
        left = remote_nodes[node].sh(vmid, 'tmux has-session -t "=$1" 2>/dev/null && echo session; '
                                           'pgrep -f "[r]endezvous[.]py" >/dev/null && echo process; true', session)
        assert left.stdout.decode().split() == [], f"{host}: {left.stdout!r}"


# Rank 2 proves its own start at once and dies 2 s later, while the others still wait for theirs.
PROVEN_THEN_DIES = ('if [ "$NODE_RANK" = ' + str(DYING_RANK) + ' ]; then echo "rank $NODE_RANK of 4: world [0, 1, 2, 3]"; '
                    'sleep 2; date +%s.%N > /workspace/died_at; exit 5; fi; exec sleep 300')


def test_a_rank_that_dies_after_its_own_proof_fails_the_fleet(remote_nodes: dict[str, RemoteNode], multinode_inventory: Path) -> None:
    folder = multinode_inventory.parent
    ensure_running(remote_nodes)
    session, log = "rendezvous4", "/workspace/rendezvous4.log"
    run = run_playbook(folder, multinode_inventory, MULTINODE_JOB,
                       {"job_session_name": session, "job_log_path": log, "job_master_addr": "127.0.0.1",
                        "job_command": PROVEN_THEN_DIES, "job_stop_timeout": 5})
    ended = time.time()
    dead_host, dead_vmid, dead_node = RANKS[DYING_RANK]
    died = float(remote_nodes[dead_node].sh(dead_vmid, "cat /workspace/died_at").stdout.decode() or "nan")
    print(f"a proven rank died -> the play failed: {ended - died:.2f} s (whole play {run.seconds:.1f} s)")
    assert run.rc != 0 and ended - died < DEATH_TO_FAILED_PLAY_BOUND, run.output
    dead = run.result(HANDLER, dead_host)
    assert dead["verdict"] == "died" and dead["exit_status"] == 5 and dead["fleet_first"] is True, dead
    assert dead["msg"].startswith(f"Job failed in session {session} in container {dead_vmid} on node {dead_node} after its start was proven"), dead
    assert run.summary()[0] == f"{session}: 0 of 4 containers run, failed: {dead_host}", run.summary()
    for host, vmid, node in RANKS:
        if host != dead_host:
            assert run.result(HANDLER, host)["verdict"] == "fleet_failed", run.result(HANDLER, host)
            left = remote_nodes[node].sh(vmid, 'tmux has-session -t "=$1" 2>/dev/null && echo session; true', session)
            assert left.stdout.decode().split() == [], f"{host}: {left.stdout!r}"


# Fleet failures on the local stand-in.

@dataclasses.dataclass
class Fleet:
    """Containers 364-367 (and 368, stopped) on the local stand-in, an inventory and the job's extra vars."""

    node: StandinNode
    folder: Path
    inventory: Path
    job: dict[str, t.Any]

    def alive(self, vmid: int, session: str) -> bool:
        """Whether tmux has ``session`` in the container."""
        return self.node.sh(vmid, 'tmux has-session -t "=$1" 2>/dev/null', session, check=False).returncode == 0

    def read(self, vmid: int, path: str) -> str:
        """A file in the container ('' when it is missing)."""
        return self.node.sh(vmid, 'cat -- "$1" 2>/dev/null', path, check=False).stdout.decode("utf-8", "replace")

    def launch(self, session: str, *options: str, **extra: t.Any) -> Run:
        """launch.yml on the fleet, with the job under session name ``session``."""
        return run_playbook(self.folder, self.inventory,
                            {**self.job, "job_session_name": session, "job_log_path": f"/workspace/{session}.log", **extra},
                            options=options)


@pytest.fixture(scope="module")
def fleet(standin: StandinNode, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """4 running containers (the third one's job is a script that does not exist) and one stopped."""
    for vmid in FLEET:
        standin.create(vmid)
    standin.create(STOPPED, start=False)
    folder = tmp_path_factory.mktemp("fleet")
    (folder / "job.py").write_text(FLEET_JOB, encoding="utf-8")
    hosts: dict[str, dict[str, t.Any]] = {f"ct{vmid}": {"pct_vmid": vmid} for vmid in FLEET}
    hosts[f"ct{BROKEN}"]["fleet_script"] = "missing.py"
    inventory = {"fleet": {"hosts": hosts,
                           "vars": {"ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": "/usr/bin/python3"}},
                 "fleet_with_stopped": {"children": {"fleet": {}}, "hosts": {f"ct{STOPPED}": {"pct_vmid": STOPPED}},
                                        "vars": {"ansible_connection": "trainops.pct_launch.pct",
                                                 "ansible_python_interpreter": "/usr/bin/python3"}}}
    path = folder / "inventory.yml"
    path.write_text(json.dumps(inventory, indent=1), encoding="utf-8")
    job = {"job_hosts": "fleet", "job_workdir": "/workspace",
           "job_files": [{"src": str(folder / "job.py"), "dest": "/workspace/job.py"}],
           "job_command": "python3 -u /workspace/{{ fleet_script | default('job.py') }}",
           "job_wait_pattern": "^tick 1$", "job_fail_pattern": "Traceback", "job_wait_timeout": 60, "job_stop_timeout": 5}
    return Fleet(standin, folder, path, job)


def test_fleet_names_the_failed_container_and_why(fleet: Fleet) -> None:
    run = fleet.launch("fleet")
    print(f"fleet launch (fresh containers): {run.seconds:.1f} s")
    assert run.rc != 0, run.output
    broken = f"ct{BROKEN}"
    assert run.result(LAUNCH, broken)["error"] == "script_missing"
    assert run.stats(broken)["failures"] == 1, run.output
    assert run.summary()[0] == f"fleet: 3 of 4 containers run, failed: {broken}", run.summary()
    line = run.line(broken)
    assert line.startswith(f"{broken} (CT {BROKEN} on localhost): failed: ") and "/workspace/missing.py does not exist" in line, line
    assert f"fatal: [{broken}]" in run.proc.stdout and "fleet in CT 366: failed: " in run.proc.stdout
    for vmid in FLEET:
        if vmid == BROKEN:
            continue
        host = f"ct{vmid}"
        assert run.stats(host)["failures"] == 0, run.output
        assert run.line(host) == f"{host} (CT {vmid} on localhost): started"
        assert (launch_proof(run.results, host) or {}).get("verdict") == "started", run.output
        assert not run.host_results(HANDLER), "without job_all_or_nothing each launch task proves its own start"
        assert fleet.alive(vmid, "fleet")
    assert not fleet.alive(BROKEN, "fleet") and fleet.read(BROKEN, "/workspace/fleet.log") == ""
    # without job_all_or_nothing nothing is stopped: the stop is skipped on every container
    stops = run.host_results(STOP)
    assert sorted(stops) == sorted(f"ct{vmid}" for vmid in FLEET), run.output
    assert {result["status"] for result in stops.values()} == {"skipped"}, stops

    # The same launch again: the three run already (no change), the broken one still fails.
    again = fleet.launch("fleet")
    assert again.rc != 0, again.output
    for vmid in (364, 365, 367):
        assert again.stats(f"ct{vmid}")["changed"] == 0, again.output
        assert again.line(f"ct{vmid}") == f"ct{vmid} (CT {vmid} on localhost): already running"
    assert again.line(broken).startswith(f"{broken} (CT {BROKEN} on localhost): failed: ")
    for vmid in FLEET:
        fleet.node.sh(vmid, 'tmux kill-session -t "=$1" 2>/dev/null; true', "fleet", check=False)


def test_all_or_nothing_stops_what_it_started(fleet: Fleet) -> None:
    # One container runs the job already: it was not started by the fleet launch, so it is left alone.
    first = fleet.launch("fleet-aon", "--limit", "ct364", job_all_or_nothing=True)
    assert first.rc == 0, first.output
    assert fleet.alive(364, "fleet-aon")

    run = fleet.launch("fleet-aon", job_all_or_nothing=True)
    assert run.rc != 0, run.output
    broken = f"ct{BROKEN}"
    for vmid in FLEET:
        assert run.stats(f"ct{vmid}")["failures"] == 1, f"ct{vmid} must fail with job_all_or_nothing\n{run.output}"
    assert run.line(broken).startswith(f"{broken} (CT {BROKEN} on localhost): failed: ")
    assert run.line("ct364").startswith("ct364 (CT 364 on localhost): already running: left running although ct366 failed")
    assert fleet.alive(364, "fleet-aon")
    for vmid in (365, 367):
        host = f"ct{vmid}"
        assert run.result(LAUNCH, host)["status"] == "changed"
        assert run.result(HANDLER, host)["status"] == "skipped", "a launch failed elsewhere: no proof is awaited"
        assert run.result(STOP, host)["status"] == "changed"
        assert run.line(host) == f"{host} (CT {vmid} on localhost): stopped: started, then stopped by job_all_or_nothing because ct366 failed"
        assert not fleet.alive(vmid, "fleet-aon")
        exit_file = fleet.read(vmid, "/workspace/fleet-aon.log.exit").splitlines()
        assert "stopped_by=trainops" in exit_file, exit_file
    assert run.summary()[0] == "fleet-aon: 1 of 4 containers run, failed: ct366", run.summary()
    fleet.node.sh(364, 'tmux kill-session -t "=$1" 2>/dev/null; true', "fleet-aon", check=False)


def test_a_container_that_failed_the_preflight_is_named_so(fleet: Fleet) -> None:
    """The summary tells a preflight failure from a prepare failure (prepare.yml's first task marks those that passed)."""
    inventory = {"pre": {"hosts": {"ct364": {"pct_vmid": 364}, "ct365": {"pct_vmid": 365, "job_prepare": "maybe"}},
                         "vars": {"ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": "/usr/bin/python3"}}}
    path = fleet.folder / "inventory-preflight.yml"
    path.write_text(json.dumps(inventory, indent=1), encoding="utf-8")
    run = run_playbook(fleet.folder, path, {**fleet.job, "job_hosts": "pre", "job_session_name": "fleet-pf",
                                            "job_log_path": "/workspace/fleet-pf.log"})
    assert run.rc != 0, run.output
    assert "job_prepare is 'maybe' for ct365" in run.result("Check that the job description is complete", "ct365")["msg"]
    assert run.line("ct365") == "ct365 (CT 365 on localhost): failed: preflight.yml failed on it before the launch (its error is shown above)"
    assert run.line("ct364") == "ct364 (CT 364 on localhost): started"
    assert run.summary()[0] == "fleet-pf: 1 of 2 containers run, failed: ct365", run.summary()
    fleet.node.sh(364, 'tmux kill-session -t "=$1" 2>/dev/null; true', "fleet-pf", check=False)


def test_a_container_whose_prepare_fails_does_not_end_the_run(fleet: Fleet) -> None:
    """The containers prepared already are launched when every container that lacks something fails its prepare:
    prepare.yml is one play over every container, so a failure there fails only the container that had it."""
    for vmid in (364, 365):
        fleet.node.install_tmux(vmid, "/workspace")
    inventory = {"prep": {"hosts": {"ct364": {"pct_vmid": 364}, "ct365": {"pct_vmid": 365, "fleet_workdir": "/etc/passwd/job"}},
                          "vars": {"ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": "/usr/bin/python3"}}}
    path = fleet.folder / "inventory-prepare.yml"
    path.write_text(json.dumps(inventory, indent=1), encoding="utf-8")
    run = run_playbook(fleet.folder, path, {"job_hosts": "prep", "job_session_name": "fleet-pp", "job_log_path": "/tmp/fleet-pp.log",
                                            "job_workdir": "{{ fleet_workdir | default('/workspace') }}",
                                            "job_command": "echo 'tick 1'; exec sleep 600", "job_wait_pattern": "^tick 1$",
                                            "job_wait_timeout": 60})
    try:
        assert run.rc == 2, run.output
        made = run.result("Create the job's working directory", "ct365")
        assert made["status"] == "failed", made
        assert run.line("ct365") == "ct365 (CT 365 on localhost): failed: prepare.yml failed on it before the launch (its error is shown above)"
        assert run.line("ct364") == "ct364 (CT 364 on localhost): started", run.summary()
        assert run.summary()[0] == "fleet-pp: 1 of 2 containers run, failed: ct365", run.summary()
        assert run.result("Do what the container lacks", "ct364")["status"] == "skipped", "ct364 is prepared already"
        assert fleet.alive(364, "fleet-pp") and not fleet.alive(365, "fleet-pp")
    finally:
        fleet.node.sh(364, 'tmux kill-session -t "=$1" 2>/dev/null; true', "fleet-pp", check=False)


def test_all_or_nothing_launches_nothing_after_a_preflight_failure(fleet: Fleet) -> None:
    run = fleet.launch("fleet-pre", job_all_or_nothing=True, job_hosts="fleet_with_stopped", fleet_script="job.py")
    assert run.rc != 0, run.output
    stopped = f"ct{STOPPED}"
    # its first pct exec (prepare.yml's: the preflight asks only the node, which has no GPU) says it is not running
    failed = run.result("Find out what the container lacks for the job", stopped)
    assert failed["status"] == "unreachable" and "the container is not running; start it with" in failed["msg"], failed
    assert run.line(stopped) == f"{stopped} (CT {STOPPED} on localhost): failed: prepare.yml failed on it before the launch (its error is shown above)"
    for vmid in FLEET:
        host = f"ct{vmid}"
        assert run.result(LAUNCH, host)["status"] == "skipped"
        assert run.line(host) == f"{host} (CT {vmid} on localhost): not started: job_all_or_nothing, and {stopped} failed before the launch"
        assert run.stats(host)["failures"] == 1
        assert not fleet.alive(vmid, "fleet-pre")
    assert run.summary()[0] == f"fleet-pre: 0 of 5 containers run, failed: {stopped}", run.summary()
