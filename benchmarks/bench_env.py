# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Infrastructure of the benchmark suite: simulated nodes, inventories, timed runs, pct call counts.

Everything runs against two simulated Proxmox VE nodes of the stand-in (tools/pve_standin/node.sh),
``pve-g`` (127.0.0.17) and ``pve-h`` (127.0.0.18), reached over ssh on loopback, with containers
400-415 on pve-g and 450-465 on pve-h. The containers are inventory hosts ``ctVMID`` reached through the
connection plugin ``trainops.pct_launch.pct`` (``pct_vmid``, ``pct_node``): the collection's modules run on
them, each pipelined module task one ``pct exec`` on the node. Each node's ``knobs.conf`` sets the
stand-in's per-call ``delay``, how a call spends it (``delay_mode``: slept, or burnt as CPU time as real
pct does; ``Context.delay_mode``) and a ``call_log`` from which every run's pct calls are counted: whatever
runs ``pct`` on a node, the pct connection included, appends a line there. Whatever node simulates them, the
containers are LXC containers on this host: the controller reads their CPU from their cgroups (ContainerCpu).
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import threading
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
# A container created on pve-g just before the first launch into it, and destroyed after.
FRESH_VMID = 499
ALL_VMIDS = [vmid for vmids in NODE_VMIDS.values() for vmid in vmids] + [FRESH_VMID]
ANSIBLE_TIMEOUT = 900
PARALLEL_LAUNCH = BENCH / "parallel_launch.sh"
# How the stand-in's pct spends its per-call delay (its knob delay_mode): "sleep" waits, "cpu" burns that much CPU
# time, as real pct's Perl start-up does, so that calls at the same moment compete for the cores.
DELAY_MODES = ("sleep", "cpu")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The nodes' LXC path, the same inside every node's mount namespace; LXC's command socket answers lxc-info there
# from the controller too (bench_setup.stop_orphans).
LXC_PATH = NODE_STATE_MOUNT + "/lxc"


@dataclasses.dataclass(frozen=True)
class Config:
    """How Ansible reaches the nodes and containers in one run."""

    name: str
    pipelining: bool | None  # None: ANSIBLE_PIPELINING unset, the pct connection's own default (on) applies
    pct_persist: bool  # the user's own ControlPersist in pct_ssh_args (its masters opened before the run)
    ssh_persist: bool  # ControlPersist for tasks delegated to the node (Ansible's ssh default: on)
    pct_share: bool = True  # the pct connection's own sharing (pct_ssh_control_persist, default 60s)


# As shipped: the shipped playbooks with the inventory the READMEs show and the pct connection's defaults:
# pipelining on (ANSIBLE_PIPELINING unset), one ssh connection per node shared by the run's pct calls
# (pct_ssh_control_persist 60s; its sockets in the work folder, pct_ssh_control_path_dir, so that each run
# starts cold), Ansible's own ssh connection with its default ControlPersist for tasks delegated to a node.
SHIPPED = Config("as shipped", pipelining=None, pct_persist=False, ssh_persist=True)
# The same with the masters open before the run (ControlPersist in pct_ssh_args, one ControlPath per node),
# as a run within 60 s of an earlier one finds them.
PERSIST = Config("as shipped, ssh masters open", pipelining=None, pct_persist=True, ssh_persist=True)
# No sharing (pct_ssh_control_persist: no): a new ssh connection for every pct call, the default before.
NO_SHARE = Config("pct_ssh_control_persist: no (a new ssh connection per pct call)", pipelining=None, pct_persist=False,
                  ssh_persist=True, pct_share=False)
