# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The node side of the pct connection, on real sshd, real sudo and real stand-in containers.

* ``node_become``: a node login that is not root runs ``env -i -C / VARS... sudo -n -- pct exec ...``.
  A user of this module's own (``USER``, created here with its key, removed at the end) logs in to the
  simulated remote node pve-a (``remote_nodes`` fixture, tests/integration/nodes.py). The node's own
  sshd (tools/pve_standin/node.sh) cannot log it in: its ``AuthorizedKeysFile`` is one fixed file in the
  node's folder, mode 0700 root, and sshd reads authorized keys as the user logging in (measured:
  ``Permission denied (publickey)``). So this module starts a second sshd of its own inside pve-a's
  mount namespace (started through pve-a's sshd, on pve-a's address, another port), which reads
  ``~/.ssh/authorized_keys`` with ``StrictModes yes``; whatever it runs sees pve-a's containers, as
  through pve-a's own sshd. It is stopped by its PID at the end. That namespace only replaces
  /var/lib/pve-standin, so sshd and sudo see this machine's /etc/passwd, /etc/sudoers and /home.
  sshd runs with ``UsePAM no`` and refuses locked accounts, so the user's password field is ``*`` (no
  password, not locked). A sudoers drop-in allows the user ``NOPASSWD`` for the stand-in's pct (its
  absolute path, ``STANDIN_PCT``) and nothing else.
* The stand-in's pct does not refuse non-root callers as real pct does (``please run as root``, from
  PVE::RESTEnvironment): measured, as non-root it says ``container 'VMID' not running!`` for exec and
  lists and reads configs. The tests of a login without sudo therefore use ``ROOT_PCT``, a wrapper that
  adds real pct's check and then runs the stand-in; it is not in sudoers, so it also serves as "a pct
  the sudoers rule does not allow".
* ``node_command``: a program on the node itself, never under sudo, for a remote node and the local one.
* community.proxmox's names ``proxmox_vmid`` / ``proxmox_node`` through the real connection.

Containers: 661 on pve-a (tmux installed for the launch), 662 on the local stand-in node (destroyed at the end of the session).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import connection_loader

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import CLEAN_PATH

from .conftest import STANDIN_PCT, StandinNode
from .nodes import RemoteNodes
from .playbook_results import PlayRun, launch_proof, run_playbook, run_tasks

pytestmark = pytest.mark.integration

VMID_REMOTE, VMID_LOCAL = 661, 662
USER = "tnb661"
SUDOERS = Path("/etc/sudoers.d") / f"trainops-test-{USER}"
DEAD_ADDRESS = "127.0.0.19"  # no sshd listens there
PYTHON = "/usr/bin/python3"
# What `env` shows inside the container under sudo that is the same everywhere (the SUDO_* values depend on the user).
SUDO_ENV = {"PATH": "/sbin:/bin:/usr/sbin:/usr/bin", "LANG": "C.UTF-8", "HOME": "/root", "LOGNAME": "root", "USER": "root",
            "SHELL": "/bin/bash", "MAIL": "/var/mail/root", "TERM": "unknown", "container": "lxc"}


class BecomeUser(t.NamedTuple):
    """The node login of this module and the pct programs its tests use."""

    name: str
    uid: int
    root_pct: Path  # real pct's root check, then the stand-in; not allowed by the sudoers rule
    folder: Path  # this module's files (keys, sshd configuration), readable by USER


class UserNode(t.NamedTuple):
    """pve-a reached as ``USER`` through this module's sshd in pve-a's mount namespace."""

    ssh_config: Path
    pid: int


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)


def _remove_user() -> None:
    SUDOERS.unlink(missing_ok=True)
    if _run("getent", "passwd", USER).returncode == 0:
        # the sshd session of a shared ssh connection (closed after each test) may take a moment to end
        for _attempt in range(50):
            removed = _run("userdel", "--remove", USER)
            if removed.returncode != 8:  # 8: the user is logged in
                break
            time.sleep(0.2)
        assert removed.returncode in (0, 12), removed.stderr  # 12: the home folder could not be removed entirely


