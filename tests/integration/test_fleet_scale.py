# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A fleet of 8 containers on 2 simulated remote nodes, the launch-only switch, pipelining by default, node.sh.

Nodes: pve-k (127.0.0.22) and pve-l (127.0.0.23), simulated remote Proxmox VE nodes of
tools/pve_standin/node.sh, each with its own sshd on loopback and its own container set.

* node.sh: both nodes brought up at the same time, three rounds: the shared ssh_config and known_hosts
  hold both entries with the nodes' real host keys, and both nodes answer through them. ``node.sh down``
  ends every process of the node (its sshd, an open ssh session, a daemon a session left behind with
  setsid): none sees the node's state folder afterwards.
* 2 nodes x 8 containers: the example job (examples/standin/job.yml, more steps so that it still runs
  at the re-run) launched with playbooks/launch.yml from the checkout, as a user runs it: an inventory
  like examples/remote/inventory.yml (without ansible_pipelining: the pct connection pipelines by
  default), ``--forks 8``. Every container's job started (verdict, summary), one job process and its
  log per container, the ``pct`` calls of launch + proof per container from the nodes' call logs
  (tmux_session 1, wait_for_log 1 per chunk, so 2), and an idempotent re-run: no change anywhere, still
  one job each, 1 ``pct`` call per container for the launch part.
* ``job_prepare: false``: a re-launch into prepared containers skips prepare.yml, starts the job and
  makes fewer ``pct`` calls than the full launch.
* Pipelining by default: ``ansible -m ping`` through the pct connection is 1 ``pct exec`` without any
  pipelining setting, more than 1 with ``ansible_pipelining=false`` or ``ANSIBLE_PIPELINING=0``.

The containers are prepared cheaply: CT 700 gets tmux, python3-venv and python3-packaging with apt and
the venv /opt/train/venv with numpy with pip (the network is needed once); its .deb files and the venv
are unpacked into the 7 others, so launch.yml's roles find everything installed.

VMIDs: 700-703 on pve-k, 704-707 on pve-l.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, require_standin
from .playbook_results import PREPARE_TASK, exec_calls, launch_proof, launch_results, results_by_host, summary_lines, task_results

pytestmark = pytest.mark.integration

NODE_SH = REPO / "tools" / "pve_standin" / "node.sh"
NODES_BASE = Path(os.environ.get("PVE_STANDIN_NODES", "/var/lib/pve-standin-nodes"))
NODE_MOUNT = "/var/lib/pve-standin"
NODES = {"pve-k": "127.0.0.22", "pve-l": "127.0.0.23"}
FLEET = {700: "pve-k", 701: "pve-k", 702: "pve-k", 703: "pve-k", 704: "pve-l", 705: "pve-l", 706: "pve-l", 707: "pve-l"}
MAIN_VMID = 700
BIN = Path(sys.executable).parent
CALLBACKS = Path(__file__).resolve().parent / "files" / "playbooks" / "callback_plugins"
JOB = REPO / "examples" / "standin" / "job.yml"
# The example job, long enough to still run at the re-run (300 steps of 0.2 s would end after a minute).
LONG_JOB = {"job_command": "python3 /workspace/train.py --steps 20000 --sleep 0.2"}
SESSION = "train-example"
LAUNCH = "Start the job in its detached tmux session"
HANDLER = "Wait for the job's log to prove it started"
REPROOF = "Prove the start of a job found running, or wait for its end"
APT = ("export DEBIAN_FRONTEND=noninteractive; { apt-get update -qq && apt-get install -y -qq --no-install-recommends "
       "tmux python3-venv python3-packaging && python3 -m venv /opt/train/venv && /opt/train/venv/bin/pip install -q "
       "--disable-pip-version-check numpy; } >/tmp/prepare.log 2>&1 || { cat /tmp/prepare.log; exit 1; }")
PACK = "cd / && tar -cf - var/cache/apt/archives/*.deb opt/train/venv"
UNPACK = ("tar -xf - -C / && dpkg -i /var/cache/apt/archives/*.deb >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 1; }; "
          "tmux -V >/dev/null && /opt/train/venv/bin/python -c 'import numpy'")
