# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Faults on the controller and node side, through ``ansible-playbook`` as a user runs it.

Each fault is one test on real containers, checking the verdict and the message the user sees,
that no run says "started" for a job that did not start, that the job's log keeps every byte
(its header, then ``step 1``, ``step 2``, ... without a gap), and that exactly one job process
runs where one is expected (processes inside the container with the test's marker in their argv).

* ``test_fault_node_unreachable_mid_wait``: the Proxmox node pve-i (simulated with
  tools/pve_standin/node.sh on 127.0.0.21) loses its sshd, connections included, while the
  launch task of playbooks/launch.yml (tmux_session's option wait, after its first chunk) waits
  for a job that proves itself late. The play
  fails naming the node; once sshd is back (``node.sh up`` again, containers untouched),
  playbooks/status.yml shows the job running with its log intact and a new launch changes nothing.
* ``test_fault_controller_killed_in_launch_call`` / ``..._in_wait``: ansible-playbook and every
  process it started get SIGKILL, except the connection's ``pct exec`` of a module and what runs
  under it (on a real node those outlive the controller), while tmux_session's ``pct exec`` runs
  (the stand-in's per-call delay, set by a ``pct_path`` wrapper, widens the window) or while a
  chunk of wait_for_log runs; the ``pct exec`` left behind ends by itself (the wait's within its
  chunk), nothing of the modules stays in the container, and the launch run again converges with
  one job, the first log kept.
* ``test_fault_two_launches_at_once``: two ansible-playbook launches of one session started
  together: one job, one run says started, the other already running.
* ``test_fault_job_ignoring_term_stopped_by_playbook``: playbooks/stop.yml on a job that ignores
  SIGTERM kills it after job_stop_timeout; exit status 137, the log intact.

The modules run on the container hosts (the ``trainops.pct_launch.pct`` connection, pipelined: one
``pct exec VMID --keep-env 1 -- /bin/sh -c CMD`` per module task or wait chunk, CMD running /usr/bin/python3 with
the module on stdin). The launches use playbooks/launch.yml, or a launch-only playbook (tmux_session,
then wait_for_log as a handler, as launch.yml does for a fleet-wide wait) where preflight and prepare would
only add time.
VMIDs: 620 (local stand-in, tmux installed once), 630 (on pve-i, tmux installed once).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import typing as t
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import REPO, StandinNode, knob_pct, require_standin
from .nodes import NODE_SH, NODES_BASE, RemoteNode, RemoteNodes
from .playbook_results import ansible_playbook, launch_proof, report_msg, task_results

pytestmark = pytest.mark.integration

CT_LOCAL, CT_REMOTE = 620, 630
NODE, NODE_ADDRESS = "pve-i", "127.0.0.21"
CALLBACK_DIR = Path(__file__).resolve().parent / "files" / "playbooks" / "callback_plugins"
LAUNCH = "Start the job in its detached tmux session"
HANDLER = "Wait for the job's log to prove it started"
REPORT = "Report the job"
HEADER = "### trainops.pct_launch: "
JOB_PATH = "/workspace/fault_job.py"
STEP = r"^step \d+ loss"
PYTHON = "/usr/bin/python3"
# A module's pct call as the connection makes it (plugin_utils/_pct_command.py: pct exec VMID --keep-env 1 -- /bin/sh -c CMD,
# CMD Ansible's pipelined python3, the module on stdin), in the argv of pct, of the pct_path wrapper or of the
# lxc-attach it becomes: what runs on the Proxmox node, which a dying controller does not take down.
NODE_SIDE = re.compile(rf"(?:\bexec (\d+) |^lxc-attach .*-n (\d+) ).*-- /bin/sh -c .*{re.escape(PYTHON)}\b")
# The job: "warming up", then after LATE seconds "step N loss X" every 0.3 s; with "ignore-term" it
# answers SIGTERM with a line saying when (epoch seconds) and goes on.
JOB_SCRIPT = """\
import signal
import sys
import time

marker, late, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, lambda signum, frame: print(f"ignoring TERM at {time.time():.3f}", flush=True))
print(f"warming up {marker}", flush=True)
end = time.monotonic() + late
while time.monotonic() < end:
    time.sleep(0.1)
for step in range(1, 100000):
    print(f"step {step} loss {1 / step:.5f}", flush=True)
    time.sleep(0.3)
"""
# Counts the processes of the container whose argv holds the marker (read from stdin, so this
# program's own argv does not hold it): one line "PID ARGS" each.
COUNT_PROGRAM = """\
import os, sys
marker = sys.stdin.read().strip()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            args = stream.read().replace(b"\\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        continue
    if marker in args and int(pid) != os.getpid():
        print(pid, args)
"""
# A launch without preflight and prepare: the launch task, the proof as a flushed handler and the
# report, with launch.yml's arguments.
LAUNCH_ONLY = [{
    "name": "Launch the job and prove it started (launch only)",
    "hosts": "{{ job_hosts | default('training') }}",
    "gather_facts": False,
    "tasks": [
        {"name": LAUNCH,
         "trainops.pct_launch.tmux_session": {
             "session_name": "{{ job_session_name }}", "argv": "{{ job_argv }}",
             "chdir": "{{ job_workdir | default(omit) }}", "log_path": "{{ job_log_path }}", "state": "started"},
         "register": "job_launch", "notify": HANDLER},
        {"name": "Prove at once that the job started", "ansible.builtin.meta": "flush_handlers"},
        {"name": REPORT,
         "ansible.builtin.debug": {
             "msg": "{{ job_session_name }} in CT {{ pct_vmid }}: {{ 'started' if job_launch is changed else 'already running' }}"}},
    ],
    "handlers": [
        {"name": HANDLER,
         "trainops.pct_launch.wait_for_log": {
             "session_name": "{{ job_session_name }}", "log_path": "{{ job_log_path }}",
             "pattern": "{{ job_wait_pattern }}", "timeout": "{{ job_wait_timeout }}"},
         "register": "job_wait"},
    ],
}]


# ---------------------------------------------------------------------------- ansible-playbook runs


@dataclasses.dataclass
class Run:
    """A finished ansible-playbook run: exit status, output, and every task result (trainops_results callback)."""

    rc: int
    stdout: str
    stderr: str
    results: dict[str, t.Any]

    @property
    def output(self) -> str:
        """Everything it printed, for assertion messages."""
        return f"rc={self.rc}\n--- stdout\n{self.stdout[-8000:]}\n--- stderr\n{self.stderr[-3000:]}"

    def results_of(self, name: str, host: str) -> list[dict[str, t.Any]]:
        """Every result of the task (or handler) called ``name`` on ``host``, in order."""
        return task_results(self.results, name, host)

    def result(self, name: str, host: str) -> dict[str, t.Any]:
        """The last result of task ``name`` on ``host``."""
        found = self.results_of(name, host)
        assert found, f"task {name!r} has no result for {host}\n{self.output}"
        return found[-1]

    def stats(self, host: str) -> dict[str, int]:
        """The play recap of ``host``."""
        assert "stats" in self.results, f"no results file: ansible-playbook ended early\n{self.output}"
        return dict(self.results["stats"][host])


class Launched:
    """An ansible-playbook process running in its own process group (so it can be killed as a whole)."""

    def __init__(self, argv: list[str], env: dict[str, str], folder: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.results_path = folder / f"results-{tag}.json"
        self.stdout_path, self.stderr_path = folder / f"stdout-{tag}.txt", folder / f"stderr-{tag}.txt"
        env = dict(env, TRAINOPS_RESULTS_FILE=str(self.results_path))
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=folder,
                                         start_new_session=True)

    def printed(self) -> str:
        """What it has printed so far."""
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def wait_until(self, what: str, ready: Callable[[], bool], timeout: float = 240) -> None:
        """Poll ``ready`` until it holds; fails when the run ends first or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"ansible-playbook ended before {what}:\n{self.finish().output}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"no {what} after {timeout} s:\n{self.printed()}")
            time.sleep(0.1)

    def kill(self, spare: re.Pattern[str] | None = None) -> list[str]:
        """SIGKILL to ansible-playbook and every process it started, as when the controller dies; returns what was killed.

        Ansible's workers run in sessions of their own, so killing the process group is not enough. The
        processes whose argv matches ``spare`` (the modules' ``pct exec`` calls: they run on the Proxmox node,
        which a dying controller does not take down) and their children are left alone.
        """
        frozen: dict[int, str] = {}
        while True:  # freeze the tree first: a frozen process forks no more, and no orphan escapes to init
            fresh = [pid for pid in process_tree(self.proc.pid, spare) if pid not in frozen]
            if not fresh:
                break
            for pid in fresh:
                frozen[pid] = _command_line(pid)[:120]
                _signal(pid, signal.SIGSTOP)
        for pid in frozen:
            _signal(pid, signal.SIGKILL)
        killed = [f"{pid} {args}" for pid, args in frozen.items()]
        self.proc.wait(60)
        return killed

    def finish(self, timeout: float = 600) -> Run:
        """Wait for the end; the run's outcome."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        results = json.loads(self.results_path.read_text(encoding="utf-8")) if self.results_path.exists() else {}
        return Run(rc, self.printed(), self.stderr_path.read_text(encoding="utf-8", errors="replace"), results)


@dataclasses.dataclass
class Playbooks:
    """Runs playbooks against one inventory, from a folder of its own."""

    folder: Path
    inventory: Path
    control_dir: Path

    def start(self, playbook: Path, job: dict[str, t.Any]) -> Launched:
        """ansible-playbook PLAYBOOK -e JOB, in the background.

        Stand-in knobs for its pct calls come from a ``pct_path`` wrapper (``knob_pct``): the connection runs pct
        with a clean environment, never with ansible-playbook's.
        """
        job_file = self.folder / f"job-{uuid.uuid4().hex[:8]}.json"
        job_file.write_text(json.dumps(job), encoding="utf-8")
        kept = ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH", "ANSIBLE_PCT_SSH_CONTROL_PATH_DIR")
        run_env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_") or key in kept}
        run_env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_RETRY_FILES_ENABLED="0",
                       ANSIBLE_PIPELINING="1", ANSIBLE_CALLBACK_PLUGINS=str(CALLBACK_DIR), ANSIBLE_CALLBACKS_ENABLED="trainops_results",
                       ANSIBLE_SSH_CONTROL_PATH_DIR=str(self.control_dir),
                       # the tests read the output while it runs, and Ansible does not flush it: a file gets it in blocks
                       PYTHONUNBUFFERED="1")
        argv = [ansible_playbook(), "-i", str(self.inventory), "-e", f"@{job_file}", str(playbook)]
        return Launched(argv, run_env, self.folder)

    def run(self, playbook: Path, job: dict[str, t.Any]) -> Run:
        """ansible-playbook PLAYBOOK -e JOB, to its end."""
        return self.start(playbook, job).finish()

    def close(self) -> None:
        """Stop the ssh control masters Ansible left behind."""
        for sock in self.control_dir.iterdir():
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "node"], capture_output=True, timeout=30, check=False)
        shutil.rmtree(self.control_dir, ignore_errors=True)