@pytest.fixture(scope="module")
def become_user() -> Iterator[BecomeUser]:
    """``USER`` with a home, no password (not locked), and ``NOPASSWD`` in sudoers for the stand-in's pct only."""
    sudo = shutil.which("sudo", path=CLEAN_PATH)
    if os.geteuid() != 0 or sudo is None or shutil.which("useradd", path=CLEAN_PATH) is None:
        message = "needs root, sudo and useradd: tools/system-packages.sh nodes installs sudo"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    _remove_user()
    folder = Path(tempfile.mkdtemp(prefix="tnb-", dir="/tmp"))
    try:
        created = _run("useradd", "--create-home", "--shell", "/bin/sh", "--comment", "trainops node_become test", USER)
        assert created.returncode == 0, created.stderr
        unlocked = _run("usermod", "--password", "*", USER)  # sshd (UsePAM no) refuses a locked account ("!")
        assert unlocked.returncode == 0, unlocked.stderr
        folder.chmod(0o755)
        root_pct = folder / "pct"
        root_pct.write_text("#!/bin/sh\n# real pct (PVE::RESTEnvironment::setup_default_cli_env) refuses any other user; the stand-in does not\n"
                            "[ \"$(id -u)\" = 0 ] || { echo 'please run as root' >&2; exit 255; }\n"
                            f"exec {STANDIN_PCT} \"$@\"\n", encoding="utf-8")
        root_pct.chmod(0o755)
        rule = folder / "sudoers"
        rule.write_text(f"{USER} ALL=(root) NOPASSWD: {STANDIN_PCT}\n", encoding="utf-8")
        checked = _run("visudo", "-c", "-f", str(rule))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        shutil.copyfile(rule, SUDOERS)
        SUDOERS.chmod(0o440)
        yield BecomeUser(USER, pwd.getpwnam(USER).pw_uid, root_pct, folder)
    finally:
        _remove_user()
        shutil.rmtree(folder, ignore_errors=True)


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path, comment: str) -> Path:
    made = _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path))
    assert made.returncode == 0, made.stderr
    return path


@pytest.fixture(scope="module")
def user_node(remote_nodes: RemoteNodes, become_user: BecomeUser) -> Iterator[UserNode]:
    """An sshd of this module's own in pve-a's mount namespace, logging ``USER`` in with its own key."""
    node, folder = remote_nodes["pve-a"], become_user.folder
    entry = pwd.getpwnam(USER)
    ssh_dir = Path(entry.pw_dir) / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    user_key = _keygen(folder / "user_key", f"{USER}@controller")
    shutil.copyfile(user_key.with_suffix(".pub"), ssh_dir / "authorized_keys")
    (ssh_dir / "authorized_keys").chmod(0o600)
    for path in (ssh_dir, ssh_dir / "authorized_keys"):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    host_key = _keygen(folder / "host_key", "pve-a-become")
    port = _free_port(node.address)
    (folder / "sshd_config").write_text(
        f"ListenAddress {node.address}\nPort {port}\nHostKey {host_key}\nPidFile {folder / 'sshd.pid'}\n"
        "AuthorizedKeysFile .ssh/authorized_keys\nStrictModes yes\nPermitRootLogin no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nAcceptEnv LANG LC_*\n", encoding="utf-8")
    checked = subprocess.run(node.ssh_argv(["/usr/sbin/sshd", "-t", "-f", str(folder / "sshd_config")]), capture_output=True, text=True,
                             timeout=60, check=False)
    assert checked.returncode == 0, checked.stderr
    started = subprocess.run(node.ssh_argv(["/usr/sbin/sshd", "-f", str(folder / "sshd_config")]), capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=60, check=False)
    assert started.returncode == 0, started.stderr
    pid = int((folder / "sshd.pid").read_text(encoding="utf-8"))
    try:
        key = host_key.with_suffix(".pub").read_text(encoding="utf-8").split()
        (folder / "known_hosts").write_text(f"pve-a-become {key[0]} {key[1]}\n", encoding="utf-8")
        config = folder / "ssh_config"
        config.write_text(f"Host pve-a\n  HostName {node.address}\n  Port {port}\n  User {USER}\n  IdentityFile {user_key}\n"
                          f"  IdentitiesOnly yes\n  UserKnownHostsFile {folder / 'known_hosts'}\n  HostKeyAlias pve-a-become\n"
                          "  BatchMode yes\n", encoding="utf-8")
        probe = subprocess.run(["ssh", "-F", str(config), "-T", "pve-a", "--", "id -un; cat /var/lib/pve-standin/node"], capture_output=True,
                               text=True, stdin=subprocess.DEVNULL, timeout=60, check=False)
        assert probe.stdout.split() == [USER, "pve-a"], probe.stdout + probe.stderr
        yield UserNode(config, pid)
    finally:
        os.kill(pid, signal.SIGTERM)