# Run on a node: unpack the payload file into each container given as an argument, in parallel.
UNPACK_LOOP = """payload="$1"; script="$2"; shift 2
pids=''
for vmid in "$@"; do pct exec "$vmid" -- sh -c "$script" < "$payload" & pids="$pids $!"; done
status=0
for pid in $pids; do wait "$pid" || status=1; done
exit "$status"
"""


def node_sh(*args: str) -> subprocess.CompletedProcess[str]:
    """tools/pve_standin/node.sh with these arguments."""
    return subprocess.run(["bash", str(NODE_SH), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=300, check=False)


def node_sh_concurrently(verb: str, names: t.Iterable[str]) -> None:
    """``node.sh VERB NAME [ADDRESS]`` for every node at the same time; fails when one of them failed."""
    procs = {}
    for name in names:
        argv = ["bash", str(NODE_SH), verb, name] + ([NODES[name]] if verb == "up" else [])
        procs[name] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,  # pylint: disable=consider-using-with
                                       stdin=subprocess.DEVNULL)
    failed = []
    for name, proc in procs.items():
        out, _err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            failed.append(f"node.sh {verb} {name}: exit {proc.returncode}: {out}")
    assert not failed, "\n".join(failed)


def node_root_id(name: str) -> tuple[int, int]:
    """Device and inode of the node's state folder, which its processes see as /var/lib/pve-standin."""
    info = (NODES_BASE / name / "root").stat()
    return info.st_dev, info.st_ino


def processes_seeing(root_id: tuple[int, int]) -> list[str]:
    """``PID ARGS`` of every process whose /var/lib/pve-standin is that folder (a process of that node)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            info = os.stat(f"{entry}/root{NODE_MOUNT}")
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == root_id:
            found.append(f"{entry.name} {args}")
    return found


def shared_ssh(name: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """ssh to a node with node.sh's shared client configuration (host key checking on)."""
    return subprocess.run(["ssh", "-F", str(NODES_BASE / "client" / "ssh_config"), "-T", "-o", "ControlMaster=no", name, command],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout, check=False)


def check_shared_client_files() -> None:
    """Both nodes in the shared ssh_config and known_hosts (with their real host keys), and both answer."""
    config = (NODES_BASE / "client" / "ssh_config").read_text(encoding="utf-8")
    known = (NODES_BASE / "client" / "known_hosts").read_text(encoding="utf-8").splitlines()
    for name, address in NODES.items():
        assert f"Host {name}\n  HostName {address}\n" in config, config
        key = " ".join((NODES_BASE / name / "ssh_host_ed25519_key.pub").read_text(encoding="utf-8").split()[:2])
        assert f"{name} {key}" in known, known
        answer = shared_ssh(name, "cat /var/lib/pve-standin/node")
        assert (answer.returncode, answer.stdout.strip()) == (0, name), answer


