# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The container-side fault matrix: each fault on real stand-in containers, verdict and message.

Every test drives the collection's modules through ansible-playbook on this machine (the stand-in
Proxmox node), as users do, and checks the verdict, the message the user sees, that nothing is
reported started that is not, and that no byte of an existing log is lost:

1. the container is stopped (``pct stop``) while wait_for_log waits for a line the job prints after 60 s;
2. the container is rebooted while a session runs (tmux_session_info, playbooks/status.yml, relaunch);
3. ``pct`` is missing on the node (pct_path to a missing file; ``pct`` hidden from PATH and the sbin
   folders in a private mount namespace, ``unshare -m``);
4. the log's file system is full: a 64 KiB tmpfs mounted inside the container with ``mount -t tmpfs``
   through ``pct exec`` (the stand-in's containers are privileged and keep CAP_SYS_ADMIN, so no
   ``pct config`` mount point is needed): (a) full at launch, (b) filled by the running job;
5. a start script without the execute bit;
6. ``pct exec`` gives the command a pty (the stand-in's ``pty`` knob on a private node);
7. tmux missing, for wait_for_log and tmux_session_info (tmux_session: test_tmux_session.py).

VMIDs: 600 (tmux, shared by most tests), 601 (no tmux), 602 (private node with the pty knob).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import typing as t
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import REPO, StandinNode
from .test_tmux_session import session_alive, wait_in_ct
from .test_wait_for_log import launch_task, playbook, prepare, wait_task

pytestmark = pytest.mark.integration

CT, CT_NO_TMUX, CT_PTY = 600, 601, 602
FULL = "/w/full"
HIDE_PCT = ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o size=64k tmpfs /usr/local/sbin && exec "$@"', "sh"]


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


def info_task(vmid: int, **args: t.Any) -> dict[str, t.Any]:
    """A tmux_session_info task that registers ``r``."""
    return {"name": "info", "trainops.pct_launch.tmux_session_info": dict(args, vmid=vmid), "register": "r"}


def launch_r(vmid: int, name: str, log_path: str, **args: t.Any) -> dict[str, t.Any]:
    """A tmux_session task that registers ``r``."""
    return {"name": "launch", "trainops.pct_launch.tmux_session": dict(args, vmid=vmid, session_name=name, log_path=log_path),
            "register": "r"}


def nothing_started(node: StandinNode, vmid: int, name: str) -> None:
    """No tmux session ``name`` and no process of a job in the container."""
    assert not session_alive(node, vmid, name)
    assert name not in node.sh(vmid, "ps -eo args").stdout.decode()


def test_fault_container_stopped_while_waiting(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_of("stopwait")
    log = f"/w/{name}.log"
    proc, _r = playbook(tmp_path, [launch_task(ct, name, "echo loading data; sleep 60; echo READY; exec sleep 300")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wait_in_ct(standin, ct, 'grep -q "loading data" "$1"', log)
    seen: dict[str, t.Any] = {}

    def stop_during_the_wait() -> None:
        wait_in_ct(standin, ct, "pgrep -x python3 >/dev/null", timeout=120)  # the wait's poll loop runs
        time.sleep(3)
        seen["log"] = log_bytes(standin, ct, log)
        seen["stopped_at"] = time.monotonic()
        standin.pct("stop", ct, check=True)

    stopper = threading.Thread(target=stop_during_the_wait)
    stopper.start()
    try:
        proc, r = playbook(tmp_path, [wait_task(vmid=ct, session_name=name, log_path=log, pattern="^READY$", timeout=600)])
        ended_at = time.monotonic()
    finally:
        stopper.join()
        standin.pct("start", ct, check=True)
    assert proc.returncode != 0 and r["failed"] is True and r.get("verdict") != "started", r
    assert ended_at - seen["stopped_at"] < 120, "failed at once, not at its timeout of 600 s"
    assert f"container {ct}" in r["msg"] and "not running" in r["msg"] and f"pct start {ct}" in r["msg"], r["msg"]
    print(f"stopped container: {r['msg']}")
    after = log_bytes(standin, ct, log)
    assert after == seen["log"] and b"loading data" in after


def test_fault_container_rebooted_while_session_runs(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_of("reboot")
    log = f"/w/{name}.log"
    job = {"command": "echo alive; exec sleep 300", "log_keep": 3}
    proc, first = playbook(tmp_path, [launch_r(ct, name, log, **job)])
    assert proc.returncode == 0 and first["state"] == "running", proc.stdout + proc.stderr
    wait_in_ct(standin, ct, 'grep -qx alive "$1"', log)
    before = log_bytes(standin, ct, log)
    standin.pct("reboot", ct, check=True)
    proc, r = playbook(tmp_path, [info_task(ct, session_name=name, log_path=log)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert r["session"]["state"] == "vanished" and r["session"]["pane_pid"] is None and r["session"]["exit_status"] is None
    assert r["session"]["log_size"] == len(before) and r["session"]["log_tail"][-1] == "alive"
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {f"ct{ct}": {"pct_vmid": ct, "ansible_connection": "trainops.pct_launch.pct"}}}}))
    status = _status(tmp_path, inventory, name, log)
    assert status.returncode == 0 and f"CT {ct} session {name}: vanished" in status.stdout, status.stdout + status.stderr
    proc, again = playbook(tmp_path, [launch_r(ct, name, log, **job)])
    assert proc.returncode == 0 and again["changed"] is True and again["state"] == "running", proc.stdout + proc.stderr
    assert again["rotated_log"] == f"{log}.1" and again["pane_pid"] != first["pane_pid"]
    assert log_bytes(standin, ct, f"{log}.1") == before
    wait_in_ct(standin, ct, 'grep -qx alive "$1"', log)
    assert log_bytes(standin, ct, log).startswith(f"### trainops.pct_launch: session={name} started_at=".encode())


def _status(tmp_path: Path, inventory: Path, name: str, log: str) -> subprocess.CompletedProcess[str]:
    """playbooks/status.yml for one session of the inventory's container."""
    program = Path(sys.executable).with_name("ansible-playbook")
    argv = [str(program), "-i", str(inventory), str(REPO / "playbooks" / "status.yml"), "-e", f"job_hosts=ct{CT}",
            "-e", f"job_session_name={name}", "-e", f"job_log_path={log}", "-e", "ansible_python_interpreter=/usr/bin/python3"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1"), cwd=tmp_path)


@pytest.mark.parametrize("where", ["pct_path", "PATH"])
def test_fault_pct_missing_on_the_node(ct: int, standin: StandinNode, tmp_path: Path, where: str) -> None:
    name = name_of("nopct")
    log = f"/w/{name}.log"
    pct_path = "/nonexistent/sbin/pct" if where == "pct_path" else "pct"
    env = {} if where == "pct_path" else {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    prefix = () if where == "pct_path" else HIDE_PCT
    tasks = {
        "tmux_session": launch_r(ct, name, log, command="echo started; exec sleep 300", pct_path=pct_path),
        "tmux_session_info": info_task(ct, session_name=name, log_path=log, pct_path=pct_path),
        "wait_for_log": wait_task(vmid=ct, session_name=name, log_path=log, pattern="started", timeout=30, pct_path=pct_path),
    }
    for module, task in tasks.items():
        proc, r = playbook(tmp_path, [task], env=env, prefix=prefix)
        assert proc.returncode != 0 and r["failed"] is True and r.get("verdict") != "started", (module, r)
        assert f"container {ct}" in r["msg"] and "set pct_path" in r["msg"], (module, r["msg"])
        if where == "pct_path":
            assert "/nonexistent/sbin/pct was not found at that path on this host" in r["msg"], (module, r["msg"])
        else:
            assert "pct was not found in PATH on this host" in r["msg"], (module, r["msg"])
        print(f"{where}, {module}: {r['msg']}")
    nothing_started(standin, ct, name)
    assert standin.sh(ct, 'ls -- "$1" 2>&1 || :', log).stdout.decode().count("No such file") == 1


@pytest.fixture()
def full_fs(ct: int, standin: StandinNode) -> Iterator[str]:
    """A 64 KiB tmpfs on /w/full inside CT 600, mounted from inside the container; unmounted at the end."""
    standin.sh(ct, 'mkdir -p "$1" && mount -t tmpfs -o size=64k,mode=0755 tmpfs "$1"', FULL)
    try:
        yield FULL
    finally:
        standin.sh(ct, 'tmux kill-server 2>/dev/null; sleep 0.2; umount "$1"', FULL, check=False)


def test_fault_log_fs_full_at_launch(ct: int, standin: StandinNode, full_fs: str, tmp_path: Path) -> None:
    name = name_of("full")
    log = f"{full_fs}/{name}.log"
    standin.sh(ct, 'i=0; while [ $i -lt 200 ]; do echo "precious line $i"; i=$((i+1)); done > "$1"; '
               'dd if=/dev/zero of="$2/filler" bs=1k 2>/dev/null; [ "$(df -Pk "$2" | awk "NR==2 {print \\$4}")" = 0 ]',
               log, full_fs)
    precious = log_bytes(standin, ct, log)
    for attempt in range(2):
        proc, r = playbook(tmp_path, [launch_r(ct, name, log, command="echo started; exec sleep 300")])
        assert proc.returncode != 0 and r["failed"] is True and r.get("state") != "running", r
        assert r["msg"].startswith(f"Cannot start session {name} in container {ct}: cannot write the log header to {log}: "
                                   "No space left on device"), r["msg"]
        assert "free space there or choose another log_path" in r["msg"], r["msg"]
        assert (f"the earlier log is kept as {log}.1" in r["msg"]) is (attempt == 0), r["msg"]
        nothing_started(standin, ct, name)
        # a failed launch leaves no empty log behind, so another attempt does not rotate the kept log away
        assert standin.sh(ct, 'cd "$1" && ls', full_fs).stdout.decode().split() == ["filler", f"{name}.log.1"], attempt
        assert log_bytes(standin, ct, f"{log}.1") == precious
    print(f"fs full at launch: {r['msg']}")


def test_fault_log_fs_fills_while_job_runs(ct: int, standin: StandinNode, full_fs: str, tmp_path: Path) -> None:
    name = name_of("fills")
    log = f"{full_fs}/{name}.log"
    flood = ('echo begin; i=0; while [ $i -lt 3000 ]; do echo "filler line $i .............................................."; '
             'i=$((i+1)); done; echo READY; exec sleep 300')
    proc, r = playbook(tmp_path, [launch_r(ct, name, log, command=flood),
                                  wait_task(vmid=ct, session_name=name, log_path=log, pattern="^READY$", timeout=15)])
    assert proc.returncode != 0 and r["verdict"] == "timeout" and r["session_alive"] is True, r
    assert f"log {log} exists ({r['log_size']} bytes) and has no such line" in r["msg"], r["msg"]
    written = log_bytes(standin, ct, log)
    assert written.startswith(f"### trainops.pct_launch: session={name}".encode()) and b"\nbegin\nfiller line 0 " in written
    assert r["log_size"] <= len(written) and b"\nREADY\n" not in written
    proc, stop = playbook(tmp_path, [launch_r(ct, name, log, state="stopped")])
    assert proc.returncode == 0 and stop["changed"] is True and stop["state"] == "finished", stop
    proc, r = playbook(tmp_path, [info_task(ct, session_name=name, log_path=log)])
    assert r["session"]["state"] != "running" and r["session"]["log_size"] >= len(written)
    assert log_bytes(standin, ct, log).startswith(written)
    print(f"fs filled by the job: wait says {r['session']}; stop says {stop}")


def test_fault_start_script_not_executable(ct: int, standin: StandinNode, tmp_path: Path) -> None:
    name = name_of("noexec")
    standin.sh(ct, 'mkdir -p /workspace && printf "#!/bin/sh\\necho started\\nexec sleep 300\\n" > /workspace/start.sh && '
               'chmod 0644 /workspace/start.sh')
    proc, r = playbook(tmp_path, [launch_r(ct, name, f"/w/{name}.log", argv=["/workspace/start.sh"])])
    assert proc.returncode != 0 and r["failed"] is True and r["error"] == "script_missing", r
    assert r["msg"].startswith(f"Cannot start session {name} in container {ct}: script /workspace/start.sh is not executable"), r["msg"]
    assert "chmod +x /workspace/start.sh" in r["msg"] and "argv: [sh, /workspace/start.sh]" in r["msg"], r["msg"]
    print(f"script without x bit: {r['msg']}")
    nothing_started(standin, ct, name)
    assert standin.sh(ct, 'ls -- "$1" 2>&1 || :', f"/w/{name}.log").stdout.decode().count("No such file") == 1


@pytest.fixture()
def pty_node(private_node: StandinNode) -> Iterator[StandinNode]:
    """A private node whose pct exec gives every command a pty (knobs.conf), with CT 602, tmux and /w."""
    prepare(private_node, CT_PTY)
    (Path(private_node.env["PVE_STANDIN_ROOT"]) / "knobs.conf").write_text("pty=1\n", encoding="utf-8")
    assert b"yes" in private_node.sh(CT_PTY, "[ -t 0 ] && echo yes || echo no").stdout
    yield private_node


def test_fault_pct_gives_a_pty(pty_node: StandinNode, tmp_path: Path) -> None:
    env = {"PVE_STANDIN_ROOT": pty_node.env["PVE_STANDIN_ROOT"]}
    good, bad = name_of("ptyok"), name_of("ptycrash")
    proc, r = playbook(tmp_path, [
        launch_task(CT_PTY, good, "echo loading; sleep 1; echo 'Epoch 1/3 loss=0.5'; exec sleep 300"),
        wait_task(vmid=CT_PTY, session_name=good, log_path=f"/w/{good}.log", pattern=r"^Epoch \d+/3 ", timeout=120)], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert r["verdict"] == "started" and r["matched_line"] == "Epoch 1/3 loss=0.5" and r["session_alive"] is True, r
    assert r["log_tail"][1:] == ["loading", "Epoch 1/3 loss=0.5"], r["log_tail"]
    proc, r = playbook(tmp_path, [
        launch_task(CT_PTY, bad, "echo 'Traceback: boom'; exit 3"),
        wait_task(vmid=CT_PTY, session_name=bad, log_path=f"/w/{bad}.log", pattern="^Epoch", timeout=600)], env=env)
    assert proc.returncode != 0 and r["verdict"] == "died" and r["exit_status"] == 3 and r["elapsed"] < 300, r
    assert "the job ended with exit status 3" in r["msg"] and "Traceback: boom" in r["msg"], r["msg"]
    proc, r = playbook(tmp_path, [info_task(CT_PTY, lines=2)], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_name = {s["name"]: s for s in r["sessions"]}
    assert r["tmux"] == "running" and set(by_name) == {good, bad}, r
    assert by_name[good]["state"] == "running" and by_name[good]["pane_pid"] > 1 and by_name[good]["log_tail"] == [
        "loading", "Epoch 1/3 loss=0.5"]
    assert by_name[bad]["state"] == "finished" and by_name[bad]["exit_status"] == 3
    assert by_name[bad]["log_tail"][0] == "Traceback: boom"
    assert not any("\r" in line for s in r["sessions"] for line in s["log_tail"] + [s["command"] or ""])


@pytest.fixture(scope="module")
def ct_no_tmux(standin: StandinNode) -> int:
    """Container 601 without tmux, with a log left from an earlier run that already holds the awaited line."""
    standin.create(CT_NO_TMUX)
    standin.sh(CT_NO_TMUX, 'mkdir -p /w && printf "### trainops.pct_launch: session=old\\nREADY\\n" > /w/old.log')
    return CT_NO_TMUX


def test_fault_tmux_missing_for_wait_and_info(ct_no_tmux: int, standin: StandinNode, tmp_path: Path) -> None:
    proc, r = playbook(tmp_path, [wait_task(vmid=ct_no_tmux, session_name="old", log_path="/w/old.log", pattern="^READY$",
                                            timeout=600)])
    assert proc.returncode != 0 and r["verdict"] == "died" and r["tmux_missing"] is True and r["elapsed"] < 300, r
    assert r["msg"].startswith(f"Cannot watch session old in container {ct_no_tmux}: tmux is not installed in the container; "
                               "install it (role trainops.pct_launch.tmux)"), r["msg"]
    print(f"tmux missing, wait_for_log: {r['msg']}")
    proc, r = playbook(tmp_path, [info_task(ct_no_tmux, session_name="old", log_path="/w/old.log")])
    assert proc.returncode == 0 and r["tmux"] == "missing", r
    assert r["session"]["state"] == "vanished" and r["session"]["log_size"] == len(log_bytes(standin, ct_no_tmux, "/w/old.log"))
    assert log_bytes(standin, ct_no_tmux, "/w/old.log").endswith(b"\nREADY\n")