@pytest.fixture(scope="module")
def remote_ct(remote_nodes: RemoteNodes) -> int:
    """Container 661, running, on pve-a."""
    return remote_nodes.create("pve-a", VMID_REMOTE)


@pytest.fixture(scope="module")
def local_ct(standin: StandinNode) -> int:
    """Container 662, running, on the local stand-in node."""
    return standin.create(VMID_LOCAL)


def remote_host(node: UserNode, **host_vars: t.Any) -> dict[str, t.Any]:
    """Container 661 on pve-a, reached as ``USER`` (pipelined), with the stand-in's pct by its absolute path (the sudoers rule's)."""
    return {"ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": PYTHON, "ansible_pipelining": True,
            "pct_vmid": VMID_REMOTE, "pct_node": "pve-a", "pct_node_user": USER, "pct_ssh_args": f"-F {node.ssh_config}",
            "pct_path": str(STANDIN_PCT), **host_vars}


def message(result: dict[str, t.Any]) -> str:
    """A result's msg without the "Task failed: " that ansible-core 2.19 puts before it."""
    return str(result.get("msg", "")).removeprefix("Task failed: ")


def output(run: PlayRun) -> str:
    return run.proc.stdout[-6000:] + run.proc.stderr[-3000:]


def env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith(" "))


# ---------------------------------------------------------------------------- node_become


def test_become_runs_pct_as_root_through_sudo(user_node: UserNode, remote_ct: int, become_user: BecomeUser, tmp_path: Path) -> None:
    """ping, command and raw work as ``USER`` with pct_node_become; the container sees root and sudo's environment."""
    hosts = {"ct": remote_host(user_node, pct_node_become=True)}
    run = run_tasks(tmp_path, hosts, [
        {"name": "Ping", "ansible.builtin.ping": {}},
        {"name": "Who", "ansible.builtin.command": "id -u"},
        {"name": "Env", "ansible.builtin.raw": "env; for fd in 0 1 2; do test -t $fd && echo TTY$fd; done; pwd"},
    ], options=["-vvv"])
    assert run.proc.returncode == 0, output(run)
    assert run.result("Ping", "ct")["ping"] == "pong"
    assert run.result("Who", "ct")["stdout"] == "0"
    inside = run.result("Env", "ct")["stdout"]
    env = env_lines(inside)
    print(f"\nenvironment inside the container under sudo -n (node login {USER}):\n{inside}")
    assert {key: env.get(key) for key in SUDO_ENV} == SUDO_ENV, inside
    assert (env.get("SUDO_USER"), env.get("SUDO_UID")) == (USER, str(become_user.uid)), inside  # proof that sudo ran pct
    assert env["SUDO_COMMAND"].startswith(f"{STANDIN_PCT} exec {VMID_REMOTE} --keep-env 1 -- /bin/sh -c "), inside
    assert "SSH_CONNECTION" not in env and not re.search(r"^TTY[0-2]$", inside, re.MULTILINE) and inside.splitlines()[-1] == "/", inside
    execs = [line for line in run.proc.stdout.splitlines() if line.startswith("<ct> EXEC ")]
    assert execs and all(f" -l {USER} " in line and f"sudo -n -- {STANDIN_PCT} exec {VMID_REMOTE} --keep-env 1 -- /bin/sh -c " in line
                         for line in execs), execs