def require_sshd() -> None:
    """Skip (fail in CI) without the OpenSSH server and client."""
    require_standin()
    if not Path("/usr/sbin/sshd").exists() or shutil.which("ssh") is None:
        reason = "simulated remote nodes need openssh-server and openssh-client"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def test_node_sh_concurrent_up_and_down_leave_nothing_behind() -> None:
    require_sshd()
    node_sh_concurrently("down", NODES)
    for _round in range(3):
        node_sh_concurrently("up", NODES)
        check_shared_client_files()
        node_sh_concurrently("down", NODES)
        config = (NODES_BASE / "client" / "ssh_config").read_text(encoding="utf-8")
        assert not any(f"Host {name}\n" in config for name in NODES), config
    node_sh_concurrently("up", NODES)
    check_shared_client_files()
    roots = {name: node_root_id(name) for name in NODES}
    # Something of each node that outlives its session: a daemon of its own session, and an open session.
    for name in NODES:
        left = shared_ssh(name, "setsid sleep 3600.7 </dev/null >/dev/null 2>&1 & echo started")
        assert left.stdout.strip() == "started", left
        assert any("sleep 3600.7" in proc for proc in processes_seeing(roots[name])), processes_seeing(roots[name])
    session = subprocess.Popen(["ssh", "-F", str(NODES_BASE / "client" / "ssh_config"), "-T", "pve-l", "sleep 3600.8"],  # pylint: disable=consider-using-with
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Until the session's command runs on the node (a deadline, not a count of tries: a scan of /proc takes its
        # own time on a busy machine, and CI once saw the command appear just after 100 tries).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("sleep 3600.8" in proc for proc in processes_seeing(roots["pve-l"])):
            time.sleep(0.1)
        assert any("sleep 3600.8" in proc for proc in processes_seeing(roots["pve-l"])), processes_seeing(roots["pve-l"])
        node_sh_concurrently("down", NODES)
        for name, root in roots.items():
            assert processes_seeing(root) == [], f"processes of node {name} outlived node.sh down"
        assert session.wait(timeout=60) != 0, "the open ssh session must have been ended"
        listing = node_sh("list").stdout.split()
        assert "pve-k" not in listing and "pve-l" not in listing, listing
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()


# ---------------------------------------------------------------------------- the fleet


class Node:
    """One simulated node of the fleet, reached with this module's ssh configuration."""

    def __init__(self, name: str, ssh_config: Path, call_log: Path) -> None:
        self.name = name
        self.ssh_config = ssh_config
        self.call_log = call_log

    def run(self, command: str, stdin: int | t.IO[bytes] = subprocess.DEVNULL, timeout: float = 900) -> subprocess.CompletedProcess[bytes]:
        """Run a shell command line on the node, no tty."""
        argv = ["ssh", "-F", str(self.ssh_config), "-T", "-o", "ControlMaster=no", self.name, command]
        return subprocess.run(argv, capture_output=True, stdin=stdin, timeout=timeout, check=False)

    def must(self, command: str, timeout: float = 900) -> bytes:
        """Run a command line on the node; its stdout, or an AssertionError saying what failed."""
        result = self.run(command, timeout=timeout)
        assert result.returncode == 0, f"on node {self.name}: {command[:200]}: exit {result.returncode}: {result.stderr[-3000:]!r} {result.stdout[-3000:]!r}"
        return result.stdout

    def sh(self, vmid: int, script: str, *args: str) -> str:
        """A sh script inside a container of the node; its stdout (checked)."""
        return self.must(shlex.join(["pct", "exec", str(vmid), "--", "sh", "-c", script, "sh", *args])).decode("utf-8", "replace")

    def calls(self) -> list[dict[str, t.Any]]:
        """Every pct call the node logged so far."""
        if not self.call_log.exists():
            return []
        return [json.loads(line) for line in self.call_log.read_text(encoding="utf-8").splitlines() if line.strip()]


def client_files(folder: Path) -> Path:
    """An ssh_config and known_hosts of this module for pve-k and pve-l (host key checking on)."""
    entries, known = [], []
    for name, address in NODES.items():
        key = (NODES_BASE / name / "ssh_host_ed25519_key.pub").read_text(encoding="utf-8").split()
        known.append(f"{name} {key[0]} {key[1]}\n")
        # Also by address: the inventory, like examples/remote/inventory.yml, gives the nodes' hosts ansible_host.
        entries.append(f"Host {name} {address}\n  HostName {address}\n  Port 22\n  User root\n  IdentityFile {NODES_BASE / 'client' / 'id_ed25519'}\n"
                       f"  IdentitiesOnly yes\n  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
                       f"  HostKeyAlias {name}\n  BatchMode yes\n\n")
    (folder / "known_hosts").write_text("".join(known), encoding="utf-8")
    (folder / "ssh_config").write_text("".join(entries), encoding="utf-8")
    return folder / "ssh_config"


def on_nodes(nodes: dict[str, Node], scripts: dict[str, str], timeout: float = 900) -> None:
    """One command line per node, the nodes in parallel; fails naming the node where one failed."""
    procs = {}
    for name, script in scripts.items():
        argv = ["ssh", "-F", str(nodes[name].ssh_config), "-T", "-o", "ControlMaster=no", name, script]
        procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=consider-using-with
                                       stderr=subprocess.STDOUT)
    failed = []
    for name, proc in procs.items():
        out, _err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            failed.append(f"{name}: exit {proc.returncode}: {out.decode('utf-8', 'replace')[-3000:]}")
    assert not failed, "; ".join(failed)