# Pipelining off: the configuration of the runs before the pct connection pipelined by default.
PIPELINING_OFF = Config("pipelining off (ansible_pipelining: false)", pipelining=False, pct_persist=False, ssh_persist=True)


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

    def set_knobs(self, delay: float, mode: str = "sleep") -> None:
        """Log every pct call and spend ``delay`` seconds in each, slept or burnt as CPU (``mode``; read by every pct call)."""
        text = f"call_log={NODE_STATE_MOUNT}/{CALL_LOG_NAME}\ndelay={delay:g}\ndelay_mode={mode}\n"
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
class Run:  # pylint: disable=too-many-instance-attributes
    """One timed command: wall seconds, controller CPU and memory, exit status, pct calls, callback events."""

    label: str
    seconds: float
    cpu: float  # user + system seconds of the command, its descendants and the ssh masters (sshd's side excluded)
    rc: int
    started: float
    ended: float
    calls: list[dict[str, object]]
    events: list[dict[str, object]]
    hosts: int = 1  # containers the command launched into
    peak_pss: float = 0.0  # MiB: the largest sum of Pss over the command's process tree (0: not sampled)
    peak_rss: float = 0.0  # MiB: the largest Rss of the command's own process (ansible-playbook's main process)
    peak_procs: int = 0  # the largest number of processes in its tree
    container_cpu: float | None = None  # seconds: the summed CPU of the containers it ran in (None: not measured, see cpu_note)
    cpu_note: str = ""  # why container_cpu is None: a counter that could not be read

    def inside(self) -> str:
        """The containers' CPU, as ``9.6 s (300 ms per container)``, or why it is not known."""
        if self.container_cpu is None:
            return f"not measured ({self.cpu_note or 'no containers given'})"
        return f"{self.container_cpu:.2f} s ({1000 * self.container_cpu / max(self.hosts, 1):.0f} ms per container)"

    def event_time(self, event: str) -> float | None:
        """Time of the last callback event of this kind."""
        times = [float(str(e["time"])) for e in self.events if e["event"] == event]
        return times[-1] if times else None


def proc_children() -> dict[int, list[int]]:
    """Every process's children, from /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def memory_kib(pid: int, field: str) -> int:
    """A field of /proc/PID/smaps_rollup (Pss, Rss) in KiB; 0 once the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as rollup:
            for line in rollup:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class TreeSampler(threading.Thread):
    """Samples the memory of a process tree every ``interval`` seconds: peak summed Pss, peak Rss of the root.

    Pss shares each page among the processes that map it, so the forked workers that share
    ansible-playbook's pages copy-on-write are not counted several times, as a sum of Rss would.
    Its own CPU is the benchmark's, not the command's (it is not a child).
    """

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_pss = self.peak_rss = 0
        self.peak_procs = 0
        self.done = threading.Event()

    def sample(self) -> None:
        """One sample of the tree."""
        children, tree, index = proc_children(), [self.pid], 0
        while index < len(tree):
            tree.extend(children.get(tree[index], []))
            index += 1
        self.peak_pss = max(self.peak_pss, sum(memory_kib(pid, "Pss") for pid in tree))
        self.peak_rss = max(self.peak_rss, memory_kib(self.pid, "Rss"))
        self.peak_procs = max(self.peak_procs, len(tree))

    def run(self) -> None:
        self.sample()
        while not self.done.wait(self.interval):
            self.sample()


