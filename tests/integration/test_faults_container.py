# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The container-side fault matrix: each fault on real stand-in containers, verdict and message.

Every test drives the collection's modules through ansible-playbook on this machine (the stand-in
Proxmox node), as users do: the modules run on the container, an inventory host reached with the
``trainops.pct_launch.pct`` connection (``playbook_results.container_host``; one ``pct exec`` per
module task, or per chunk of wait_for_log). Each checks the verdict, the message the user sees,
that nothing is reported started that is not, and that no byte of an existing log is lost:

1. the container is stopped (``pct stop``) while wait_for_log waits for a line the job prints after
   60 s: (a) while a chunk runs in the container, (b) between two chunks (a ``pct_path`` wrapper holds
   the second chunk's ``pct exec`` until the container is stopped);
2. the container is rebooted while a session runs (tmux_session_info, playbooks/status.yml, relaunch);
3. ``pct`` is missing on the node: the connection's ``pct_path`` names a missing file, or ``pct`` is
   hidden from the connection's PATH in a private mount namespace (``unshare -m``); on a remote node
   (pve-a of the ``remote_nodes`` fixture) ``pct_path`` names a missing file or a program not in PATH;
4. the log's file system is full: a 64 KiB tmpfs mounted inside the container with ``mount -t tmpfs``
   through ``pct exec`` (the stand-in's containers are privileged and keep CAP_SYS_ADMIN, so no
   ``pct config`` mount point is needed): (a) full at launch, (b) filled by the running job;
5. a start script without the execute bit;
6. tmux missing, for wait_for_log and tmux_session_info (tmux_session: test_tmux_session.py).

A ``pct exec`` that gives the command a pty (the stand-in's ``pty`` knob) is not tested here: that
was the armour of the modules' old transport (sh programs piped to ``pct exec`` by the node). The
connection never gives ``pct exec`` a terminal, so real pct allocates no pty for it; ansible-playbook
run in a terminal is tested in test_beyond_proxmox.py.

VMIDs: 600 (tmux, shared by most tests), 601 (no tmux), 602 (on the remote node pve-a, no tmux).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
import time
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import playbook_results
from .conftest import REPO, STANDIN_PCT, StandinNode
from .nodes import RemoteNodes
from .playbook_results import PlayRun, container_host, run_tasks

pytestmark = pytest.mark.integration

CT, CT_NO_TMUX, CT_REMOTE = 600, 601, 602
FULL = "/w/full"
# The pct program the connection runs on this machine (it looks in /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin).
LOCAL_PCT = "/usr/local/sbin/pct"
# Prefix of an argv that runs it with /usr/local/sbin (where pct is) hidden by an empty tmpfs.
HIDE_PCT = ["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs /usr/local/sbin && exec "$@"', "sh"]


def prepare(node: StandinNode, vmid: int) -> int:
    """Create the container, install tmux in it with apt, make /w for the logs."""
    node.create(vmid)
    node.apt_install(vmid, "tmux")
    node.sh(vmid, "mkdir -p /w")
    return vmid


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """Container 600 with tmux and /w."""
    return prepare(standin, CT)


def name_of(kind: str) -> str:
    """A fresh session name."""
    return f"{kind}-{uuid.uuid4().hex[:6]}"


def log_bytes(node: StandinNode, vmid: int, path: str) -> bytes:
    """The bytes of a file inside the container."""
    return node.sh(vmid, 'cat -- "$1"', path).stdout


def wait_in_ct(node: StandinNode, vmid: int, condition: str, *args: str, timeout: float = 30) -> None:
    """Wait until a sh condition holds inside the container (an event, not a timing)."""
    script = f'i=0; until {condition}; do i=$((i+1)); [ "$i" -gt {int(timeout * 10)} ] && exit 1; sleep 0.1; done'
    out = node.sh(vmid, script, *args, check=False, timeout=timeout + 60)
    assert out.returncode == 0, f"in CT {vmid}: {condition} {args} did not hold within {timeout} s"


def session_alive(node: StandinNode, vmid: int, name: str) -> bool:
    """Whether the tmux session exists in the container."""
    return node.sh(vmid, 'tmux has-session -t "=$1" 2>/dev/null', name, check=False).returncode == 0


def launch_task(name: str, log_path: str, **args: t.Any) -> dict[str, t.Any]:
    """A tmux_session task (task name ``launch``) for session ``name`` logging to ``log_path``."""
    return {"name": "launch", "trainops.pct_launch.tmux_session": dict(args, session_name=name, log_path=log_path)}


def wait_task(**args: t.Any) -> dict[str, t.Any]:
    """A wait_for_log task (task name ``wait``)."""
    return {"name": "wait", "trainops.pct_launch.wait_for_log": args}


def info_task(**args: t.Any) -> dict[str, t.Any]:
    """A tmux_session_info task (task name ``info``)."""
    return {"name": "info", "trainops.pct_launch.tmux_session_info": args}


def play(folder: Path, vmid: int, tasks: list[dict[str, t.Any]], **host_vars: t.Any) -> PlayRun:
    """Run ``tasks`` on container ``vmid`` (host ctVMID) through the pct connection."""
    return run_tasks(folder, {f"ct{vmid}": container_host(vmid, **host_vars)}, tasks)


def output(run: PlayRun) -> str:
    """What ansible-playbook printed, for assertion messages."""
    return f"rc={run.proc.returncode}\n{run.proc.stdout[-6000:]}\n{run.proc.stderr[-3000:]}"


def message(result: t.Mapping[str, t.Any]) -> str:
    """A result's msg without the "Task failed: " that ansible-core 2.19 puts before it."""
    return str(result.get("msg", "")).removeprefix("Task failed: ")


def launch_where(vmid: int) -> str:
    """How tmux_session's messages name the container it runs on (its action plugin puts the VMID in)."""
    return f"container {vmid}"


def nothing_started(node: StandinNode, vmid: int, name: str) -> None:
    """No tmux session ``name`` and no process of a job in the container."""
    assert not session_alive(node, vmid, name)
    assert name not in node.sh(vmid, "ps -eo args").stdout.decode()


# ---------------------------------------------------------------------------- 1. stopped while waiting


def gate_pct(folder: Path) -> tuple[str, Path, Path]:
    """A pct_path wrapper of this machine's pct that holds the second ``pct exec`` until a file appears.

    Returns (wrapper, file it creates when it holds the call, file that lets the call go on).
    """
    folder.mkdir(parents=True, exist_ok=True)
    count, held, go = folder / "exec-count", folder / "held", folder / "go"
    wrapper = folder / "pct-gate"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = exec ]; then\n'
        f"  n=$(( $(cat {shlex.quote(str(count))} 2>/dev/null || echo 0) + 1 )); echo \"$n\" > {shlex.quote(str(count))}\n"
        f'  if [ "$n" -eq 2 ]; then : > {shlex.quote(str(held))}; until [ -e {shlex.quote(str(go))} ]; do sleep 0.1; done; fi\n'
        "fi\n"
        f'exec {LOCAL_PCT} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return str(wrapper), held, go


def wait_for_file(path: Path, timeout: float = 120) -> None:
    """Wait until ``path`` exists."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.1)


@pytest.mark.parametrize("moment", ["in_a_chunk", "between_chunks"])
def test_fault_container_stopped_while_waiting(ct: int, standin: StandinNode, tmp_path: Path, moment: str) -> None:
    name, host = name_of("stopwait"), f"ct{ct}"
    log = f"/w/{name}.log"
    run = play(tmp_path, ct, [launch_task(name, log, command="echo loading data; sleep 60; echo READY; exec sleep 300")])
    assert run.result("launch", host)["status"] == "changed", output(run)
    wait_in_ct(standin, ct, 'grep -q "loading data" "$1"', log)
    gate, held, go = gate_pct(tmp_path / "gate")
    host_vars = {"pct_path": gate} if moment == "between_chunks" else {}
    seen: dict[str, t.Any] = {}

    def stop_during_the_wait() -> None:
        try:
            if moment == "in_a_chunk":  # the chunk's module (python3 reading its program from stdin) polls in the container
                wait_in_ct(standin, ct, "pgrep -xf /usr/bin/python3 >/dev/null", timeout=120)
                time.sleep(2)  # well inside its chunk of 10 s
            else:  # the first chunk is over (a timeout verdict), the second one's pct exec is held
                wait_for_file(held)
            seen["log"] = log_bytes(standin, ct, log)
            seen["stopped_at"] = time.monotonic()
            standin.pct("stop", ct, check=True)
        finally:
            go.touch()

    stopper = threading.Thread(target=stop_during_the_wait)
    stopper.start()
    try:
        run = play(tmp_path, ct, [wait_task(session_name=name, log_path=log, pattern="^READY$", timeout=600)], **host_vars)
        ended_at = time.monotonic()
    finally:
        stopper.join()
        standin.pct("start", ct, check=True)
    assert "stopped_at" in seen, "the container was not stopped during the wait"
    r = run.result("wait", host)
    assert run.proc.returncode != 0 and r.get("verdict") != "started", output(run)
    assert ended_at - seen["stopped_at"] < 120, "failed at once, not at its timeout of 600 s"
    text = message(r)
    # Between chunks the next pct exec finds the container stopped; during a chunk, its pct exec dies with the
    # container (SIGKILL, no output) and the action asks the container once more: either way pct says it is
    # not running, and the wait fails (not unreachable: the node answered) saying how to go on.
    assert r["status"] == "failed" and run.results["stats"][host]["unreachable"] == 0, output(run)
    assert text.startswith(f"Cannot wait for session {name} in container {ct}: the container is not running any more "
                           f"(it stopped during the wait, and the job with it); start it with 'pct start {ct}' and launch the job again"), text
    assert "may still run" not in text, text
    print(f"stopped container ({moment}): {text}")
    after = log_bytes(standin, ct, log)
    assert after == seen["log"] and b"loading data" in after


# ---------------------------------------------------------------------------- 2. rebooted


def _status(tmp_path: Path, vmid: int, name: str, log: str) -> subprocess.CompletedProcess[str]:
    """playbooks/status.yml for one session of container ``vmid`` (host ctVMID)."""
    inventory = tmp_path / f"inventory-status-{uuid.uuid4().hex[:8]}.json"
    inventory.write_text(json.dumps({"all": {"hosts": {f"ct{vmid}": container_host(vmid)}}}), encoding="utf-8")
    argv = [playbook_results.ansible_playbook(), "-i", str(inventory), str(REPO / "playbooks" / "status.yml"), "-e", f"job_hosts=ct{vmid}",
            "-e", f"job_session_name={name}", "-e", f"job_log_path={log}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1"), cwd=tmp_path)


def test_fault_container_rebooted_while_session_runs(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name, host = name_of("reboot"), f"ct{ct}"
    log = f"/w/{name}.log"
    job = {"command": "echo alive; exec sleep 300", "log_keep": 3}
    run = play(tmp_path, ct, [launch_task(name, log, **job)])
    first = run.result("launch", host)
    assert run.proc.returncode == 0 and first["state"] == "running", output(run)
    wait_in_ct(standin, ct, 'grep -qx alive "$1"', log)
    before = log_bytes(standin, ct, log)
    # killed and started again (a crash of the node, `pct stop` + `pct start`): a clean `pct reboot` records the end,
    # see test_shutdown.py
    standin.pct("stop", ct, check=True)
    standin.pct("start", ct, check=True)
    run = play(tmp_path, ct, [info_task(session_name=name, log_path=log)])
    assert run.proc.returncode == 0, output(run)
    session = run.result("info", host)["session"]
    assert session["state"] == "vanished" and session["pane_pid"] is None and session["exit_status"] is None, session
    assert session["log_size"] == len(before) and session["log_tail"][-1] == "alive", session
    status = _status(tmp_path, ct, name, log)
    assert status.returncode == 0 and f"CT {ct} session {name}: vanished" in status.stdout, status.stdout + status.stderr
    run = play(tmp_path, ct, [launch_task(name, log, **job)])
    again = run.result("launch", host)
    assert run.proc.returncode == 0 and again["changed"] is True and again["state"] == "running", output(run)
    assert again["rotated_log"] == f"{log}.1" and again["pane_pid"] != first["pane_pid"]
    assert log_bytes(standin, ct, f"{log}.1") == before
    wait_in_ct(standin, ct, 'grep -qx alive "$1"', log)
    assert log_bytes(standin, ct, log).startswith(f"### trainops.pct_launch: session={name} started_at=".encode())


# ---------------------------------------------------------------------------- 3. pct missing on the node


def missing_pct_tasks(name: str, log: str) -> list[dict[str, t.Any]]:
    """tmux_session_info on every host; tmux_session and wait_for_log on all but ``control``. Unreachable hosts go on."""
    on_the_host = "inventory_hostname != 'control'"
    return [
        dict(info_task(session_name=name, log_path=log), ignore_unreachable=True),
        dict(launch_task(name, log, command="echo started; exec sleep 300"), ignore_unreachable=True, when=on_the_host),
        dict(wait_task(session_name=name, log_path=log, pattern="started", timeout=30), ignore_unreachable=True, when=on_the_host),
    ]


def check_missing_pct(run: PlayRun, vmid: int, expected: str) -> None:
    """The control host reached the container; every module failed on ``ct`` naming the container, the missing pct and the fix."""
    control = run.result("info", "control")
    assert control["status"] == "ok" and control["session"]["state"] == "absent", (control, output(run))
    for task in ("info", "launch", "wait"):
        r = run.result(task, "ct")
        text = message(r)
        assert r["status"] == "unreachable" and r.get("verdict") != "started", (task, r)
        assert f"container {vmid}" in text and expected in text and "set pct_path" in text, (task, text)
        print(f"{task}: {text}")
    assert "Cannot wait for session" in message(run.result("wait", "ct")), run.result("wait", "ct")


@pytest.mark.parametrize("where", ["pct_path", "PATH"])
def test_fault_pct_missing_on_the_node(ct: int, standin: StandinNode, tmp_path: Path, where: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    name = name_of("nopct")
    log = f"/w/{name}.log"
    if where == "pct_path":
        hosts = {"control": container_host(ct), "ct": container_host(ct, pct_path="/nonexistent/sbin/pct")}
        expected = f"Cannot reach container {ct}: /nonexistent/sbin/pct was not found at that path on the local node"
    else:  # ansible-playbook in a mount namespace where /usr/local/sbin is empty; the control host names the stand-in's pct itself
        wrapper = tmp_path / "ansible-playbook-without-pct"
        wrapper.write_text(f"#!/bin/sh\nexec {shlex.join(HIDE_PCT)} {shlex.quote(playbook_results.ansible_playbook())} \"$@\"\n",
                           encoding="utf-8")
        wrapper.chmod(0o755)
        monkeypatch.setattr(playbook_results, "ansible_playbook", lambda: str(wrapper))
        hosts = {"control": container_host(ct, pct_path=str(STANDIN_PCT)), "ct": container_host(ct)}
        expected = f"Cannot reach container {ct}: pct was not found in PATH /usr/local/sbin:/usr/local/bin:"
    run = run_tasks(tmp_path, hosts, missing_pct_tasks(name, log))
    print(f"\n{where}:")
    check_missing_pct(run, ct, expected)
    nothing_started(standin, ct, name)
    assert standin.sh(ct, 'ls -- "$1" 2>&1 || :', log).stdout.decode().count("No such file") == 1


@pytest.fixture(scope="module")
def remote_ct(remote_nodes: RemoteNodes) -> int:
    """Container 602 on node pve-a (no tmux: nothing may start there anyway)."""
    remote_nodes.create("pve-a", CT_REMOTE)
    remote_nodes["pve-a"].sh(CT_REMOTE, "mkdir -p /w")
    return CT_REMOTE


@pytest.mark.parametrize("pct_path", ["/nonexistent/sbin/pct", "pct-not-installed"])
def test_fault_pct_missing_on_a_remote_node(remote_nodes: RemoteNodes, remote_ct: int, tmp_path: Path, pct_path: str) -> None:
    name = name_of("nopct-remote")
    log = f"/w/{name}.log"
    node_vars = {"pct_node": "pve-a", "pct_ssh_args": f"-F {remote_nodes.ssh_config}"}
    hosts = {"control": container_host(remote_ct, **node_vars), "ct": container_host(remote_ct, pct_path=pct_path, **node_vars)}
    run = run_tasks(tmp_path, hosts, missing_pct_tasks(name, log))
    where = "at that path" if "/" in pct_path else "in PATH /usr/local/sbin:/usr/local/bin:"
    print(f"\nremote {pct_path}:")
    check_missing_pct(run, remote_ct, f"Cannot run a command in container {remote_ct} on node pve-a: {pct_path} was not found {where}")
    node = remote_nodes["pve-a"]
    assert name not in node.sh(remote_ct, "ps -eo args").stdout.decode()
    assert node.sh(remote_ct, 'ls -- "$1" 2>&1 || :', log).stdout.decode().count("No such file") == 1


# ---------------------------------------------------------------------------- 4. log file system full


@pytest.fixture()
def full_fs(ct: int, standin: StandinNode) -> Iterator[str]:
    """A 64 KiB tmpfs on /w/full inside CT 600, mounted from inside the container; unmounted at the end."""
    standin.sh(ct, 'mkdir -p "$1" && mount -t tmpfs -o size=64k,mode=0755 tmpfs "$1"', FULL)
    try:
        yield FULL
    finally:
        standin.sh(ct, 'tmux kill-server 2>/dev/null; sleep 0.2; umount "$1"', FULL, check=False)


def test_fault_log_fs_full_at_launch(ct: int, standin: StandinNode, full_fs: str, tmp_path: Path) -> None:
    name, host = name_of("full"), f"ct{ct}"
    log = f"{full_fs}/{name}.log"
    standin.sh(ct, 'i=0; while [ $i -lt 200 ]; do echo "precious line $i"; i=$((i+1)); done > "$1"; '
               'dd if=/dev/zero of="$2/filler" bs=1k 2>/dev/null; [ "$(df -Pk "$2" | awk "NR==2 {print \\$4}")" = 0 ]',
               log, full_fs)
    precious = log_bytes(standin, ct, log)
    for attempt in range(2):
        run = play(tmp_path, ct, [launch_task(name, log, command="echo started; exec sleep 300")])
        r = run.result("launch", host)
        text = message(r)
        assert run.proc.returncode != 0 and r["status"] == "failed" and r.get("state") != "running", r
        assert text.startswith(f"Cannot start session {name} in {launch_where(ct)}: cannot write the log header to {log}: "
                               "No space left on device"), text
        assert "free space there or choose another log_path" in text, text
        assert (f"the earlier log is kept as {log}.1" in text) is (attempt == 0), text
        nothing_started(standin, ct, name)
        # a failed launch leaves no empty log behind, so another attempt does not rotate the kept log away
        assert standin.sh(ct, 'cd "$1" && ls', full_fs).stdout.decode().split() == ["filler", f"{name}.log.1"], attempt
        assert log_bytes(standin, ct, f"{log}.1") == precious
    print(f"fs full at launch: {text}")


def test_fault_log_fs_fills_while_job_runs(ct: int, standin: StandinNode, full_fs: str, tmp_path: Path) -> None:
    name, host = name_of("fills"), f"ct{ct}"
    log = f"{full_fs}/{name}.log"
    flood = ('echo begin; i=0; while [ $i -lt 3000 ]; do echo "filler line $i .............................................."; '
             'i=$((i+1)); done; echo READY; exec sleep 300')
    run = play(tmp_path, ct, [launch_task(name, log, command=flood),
                              wait_task(session_name=name, log_path=log, pattern="^READY$", timeout=15)])
    r = run.result("wait", host)
    assert run.proc.returncode != 0 and r["verdict"] == "timeout" and r["session_alive"] is True, r
    assert f"log {log} exists ({r['log_size']} bytes) and has no such line" in r["msg"], r["msg"]
    written = log_bytes(standin, ct, log)
    assert written.startswith(f"### trainops.pct_launch: session={name}".encode()) and b"\nbegin\nfiller line 0 " in written
    assert r["log_size"] <= len(written) and b"\nREADY\n" not in written
    run = play(tmp_path, ct, [launch_task(name, log, state="stopped")])
    stop = run.result("launch", host)
    assert run.proc.returncode == 0 and stop["changed"] is True and stop["state"] == "finished", stop
    run = play(tmp_path, ct, [info_task(session_name=name, log_path=log)])
    session = run.result("info", host)["session"]
    assert run.proc.returncode == 0 and session["state"] != "running" and session["log_size"] >= len(written), session
    assert log_bytes(standin, ct, log).startswith(written)
    print(f"fs filled by the job: info says {session}; stop says {stop}")


# ---------------------------------------------------------------------------- 5. start script not executable


def test_fault_start_script_not_executable(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name, host = name_of("noexec"), f"ct{ct}"
    standin.sh(ct, 'mkdir -p /workspace && printf "#!/bin/sh\\necho started\\nexec sleep 300\\n" > /workspace/start.sh && '
               'chmod 0644 /workspace/start.sh')
    run = play(tmp_path, ct, [launch_task(name, f"/w/{name}.log", argv=["/workspace/start.sh"])])
    r = run.result("launch", host)
    text = message(r)
    assert run.proc.returncode != 0 and r["status"] == "failed" and r["error"] == "script_missing", r
    assert text.startswith(f"Cannot start session {name} in {launch_where(ct)}: script /workspace/start.sh is not executable"), text
    assert "chmod +x /workspace/start.sh" in text and "argv: [sh, /workspace/start.sh]" in text, text
    print(f"script without x bit: {text}")
    nothing_started(standin, ct, name)
    assert standin.sh(ct, 'ls -- "$1" 2>&1 || :', f"/w/{name}.log").stdout.decode().count("No such file") == 1


# ---------------------------------------------------------------------------- 6. tmux missing


@pytest.fixture(scope="module")
def ct_no_tmux(standin: StandinNode) -> int:
    """Container 601 without tmux, with a log left from an earlier run that already holds the awaited line."""
    standin.create(CT_NO_TMUX)
    standin.sh(CT_NO_TMUX, 'mkdir -p /w && printf "### trainops.pct_launch: session=old\\nREADY\\n" > /w/old.log')
    return CT_NO_TMUX


def test_fault_tmux_missing_for_wait_and_info(ct_no_tmux: int, standin: StandinNode, tmp_path: Path) -> None:
    host = f"ct{ct_no_tmux}"
    run = play(tmp_path, ct_no_tmux, [wait_task(session_name="old", log_path="/w/old.log", pattern="^READY$", timeout=600)])
    r = run.result("wait", host)
    assert run.proc.returncode != 0 and r["verdict"] == "died" and r["tmux_missing"] is True and r["elapsed"] < 300, r
    assert message(r).startswith(f"Cannot watch session old in container {ct_no_tmux}: tmux is not installed there; "
                                 "install it (role trainops.pct_launch.tmux)"), r["msg"]
    print(f"tmux missing, wait_for_log: {message(r)}")
    run = play(tmp_path, ct_no_tmux, [info_task(session_name="old", log_path="/w/old.log")])
    r = run.result("info", host)
    assert run.proc.returncode == 0 and r["tmux"] == "missing", r
    assert r["session"]["state"] == "vanished" and r["session"]["log_size"] == len(log_bytes(standin, ct_no_tmux, "/w/old.log"))
    assert log_bytes(standin, ct_no_tmux, "/w/old.log").endswith(b"\nREADY\n")