def create_and_prepare(nodes: dict[str, Node], folder: Path) -> None:
    """The 8 containers, running; tmux and the venv installed in CT 700 once, then unpacked into the others."""
    scripts = {}
    for name in NODES:
        vmids = " ".join(str(vmid) for vmid, node in FLEET.items() if node == name)
        scripts[name] = (f"for v in {vmids}; do if pct config $v >/dev/null 2>&1; then pct destroy $v --force || exit 1; fi; "
                         f"pct create $v --release bookworm --start 1 || exit 1; done")
    on_nodes(nodes, scripts)
    main = nodes[FLEET[MAIN_VMID]]
    main.must(shlex.join(["pct", "exec", str(MAIN_VMID), "--", "sh", "-c", APT]))
    payload = folder / "payload.tar"
    with payload.open("wb") as out:
        packed = subprocess.run(["ssh", "-F", str(main.ssh_config), "-T", main.name, shlex.join(["pct", "exec", str(MAIN_VMID), "--", "sh", "-c", PACK])],
                                stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=600, check=False)
    assert packed.returncode == 0, packed.stderr
    scripts = {}
    for name in NODES:
        others = [str(vmid) for vmid, node in FLEET.items() if node == name and vmid != MAIN_VMID]
        scripts[name] = shlex.join(["sh", "-c", UNPACK_LOOP, "sh", str(payload), UNPACK, *others])
    on_nodes(nodes, scripts)  # the payload is read on the node: the nodes share this host's /tmp
    payload.unlink()


def write_inventory(folder: Path, ssh_config: Path, control_dir: Path) -> Path:
    """Like examples/remote/inventory.yml: the nodes with Ansible's ssh, the 8 containers with the pct connection."""
    multiplex = f"-o ControlMaster=auto -o ControlPersist=60s -o ControlPath={control_dir}/pct-%C"
    inventory = {"all": {"children": {
        "pve_nodes": {
            "hosts": {name: {"ansible_host": address} for name, address in NODES.items()},
            "vars": {"ansible_connection": "ssh", "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
                     "ansible_ssh_common_args": f"-F {ssh_config}"},
        },
        "training": {
            "hosts": {f"ct{vmid}": {"pct_vmid": vmid, "pct_node": node} for vmid, node in FLEET.items()},
            "vars": {"ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": "/usr/bin/python3",
                     "pct_node_address": "{{ hostvars[pct_node].ansible_host }}", "pct_node_user": "{{ hostvars[pct_node].ansible_user }}",
                     "pct_ssh_args": f"-F {ssh_config} {multiplex}"},
        },
    }}}
    path = folder / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False), encoding="utf-8")
    return path


class Run:
    """One Ansible run: its process, its task results (tests' trainops_results callback), the pct calls it made."""

    def __init__(self, proc: subprocess.CompletedProcess[str], results: dict[str, t.Any], calls: list[dict[str, t.Any]]) -> None:
        self.proc = proc
        self.results = results
        self.calls = calls

    @property
    def output(self) -> str:
        """What the run printed, for assertion messages."""
        return f"rc={self.proc.returncode}\n--- stdout\n{self.proc.stdout[-12000:]}\n--- stderr\n{self.proc.stderr[-4000:]}"

    def task(self, name: str) -> dict[str, dict[str, t.Any]]:
        """The results of task ``name`` per host (its last run)."""
        return results_by_host(self.results, name)

    def launch(self, host: str) -> dict[str, t.Any]:
        """tmux_session's last result on ``host``: launch.yml's launch task."""
        found = launch_results(self.results, host)
        assert found, f"no launch on {host}\n{self.output}"
        return found[-1]

    def proof(self, host: str) -> dict[str, t.Any]:
        """The proof of the start on ``host``: the launch task's wait (tmux_session's option wait) or the handler's result."""
        found = launch_proof(self.results, host)
        assert found is not None, f"no proof of a start on {host}\n{self.output}"
        return found

    def summary(self) -> list[str]:
        """The lines of the fleet summary."""
        return summary_lines(self.results)

    def module_calls(self, host: str, *tasks: str) -> int:
        """The pct calls (``EXEC`` lines of the -vvv output, one ``pct exec`` each) of ``tasks`` on ``host``."""
        counts = exec_calls(self.proc.stdout, host)
        return sum(counts.get(task, 0) for task in tasks)

    def pct_calls(self, vmid: int, kind: str | None = None) -> int:
        """The run's ``pct`` calls on container ``vmid``: all, or ``exec`` of ``/bin/sh -s`` (the collection's modules) or ``-c``."""
        count = 0
        for call in self.calls:
            argv = call["argv"]
            start = argv.index("exec") if "exec" in argv else (argv.index("status") if "status" in argv else -1)
            if start < 0 or start + 1 >= len(argv) or argv[start + 1] != str(vmid):
                continue
            if kind is None or (argv[start] == "exec" and argv[start + 2:start + 7] == ["--keep-env", "1", "--", "/bin/sh", kind]):
                count += 1
        return count