def make_playbooks(folder: Path, containers: dict[str, dict[str, t.Any]], ssh_config: Path | None = None) -> Playbooks:
    """An inventory of ``containers`` (group training) and, with ``ssh_config``, node pve-i reached with ssh."""
    training_vars: dict[str, t.Any] = {"ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": "/usr/bin/python3"}
    inventory: dict[str, t.Any] = {"training": {"hosts": containers, "vars": training_vars}}
    if ssh_config is not None:
        training_vars["pct_ssh_args"] = f"-F {ssh_config}"
        inventory["pve_nodes"] = {"hosts": {NODE: {}}, "vars": {"ansible_connection": "ssh", "ansible_user": "root",
                                                                "ansible_ssh_common_args": f"-F {ssh_config}",
                                                                "ansible_python_interpreter": "/usr/bin/python3"}}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "inventory.json"
    path.write_text(json.dumps(inventory, indent=1), encoding="utf-8")
    # Short: a control socket's path must fit in 108 bytes.
    return Playbooks(folder, path, Path(tempfile.mkdtemp(prefix="fc-cp-", dir="/tmp")))


# ---------------------------------------------------------------------------- the job and its container


@dataclasses.dataclass
class Job:
    """One job of a test: its session, log, marker (in its argv) and the container it runs in."""

    node: StandinNode
    vmid: int
    session: str
    late: float = 0.0
    mode: str = "plain"
    marker: str = dataclasses.field(default_factory=lambda: f"fault-marker-{uuid.uuid4().hex[:12]}")

    @property
    def log_path(self) -> str:
        """The job's log inside the container."""
        return f"/workspace/{self.session}.log"

    def vars(self, **extra: t.Any) -> dict[str, t.Any]:
        """The job description (extra vars of launch.yml)."""
        return {"job_session_name": self.session, "job_workdir": "/workspace", "job_log_path": self.log_path,
                "job_argv": ["python3", "-u", JOB_PATH, self.marker, str(self.late), self.mode],
                "job_wait_pattern": STEP, "job_fail_pattern": "Traceback", "job_wait_timeout": 120, "job_stop_timeout": 5, **extra}

    def processes(self) -> list[str]:
        """``PID ARGS`` of every process in the container whose argv holds the marker: the job's python3 only
        (the wrapper and tmux do not carry the job's argv)."""
        out = self.node.pct("exec", self.vmid, "--", "python3", "-c", COUNT_PROGRAM, input=self.marker.encode(), check=True)
        return out.stdout.decode("utf-8", "replace").splitlines()

    def assert_one_job(self) -> None:
        """Exactly one process of the job runs in the container."""
        found = self.processes()
        assert len(found) == 1 and f" {JOB_PATH} {self.marker} " in found[0], f"not one job process in CT {self.vmid}: {found}"

    def read(self, path: str) -> str:
        """A file inside the container ('' when it is missing)."""
        return self.node.sh(self.vmid, 'cat -- "$1" 2>/dev/null || true', path).stdout.decode("utf-8", "replace")

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists inside the container."""
        return self.node.sh(self.vmid, 'test -e "$1"', path, check=False).returncode == 0

    def alive(self) -> bool:
        """Whether tmux has the job's session."""
        return self.node.sh(self.vmid, 'tmux has-session -t "=$1" 2>/dev/null', self.session, check=False).returncode == 0

    def check_log(self, text: str | None = None) -> list[str]:
        """The log holds the header, then every line the job printed, in order, none lost; returns its lines."""
        lines = (self.read(self.log_path) if text is None else text).splitlines()
        assert lines and lines[0].startswith(f"{HEADER}session={self.session} started_at="), lines[:3]
        assert lines[1] == f"warming up {self.marker}", lines[:3]
        body = [line for line in lines[2:] if not line.startswith(("ignoring TERM at ", HEADER))]
        steps = [int(match.group(1)) for match in (re.match(r"^step (\d+) loss 0?\.?\d", line) for line in body) if match]
        assert len(steps) == len(body), f"lines that are no step line: {[line for line in body if not line.startswith('step ')]}"
        assert steps == list(range(1, len(steps) + 1)), f"steps lost or repeated in {self.log_path}: {steps}"
        trailers = [line for line in lines[1:] if line.startswith(HEADER)]
        assert all(" exit_status=" in line for line in trailers) and len(trailers) <= 1, trailers
        return lines