def test_a_launch_through_a_login_that_may_run_only_pct_under_sudo(
        user_node: UserNode, remote_nodes: RemoteNodes, remote_ct: int, become_user: BecomeUser, tmp_path: Path) -> None:
    """launch.yml (preflight, launch, proof), status.yml and stop.yml as ``USER`` with pct_node_become: the job runs in the container."""
    remote_nodes["pve-a"].install_tmux(remote_ct, "/w")
    hosts = {"ct": remote_host(user_node, pct_node_become=True)}
    job = {"job_session_name": "sudo-job", "job_log_path": "/w/sudo-job.log", "job_prepare": False,
           "job_command": "echo 'step 1 loss 0.5'; sleep 600", "job_wait_pattern": "step [0-9]+", "job_wait_timeout": 60}
    proc, results = run_playbook(tmp_path, "launch.yml", hosts, job)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert (launch_proof(results, "ct") or {}).get("verdict") == "started", proc.stdout[-5000:]
    assert remote_nodes["pve-a"].sh(remote_ct, "tmux has-session -t =sudo-job", check=False).returncode == 0
    proc, _results = run_playbook(tmp_path, "status.yml", hosts, job)
    assert proc.returncode == 0 and "sudo-job" in proc.stdout and "running" in proc.stdout, proc.stdout[-3000:]
    proc, _results = run_playbook(tmp_path, "stop.yml", hosts, job)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert remote_nodes["pve-a"].sh(remote_ct, "tmux has-session -t =sudo-job", check=False).returncode != 0


def test_become_copy_and_fetch(user_node: UserNode, remote_ct: int, become_user: BecomeUser, tmp_path: Path) -> None:
    """put_file and fetch_file (no pipelining) go through sudo too; the file is root's in the container."""
    data = os.urandom(300_000)
    (tmp_path / "blob").write_bytes(data)
    hosts = {"ct": remote_host(user_node, pct_node_become=True, ansible_pipelining=False)}
    run = run_tasks(tmp_path, hosts, [
        {"name": "Copy", "ansible.builtin.copy": {"src": str(tmp_path / "blob"), "dest": "/root/tnb-blob", "mode": "0600"}},
        {"name": "Fetch", "ansible.builtin.fetch": {"src": "/root/tnb-blob", "dest": str(tmp_path / "back"), "flat": True}},
        {"name": "Owner", "ansible.builtin.command": "stat -c %U:%a /root/tnb-blob"},
        {"name": "Clean", "ansible.builtin.file": {"path": "/root/tnb-blob", "state": "absent"}},
    ])
    assert run.proc.returncode == 0, output(run)
    assert (tmp_path / "back").read_bytes() == data
    assert run.result("Owner", "ct")["stdout"] == "root:600"


def test_without_become_pct_refuses_the_login(user_node: UserNode, remote_ct: int, become_user: BecomeUser, tmp_path: Path) -> None:
    """As ``USER`` without pct_node_become, pct refuses (real pct's message): the error says to log in as root or to set pct_node_become."""
    hosts = {"real_pct": remote_host(user_node, pct_path=str(become_user.root_pct)),
             "standin_pct": remote_host(user_node)}
    run = run_tasks(tmp_path, hosts, [{"name": "Ping", "ansible.builtin.ping": {}, "ignore_unreachable": True}])
    refused = run.result("Ping", "real_pct")
    assert refused["status"] == "unreachable", (refused, output(run))
    assert message(refused) == (
        f"Cannot run a command in container {VMID_REMOTE} on node pve-a: pct needs root on node pve-a and ran as {USER} "
        "(pct: please run as root); set pct_node_user to root, or set pct_node_become to true to run pct with sudo -n and "
        f"allow NOPASSWD for pct in sudoers on node pve-a, e.g. `{USER} ALL=(root) NOPASSWD: {become_user.root_pct}` in /etc/sudoers.d/"
    ), message(refused)
    # the stand-in's own pct as a non-root user: it fails too, but names another cause (see the module's docstring)
    standin = run.result("Ping", "standin_pct")
    assert standin["status"] == "unreachable", (standin, output(run))
    print(f"\nwithout node_become, real pct's check: {message(refused)}\nwithout node_become, the stand-in's pct: {message(standin)}")