class Fleet:
    """The nodes, the inventory, and how Ansible is run on them."""

    def __init__(self, nodes: dict[str, Node], folder: Path, inventory: Path, control_dir: Path) -> None:
        self.nodes = nodes
        self.folder = folder
        self.inventory = inventory
        self.control_dir = control_dir

    def env(self, results: Path, **extra: str) -> dict[str, str]:
        """Ansible's environment: no ANSIBLE_* of the caller (so no pipelining setting), the results callback."""
        kept = ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH", "ANSIBLE_PCT_SSH_CONTROL_PATH_DIR")
        env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_") or key in kept}
        env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_RETRY_FILES_ENABLED="0",
                   ANSIBLE_SSH_CONTROL_PATH_DIR=str(self.control_dir), ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
                   ANSIBLE_CALLBACKS_ENABLED="trainops_results", TRAINOPS_RESULTS_FILE=str(results), **extra)
        return env

    def run(self, program: str, args: list[str], **env: str) -> Run:
        """``program`` (ansible-playbook or ansible) from the checkout's folder, as a user runs it; with the pct calls it made."""
        results = self.folder / f"results-{len(list(self.folder.glob('results-*.json'))) + 1}.json"
        before = {name: len(node.calls()) for name, node in self.nodes.items()}
        proc = subprocess.run([str(BIN / program), "-i", str(self.inventory), *args], capture_output=True, text=True, timeout=1500,
                              env=self.env(results, **env), stdin=subprocess.DEVNULL, cwd=REPO, check=False)
        calls = [call for name, node in self.nodes.items() for call in node.calls()[before[name]:]]
        data = json.loads(results.read_text(encoding="utf-8")) if results.exists() else {}
        return Run(proc, data, calls)

    def launch(self, *extra: str) -> Run:
        """playbooks/launch.yml with the example job (long), forks 8."""
        return self.run("ansible-playbook", ["-vvv", "--forks", "8", "-e", f"@{JOB}", "-e", json.dumps(LONG_JOB), *extra,
                                             str(REPO / "playbooks" / "launch.yml")])

    def node_of(self, vmid: int) -> Node:
        """The node that carries container ``vmid``."""
        return self.nodes[FLEET[vmid]]

    def job_processes(self, vmid: int, script: str = "/workspace/train.py") -> list[str]:
        """The processes of the job in the container: python3 running ``script`` (``PID ARGS`` each)."""
        listing = self.node_of(vmid).sh(vmid, "ps -eo pid=,args=").splitlines()
        return [line.strip() for line in listing
                if len(line.split()) > 2 and line.split()[1].endswith("python3") and script in line.split()[2:]]

    def close(self) -> None:
        """Close the ssh control masters of the runs."""
        for sock in self.control_dir.iterdir():
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "node"], capture_output=True, timeout=30, check=False)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """pve-k and pve-l up with call logs, containers 700-707 running and prepared; everything removed at the end."""
    require_sshd()
    folder = tmp_path_factory.mktemp("fleet-scale")
    control_dir = Path(tempfile.mkdtemp(prefix="fs-cp-", dir="/tmp"))  # short: a control socket path must fit in 108 bytes
    payload_dir = Path(tempfile.mkdtemp(prefix="fs-payload-", dir="/tmp"))  # the nodes see this host's /tmp
    nodes: dict[str, Node] = {}
    try:
        node_sh_concurrently("up", NODES)
        config = client_files(folder)
        for name in NODES:
            call_log = folder / f"calls-{name}.jsonl"
            (NODES_BASE / name / "root" / "knobs.conf").write_text(f"call_log={call_log}\n", encoding="utf-8")
            nodes[name] = Node(name, config, call_log)
        started = time.monotonic()
        create_and_prepare(nodes, payload_dir)
        print(f"8 containers created and prepared in {time.monotonic() - started:.1f} s")
        fleet_ = Fleet(nodes, folder, write_inventory(folder, config, control_dir), control_dir)
        yield fleet_
        fleet_.close()
    finally:
        for name, node in nodes.items():
            vmids = " ".join(str(vmid) for vmid, owner in FLEET.items() if owner == name)
            node.run(f"for v in {vmids}; do pct destroy $v --force >/dev/null 2>&1; done", timeout=300)
        node_sh_concurrently("down", NODES)
        shutil.rmtree(control_dir, ignore_errors=True)
        shutil.rmtree(payload_dir, ignore_errors=True)


