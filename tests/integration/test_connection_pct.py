# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The trainops.pct_launch.pct connection plugin against real containers behind ``pct``.

Needs ``pct`` on this machine: a Proxmox VE node, or the stand-in (tools/pve_standin/setup.sh),
with container 200 running. Container 201 is created (``pct create 201 --release bookworm``,
stand-in syntax) and kept stopped when it does not exist yet; it is destroyed at the end only
when this module created it. VMID 999999999 must not exist.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import connection_loader

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import CLEAN_PATH

from .conftest import knob_pct

PCT = shutil.which("pct", path=CLEAN_PATH)
INVENTORY = Path(__file__).resolve().parent / "inventory_connection.yml"
RUNNING, STOPPED, MISSING = 200, 201, 999_999_999

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(PCT is None, reason=f"pct not found in {CLEAN_PATH}: not a Proxmox node (run tools/pve_standin/setup.sh)"),
]


def pct(*args: object, data: bytes = b"", check: bool = False) -> subprocess.CompletedProcess[bytes]:
    """Run pct directly (not through the plugin), stdin a pipe."""
    assert PCT is not None
    return subprocess.run([PCT, *map(str, args)], input=data, capture_output=True, timeout=300, check=check)


def ct_sh(script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run a sh script in the running container, directly with pct."""
    return pct("exec", RUNNING, "--", "sh", "-c", script, "sh", *args, check=check)


def ansible(pattern: str, module: str, args: str | None = None, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the ``ansible`` ad-hoc CLI on the test inventory; returns its output as text."""
    program = Path(sys.executable).with_name("ansible")
    argv = [str(program) if program.exists() else "ansible", pattern, "-i", str(INVENTORY), "-m", module, *extra]
    if args is not None:
        argv += ["-a", args]
    full_env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0", **(env or {}))
    full_env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=full_env, check=False, cwd=Path(__file__).parent)


def pipelining(enabled: bool) -> list[str]:
    return ["-e", f"ansible_pipelining={'true' if enabled else 'false'}"]


@pytest.fixture(scope="module")
def running() -> int:
    status = pct("status", RUNNING)
    if status.stdout.strip() != b"status: running":
        pytest.fail(f"container {RUNNING} must be running (tools/pve_standin/setup.sh): {status.stdout!r} {status.stderr!r}")
    return RUNNING


@pytest.fixture(scope="module")
def stopped() -> Iterator[int]:
    """Container 201, created stopped unless it exists; never stopped when someone else runs it."""
    created = False
    if pct("config", STOPPED).returncode != 0:
        pct("create", STOPPED, "--release", "bookworm", check=True)
        created = True
    status = pct("status", STOPPED).stdout.strip()
    if status == b"status: running":
        if not created:
            pytest.fail(f"container {STOPPED} exists and is running: stop it (pct stop {STOPPED}) or destroy it")
        pct("stop", STOPPED, check=True)
    yield STOPPED
    if created:
        pct("destroy", STOPPED, "--force", "1")


@pytest.fixture()
def workdir(running: int) -> Iterator[str]:
    """A fresh directory in the running container, removed afterwards."""
    path = f"/tmp/trainops-it-{uuid.uuid4().hex}"
    ct_sh('mkdir -p -- "$1"', path)
    yield path
    ct_sh('rm -rf -- "$1"', path, check=False)


@pytest.mark.parametrize("enabled", [False, True], ids=["no-pipelining", "pipelining"])
def test_ping(running: int, enabled: bool) -> None:
    result = ansible("pct_running", "ping", None, "-vvv", *pipelining(enabled))
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"ping": "pong"' in result.stdout
    assert "ESTABLISH PCT CONNECTION TO container 200" in result.stdout
    execs = [line for line in result.stdout.splitlines() if line.startswith("<ct200> EXEC ")]
    assert execs and all(re.match(r"<ct200> EXEC \S*pct exec 200 --keep-env 1 -- /bin/sh -c ", line) for line in execs), execs
    puts = re.findall(r"^<ct200> PUT .* TO .*AnsiballZ_ping\.py$", result.stdout, re.MULTILINE)
    assert (len(puts) == 0) if enabled else (len(puts) == 1), result.stdout