def put_job_script(node: StandinNode, vmid: int) -> None:
    """The job's script, written into the container once."""
    node.sh(vmid, 'mkdir -p /workspace && cat > "$1"', JOB_PATH, input=JOB_SCRIPT.encode())


def wait_in_container(node: StandinNode, vmid: int, condition: str, *args: str, timeout: int = 120) -> None:
    """Poll a sh condition inside the container (up to ``timeout`` seconds): an event, not a timing."""
    script = f'i=0; until {condition}; do i=$((i+1)); [ "$i" -gt {timeout * 10} ] && exit 1; sleep 0.1; done'
    out = node.sh(vmid, script, *args, check=False, timeout=timeout + 60)
    assert out.returncode == 0, f"in CT {vmid}: {condition} {args} did not hold within {timeout} s"


def _parents() -> dict[int, int]:
    """Parent pid of every process of this machine."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def process_tree(root: int, spare: re.Pattern[str] | None = None) -> list[int]:
    """``root`` (while it lives) and its descendants, in that order; with ``spare``, without the processes whose argv
    matches it and their descendants."""
    parents = _parents()
    tree, frontier = ([root] if root in parents else []), [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        if spare is not None:
            children = [pid for pid in children if not spare.search(_command_line(pid))]
        tree += children
        frontier = children
    return tree


def node_side_calls(vmid: int) -> list[str]:
    """``PID ARGS`` of the processes of this machine that run a module in container ``vmid``: the connection's
    ``pct exec VMID --keep-env 1 -- /bin/sh -c CMD`` (CMD runs /usr/bin/python3), which becomes ``lxc-attach ... -n VMID ... -- /bin/sh -c CMD``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            args = _command_line(int(entry.name))
            match = NODE_SIDE.search(args)
            if match and str(vmid) in match.groups():
                found.append(f"{entry.name} {args}")
    return found