def process_cpu(pid: int) -> float:
    """User + system seconds of one process so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def payload_cgroup(path: str, vmid: int) -> str | None:
    """The container's own cgroup in a process's cgroup path: ``lxc.payload.400`` (LXC 4+, ``lxc.payload.400-1``
    when the name was taken) or ``lxc/400`` (Proxmox VE 7+), above the subgroups its processes sit in
    (``init.scope``, ``.lxc``, ``ns``)."""
    parts = [part for part in path.split("/") if part]
    for index, part in enumerate(parts):
        if re.fullmatch(rf"lxc\.payload\.{vmid}(-[0-9]+)?", part) or (part == str(vmid) and index and parts[index - 1] == "lxc"):
            return "/".join(parts[:index + 1])
    return None


class ContainerCpu:
    """The CPU the containers have used so far, from their cgroup counters, read on the controller.

    cgroup v1: ``cpuacct.usage`` (ns) in the cpuacct hierarchy (``/sys/fs/cgroup/cpuacct`` or ``cpu,cpuacct``);
    cgroup v2: ``usage_usec`` of ``cpu.stat`` (``/sys/fs/cgroup``, or ``unified`` on a hybrid host, used only
    when there is no cpuacct hierarchy). The container's cgroup is found from its init's ``/proc/PID/cgroup``
    (``lxc-info -p``), else by name; the counter file is remembered per VMID while it exists. The counter holds
    all the container's processes (its init, what ``pct exec`` attaches, their children): ``lxc-attach`` moves
    the attached process into it before it runs the command.
    """

    def __init__(self) -> None:
        self.files: dict[int, Path] = {}

    @staticmethod
    def cgroup(vmid: int) -> str:
        """The container's cgroup path, relative to a hierarchy's root."""
        try:
            proc = subprocess.run(["lxc-info", "-P", LXC_PATH, "-n", str(vmid), "-p", "-H"], capture_output=True, text=True, check=False, timeout=30)
            pid = proc.stdout.strip() if proc.returncode == 0 else ""
        except (OSError, subprocess.SubprocessError):
            pid = ""
        if pid.isdigit():
            try:
                lines = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8").splitlines()
            except OSError:
                lines = []
            paths = {fields[1]: fields[2] for fields in (line.split(":", 2) for line in lines) if len(fields) == 3}
            cpuacct = [path for controllers, path in paths.items() if "cpuacct" in controllers.split(",")]
            for path in cpuacct + [paths.get("", "")]:
                found = payload_cgroup(path, vmid)
                if found:
                    return found
        return f"lxc.payload.{vmid}"

    def counter_file(self, vmid: int) -> Path:
        """The file of the container's CPU counter; OSError when there is none."""
        known = self.files.get(vmid)
        if known is not None and known.exists():
            return known
        cgroup = self.cgroup(vmid)
        candidates = [Path(base) / cgroup / "cpuacct.usage" for base in sorted(glob.glob(str(CGROUP_ROOT / "*cpuacct*")))]
        candidates += [CGROUP_ROOT / cgroup / "cpu.stat", CGROUP_ROOT / "unified" / cgroup / "cpu.stat"]
        for candidate in candidates:
            if candidate.is_file() and os.access(candidate, os.R_OK):
                self.files[vmid] = candidate
                return candidate
        raise OSError(f"no readable CPU counter of CT {vmid}'s cgroup {cgroup} under {CGROUP_ROOT} (cpuacct.usage or cpu.stat)")

    def seconds(self, vmid: int) -> float:
        """CPU seconds the container has used so far."""
        path = self.counter_file(vmid)
        text = path.read_text(encoding="utf-8")
        if path.name == "cpuacct.usage":
            return int(text.strip()) / 1e9
        for line in text.splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        raise ValueError(f"{path} has no usage_usec")

    def read(self, vmids: Sequence[int]) -> tuple[dict[int, float], str]:
        """CPU seconds so far of each container whose counter can be read, and why the others' cannot ("" when all can)."""
        values, problems = {}, []
        for vmid in vmids:
            try:
                values[vmid] = self.seconds(vmid)
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                self.files.pop(vmid, None)
                problems.append(str(exc))
        more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
        return values, "; ".join(problems[:2]) + more

    @staticmethod
    def used(before: tuple[dict[int, float], str], after: tuple[dict[int, float], str]) -> tuple[float | None, str]:
        """Summed CPU seconds between two readings of the same containers; None and why when a counter was unreadable."""
        note = before[1] or after[1]
        if note or before[0].keys() != after[0].keys():
            return None, note or "a counter vanished during the run"
        return sum(after[0][vmid] - before[0][vmid] for vmid in before[0]), ""


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
        # the pct connection's own shared connections (as shipped): ControlPath {shared_dir}/pct-%C
        self.shared_dir = str(workdir / "shared-cp")
        self.runs = 0
        self.container_cpu = ContainerCpu()
        # Runs and figures the summary at the top of the table picks from the sections.
        self.facts: dict[str, object] = {}
        self.started = time.monotonic()
        self.deadline = float("inf")  # optional measurements are skipped when they would end after it
        self.delay_mode = "sleep"  # how the stand-in's pct spends a delay set by set_delay (DELAY_MODES)
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    def time_left(self) -> float:
        """Seconds left before the deadline."""
        return self.deadline - time.monotonic()

    @property
    def main(self) -> Node:
        """The node of the container the single-container benchmarks use."""
        return self.nodes[MAIN_NODE]

    def set_delay(self, delay: float) -> None:
        """Set the stand-in's per-call delay on every node, spent as ``delay_mode`` says."""
        for node in self.nodes.values():
            node.set_knobs(delay, self.delay_mode)

    def burns(self, delay: float) -> bool:
        """Whether a pct call burns ``delay`` as CPU time (a delay of 0 is the same in both modes)."""
        return delay > 0 and self.delay_mode == "cpu"

    def delay_text(self, delay: float) -> str:
        """The delay for a table's section, as ``0.5 s`` or ``0.5 s of CPU (delay_mode cpu)``."""
        return f"{delay:g} s" + (" of CPU (delay_mode cpu)" if self.burns(delay) else "")

    def delay_tag(self, delay: float) -> str:
        """The delay for a run's label and ctx.facts keys, as ``0.5`` or ``0.5 cpu``."""
        return f"{delay:g}" + (" cpu" if self.burns(delay) else "")

    def persist_args(self) -> str:
        """ssh options that share one persistent connection per node (closed by close_masters)."""
        return f"-o ControlMaster=auto -o ControlPersist=60s -o ControlPath={self.control_path}"

    def master_pids(self) -> list[int]:
        """The pids of the persistent ssh connections that are open (ssh -O check)."""
        pids = []
        for node in self.nodes.values():
            for path in (self.control_path, f"{self.shared_dir}/pct-%C"):
                proc = subprocess.run(["ssh", "-F", self.ssh_config, "-o", f"ControlPath={path}", "-O", "check", node.name],
                                      capture_output=True, text=True, check=False, timeout=30)
                found = re.search(r"pid=([0-9]+)", proc.stderr)
                if proc.returncode == 0 and found:
                    pids.append(int(found.group(1)))
        return pids

    def close_masters(self) -> None:
        """End the persistent ssh connections, so that the next run starts cold."""
        for node in self.nodes.values():
            for path in (self.control_path, f"{self.shared_dir}/pct-%C"):
                subprocess.run(["ssh", "-F", self.ssh_config, "-o", f"ControlPath={path}", "-O", "exit", node.name],
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
                         "pct_ssh_control_persist": "60s" if config.pct_share else "no",
                         "pct_ssh_control_path_dir": self.shared_dir, "ansible_python_interpreter": "/usr/bin/python3"},
            },
        }
        pipelining = "d" if config.pipelining is None else f"{config.pipelining:d}"
        path = self.workdir / f"inventory-{len(hosts)}-{pipelining}{config.pct_persist:d}{config.ssh_persist:d}{config.pct_share:d}.json"
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

    def run(self, label: str, argv: Sequence[str], env: dict[str, str] | None = None, hosts: int = 1,  # pylint: disable=too-many-arguments,too-many-locals
            *, sample: bool = False, vmids: Sequence[int] = ()) -> Run:
        """Run a command from the repository root: wall time, controller CPU, pct calls on the nodes, callback events.

        The controller's CPU is the command's and its descendants' (RUSAGE_CHILDREN, before and after), plus what
        the persistent ssh connections (masters, which run apart from the command once daemonized) spent during it.
        With ``sample``, the memory of its process tree is sampled too (TreeSampler). With ``vmids``, the summed
        CPU of these containers during the run (their cgroup counters, read just before and just after it).
        """
        self.runs += 1
        stem = f"{self.runs:03d}-{label}".replace(" ", "_").replace("/", "_")
        times = self.workdir / "logs" / f"{stem}.times.jsonl"
        env = dict(env or os.environ, TRAINOPS_BENCH_TIMES=str(times))
        before = {name: node.call_count() for name, node in self.nodes.items()}
        # First: finding a container's cgroup the first time runs lxc-info, which must not count as the command's CPU.
        inside = self.container_cpu.read(vmids) if vmids else None
        masters = {pid: process_cpu(pid) for pid in self.master_pids()}
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        started, clock = time.time(), time.monotonic()
        with subprocess.Popen(list(argv), env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL) as proc:
            sampler = TreeSampler(proc.pid) if sample else None
            if sampler is not None:
                sampler.start()
            try:
                out, dummy = proc.communicate(timeout=ANSIBLE_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, dummy = proc.communicate()
            seconds, ended = time.monotonic() - clock, time.time()
            if sampler is not None:
                sampler.done.set()
                sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
        cpu += sum(process_cpu(pid) - masters.get(pid, 0.0) for pid in self.master_pids())
        container_cpu, cpu_note = self.container_cpu.used(inside, self.container_cpu.read(vmids)) if inside is not None else (None, "")
        (self.workdir / "logs" / f"{stem}.out").write_bytes(f"$ {shlex.join(argv)}\n".encode() + out)
        calls = [call for name, node in self.nodes.items() for call in node.calls_since(before[name])]
        events = [json.loads(line) for line in times.read_text(encoding="utf-8").splitlines()] if times.exists() else []
        run = Run(label, seconds, cpu, proc.returncode, started, ended, calls, events, hosts, container_cpu=container_cpu, cpu_note=cpu_note)
        if sampler is not None:
            run.peak_pss, run.peak_rss, run.peak_procs = sampler.peak_pss / 1024, sampler.peak_rss / 1024, sampler.peak_procs
        return run

    def open_masters(self) -> None:
        """Open a persistent ssh connection to each node, as a run within ControlPersist of an earlier one finds."""
        for node in self.nodes.values():
            subprocess.run(["ssh", "-T", "-F", self.ssh_config, *shlex.split(self.persist_args()), node.name, "true"],
                           capture_output=True, check=False, timeout=60)

    def playbook(self, label: str, playbook: str, hosts: Sequence[tuple[int, str]], config: Config, job: Path,  # pylint: disable=too-many-arguments
                 forks: int = 5, warm: bool = False, sample: bool = False) -> Run:
        """Run ansible-playbook PLAYBOOK (a path from the repository root) with the job file, cold unless warm."""
        self.close_masters()
        if warm:
            self.open_masters()
        argv = ["ansible-playbook", "-i", str(self.inventory(hosts, config)), playbook, "-e", f"@{job}"]
        return self.run(label, argv, self.ansible_env(config, forks), len(hosts), sample=sample,
                        vmids=[vmid for vmid, dummy in hosts])

    def baseline(self, label: str, vmid: int, node: str, job: dict[str, str]) -> Run:
        """Run benchmarks/baseline_launch.sh against the container (plain ssh, no connection sharing)."""
        argv = [str(BENCH / "baseline_launch.sh"), "-n", node, "-F", self.ssh_config, "-t", "60",
                str(vmid), job["session"], job["log"], job["pattern"], "--", *shlex.split(job["command"])]
        return self.run(label, argv, vmids=[vmid])

    def parallel(self, label: str, hosts: Sequence[tuple[int, str]], job: dict[str, str], sample: bool = False) -> Run:
        """Run benchmarks/parallel_launch.sh on the containers: masters opened first, one process per container."""
        argv = [str(PARALLEL_LAUNCH), "-F", self.ssh_config, "-S", self.control_path, "-t", "60",
                job["session"], job["log"], job["pattern"], *(f"{node}:{vmid}" for vmid, node in hosts), "--", *shlex.split(job["command"])]
        return self.with_masters(label, argv, hosts, sample)

    def with_masters(self, label: str, argv: Sequence[str], hosts: Sequence[tuple[int, str]], sample: bool) -> Run:
        """Run a launcher of the containers with the ssh masters of both nodes opened just before it, closed after."""
        self.close_masters()
        self.open_masters()
        run = self.run(label, argv, hosts=len(hosts), sample=sample, vmids=[vmid for vmid, dummy in hosts])
        self.close_masters()
        return run