def _blob(path: Path) -> bytes:
    data = bytes(range(256)) * 4096 + os.urandom(3 * 1024 * 1024 + 123) + bytes(reversed(range(256)))
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("enabled", [False, True], ids=["no-pipelining", "pipelining"])
def test_copy_and_fetch_binary(tmp_path: Path, workdir: str, enabled: bool) -> None:
    data = _blob(tmp_path / "blob.bin")
    dest = f"{workdir}/blob.bin"
    result = ansible("pct_running", "copy", f"src={tmp_path / 'blob.bin'} dest={dest} mode=0600", *pipelining(enabled))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f'"checksum": "{hashlib.sha1(data).hexdigest()}"' in result.stdout
    inside = ct_sh('sha256sum < "$1"', dest).stdout.split()[0].decode()
    assert inside == hashlib.sha256(data).hexdigest()
    result = ansible("pct_running", "fetch", f"src={dest} dest={tmp_path / 'back.bin'} flat=true", *pipelining(enabled))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "back.bin").read_bytes() == data


def test_environment_no_leak_no_tty(running: int) -> None:
    result = ansible("pct_running", "raw", "env; for fd in 0 1 2; do test -t $fd && echo TTY$fd; done; pwd; id -u",
                     env={"TRAINOPS_LEAK_CANARY": "leaked", "LANGUAGE": "xx_LEAK"})
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "TRAINOPS_LEAK_CANARY" not in out and "xx_LEAK" not in out and "ANSIBLE_" not in out
    for line in ("LANG=C.UTF-8", "HOME=/root", "USER=root", "LOGNAME=root", "PATH=/sbin:/bin:/usr/sbin:/usr/bin"):
        assert line in out.splitlines(), out
    assert "TTY" not in out
    assert "\n/\n" in out and "\n0\n" in out


def test_background_job_of_raw_survives(workdir: str) -> None:
    """No pty: a nohup'ed job behind a && list keeps running, and the task does not wait for it."""
    script = f"cd {workdir} && true && nohup sh -c 'echo $$ > job.pid; exec sleep 120' > job.log 2>&1 &"
    started = time.monotonic()
    result = ansible("pct_running", "raw", script)
    assert result.returncode == 0, result.stdout + result.stderr
    assert time.monotonic() - started < 60
    # The job writes its pid as its first act; give a loaded machine time for it.
    ct_sh('i=0; while [ ! -s "$1/job.pid" ] && [ "$i" -lt 150 ]; do sleep 0.1; i=$((i+1)); done', workdir, check=False)
    alive = ct_sh('test -e "$1/job.log" && kill -0 "$(cat "$1/job.pid")" && kill "$(cat "$1/job.pid")"', workdir, check=False)
    assert alive.returncode == 0, alive.stderr


def _connection(vmid: int) -> Any:
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options={"pct_vmid": vmid})
    return conn


# No "/" (a file name): the injections would create pwned-ID in the working directory (/).
HOSTILE = "it's \"q\" $(touch pwned-{id}) `touch pwned-{id}` \n ünï ✓ -x --"