def test_sudo_refusals_give_the_fix(user_node: UserNode, remote_ct: int, become_user: BecomeUser, tmp_path: Path) -> None:
    """A pct that sudoers does not allow, and a missing sudo: clear errors, nothing prompts, nothing hangs."""
    hosts = {"no_rule": remote_host(user_node, pct_path=str(become_user.root_pct), pct_node_become=True),
             "no_sudo": remote_host(user_node, pct_node_become=True, pct_node_become_exe="/nonexistent/sudo")}
    run = run_tasks(tmp_path, hosts, [{"name": "Ping", "ansible.builtin.ping": {}, "ignore_unreachable": True}], timeout=300)
    no_rule = run.result("Ping", "no_rule")
    assert no_rule["status"] == "unreachable", (no_rule, output(run))
    assert message(no_rule) == (
        f"Cannot run a command in container {VMID_REMOTE} on node pve-a: sudo refused to run pct as root for {USER} on node pve-a "
        f"without a password (sudo -n -- {become_user.root_pct}: sudo: a password is required); allow NOPASSWD for pct in sudoers "
        f"on node pve-a, e.g. `{USER} ALL=(root) NOPASSWD: {become_user.root_pct}` in /etc/sudoers.d/"
    ), message(no_rule)
    no_sudo = run.result("Ping", "no_sudo")
    assert no_sudo["status"] == "unreachable", (no_sudo, output(run))
    assert message(no_sudo).startswith(f"Cannot run a command in container {VMID_REMOTE} on node pve-a: /nonexistent/sudo was not found "
                                       "at that path on node pve-a (env: "), message(no_sudo)
    assert "install it on the node (apt-get install sudo), set pct_node_become_exe" in message(no_sudo)
    print(f"\nsudoers without a rule for that pct: {message(no_rule)}\nno sudo: {message(no_sudo)}")