def modules_in_container(node: StandinNode, vmid: int) -> list[str]:
    """``PID ARGS`` of the module programs running inside the container: a pipelined python3 reads its program from stdin,
    so its argv is the interpreter alone."""
    out = node.sh(vmid, f"pgrep -a -x -f {PYTHON} || true")
    return out.stdout.decode("utf-8", "replace").splitlines()


def wait_gone(node: StandinNode, vmid: int, timeout: float = 60) -> None:
    """Wait until no module runs in container ``vmid`` any more, on the node or inside (a killed run's calls end by themselves)."""
    deadline = time.monotonic() + timeout
    while (node_side_calls(vmid) or modules_in_container(node, vmid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not node_side_calls(vmid), node_side_calls(vmid)
    assert not modules_in_container(node, vmid), modules_in_container(node, vmid)


@pytest.fixture(scope="module")
def local_ct(standin: StandinNode) -> int:
    """Container 620 on the local stand-in, with tmux (apt, once) and the job's script."""
    standin.create(CT_LOCAL)
    standin.apt_install(CT_LOCAL, "tmux")
    put_job_script(standin, CT_LOCAL)
    return CT_LOCAL


@pytest.fixture()
def local(local_ct: int, tmp_path: Path) -> Iterator[Playbooks]:
    """Playbooks against container 620 (host ct620)."""
    books = make_playbooks(tmp_path / "ansible", {f"ct{local_ct}": {"pct_vmid": local_ct}})
    (tmp_path / "ansible" / "launch_only.yml").write_text(json.dumps(LAUNCH_ONLY, indent=1), encoding="utf-8")
    yield books
    books.close()


# ---------------------------------------------------------------------------- the simulated node pve-i


def node_sh(*args: str) -> subprocess.CompletedProcess[str]:
    """tools/pve_standin/node.sh with these arguments."""
    return subprocess.run(["bash", str(NODE_SH), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300, check=False)


def _command_name(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def kill_node_sshd(name: str) -> list[int]:
    """SIGKILL to node ``name``'s sshd and its connection processes (sshd, sshd-session), nothing else.

    The node becomes unreachable as after a network cut: open connections drop, new ones are refused.
    Its containers, their jobs and the processes that ssh sessions had started keep running.
    """
    main = int((NODES_BASE / name / "sshd.pid").read_text(encoding="utf-8").split()[0])
    tree = process_tree(main)
    victims = [pid for pid in tree if pid == main or _command_name(pid) in ("sshd", "sshd-session")]
    for pid in victims:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60  # gone (reaped), so that node.sh no longer finds its sshd alive
    while any(Path(f"/proc/{pid}").exists() for pid in victims) and time.monotonic() < deadline:
        time.sleep(0.1)
    return victims


def require_sshd() -> None:
    """Skip (fail in CI) without the OpenSSH server."""
    if not os.access("/usr/sbin/sshd", os.X_OK) or shutil.which("ssh") is None:
        message = "needs openssh-server and openssh-client for the simulated node pve-i"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def node_i(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteNode]:
    """Node pve-i (127.0.0.21) up with container 630 (tmux, the job's script); taken down at the end."""
    require_standin()
    require_sshd()
    up = node_sh("up", NODE, NODE_ADDRESS)
    assert up.returncode == 0, f"node.sh up {NODE} {NODE_ADDRESS}: {up.stdout}{up.stderr}"
    client_dir = tmp_path_factory.mktemp("ssh-client-i")
    node = RemoteNode(NODE, NODE_ADDRESS, 22, client_dir)
    nodes = RemoteNodes(client_dir, [node])
    try:
        nodes.write_client_files()
        nodes.create(NODE, CT_REMOTE)
        node.apt_install(CT_REMOTE, "tmux")
        put_job_script(node, CT_REMOTE)
        yield node
    finally:
        node_sh("up", NODE, NODE_ADDRESS)  # sshd back if a test left it down, so that down can destroy the containers
        nodes.destroy_all()
        down = node_sh("down", NODE)
        assert down.returncode == 0, f"node.sh down {NODE}: {down.stdout}{down.stderr}"


# ---------------------------------------------------------------------------- 1. node unreachable


def test_fault_node_unreachable_mid_wait(node_i: RemoteNode, tmp_path: Path) -> None:
    job, host = Job(node_i, CT_REMOTE, "unreach", late=30), f"ct{CT_REMOTE}"
    books = make_playbooks(tmp_path / "ansible", {host: {"pct_vmid": CT_REMOTE, "pct_node": NODE}}, node_i.ssh_config)
    try:
        launched = books.start(REPO / "playbooks" / "launch.yml", job.vars())
        # the launch's own call ran the first chunk of the proof; the progress line after it: the chunks go on
        launched.wait_until("the wait for the log", lambda: f"wait_for_log {job.session} in container" in launched.printed())
        wait_in_container(node_i, CT_REMOTE, 'grep -q "^warming up" "$1"', job.log_path)
        killed = kill_node_sshd(NODE)
        run = launched.finish()
        assert run.rc != 0, run.output
        wait = run.result(LAUNCH, host)
        assert wait["status"] == "unreachable" and "verdict" not in wait and wait["changed"], wait
        assert not run.results_of(HANDLER, host), "a launch that is no fleet-wide wait is proven in its own task"
        text = wait["msg"].removeprefix("Task failed: ")
        assert text.startswith(f"Cannot wait for session {job.session} in container {CT_REMOTE} on node {NODE}: the wait was cut off "), text
        assert f"node {NODE} cannot be reached" in text and f"once container {CT_REMOTE} on node {NODE} can be reached" in text, text
        assert "The job's start is not proven" in text and "playbooks/status.yml" in text, text
        assert f"fatal: [{host}]: UNREACHABLE!" in run.stdout and "Traceback" not in run.stdout + run.stderr, run.output
        assert report_msg(run.results, host) is None and run.stats(host)["unreachable"] == 1, run.output
        print(f"\nnode unreachable: killed sshd processes {killed}; ansible-playbook exited {run.rc}: {text}")

        up = node_sh("up", NODE, NODE_ADDRESS)  # sshd again; the node's containers were never touched
        assert up.returncode == 0 and "sshd up" in up.stdout, up.stdout + up.stderr
        status = books.run(REPO / "playbooks" / "status.yml", job.vars())
        assert status.rc == 0, status.output
        session = status.result("Read the sessions from the container", host)["session"]
        assert session["state"] == "running" and session["log_path"] == job.log_path, session
        job.assert_one_job()
        again = books.run(REPO / "playbooks" / "launch.yml", job.vars())
        assert again.rc == 0, again.output
        assert again.result(LAUNCH, host)["status"] == "ok" and again.stats(host)["changed"] == 0, again.output
        assert "already running" in str(report_msg(again.results, host)), again.output
        job.assert_one_job()
        assert not job.exists(job.log_path + ".1"), "the log was rotated: a second start"
        wait_in_container(node_i, CT_REMOTE, 'grep -q "^step 2 loss" "$1"', job.log_path)
        job.check_log()
    finally:
        node_sh("up", NODE, NODE_ADDRESS)
        books.close()


# ---------------------------------------------------------------------------- 2. controller killed mid-launch


def module_calls(call_log: Path, vmid: int) -> int:
    """How many module calls (the connection's ``pct exec VMID --keep-env 1 -- /bin/sh -c CMD``, CMD running python3) the stand-in's call log holds."""
    if not call_log.exists():
        return 0
    calls = [json.loads(line)["argv"][1:] for line in call_log.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sum(1 for argv in calls if argv[:7] == ["exec", str(vmid), "--keep-env", "1", "--", "/bin/sh", "-c"] and len(argv) == 8 and PYTHON in argv[7])


def check_rerun(job: Job, rerun: Run, host: str, first_log: str) -> str:
    """The launch run again after a killed one: one job, the first run's log kept, a true verdict; returns the verdict."""
    assert rerun.rc == 0, rerun.output
    launch, report = rerun.result(LAUNCH, host), str(report_msg(rerun.results, host))
    if first_log:  # the killed run had started the job: the same job is found running, its log is the same file
        assert launch["status"] == "ok" and launch["state"] == "running", launch
        assert "already running" in report and not any(r["status"] != "skipped" for r in rerun.results_of(HANDLER, host)), report
        assert job.read(job.log_path).startswith(first_log)
    else:  # nothing had started: this run starts it and proves it
        assert launch["status"] == "changed", launch
        assert (launch_proof(rerun.results, host) or {}).get("verdict") == "started" and ": started" in report, rerun.output
    job.assert_one_job()
    assert not job.exists(job.log_path + ".1"), "the log was rotated: a second start"
    wait_in_container(job.node, job.vmid, 'grep -q "^step 2 loss" "$1"', job.log_path)
    job.check_log()
    return "already running" if first_log else "started"


def test_fault_controller_killed_in_launch_call(local: Playbooks, local_ct: int, standin: StandinNode) -> None:
    """SIGKILL to ansible-playbook while tmux_session's pct exec runs (held 4 s by the stand-in's delay)."""
    job, host = Job(standin, local_ct, "ctlkill-a", late=1), f"ct{local_ct}"
    calls = local.folder / "calls-a.jsonl"
    pct = knob_pct(local.folder, delay="4", call_log=str(calls))
    launched = local.start(local.folder / "launch_only.yml", job.vars(pct_path=pct))
    launched.wait_until("tmux_session's pct exec", lambda: module_calls(calls, local_ct) >= 1)
    time.sleep(1)
    killed = launched.kill(spare=NODE_SIDE)
    left = node_side_calls(local_ct)
    print(f"\nkilled: {killed}\nleft running on the node: {left}")
    assert left, "tmux_session's pct exec had ended before the kill"
    assert module_calls(calls, local_ct) == 1, "the killed run made another module call"
    wait_gone(standin, local_ct)  # the killed run's pct call has ended too, its module with it
    first_log = job.read(job.log_path)
    assert len(job.processes()) <= 1, job.processes()
    print(f"\nkilled in tmux_session's pct call: job {'started' if first_log else 'not started'} by the killed run")
    rerun = local.run(REPO / "playbooks" / "launch.yml", job.vars())
    verdict = check_rerun(job, rerun, host, first_log)
    print(f"rerun: {verdict}; {report_msg(rerun.results, host)}")


def test_fault_controller_killed_in_wait(local: Playbooks, local_ct: int, standin: StandinNode) -> None:
    """SIGKILL to ansible-playbook while wait_for_log waits for a job that proves itself late."""
    job, host = Job(standin, local_ct, "ctlkill-b", late=15), f"ct{local_ct}"
    launched = local.start(local.folder / "launch_only.yml", job.vars())
    launched.wait_until("the wait for the log", lambda: f"RUNNING HANDLER [{HANDLER}]" in launched.printed())
    wait_in_container(standin, local_ct, 'grep -q "^warming up" "$1"', job.log_path)
    launched.wait_until("a chunk of the wait in the container", lambda: bool(node_side_calls(local_ct)))
    time.sleep(1)
    killed = launched.kill(spare=NODE_SIDE)
    killed_at = time.monotonic()
    left = node_side_calls(local_ct)
    print(f"\nkilled: {killed}\nleft running on the node: {left}")
    assert left and modules_in_container(standin, local_ct), "no chunk of the wait ran when the controller died"
    assert "ok: [" not in launched.printed().split(f"RUNNING HANDLER [{HANDLER}]")[-1], "the wait had ended before the kill"
    first_log = job.read(job.log_path)
    assert first_log.startswith(f"{HEADER}session={job.session} ") and job.alive(), first_log
    rerun = local.run(REPO / "playbooks" / "launch.yml", job.vars())  # at once: the orphaned chunk may still poll
    assert check_rerun(job, rerun, host, first_log) == "already running"
    assert rerun.stats(host)["changed"] == 0, rerun.output
    # The orphaned chunk ends by itself, on the node and in the container, within its chunk (10 s) and a margin.
    wait_gone(standin, local_ct, timeout=max(1.0, killed_at + 40 - time.monotonic()))
    print(f"orphaned chunk gone {time.monotonic() - killed_at:.1f} s after the kill; rerun: {report_msg(rerun.results, host)}")


# ---------------------------------------------------------------------------- 3. two launches at once


def test_fault_two_launches_at_once(local: Playbooks, local_ct: int, standin: StandinNode) -> None:
    job, host = Job(standin, local_ct, "twice", late=2), f"ct{local_ct}"
    launched = [local.start(local.folder / "launch_only.yml", job.vars()) for _attempt in range(2)]
    runs = [one.finish() for one in launched]
    for run in runs:
        assert run.rc == 0, run.output
    statuses = sorted(run.result(LAUNCH, host)["status"] for run in runs)
    assert statuses == ["changed", "ok"], [run.output for run in runs]
    starter = next(run for run in runs if run.result(LAUNCH, host)["status"] == "changed")
    other = next(run for run in runs if run is not starter)
    assert starter.result(HANDLER, host)["verdict"] == "started", starter.output
    assert starter.result(REPORT, host)["msg"] == f"twice in CT {local_ct}: started"
    assert other.result(REPORT, host)["msg"] == f"twice in CT {local_ct}: already running"
    assert not other.results_of(HANDLER, host), "the run that started nothing has nothing to prove"
    job.assert_one_job()
    lines = job.check_log()
    assert sum(line.startswith(HEADER) for line in lines) == 1 and not job.exists(job.log_path + ".1"), lines[:4]


# ---------------------------------------------------------------------------- 4. a job that ignores SIGTERM


def test_fault_job_ignoring_term_stopped_by_playbook(local: Playbooks, local_ct: int, standin: StandinNode) -> None:
    job, host = Job(standin, local_ct, "stubborn", mode="ignore-term"), f"ct{local_ct}"
    start = local.run(local.folder / "launch_only.yml", job.vars())
    assert start.rc == 0 and start.result(HANDLER, host)["verdict"] == "started", start.output
    job.assert_one_job()
    stop_timeout = 3
    began = time.monotonic()
    stop = local.run(REPO / "playbooks" / "stop.yml", job.vars(job_stop_timeout=stop_timeout))
    seconds = time.monotonic() - began
    assert stop.rc == 0, stop.output
    stopped = stop.result("Stop the job and end its tmux session", host)
    assert stopped["status"] == "changed" and stopped["killed"] is True and stopped["exit_status"] == 137, stopped
    assert job.processes() == [] and not job.alive(), job.processes()
    exit_file = job.read(job.log_path + ".exit").splitlines()
    assert "exit_status=137" in exit_file and "stopped_by=trainops" in exit_file, exit_file
    lines = job.check_log()
    terms = [float(line.split()[-1]) for line in lines if line.startswith("ignoring TERM at ")]
    assert len(terms) == 1, lines[-5:]  # TERM came first, and the job outlived it
    ended = next(line.split("=", 1)[1] for line in exit_file if line.startswith("ended_at="))
    ended_at = datetime.datetime.strptime(ended, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    assert ended_at + 1 >= terms[0] + stop_timeout, f"KILL {ended} came before stop_timeout after TERM at {terms[0]}"  # whole seconds
    status = local.run(REPO / "playbooks" / "status.yml", job.vars())
    assert status.rc == 0, status.output
    headline = status.result("Show each session", host)["results"][0]["msg"][0]
    assert f"session {job.session}: finished" in headline and "exit_status 137 at " in headline, headline
    print(f"\nstop.yml on a job ignoring TERM: {seconds:.1f} s with job_stop_timeout {stop_timeout}; {headline}")