def test_hostile_names_byte_exact(tmp_path: Path, workdir: str) -> None:
    marker = uuid.uuid4().hex
    name = HOSTILE.format(id=marker)
    data = _blob(tmp_path / "src")
    conn = _connection(RUNNING)
    dest = f"{workdir}/{name}"
    (tmp_path / "src").chmod(0o644)
    conn.put_file(str(tmp_path / "src"), dest)
    # lxc-attach changes the mode of a file it gets as stdin: the connection gives pct a pipe.
    assert (tmp_path / "src").stat().st_mode & 0o7777 == 0o644, "put_file changed the local file's mode"
    listing = ct_sh('cd "$1" && for f in *; do printf "%s\\0" "$f"; done', workdir).stdout
    assert listing == name.encode() + b"\0"
    assert ct_sh('sha256sum < "$1"', dest).stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    conn.fetch_file(dest, str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == data
    rc, out, dummy = conn.exec_command("printf %s " + "'" + name.replace("'", "'\\''") + "'")
    assert (rc, out) == (0, name.encode())
    assert ct_sh(f"test ! -e /pwned-{marker} && test ! -e {workdir}/pwned-{marker}", check=False).returncode == 0


def test_transfer_errors_name_container_and_path(tmp_path: Path, workdir: str) -> None:
    conn = _connection(RUNNING)
    (tmp_path / "src").write_bytes(b"x")
    with pytest.raises(Exception, match=rf"^Cannot copy .* to {workdir}/no/dir/f in container 200: sh -c .* exited with status"):
        conn.put_file(str(tmp_path / "src"), f"{workdir}/no/dir/f")
    with pytest.raises(Exception, match=rf"^Cannot fetch {workdir}/nope to .* from container 200: cat exited with status 1: cat: .*No such file"):
        conn.fetch_file(f"{workdir}/nope", str(tmp_path / "nope"))
    assert not (tmp_path / "nope").exists()


def test_stopped_container(stopped: int, tmp_path: Path) -> None:
    result = ansible("pct_stopped", "ping")
    assert result.returncode != 0
    assert "UNREACHABLE" in result.stdout
    assert f"Cannot run a command in container {stopped}: the container is not running; start it with 'pct start {stopped}'" in result.stdout
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(AnsibleConnectionFailure, match=rf"^Cannot copy .* in container {stopped}: the container is not running"):
        _connection(stopped).put_file(str(tmp_path / "f"), "/tmp/f")


def test_missing_container(running: int) -> None:
    assert pct("config", MISSING).returncode != 0, f"VMID {MISSING} must not exist for this test"
    result = ansible("pct_missing", "ping")
    assert result.returncode != 0
    assert "UNREACHABLE" in result.stdout
    assert f"Cannot run a command in container {MISSING}: the container does not exist on the local node" in result.stdout
    assert f"lxc/{MISSING}.conf' does not exist" in result.stdout


def test_misconfigured_vmid(running: int) -> None:
    result = ansible("pct_misconfigured", "ping")
    assert result.returncode != 0
    assert "ct_no_vmid" in result.stdout and "Missing container id: set the host variable pct_vmid" in result.stdout
    assert "Invalid container id 99: pct_vmid (or proxmox_vmid) must be an integer from 100 to 999999999" in result.stdout


def test_proxmox_vmid_alone_and_pct_vmid_wins(running: int, stopped: int) -> None:
    """community.proxmox's proxmox_vmid names the container; with both names set pct_vmid wins (here: the running one)."""
    for host_vars in ({"proxmox_vmid": running}, {"proxmox_vmid": stopped, "pct_vmid": running}):
        conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
        conn.set_options(var_options=host_vars)
        rc, out, err = conn.exec_command("cat /etc/hostname")
        assert rc == 0, (host_vars, err)
        assert out.decode().strip() == ct_sh("cat /etc/hostname").stdout.decode().strip(), host_vars


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"sshd exited: {log.read_text(encoding='utf-8', errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail("sshd did not listen on 127.0.0.1")


@pytest.fixture(scope="module")
def loopback_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """This machine as a remote node: an sshd of our own on 127.0.0.1 with a throw-away key."""
    sshd, keygen = shutil.which("sshd", path=CLEAN_PATH), shutil.which("ssh-keygen")
    if sshd is None or keygen is None or shutil.which("ssh") is None:
        pytest.skip("needs the OpenSSH server and client (sshd, ssh, ssh-keygen) for a loopback node")
    home = tmp_path_factory.mktemp("sshnode")
    for name in ("hostkey", "clientkey"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(home / name)], check=True)
    shutil.copy(home / "clientkey.pub", home / "authorized_keys")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    port = _free_port()
    options = [f"ListenAddress=127.0.0.1:{port}", f"HostKey={home / 'hostkey'}", f"AuthorizedKeysFile={home / 'authorized_keys'}",
               "StrictModes=no", "PermitRootLogin=prohibit-password", "PasswordAuthentication=no", "UsePAM=no",
               f"PidFile={home / 'sshd.pid'}"]
    log = home / "sshd.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen([sshd, "-D", "-e", "-f", "/dev/null", *(arg for opt in options for arg in ("-o", opt))],
                                stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file)
    try:
        _wait_listening(port, proc, log)
        ssh_args = (f"-p {port} -i {home / 'clientkey'} -o UserKnownHostsFile={home / 'known_hosts'}"
                    " -o StrictHostKeyChecking=accept-new -o LogLevel=ERROR")
        yield {"pct_node": "127.0.0.1", "pct_node_user": "root", "pct_ssh_args": ssh_args}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _extra_vars(host_vars: dict[str, Any]) -> list[str]:
    return ["-e", json.dumps(host_vars)]


