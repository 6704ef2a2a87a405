# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Infrastructure of the benchmark suite: simulated nodes, inventories, timed runs, pct call counts.

Everything runs against two simulated Proxmox VE nodes of the stand-in (tools/pve_standin/node.sh),
``pve-g`` (127.0.0.17) and ``pve-h`` (127.0.0.18), reached over ssh on loopback, with containers
400-415 on pve-g and 450-465 on pve-h. The containers are inventory hosts ``ctVMID`` reached through the
connection plugin ``trainops.pct_launch.pct`` (``pct_vmid``, ``pct_node``): the collection's modules run on
them, each pipelined module task one ``pct exec`` on the node. Each node's ``knobs.conf`` sets the
stand-in's per-call ``delay`` and a ``call_log`` from which every run's pct calls are counted: whatever
runs ``pct`` on a node, the pct connection included, appends a line there.
"""
from __future__ import annotations

import dataclasses
import json
import os
import resource
import shlex
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
NODE_SH = REPO / "tools" / "pve_standin" / "node.sh"
NODES_BASE = Path(os.environ.get("PVE_STANDIN_NODES", "/var/lib/pve-standin-nodes"))
# Where a node's own state root is mounted inside its sshd's mount namespace.
NODE_STATE_MOUNT = "/var/lib/pve-standin"
CALL_LOG_NAME = "bench-calls.jsonl"
NODE_ADDRESSES = {"pve-g": "127.0.0.17", "pve-h": "127.0.0.18"}
NODE_VMIDS = {"pve-g": list(range(400, 416)), "pve-h": list(range(450, 466))}
MAIN_NODE = "pve-g"
MAIN_VMID = 400
ANSIBLE_TIMEOUT = 900


@dataclasses.dataclass(frozen=True)
class Config:
    """How Ansible reaches the nodes and containers in one run."""

    name: str
    pipelining: bool | None  # None: ANSIBLE_PIPELINING unset, the pct connection's own default (on) applies
    pct_persist: bool  # ControlPersist for the pct connection's ssh to the node
    ssh_persist: bool  # ControlPersist for tasks delegated to the node (Ansible's ssh default: on)


# The shipped playbooks with the inventory the README shows and Ansible's defaults, pipelining off:
# the configuration of the runs before the pct connection pipelined by default (read it as "pipelining off").
SHIPPED = Config("as shipped (Ansible defaults)", pipelining=False, pct_persist=False, ssh_persist=True)
# launch_only.yml as shipped now: the pct connection's own defaults (pipelining on, one ssh per command).
# Its modules run on the containers, so without pipelining a module task would cost 4 to 6 pct exec.
LAUNCH_SHIPPED = Config("as shipped (pct connection defaults: pipelining on)", pipelining=None, pct_persist=False, ssh_persist=True)
PIPELINED = Config("pipelining", pipelining=True, pct_persist=False, ssh_persist=True)
TUNED = Config("pipelining + ControlPersist", pipelining=True, pct_persist=True, ssh_persist=True)
NO_PERSIST = Config("no ControlPersist", pipelining=True, pct_persist=False, ssh_persist=False)


@dataclasses.dataclass
class Node:
    """A simulated Proxmox VE node reached over ssh."""

    name: str
    address: str
    ssh_config: str

    @property
    def root(self) -> Path:
        """The node's stand-in state root, as the controller sees it."""
        return NODES_BASE / self.name / "root"

    @property
    def call_log(self) -> Path:
        """The node's pct call log, as the controller sees it."""
        return self.root / CALL_LOG_NAME

    def ssh(self, command: str, stdin: bytes = b"", check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[bytes]:
        """Run a shell command line on the node (no terminal, no connection sharing)."""
        argv = ["ssh", "-T", "-F", self.ssh_config, "-o", "ControlMaster=no", "-o", "ControlPath=none", self.name, command]
        proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"on {self.name}: {command!r} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
        return proc

    def set_knobs(self, delay: float) -> None:
        """Log every pct call and sleep ``delay`` seconds in each (read by every pct call)."""
        text = f"call_log={NODE_STATE_MOUNT}/{CALL_LOG_NAME}\ndelay={delay:g}\n"
        (self.root / "knobs.conf").write_text(text, encoding="utf-8")

    def call_count(self) -> int:
        """Number of pct calls logged so far."""
        if not self.call_log.exists():
            return 0
        with open(self.call_log, encoding="utf-8") as log:
            return sum(1 for dummy in log)

    def calls_since(self, count: int) -> list[dict[str, object]]:
        """The pct calls logged after the first ``count``."""
        if not self.call_log.exists():
            return []
        with open(self.call_log, encoding="utf-8") as log:
            return [json.loads(line) for line in log.readlines()[count:]]


@dataclasses.dataclass
class Run:
    """One timed command: wall seconds, exit status, pct calls, callback events."""

    label: str
    seconds: float
    cpu: float  # user + system seconds of the command and its descendants (on this host, sshd's side excluded)
    rc: int
    started: float
    ended: float
    calls: list[dict[str, object]]
    events: list[dict[str, object]]

    def event_time(self, event: str) -> float | None:
        """Time of the last callback event of this kind."""
        times = [float(str(e["time"])) for e in self.events if e["event"] == event]
        return times[-1] if times else None


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    return statistics.median(values)


class Context:
    """The nodes, the work folder and the way to run Ansible and the baseline against them."""

    def __init__(self, workdir: Path, ssh_config: str, repeat: int) -> None:
        self.workdir = workdir
        self.ssh_config = ssh_config
        self.repeat = repeat
        self.nodes = {name: Node(name, address, ssh_config) for name, address in NODE_ADDRESSES.items()}
        self.control_path = str(workdir / "cp-%C")
        self.runs = 0
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    @property
    def main(self) -> Node:
        """The node of the container the single-container benchmarks use."""
        return self.nodes[MAIN_NODE]

    def set_delay(self, delay: float) -> None:
        """Set the stand-in's per-call delay on every node."""
        for node in self.nodes.values():
            node.set_knobs(delay)

    def persist_args(self) -> str:
        """ssh options that share one persistent connection per node (closed by close_masters)."""
        return f"-o ControlMaster=auto -o ControlPersist=60s -o ControlPath={self.control_path}"

    def close_masters(self) -> None:
        """End the persistent ssh connections, so that the next run starts cold."""
        for node in self.nodes.values():
            subprocess.run(["ssh", "-F", self.ssh_config, "-o", f"ControlPath={self.control_path}", "-O", "exit", node.name],
                           capture_output=True, check=False, timeout=30)

    def inventory(self, hosts: Sequence[tuple[int, str]], config: Config) -> Path:
        """Write an inventory: the nodes (group nodes) and containers ctVMID (group training).

        The containers are the hosts the modules run on, through the pct connection to their node
        (``pct_node``, reached with our ssh_config); the nodes are there for launch.yml's tasks that
        are delegated to them (preflight's ``pct status``), with Ansible's ssh connection.
        """
        pct_ssh = f"-F {self.ssh_config}" + (f" {self.persist_args()}" if config.pct_persist else "")
        # Ansible's own default for its ssh connection is "-C -o ControlMaster=auto -o ControlPersist=60s";
        # the same with a ControlPath of ours, so the runs can close it and start cold.
        ssh_args = f"-C {self.persist_args()}" if config.ssh_persist else "-C -o ControlMaster=no"
        data = {
            "nodes": {
                "hosts": {name: {} for name in self.nodes},
                "vars": {"ansible_connection": "ssh", "ansible_ssh_common_args": f"-F {self.ssh_config}",
                         "ansible_ssh_args": ssh_args, "ansible_python_interpreter": "/usr/bin/python3"},
            },
            "training": {
                "hosts": {f"ct{vmid}": {"pct_vmid": vmid, "pct_node": node} for vmid, node in hosts},
                "vars": {"ansible_connection": "trainops.pct_launch.pct", "pct_ssh_args": pct_ssh,
                         "ansible_python_interpreter": "/usr/bin/python3"},
            },
        }
        pipelining = "d" if config.pipelining is None else f"{config.pipelining:d}"
        path = self.workdir / f"inventory-{len(hosts)}-{pipelining}{config.pct_persist:d}{config.ssh_persist:d}.json"
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")
        return path

    def ansible_env(self, config: Config, forks: int = 5) -> dict[str, str]:
        """Environment of an ansible or ansible-playbook run with this configuration."""
        env = dict(os.environ)
        if config.pipelining is None:
            env.pop("ANSIBLE_PIPELINING", None)
        else:
            env["ANSIBLE_PIPELINING"] = str(config.pipelining)
        env.update(ANSIBLE_FORKS=str(forks), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_CALLBACK_PLUGINS=str(BENCH / "callback_plugins"), ANSIBLE_CALLBACKS_ENABLED="trainops_bench_timer",
                   ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_RETRY_FILES_ENABLED="False")
        return env

    def run(self, label: str, argv: Sequence[str], env: dict[str, str] | None = None) -> Run:
        """Run a command from the repository root: wall time, pct calls on the nodes, callback events."""
        self.runs += 1
        stem = f"{self.runs:03d}-{label}".replace(" ", "_").replace("/", "_")
        times = self.workdir / "logs" / f"{stem}.times.jsonl"
        env = dict(env or os.environ, TRAINOPS_BENCH_TIMES=str(times))
        before = {name: node.call_count() for name, node in self.nodes.items()}
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        started, clock = time.time(), time.monotonic()
        proc = subprocess.run(list(argv), env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=ANSIBLE_TIMEOUT, check=False)
        seconds, ended = time.monotonic() - clock, time.time()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
        (self.workdir / "logs" / f"{stem}.out").write_bytes(f"$ {shlex.join(argv)}\n".encode() + proc.stdout)
        calls = [call for name, node in self.nodes.items() for call in node.calls_since(before[name])]
        events = [json.loads(line) for line in times.read_text(encoding="utf-8").splitlines()] if times.exists() else []
        return Run(label, seconds, cpu, proc.returncode, started, ended, calls, events)

    def open_masters(self) -> None:
        """Open a persistent ssh connection to each node, as a run within ControlPersist of an earlier one finds."""
        for node in self.nodes.values():
            subprocess.run(["ssh", "-T", "-F", self.ssh_config, *shlex.split(self.persist_args()), node.name, "true"],
                           capture_output=True, check=False, timeout=60)

    def playbook(self, label: str, playbook: str, hosts: Sequence[tuple[int, str]], config: Config, job: Path,
                 forks: int = 5, warm: bool = False) -> Run:
        """Run ansible-playbook PLAYBOOK (a path from the repository root) with the job file, cold unless warm."""
        self.close_masters()
        if warm:
            self.open_masters()
        argv = ["ansible-playbook", "-i", str(self.inventory(hosts, config)), playbook, "-e", f"@{job}"]
        return self.run(label, argv, self.ansible_env(config, forks))

    def baseline(self, label: str, vmid: int, node: str, job: dict[str, str]) -> Run:
        """Run benchmarks/baseline_launch.sh against the container (plain ssh, no connection sharing)."""
        argv = [str(BENCH / "baseline_launch.sh"), "-n", node, "-F", self.ssh_config, "-t", "60",
                str(vmid), job["session"], job["log"], job["pattern"], "--", *shlex.split(job["command"])]
        return self.run(label, argv)