def check_one_job_each(fleet: Fleet, run: Run) -> dict[int, str]:
    """One job process per container, and its log with step lines; returns the job's pid per container."""
    pids = {}
    for vmid in FLEET:
        procs = fleet.job_processes(vmid)
        assert len(procs) == 1, f"CT {vmid}: {procs}\n{run.output}"
        pids[vmid] = procs[0].split()[0]
        log = fleet.node_of(vmid).sh(vmid, 'cat -- "$1"; ls /workspace', "/workspace/train.log")
        assert any(line.startswith("step ") and " loss " in line for line in log.splitlines()), f"CT {vmid}: {log[-2000:]}"
        assert "train.log.1" not in log.split(), f"CT {vmid}: one launch, one log: {log[-500:]}"
    return pids


def check_launch_calls(run: Run) -> dict[int, int]:
    """tmux_session's 1 call, in which the first chunk of the proof runs, and 1 more per chunk after it (none when the
    proof came within the first) per container."""
    counts = {}
    for vmid in FLEET:
        host = f"ct{vmid}"
        proof = run.proof(host)
        chunks = int(proof["pct_calls"])
        assert chunks == 0 or float(proof["elapsed"]) > 9, f"{host}: {proof}"
        counts[vmid] = run.module_calls(host, LAUNCH, HANDLER)
        assert counts[vmid] == 1 + chunks, f"{host}: {counts[vmid]} pct exec, expected tmux_session 1 + wait {chunks}"
    return counts


def test_eight_containers_on_two_nodes(fleet: Fleet) -> None:
    started = time.monotonic()
    run = fleet.launch()
    print(f"launch of 8 containers on 2 nodes: {time.monotonic() - started:.1f} s, {len(run.calls)} pct calls")
    assert run.proc.returncode == 0, run.output
    assert run.summary()[0] == f"{SESSION}: 8 of 8 containers run", run.summary()
    assert sorted(run.task(LAUNCH)) == sorted(f"ct{vmid}" for vmid in FLEET), "one launch task, a result per container"
    assert "skipping: no hosts matched" not in run.proc.stdout, run.output
    for vmid, node in FLEET.items():
        host = f"ct{vmid}"
        assert run.launch(host)["changed"] is True, run.output
        assert run.proof(host)["verdict"] == "started" and run.launch(host)["proven"] is True, run.proof(host)
        assert host not in run.task(HANDLER), "a launch that is no fleet-wide wait is proven in its own task"
        assert f"{host} (CT {vmid} on {node}): started" in run.summary(), run.summary()
        assert run.results["stats"][host]["failures"] == 0 and run.results["stats"][host]["ok"] > 0, run.output  # a recap line each
    counts = check_launch_calls(run)
    print(f"pct calls of launch + proof per container: {counts}; all pct calls per container: "
          f"{ {vmid: run.pct_calls(vmid) for vmid in FLEET} }")
    pids = check_one_job_each(fleet, run)

    started = time.monotonic()
    again = fleet.launch()
    print(f"idempotent re-run: {time.monotonic() - started:.1f} s, {len(again.calls)} pct calls")
    assert again.proc.returncode == 0, again.output
    assert again.summary()[0] == f"{SESSION}: 8 of 8 containers run", again.summary()
    for vmid, node in FLEET.items():
        host = f"ct{vmid}"
        assert again.launch(host)["changed"] is False and again.launch(host)["state"] == "running", again.launch(host)
        assert again.task(HANDLER).get(host) is None, "the proof is not awaited again"
        assert again.results["stats"].get(host, {}).get("changed", 0) == 0, again.output  # a host whose every task ran once: none
        assert f"{host} (CT {vmid} on {node}): already running" in again.summary(), again.summary()
        assert again.module_calls(host, LAUNCH, HANDLER, REPROOF) == 1, f"{host}: the re-run's launch part is tmux_session's one call"
    assert check_one_job_each(fleet, again) == pids, "the same job process in every container"