@pytest.mark.parametrize("enabled", [False, True], ids=["no-pipelining", "pipelining"])
def test_remote_node_over_ssh(loopback_node: dict[str, Any], tmp_path: Path, workdir: str, enabled: bool) -> None:
    """The same container, reached as if the node were remote (ssh to 127.0.0.1)."""
    data = _blob(tmp_path / "blob.bin")
    extra = [*_extra_vars(loopback_node), *pipelining(enabled)]
    result = ansible("pct_running", "copy", f"src={tmp_path / 'blob.bin'} dest={workdir}/blob.bin", *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ct_sh('sha256sum < "$1"', f"{workdir}/blob.bin").stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    result = ansible("pct_running", "fetch", f"src={workdir}/blob.bin dest={tmp_path / 'back.bin'} flat=true", *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "back.bin").read_bytes() == data
    result = ansible("pct_running", "raw", "env; pwd; for fd in 0 1 2; do test -t $fd && echo TTY$fd; done; true", *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "LANG=C.UTF-8" in lines and "HOME=/root" in lines and "/" in lines
    assert "TTY" not in result.stdout and "SSH_CONNECTION" not in result.stdout


def test_remote_node_errors(loopback_node: dict[str, Any]) -> None:
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options={"pct_vmid": MISSING, **loopback_node})
    with pytest.raises(AnsibleConnectionFailure, match=rf"^Cannot run a command in container {MISSING} on node 127.0.0.1: the container does not exist"):
        conn.exec_command("true")
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options={"pct_vmid": RUNNING, **loopback_node, "pct_path": "pct-not-here"})
    with pytest.raises(AnsibleConnectionFailure, match=r"pct-not-here was not found in PATH .* on node 127.0.0.1 .*set pct_path"):
        conn.exec_command("true")
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options={"pct_vmid": RUNNING, **loopback_node, "pct_ssh_args": f"-p {_free_port()} -o LogLevel=ERROR"})
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot run a command in container 200 on node 127.0.0.1: ssh could not run pct .*refused"):
        conn.exec_command("true")


# --- faults of real nodes, through the stand-in's knobs (tools/pve_standin/standin_faults.py) -----------------------
# Each test gets its knobs through a pct_path wrapper (conftest.knob_pct), so the node's other users see none of them.

KEEP_ENV_WARNING = "pct on the local node does not know the option --keep-env of pct exec"
LOCKED = 561  # a running container of this module whose config gets a lock