def _inventory(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    program = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin" / args[0]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_INVENTORY_UNPARSED_FAILED="1")
    env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run([str(program) if program.exists() else args[0], *args[1:]], capture_output=True, text=True, timeout=600,
                          env=env, stdin=subprocess.DEVNULL, cwd=tmp_path, check=False)


def test_inventory_plugin_with_become(user_node: UserNode, remote_ct: int, become_user: BecomeUser, tmp_path: Path) -> None:
    """pct_containers lists pve-a as ``USER`` through sudo -n and hands pct_node_become to the connection, which then works."""
    options = {"plugin": "trainops.pct_launch.pct_containers", "nodes": ["pve-a"], "node_user": USER, "node_become": True,
               "pct_path": str(STANDIN_PCT), "ssh_args": f"-F {user_node.ssh_config}", "status": ["running"],
               "compose": {"ansible_python_interpreter": f"'{PYTHON}'"}}
    source = tmp_path / "become.pct_containers.yml"
    source.write_text(yaml.safe_dump(options), encoding="utf-8")
    listed = _inventory(["ansible-inventory", "-i", str(source), "--host", f"ct{VMID_REMOTE}"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    host = json.loads(listed.stdout)
    assert (host["pct_node"], host["pct_node_user"], host["pct_node_become"]) == ("pve-a", USER, True), host
    ping = _inventory(["ansible", "-i", str(source), f"ct{VMID_REMOTE}", "-m", "ansible.builtin.command", "-a", "id -u", "-o"], tmp_path)
    assert ping.returncode == 0 and f"ct{VMID_REMOTE} | CHANGED | rc=0 | (stdout) 0" in ping.stdout, ping.stdout + ping.stderr
    for become, path, cause in ((False, become_user.root_pct, f"pct needs root on node pve-a and ran as {USER} (pct: please run as root)"),
                                (True, become_user.root_pct, f"sudo refused to run pct as root for {USER} on node pve-a without a password")):
        source.write_text(yaml.safe_dump(dict(options, node_become=become, pct_path=str(path))), encoding="utf-8")
        failed = _inventory(["ansible-inventory", "-i", str(source), "--list"], tmp_path)
        text = " ".join(failed.stderr.split())
        assert failed.returncode != 0 and f"Cannot list the containers of node pve-a: {cause}" in text, text
        assert "NOPASSWD" in text, text


# ---------------------------------------------------------------------------- node_command


def _connection(**host_vars: t.Any) -> t.Any:
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options=host_vars)
    return conn


WHERE = ["sh", "-c", 'echo "$$"; hostname; id -u; readlink /proc/self/ns/pid; cat /var/lib/pve-standin/node 2>/dev/null || echo -; pwd']


def test_node_command_on_a_remote_node(user_node: UserNode, remote_ct: int, become_user: BecomeUser) -> None:
    """As ``USER`` with pct_node_become: node_command runs on pve-a itself as ``USER`` (no sudo), exec_command in the container as root."""
    conn = _connection(**remote_host(user_node, pct_node_become=True))
    rc, out, err = conn.node_command(WHERE)
    assert rc == 0, err
    pid, hostname, uid, pid_ns, node, cwd = out.decode().split("\n")[:6]
    assert int(pid) > 1
    assert (hostname, uid, pid_ns, node, cwd) == (socket.gethostname(), str(become_user.uid), os.readlink("/proc/self/ns/pid"), "pve-a", "/")
    rc, inside, err = conn.exec_command(shlex.join(WHERE))
    assert rc == 0, err
    ct_hostname, ct_uid, ct_pid_ns, ct_node = inside.decode().split("\n")[1:5]
    assert (ct_hostname, ct_uid, ct_node) == (f"CT{VMID_REMOTE}", "0", "-") and ct_pid_ns != pid_ns
    rc, out, err = conn.node_command(["cat"], in_data=b"through stdin\n")
    assert (rc, out) == (0, b"through stdin\n"), err
    rc, out, err = conn.node_command(["sh", "-c", "echo failed >&2; exit 7"])
    assert (rc, err) == (7, b"failed\n")
    rc, out, err = conn.node_command(["no-such-program-on-the-node"])
    assert rc == 127 and b"no-such-program-on-the-node" in err
    dead = _connection(**remote_host(user_node, pct_node_address=DEAD_ADDRESS))
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot run sh on node pve-a: ssh could not run it \(exit status 255\): "
                                                       r"node pve-a cannot be reached: .*Connection refused; check that it is up"):
        dead.node_command(WHERE)
    print(f"\nnode_command on pve-a as {USER}: pid {pid}, uid {uid}, node {node}; exec_command in CT {VMID_REMOTE}: uid {ct_uid}, host {ct_hostname}")


def test_node_command_on_the_local_node(local_ct: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller as the node: node_command runs here with the small environment, exec_command in the container."""
    monkeypatch.setenv("TRAINOPS_LEAK_CANARY", "leaked")
    conn = _connection(pct_vmid=local_ct, pct_path=str(STANDIN_PCT))
    rc, out, err = conn.node_command([*WHERE[:2], WHERE[2] + "; env"])
    assert rc == 0, err
    lines = out.decode().splitlines()
    assert lines[1:4] == [socket.gethostname(), str(os.geteuid()), os.readlink("/proc/self/ns/pid")] and lines[5] == "/", lines
    env = env_lines(out.decode())
    assert env["PATH"] == CLEAN_PATH and env["LANG"] == "C.UTF-8" and "TRAINOPS_LEAK_CANARY" not in env, env
    rc, inside, err = conn.exec_command("hostname; readlink /proc/self/ns/pid")
    assert rc == 0, err
    assert inside.decode().splitlines()[0] == f"CT{local_ct}" and inside.decode().splitlines()[1] != lines[3]


# ---------------------------------------------------------------------------- community.proxmox's names


def test_proxmox_vmid_and_proxmox_node_through_the_connection(remote_nodes: RemoteNodes, remote_ct: int, local_ct: int, tmp_path: Path) -> None:
    """Hosts written for community.proxmox (proxmox_vmid, proxmox_node) work; where both names are set, pct_* wins."""
    base = {"ansible_connection": "trainops.pct_launch.pct", "ansible_python_interpreter": PYTHON, "pct_path": str(STANDIN_PCT)}
    remote = {"pct_ssh_args": f"-F {remote_nodes.ssh_config}", "pct_node_user": "root"}
    hosts = {
        "local_proxmox_only": {**base, "proxmox_vmid": local_ct},
        "remote_proxmox_only": {**base, **remote, "proxmox_vmid": remote_ct, "proxmox_node": "pve-a"},
        "both_vmids": {**base, "proxmox_vmid": 999_999_998, "pct_vmid": local_ct},
        "both_nodes": {**base, **remote, "pct_vmid": remote_ct, "proxmox_node": "pve-b", "pct_node": "pve-a"},
    }
    run = run_tasks(tmp_path, hosts, [{"name": "Name", "ansible.builtin.command": "cat /etc/hostname"}])
    assert run.proc.returncode == 0, output(run)
    expected = {"local_proxmox_only": local_ct, "remote_proxmox_only": remote_ct, "both_vmids": local_ct, "both_nodes": remote_ct}
    assert {host: run.result("Name", host)["stdout"] for host in hosts} == {host: f"CT{vmid}" for host, vmid in expected.items()}