def test_launch_only_into_prepared_containers(fleet: Fleet) -> None:
    """job_prepare: false re-launches into containers the first test prepared: no prepare.yml, fewer pct calls."""
    limit = ["--limit", "ct700,ct704"]
    before = {vmid: len(fleet.job_processes(vmid)) for vmid in (700, 704)}
    full = fleet.launch(*limit, "-e", json.dumps({"job_session_name": "fullrun", "job_log_path": "/workspace/fullrun.log"}))
    assert full.proc.returncode == 0, full.output
    only = fleet.launch(*limit, "-e", json.dumps({"job_session_name": "relaunch", "job_log_path": "/workspace/relaunch.log",
                                                  "job_prepare": False}))
    assert only.proc.returncode == 0, only.output
    try:
        for vmid in (700, 704):
            host = f"ct{vmid}"
            prepared = task_results(full.results, PREPARE_TASK, host)
            assert [result["prepared"] for result in prepared] == [True], full.output  # one check
            assert [result["status"] for result in task_results(only.results, PREPARE_TASK, host)] == ["skipped"], only.output
            assert only.launch(host)["changed"] is True and only.proof(host)["verdict"] == "started", only.output
            assert len(fleet.job_processes(vmid)) == before[vmid] + 2, "fullrun and relaunch run, next to what ran before"
            print(f"{host}: pct calls of launch.yml, whole: {full.pct_calls(vmid)}, job_prepare=false: {only.pct_calls(vmid)}")
            assert only.pct_calls(vmid) < full.pct_calls(vmid), (only.calls, full.calls)
            for each in (full, only):  # the same launch and proof: one pct exec, and one more per chunk after the first
                assert each.module_calls(host, LAUNCH, HANDLER) == 1 + each.proof(host)["pct_calls"], each.output
    finally:
        for vmid in (700, 704):
            fleet.node_of(vmid).sh(vmid, 'for s in fullrun relaunch; do tmux kill-session -t "=$s" 2>/dev/null; done; true')


def test_job_prepare_must_be_a_boolean(fleet: Fleet) -> None:
    run = fleet.launch("--limit", "ct700", "-e", "job_prepare=maybe")
    assert run.proc.returncode != 0, run.output
    result = run.task("Check that the job description is complete")["ct700"]
    assert result["status"] == "failed" and "job_prepare is 'maybe'" in result["msg"], result
    assert run.module_calls("ct700", LAUNCH, HANDLER) == 0 and run.pct_calls(700) == 0, "nothing launched"


@pytest.mark.parametrize(("args", "env", "expected"), [
    ([], {}, "1"),
    (["-e", "ansible_pipelining=false"], {}, "more"),
    ([], {"ANSIBLE_PIPELINING": "0"}, "more"),
], ids=["default", "ansible_pipelining=false", "ANSIBLE_PIPELINING=0"])
def test_module_task_is_pipelined_by_default(fleet: Fleet, args: list[str], env: dict[str, str], expected: str) -> None:
    run = fleet.run("ansible", ["ct701", "-m", "ansible.builtin.ping", *args], **env)
    assert run.proc.returncode == 0 and '"ping": "pong"' in run.proc.stdout, run.output
    calls = run.pct_calls(701)
    print(f"-m ping {args or ''}{env or ''}: {calls} pct exec")
    if expected == "1":
        assert calls == 1, run.calls
    else:
        assert calls >= 4, run.calls