def _calls(path: Path) -> list[list[str]]:
    """The pct calls of a call log (argv without the program)."""
    return [json.loads(line)["argv"][1:] for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def _exec_options(calls: list[list[str]]) -> list[list[str]]:
    """What each pct exec put between its VMID and ``--``."""
    return [call[2:call.index("--")] for call in calls if call and call[0] == "exec"]


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("enabled", [False, True], ids=["no-pipelining", "pipelining"])
def test_pve_container_5_0_8_without_keep_env(running: int, tmp_path: Path, enabled: bool) -> None:
    """Proxmox VE 7.4 to 8.1: pct refuses --keep-env; the connection runs the same command again without it and warns once."""
    log = tmp_path / "calls.jsonl"
    pct_path = knob_pct(tmp_path, pve_container="5.0.8", call_log=str(log))
    data = _blob(tmp_path / "blob.bin")
    extra = ["-e", f"pct_path={pct_path}", *pipelining(enabled)]
    result = ansible("pct_running", "copy", f"src={tmp_path / 'blob.bin'} dest=/tmp/trainops-old-{uuid.uuid4().hex}", *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f'"checksum": "{hashlib.sha1(data).hexdigest()}"' in result.stdout
    assert _one_line(result.stderr).count(KEEP_ENV_WARNING) == 1, result.stderr
    options = _exec_options(_calls(log))
    # every task's connection tries the option once: refused, then every call of that task without it
    assert options[0] == ["--keep-env", "1"] and options[1] == [] and all(o in ([], ["--keep-env", "1"]) for o in options), options
    assert [i for i, o in enumerate(options) if o] == [i for i, o in enumerate(options) if o and i + 1 < len(options) and not options[i + 1]]
    env = ansible("pct_running", "raw", "env", "-e", f"pct_path={pct_path}")
    assert env.returncode == 0 and "LANG=C.UTF-8" in env.stdout.splitlines(), env.stdout  # lxc-attach kept it, with no option
    assert "PATH=/sbin:/bin:/usr/sbin:/usr/bin" in env.stdout.splitlines()


def test_pve_container_5_0_8_with_pct_keep_env_false_or_true(running: int, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    pct_path = knob_pct(tmp_path, pve_container="5.0.8", call_log=str(log))
    result = ansible("pct_running", "ping", None, "-e", f"pct_path={pct_path}", "-e", "pct_keep_env=false")
    assert result.returncode == 0 and '"ping": "pong"' in result.stdout, result.stdout + result.stderr
    assert KEEP_ENV_WARNING not in _one_line(result.stderr) and _exec_options(_calls(log)) == [[]]  # one call, no refusal
    result = ansible("pct_running", "ping", None, "-e", f"pct_path={pct_path}", "-e", "pct_keep_env=true")
    assert result.returncode != 0 and "UNREACHABLE" in result.stdout
    assert ("Cannot run a command in container 200: pct on the local node does not know the option --keep-env "
            "(pct: Unknown option: keep-env | 400 unable to parse option | pct exec <vmid> [<extra-args>]); "
            "pve-container before 5.0.9") in _one_line(result.stdout), result.stdout


def test_pve_container_5_0_8_transfers_are_sent_again(running: int, tmp_path: Path, workdir: str) -> None:
    """put_file and fetch_file of a refused call send the file again; nothing of it reached the container the first time."""
    log = tmp_path / "calls.jsonl"
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options={"pct_vmid": RUNNING, "pct_path": knob_pct(tmp_path, pve_container="5.0.8", call_log=str(log))})
    data = _blob(tmp_path / "src")
    conn.put_file(str(tmp_path / "src"), f"{workdir}/blob")
    fresh = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    fresh.set_options(var_options={"pct_vmid": RUNNING, "pct_path": knob_pct(tmp_path, pve_container="5.0.8", call_log=str(log))})
    fresh.fetch_file(f"{workdir}/blob", str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == data
    assert _exec_options(_calls(log)) == [["--keep-env", "1"], [], ["--keep-env", "1"], []]


@pytest.mark.parametrize("die_status", ["1", "2", "111", "255"])
def test_pct_failures_do_not_depend_on_the_exit_status(running: int, stopped: int, tmp_path: Path, die_status: str) -> None:
    """A Perl die exits with $! (or 255): the messages are the same whatever the number."""
    pct_path = knob_pct(tmp_path, die_status=die_status)
    cases = {"pct_stopped": f"Cannot run a command in container {stopped}: the container is not running; start it with 'pct start {stopped}'",
             "pct_missing": f"Cannot run a command in container {MISSING}: the container does not exist on the local node"}
    for group, expected in cases.items():
        result = ansible(group, "ping", None, "-e", f"pct_path={pct_path}")
        assert result.returncode != 0 and "UNREACHABLE" in result.stdout and expected in result.stdout, result.stdout
    old = knob_pct(tmp_path, die_status=die_status, pve_container="5.0.8")
    result = ansible("pct_running", "ping", None, "-e", f"pct_path={old}")
    assert result.returncode == 0 and '"ping": "pong"' in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("die_status", ["", "255"])
def test_pve_cluster_down(running: int, tmp_path: Path, die_status: str) -> None:
    pct_path = knob_pct(tmp_path, cluster="down", **({"die_status": die_status} if die_status else {}))
    result = ansible("pct_running", "ping", None, "-e", f"pct_path={pct_path}")
    assert result.returncode != 0 and "UNREACHABLE" in result.stdout
    assert ("Cannot run a command in container 200: pve-cluster (pmxcfs, the file system of /etc/pve) is not running on the local node, "
            "so pct cannot read the configuration (pct: ipcc_send_rec[3] failed: Connection refused | "
            "Unable to load access control list: Connection refused); start it there (systemctl start pve-cluster") in _one_line(result.stdout)


@pytest.fixture()
def locked(tmp_path: Path) -> Iterator[Path]:
    """Container 561 running, with ``lock: backup`` in its config; unlocked and destroyed afterwards."""
    if pct("config", LOCKED).returncode == 0:
        pct("destroy", LOCKED, "--force", "1")
    pct("create", LOCKED, "--release", "bookworm", "--start", "1", check=True)
    confs = list(Path(os.environ.get("PVE_STANDIN_ROOT", "/var/lib/pve-standin")).glob(f"nodes/*/lxc/{LOCKED}.conf"))
    assert len(confs) == 1, confs
    conf = confs[0]
    with open(conf, "a", encoding="utf-8") as out:
        out.write("lock: backup\n")
    try:
        yield conf
    finally:
        conf.write_text("".join(line for line in conf.read_text(encoding="utf-8").splitlines(True) if not line.startswith("lock:")),
                        encoding="utf-8")
        pct("destroy", LOCKED, "--force", "1")


def test_a_locked_container(locked: Path, tmp_path: Path) -> None:
    """A vzdump backup's lock: exec goes on in a running container; stop refuses; a stopped locked one says: wait for the backup."""
    host = {"pct_vmid": LOCKED}
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options=host)
    assert conn.exec_command("true")[0] == 0  # pct exec checks no lock
    refused = pct("stop", LOCKED)
    assert refused.returncode != 0 and refused.stderr == b"CT is locked (backup)\n"
    assert b"backup" in pct("list").stdout
    pct("stop", LOCKED, "--skiplock", "1", check=True)  # vzdump in stop mode stops it so
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options=host)
    with pytest.raises(AnsibleConnectionFailure) as failure:
        conn.exec_command("true")
    assert str(failure.value).startswith(
        f"Cannot run a command in container {LOCKED}: the container is not running and is locked (backup) on the local node: a vzdump "
        "backup in stop mode stops it and starts it again when it ends; wait for the backup"), str(failure.value)
    assert str(failure.value).endswith(f"(pct: container '{LOCKED}' not running!)")
    assert type(failure.value).__name__ == "ContainerNotRunning"


def test_remote_node_faults_over_ssh(loopback_node: dict[str, Any], running: int, stopped: int, tmp_path: Path) -> None:
    """Over ssh, pct's own 255 with pct's words is pct's failure, never ssh's; an old pct over ssh works as locally."""
    node = loopback_node["pct_node"]
    cases = [
        ({"cluster": "down", "die_status": "255"}, RUNNING, f"pve-cluster (pmxcfs, the file system of /etc/pve) is not running on node {node}"),
        ({"die_status": "255"}, stopped, "the container is not running; start it with"),
        ({"die_status": "255"}, MISSING, f"the container does not exist on node {node}"),
        ({"pve_container": "5.0.8", "die_status": "255"}, RUNNING, None),
    ]
    for knobs, vmid, expected in cases:
        conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
        conn.set_options(var_options={"pct_vmid": vmid, **loopback_node, "pct_path": knob_pct(tmp_path, **knobs),
                                      **({"pct_keep_env": "true"} if expected is None else {})})
        with pytest.raises(AnsibleConnectionFailure) as failure:
            conn.exec_command("true")
        text = str(failure.value)
        assert text.startswith(f"Cannot run a command in container {vmid} on node {node}: "), text
        assert "ssh could not" not in text and (expected or "does not know the option --keep-env") in text, text
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options={"pct_vmid": RUNNING, **loopback_node, "pct_path": knob_pct(tmp_path, pve_container="5.0.8")})
    assert conn.exec_command("printf %s ok")[:2] == (0, b"ok")
