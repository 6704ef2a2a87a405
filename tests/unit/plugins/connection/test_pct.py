# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the trainops.pct_launch.pct connection plugin, against a fake ``pct`` (and ``ssh``, ``sudo``).

The fake ``pct`` records its argv, environment, working directory and standard streams, then
(by default) runs the command after ``--`` on this machine, standing in for the container.
The fake ``sudo`` records its argv and runs what follows ``-n --`` (or refuses as sudo does);
tests/integration/test_node_become.py runs the real sudo.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import become_loader, connection_loader

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import CLEAN_PATH, VMID_MAX, VMID_MIN

HOSTILE_NAMES = [
    "it's here",
    'say "hi"',
    "$(touch pwned)",
    "`touch pwned`",
    "new\nline",
    "-dash",
    "--",
    "ünïcödé ✓",
    "\udcff raw",
]

FAKE_PCT = """#!{python}
import json, os, sys
state = {state!r}
mode_file = os.path.join(state, "mode")
mode = open(mode_file).read().strip() if os.path.exists(mode_file) else "run"
with open(os.path.join(state, "pct_calls.jsonl"), "a") as out:
    out.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "config":
    config = os.path.join(state, "config")
    sys.stdout.write(open(config).read() if os.path.exists(config) else "hostname: ct\\n")
    sys.exit(0)
options = sys.argv[3:sys.argv.index("--")] if "--" in sys.argv else []
if mode == "old" and options:  # pve-container before 5.0.9: no --keep-env (exit status: Perl's die, $!)
    sys.stderr.write("".join("Unknown option: %s\\n" % o.lstrip("-").split("=")[0] for o in options if o.startswith("-")))
    sys.stderr.write("400 unable to parse option\\npct exec <vmid> [<extra-args>]\\n")
    sys.exit(25)
with open(os.path.join(state, "argv.bin"), "wb") as out:
    out.write(b"".join(os.fsencode(a) + b"\\0" for a in sys.argv))
fds = {{}}
for fd in (0, 1, 2):
    fds[fd] = {{"tty": os.isatty(fd), "target": os.readlink("/proc/self/fd/%d" % fd)}}
with open(os.path.join(state, "call.json"), "w") as out:
    json.dump({{"env": dict(os.environ), "cwd": os.getcwd(), "fds": fds}}, out)
vmid = sys.argv[2]
if mode == "missing":
    sys.stderr.write("Configuration file 'nodes/testnode/lxc/%s.conf' does not exist\\n" % vmid)
    sys.exit(2)
if mode == "stopped":
    sys.stderr.write("container '%s' not running!\\n" % vmid)
    sys.exit(2)
if mode == "nosh":
    sys.stderr.write('lxc-attach: %s: attach.c: lxc_attach_run_command: 1841 No such file or directory - Failed to exec "/bin/sh"\\n' % vmid)
    sys.exit(127)
command = sys.argv[sys.argv.index("--") + 1:]
os.execv(command[0] if "/" in command[0] else "/bin/" + command[0], command)
"""

FAKE_SUDO = """#!{python}
import json, os, sys
state = {state!r}
with open(os.path.join(state, "sudo.json"), "w") as out:
    json.dump({{"argv": sys.argv, "env": dict(os.environ)}}, out)
mode_file = os.path.join(state, "sudo_mode")
mode = open(mode_file).read().strip() if os.path.exists(mode_file) else "run"
if mode == "password":
    sys.stderr.write("sudo: a password is required\\n")
    sys.exit(1)
if mode == "tty":
    sys.stderr.write("sudo: sorry, you must have a tty to run sudo\\n")
    sys.exit(1)
assert sys.argv[1:3] == ["-n", "--"], sys.argv
os.execv(sys.argv[3], sys.argv[3:])
"""

FAKE_SSH = """#!{python}
import json, os, sys
state = {state!r}
with open(os.path.join(state, "ssh_argv.bin"), "wb") as out:
    out.write(b"".join(os.fsencode(a) + b"\\0" for a in sys.argv))
with open(os.path.join(state, "ssh_calls.jsonl"), "a") as out:
    out.write(json.dumps(sys.argv) + "\\n")
if os.path.exists(os.path.join(state, "ssh_down")):
    sys.stderr.write("ssh: connect to host pve1 port 22: Connection refused\\r\\n")
    sys.exit(255)
line = " ".join(sys.argv[sys.argv.index("--") + 1:])
os.execv("/bin/sh", ["sh", "-c", line])
"""


class Fake:
    """A fake pct (and ssh) with its recorded state in one directory."""

    def __init__(self, root: Path) -> None:
        self.state = root / "state"
        self.state.mkdir()
        self.pct = self._write(root / "bin" / "pct", FAKE_PCT)
        self.ssh = self._write(root / "bin" / "ssh", FAKE_SSH)
        self.sudo = self._write(root / "bin" / "sudo", FAKE_SUDO)

    def _write(self, path: Path, template: str) -> Path:
        path.parent.mkdir(exist_ok=True)
        path.write_text(template.format(python=sys.executable, state=str(self.state)), encoding="utf-8")
        path.chmod(0o755)
        return path

    def mode(self, mode: str) -> None:
        (self.state / "mode").write_text(mode, encoding="utf-8")

    def argv(self, name: str = "argv.bin") -> list[bytes]:
        return (self.state / name).read_bytes().split(b"\0")[:-1]

    def ssh_calls(self) -> list[list[str]]:
        """The argv of every ssh process started so far, in order."""
        path = self.state / "ssh_calls.jsonl"
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []

    def pct_calls(self) -> list[list[str]]:
        """The arguments of every pct call so far, in order."""
        path = self.state / "pct_calls.jsonl"
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []

    def call(self) -> dict[str, Any]:
        return json.loads((self.state / "call.json").read_text(encoding="utf-8"))

    def sudo_call(self) -> dict[str, Any] | None:
        path = self.state / "sudo.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


@pytest.fixture()
def fake(tmp_path: Path) -> Fake:
    return Fake(tmp_path)


def connect(**host_vars: Any) -> Any:
    """A connection plugin instance with these host variables, as the task executor makes it."""
    conn = connection_loader.get("trainops.pct_launch.pct", PlayContext())
    conn.set_options(var_options=host_vars)
    return conn


@pytest.fixture()
def local(fake: Fake) -> Any:
    return connect(pct_vmid=200, pct_path=str(fake.pct))


@pytest.fixture()
def remote(fake: Fake) -> Any:
    return connect(pct_vmid=200, pct_path=str(fake.pct), pct_node="pve1", pct_node_user="root", pct_ssh_executable=str(fake.ssh))


def test_plugin_flags(local: Any) -> None:
    assert local.has_pipelining is True
    assert local.has_tty is False
    assert local.transport == "trainops.pct_launch.pct"


def action_pipelines(conn: Any) -> bool:
    """Whether Ansible's action plugins pipeline a new-style module through ``conn`` (its own decision, any version)."""
    # pylint: disable-next=import-outside-toplevel
    from ansible.plugins.action import ActionBase

    class Probe(ActionBase):  # pylint: disable=abstract-method,too-few-public-methods
        """An action plugin that is never run."""

        def run(self, tmp: Any = None, task_vars: Any = None) -> dict[str, Any]:
            raise NotImplementedError

    action = Probe.__new__(Probe)  # only _connection and _play_context are read
    action._connection = conn  # pylint: disable=protected-access
    action._play_context = PlayContext()  # pylint: disable=protected-access
    return bool(action._is_pipelining_enabled("new"))  # pylint: disable=protected-access


def test_pipelining_is_on_by_default(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_PIPELINING", raising=False)
    conn = connect(pct_vmid=200, pct_path=str(fake.pct))
    assert conn.get_option("pipelining") is True
    assert action_pipelines(conn) is True
    assert action_pipelines(connect(pct_vmid=200, pct_path=str(fake.pct), ansible_pipelining=True)) is True


@pytest.mark.parametrize("value", [False, "false", "no", 0])
def test_pipelining_off_with_ansible_pipelining(fake: Fake, monkeypatch: pytest.MonkeyPatch, value: Any) -> None:
    monkeypatch.delenv("ANSIBLE_PIPELINING", raising=False)
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), ansible_pipelining=value)
    assert conn.get_option("pipelining") is False
    assert action_pipelines(conn) is False


@pytest.mark.parametrize(("env", "expected"), [("0", False), ("false", False), ("1", True), ("true", True)])
def test_pipelining_follows_ansible_pipelining_env(fake: Fake, monkeypatch: pytest.MonkeyPatch, env: str, expected: bool) -> None:
    monkeypatch.setenv("ANSIBLE_PIPELINING", env)
    conn = connect(pct_vmid=200, pct_path=str(fake.pct))
    assert conn.get_option("pipelining") is expected
    assert action_pipelines(conn) is expected


def test_pipelining_host_var_wins_over_env(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_PIPELINING", "0")
    assert connect(pct_vmid=200, pct_path=str(fake.pct), ansible_pipelining=True).get_option("pipelining") is True


def test_pipelining_off_in_ansible_cfg(fake: Fake, tmp_path: Path) -> None:
    """``pipelining = False`` in ansible.cfg ([defaults] or [connection]) switches it off (a fresh process reads the file)."""
    for section in ("defaults", "connection"):
        cfg = tmp_path / f"{section}.cfg"
        cfg.write_text(f"[{section}]\npipelining = False\n", encoding="utf-8")
        code = ("from ansible.plugins.loader import connection_loader, init_plugin_loader; init_plugin_loader(); "
                "from ansible.playbook.play_context import PlayContext; "
                "c = connection_loader.get('trainops.pct_launch.pct', PlayContext()); c.set_options(var_options={'pct_vmid': 200}); "
                "print(c.get_option('pipelining'))")
        env = {key: value for key, value in os.environ.items() if key != "ANSIBLE_PIPELINING"}
        env["ANSIBLE_CONFIG"] = str(cfg)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
        assert out.stdout.strip() == "False", (section, out.stdout, out.stderr)


def test_exec_command_argv_env_cwd_and_no_tty(local: Any, fake: Fake) -> None:
    rc, out, err = local.exec_command("echo out; echo err >&2; exit 3")
    assert (rc, out, err) == (3, b"out\n", b"err\n")
    assert fake.argv() == [os.fsencode(str(fake.pct)), b"exec", b"200", b"--keep-env", b"1", b"--", b"/bin/sh", b"-c",
                           b"echo out; echo err >&2; exit 3"]
    call = fake.call()
    home = os.path.expanduser("~")
    user = call["env"]["USER"]
    assert call["env"] == {"PATH": CLEAN_PATH, "LANG": "C.UTF-8", "HOME": home, "LOGNAME": user, "USER": user}
    assert call["cwd"] == "/"
    assert call["fds"]["0"] == {"tty": False, "target": "/dev/null"}
    assert not call["fds"]["1"]["tty"] and not call["fds"]["2"]["tty"]


def test_exec_command_does_not_leak_controller_environment(local: Any, fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINOPS_SECRET_CANARY", "leaked")
    local.exec_command("true")
    assert "TRAINOPS_SECRET_CANARY" not in fake.call()["env"]


def test_pipelining_sends_in_data_on_a_pipe(local: Any, fake: Fake) -> None:
    payload = bytes(range(256)) * 1000
    rc, out, dummy = local.exec_command("cat", in_data=payload)
    assert rc == 0 and out == payload
    assert fake.call()["fds"]["0"]["target"].startswith("pipe:")


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_exec_command_passes_hostile_text_byte_exact(local: Any, fake: Fake, tmp_path: Path, name: str) -> None:
    cmd = "printf '%s' " + "'" + name.replace("'", "'\\''") + "'"
    rc, out, dummy = local.exec_command(cmd)
    assert rc == 0 and out == os.fsencode(name)
    assert fake.argv()[-1] == os.fsencode(cmd)
    assert not (tmp_path / "pwned").exists() and not Path("/pwned").exists()


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("missing", r"^Cannot run a command in container 200: the container does not exist on the local node \(pct: Configuration file"),
        ("stopped", r"^Cannot run a command in container 200: the container is not running; start it with 'pct start 200'"),
        ("nosh", r"^Cannot run a command in container 200: /bin/sh was not found inside the container"),
    ],
)
def test_exec_command_pct_failures(local: Any, fake: Fake, mode: str, expected: str) -> None:
    fake.mode(mode)
    with pytest.raises(AnsibleConnectionFailure, match=expected):
        local.exec_command("true")


def test_pct_not_found(tmp_path: Path) -> None:
    conn = connect(pct_vmid=200, pct_path=str(tmp_path / "nope" / "pct"))
    with pytest.raises(AnsibleConnectionFailure, match=r"container 200: .*/nope/pct was not found .*not a Proxmox node\? set pct_path"):
        conn.exec_command("true")
    conn = connect(pct_vmid=200, pct_path="pct-does-not-exist")
    with pytest.raises(AnsibleConnectionFailure, match=r"pct-does-not-exist was not found in PATH /usr/local/sbin:"):
        conn.exec_command("true")


@pytest.mark.parametrize("host_vars, expected", [
    ({}, "Missing container id"),
    ({"pct_vmid": 42}, "Invalid container id 42"),
    ({"pct_vmid": VMID_MIN - 1}, f"Invalid container id {VMID_MIN - 1}"),
    ({"pct_vmid": VMID_MAX + 1}, f"Invalid container id {VMID_MAX + 1}"),
])
def test_vmid_errors_name_the_variable(fake: Fake, host_vars: dict[str, Any], expected: str) -> None:
    conn = connect(pct_path=str(fake.pct), **host_vars)
    with pytest.raises(AnsibleError, match=f"{expected}.*pct_vmid"):
        conn.exec_command("true")


@pytest.mark.parametrize("vmid", [VMID_MIN, VMID_MAX])
def test_the_vmid_range_is_pct_exec_s(fake: Fake, vmid: int) -> None:
    rc, _out, _err = connect(pct_vmid=vmid, pct_path=str(fake.pct)).exec_command("true")
    assert rc == 0 and fake.argv()[1:6] == [b"exec", str(vmid).encode(), b"--keep-env", b"1", b"--"]


def test_become_with_password_is_refused(local: Any) -> None:
    become = become_loader.get("su")
    become.set_options(direct={"become_pass": "secret"})
    become.build_become_command("true", local._shell)  # pylint: disable=protected-access
    local.set_become_plugin(become)
    with pytest.raises(AnsibleError, match=r"^Cannot escalate privileges in container 200: .*needs a terminal"):
        local.exec_command("true", sudoable=True)


def _payload(path: Path, size: int) -> bytes:
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("size", [0, 1, 256, 3 * 1024 * 1024 + 7])
def test_put_file_binary_exact(local: Any, fake: Fake, tmp_path: Path, size: int) -> None:
    data = _payload(tmp_path / "src", size)
    dest = tmp_path / "dest"
    local.put_file(str(tmp_path / "src"), str(dest))
    assert dest.read_bytes() == data
    assert fake.argv()[1:] == [b"exec", b"200", b"--keep-env", b"1", b"--", b"/bin/sh", b"-c", b'cat > "$1"', b"sh", os.fsencode(str(dest))]


def test_put_file_gives_pct_a_pipe_not_the_file(local: Any, fake: Fake, tmp_path: Path) -> None:
    """lxc-attach changes the mode of a file it gets as stdin: pct must never get the user's file itself."""
    data = _payload(tmp_path / "src", 100_000)
    (tmp_path / "src").chmod(0o644)
    local.put_file(str(tmp_path / "src"), str(tmp_path / "dest"))
    assert fake.call()["fds"]["0"]["target"].startswith("pipe:"), fake.call()["fds"]
    assert (tmp_path / "dest").read_bytes() == data and stat.S_IMODE((tmp_path / "src").stat().st_mode) == 0o644


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_put_and_fetch_hostile_names(local: Any, tmp_path: Path, name: str) -> None:
    data = _payload(tmp_path / "src", 1000)
    monkey = tmp_path / "ct"
    monkey.mkdir()
    dest = str(monkey / name)
    local.put_file(str(tmp_path / "src"), dest)
    assert os.listdir(os.fsencode(str(monkey))) == [os.fsencode(name)]
    back = tmp_path / "back"
    local.fetch_file(dest, str(back))
    assert back.read_bytes() == data
    assert not (tmp_path / "pwned").exists() and not Path("/pwned").exists()


def test_fetch_file_leading_dash(local: Any, fake: Fake, tmp_path: Path) -> None:
    with pytest.raises(AnsibleError, match=r"^Cannot fetch -n to .* from container 200: cat exited with status 1: cat: -n: No such file"):
        local.fetch_file("-n", str(tmp_path / "x"))
    assert fake.argv()[-3:] == [b"cat", b"--", b"-n"]
    assert fake.call()["cwd"] == "/"


def test_transfers_stream_without_holding_the_file(local: Any, tmp_path: Path) -> None:
    size = 16 * 1024 * 1024
    _payload(tmp_path / "src", size)
    tracemalloc.start()
    try:
        local.put_file(str(tmp_path / "src"), str(tmp_path / "dest"))
        local.fetch_file(str(tmp_path / "dest"), str(tmp_path / "back"))
        dummy, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024
    digest = hashlib.sha256((tmp_path / "src").read_bytes()).hexdigest()
    assert hashlib.sha256((tmp_path / "back").read_bytes()).hexdigest() == digest


def test_put_file_failures(local: Any, fake: Fake, tmp_path: Path) -> None:
    _payload(tmp_path / "src", 10)
    with pytest.raises(AnsibleFileNotFound, match=r"^Cannot copy .*/missing to /x in container 200: the local file does not exist"):
        local.put_file(str(tmp_path / "missing"), "/x")
    dest = str(tmp_path / "no" / "dir")
    with pytest.raises(AnsibleError, match=r"^Cannot copy .*/src to .*/no/dir in container 200: sh -c 'cat > \"\$1\"' exited with status [12]: .*"):
        local.put_file(str(tmp_path / "src"), dest)
    fake.mode("stopped")
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot copy .* in container 200: the container is not running"):
        local.put_file(str(tmp_path / "src"), "/x")


def test_fetch_file_failure_keeps_old_file(local: Any, fake: Fake, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_bytes(b"previous")
    with pytest.raises(AnsibleError, match=r"^Cannot fetch /no/such/file to .*/out from container 200: cat exited with status 1"):
        local.fetch_file("/no/such/file", str(out))
    fake.mode("missing")
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot fetch /etc/hostname to .* from container 200: the container does not exist"):
        local.fetch_file("/etc/hostname", str(out))
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "out", "state"]


def test_fetch_file_mode_follows_umask(local: Any, tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(b"x")
    old = os.umask(0o027)
    try:
        local.fetch_file(str(tmp_path / "src"), str(tmp_path / "dest"))
    finally:
        os.umask(old)
    assert (tmp_path / "dest").stat().st_mode & 0o777 == 0o640


def test_remote_exec_goes_through_ssh_with_clean_env(remote: Any, fake: Fake) -> None:
    rc, out, dummy = remote.exec_command("printf %s \"$LANG\"", in_data=b"")
    assert (rc, out) == (0, b"C.UTF-8")
    ssh = fake.argv("ssh_argv.bin")
    assert ssh[:8] == [os.fsencode(str(fake.ssh)), b"-T", b"-o", b"BatchMode=yes", b"-o", b"ConnectTimeout=10", b"-l", b"root"]
    # shared by default, as Ansible's own ssh connection: ControlPersist 60 s, a socket per node and user in ~/.ansible/cp
    assert ssh[8:14] == [b"-o", b"ControlMaster=auto", b"-o", b"ControlPersist=60s", b"-o",
                         os.fsencode("ControlPath=" + os.path.expanduser("~/.ansible/cp") + "/pct-%C")]
    assert ssh[14:16] == [b"pve1", b"--"] and len(ssh) == 17
    assert fake.argv()[1:] == [b"exec", b"200", b"--keep-env", b"1", b"--", b"/bin/sh", b"-c", b"printf %s \"$LANG\""]
    call = fake.call()
    assert call["env"] == {"PATH": CLEAN_PATH, "LANG": "C.UTF-8", "HOME": "/root", "LOGNAME": "root", "USER": "root"}
    assert call["cwd"] == "/"
    assert call["fds"]["0"]["target"].startswith("pipe:")


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_remote_hostile_text_byte_exact(remote: Any, fake: Fake, tmp_path: Path, name: str) -> None:
    cmd = "printf '%s' " + "'" + name.replace("'", "'\\''") + "'"
    rc, out, dummy = remote.exec_command(cmd)
    assert (rc, out) == (0, os.fsencode(name))
    assert fake.argv()[-1] == os.fsencode(cmd)
    data = _payload(tmp_path / "src", 70000)
    (tmp_path / "ct").mkdir()
    dest = str(tmp_path / "ct" / name)
    remote.put_file(str(tmp_path / "src"), dest)
    remote.fetch_file(dest, str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == data
    assert not (tmp_path / "pwned").exists() and not Path("/pwned").exists()


def test_remote_failures(remote: Any, fake: Fake) -> None:
    fake.mode("stopped")
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot run a command in container 200 on node pve1: the container is not running"):
        remote.exec_command("true")
    (fake.state / "ssh_down").touch()
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot run a command in container 200 on node pve1: ssh could not run pct on node pve1 "):
        remote.exec_command("true")


def test_remote_pct_missing(fake: Fake) -> None:
    conn = connect(pct_vmid=200, pct_node="pve1", pct_ssh_executable=str(fake.ssh), pct_path="/nonexistent/pct")
    with pytest.raises(AnsibleConnectionFailure, match=r"container 200 on node pve1: /nonexistent/pct was not found .*set pct_path"):
        conn.exec_command("true")


def test_ssh_args_and_timeout_options(fake: Fake) -> None:
    conn = connect(pct_vmid=200, pct_node="pve1", pct_ssh_executable=str(fake.ssh), pct_path=str(fake.pct),
                   pct_ssh_args="-o 'UserKnownHostsFile=/k h' -p 2222", pct_timeout=3)
    conn.exec_command("true")
    ssh = fake.argv("ssh_argv.bin")
    assert ssh[1:10] == [b"-T", b"-o", b"BatchMode=yes", b"-o", b"ConnectTimeout=3", b"-o", b"UserKnownHostsFile=/k h", b"-p", b"2222"]
    assert ssh[10:12] == [b"-o", b"ControlMaster=auto"] and ssh[16] == b"pve1"


def test_ssh_control_persist_options(fake: Fake, tmp_path: Path) -> None:
    base = {"pct_vmid": 200, "pct_node": "pve1", "pct_ssh_executable": str(fake.ssh), "pct_path": str(fake.pct)}
    folder = tmp_path / "cp" / "sub"
    conn = connect(**base, pct_ssh_control_persist="10m", pct_ssh_control_path_dir=str(folder))
    conn.exec_command("true")
    ssh = fake.argv("ssh_argv.bin")
    assert ssh[6:12] == [b"-o", b"ControlMaster=auto", b"-o", b"ControlPersist=10m", b"-o", os.fsencode(f"ControlPath={folder}/pct-%C")]
    assert folder.is_dir() and folder.stat().st_mode & 0o777 == 0o700
    # the user's own options come first, so ssh takes them (the first value of an option wins)
    conn = connect(**base, pct_ssh_args="-o ControlMaster=no")
    conn.exec_command("true")
    ssh = fake.argv("ssh_argv.bin")
    assert ssh.index(b"ControlMaster=no") < ssh.index(b"ControlMaster=auto")
    for off in ("no", "", "0"):
        conn = connect(**base, pct_ssh_control_persist=off)
        conn.exec_command("true")
        assert not any(arg.startswith(b"Control") for arg in fake.argv("ssh_argv.bin")), off


def test_each_call_is_one_ssh_process_and_ssh_alone_shares(fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transport: one ssh per pct call and per node command, no master opened beforehand, nothing kept between workers."""
    run_tmp = tmp_path / "ansible-local"
    run_tmp.mkdir()
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(run_tmp))
    conn = connect(pct_vmid=200, pct_node="pve1", pct_ssh_executable=str(fake.ssh), pct_path=str(fake.pct),
                   pct_ssh_control_path_dir=str(tmp_path / "cp"))
    conn.exec_command("true")
    conn.put_file(str(fake.pct), str(tmp_path / "copy"))
    conn.fetch_file(str(tmp_path / "copy"), str(tmp_path / "back"))
    conn.node_command(["true"])
    calls = fake.ssh_calls()
    assert len(calls) == 4
    for argv in calls:
        assert "ControlMaster=auto" in argv and argv[argv.index("--") - 1] == "pve1"
        assert not {"-O", "-f", "-N", "-M"} & set(argv), argv
    assert not list(run_tmp.iterdir())


@pytest.mark.parametrize(("host_vars", "message"), [
    ({"pct_ssh_control_persist": "forever"}, "Invalid pct_ssh_control_persist 'forever': expected ssh's ControlPersist time"),
    ({"pct_ssh_control_path_dir": "/a b"}, "Invalid pct_ssh_control_path_dir '/a b': expected a folder without spaces"),
    ({"pct_ssh_control_path_dir": "/a%h"}, "Invalid pct_ssh_control_path_dir '/a%h'"),
])
def test_ssh_control_invalid(fake: Fake, host_vars: dict[str, str], message: str) -> None:
    conn = connect(pct_vmid=200, pct_node="pve1", pct_ssh_executable=str(fake.ssh), pct_path=str(fake.pct), **host_vars)
    with pytest.raises(AnsibleError, match="^Cannot use the pct connection for host .*: " + re.escape(message)):
        conn.exec_command("true")
    assert not (fake.state / "ssh_argv.bin").exists()


def test_ssh_control_folder_that_cannot_be_made_shares_nothing(fake: Fake, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    conn = connect(pct_vmid=200, pct_node="pve1", pct_ssh_executable=str(fake.ssh), pct_path=str(fake.pct),
                   pct_ssh_control_path_dir=str(tmp_path / "file" / "cp"))
    assert conn.exec_command("true")[0] == 0
    assert not any(arg.startswith(b"Control") for arg in fake.argv("ssh_argv.bin"))


def test_invalid_node_is_rejected(fake: Fake) -> None:
    conn = connect(pct_vmid=200, pct_node="-oProxyCommand=touch /tmp/pwned", pct_ssh_executable=str(fake.ssh))
    with pytest.raises(AnsibleError, match="pct_node"):
        conn.exec_command("true")


# --- community.proxmox's variable names -------------------------------------------------------------


def test_proxmox_vmid_alone_names_the_container(fake: Fake) -> None:
    conn = connect(proxmox_vmid=201, pct_path=str(fake.pct))
    assert conn.get_option("vmid") == 201
    rc, _out, _err = conn.exec_command("true")
    assert rc == 0 and fake.argv()[1:3] == [b"exec", b"201"]


def test_pct_vmid_wins_over_proxmox_vmid(fake: Fake) -> None:
    conn = connect(proxmox_vmid=201, pct_vmid=202, pct_path=str(fake.pct))
    rc, _out, _err = conn.exec_command("true")
    assert rc == 0 and fake.argv()[1:3] == [b"exec", b"202"]
    # the order of the host variables does not matter: the connection's vars list decides
    conn = connect(pct_vmid=202, proxmox_vmid=201, pct_path=str(fake.pct))
    assert conn.get_option("vmid") == 202


def test_proxmox_node_alone_and_pct_node_wins(fake: Fake) -> None:
    conn = connect(pct_vmid=200, proxmox_node="pve-from-proxmox", pct_path=str(fake.pct), pct_ssh_executable=str(fake.ssh))
    conn.exec_command("true")
    assert b"pve-from-proxmox" in fake.argv("ssh_argv.bin")
    conn = connect(pct_vmid=200, proxmox_node="pve-from-proxmox", pct_node="pve1", pct_path=str(fake.pct), pct_ssh_executable=str(fake.ssh))
    conn.exec_command("true")
    ssh = fake.argv("ssh_argv.bin")
    assert b"pve1" in ssh and b"pve-from-proxmox" not in ssh


def test_missing_vmid_mentions_both_names(fake: Fake) -> None:
    with pytest.raises(AnsibleError, match=r"Missing container id: set the host variable pct_vmid \(proxmox_vmid, community.proxmox's name, is accepted too\)"):
        connect(pct_path=str(fake.pct)).exec_command("true")
    with pytest.raises(AnsibleError, match=r"Invalid container id 42: pct_vmid \(or proxmox_vmid\) must be an integer from 100 to 999999999; fix"):
        connect(proxmox_vmid=42, pct_path=str(fake.pct)).exec_command("true")


# --- node_become: pct under sudo -n -------------------------------------------------------------------


def test_node_become_is_off_by_default(local: Any, fake: Fake) -> None:
    assert local.get_option("node_become") is False and local.get_option("node_become_exe") == "sudo"
    local.exec_command("true")
    assert fake.sudo_call() is None


@pytest.mark.parametrize("value, expected", [("true", True), ("yes", True), ("false", False)])
def test_node_become_from_env(fake: Fake, monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("ANSIBLE_PCT_NODE_BECOME", value)
    assert connect(pct_vmid=200, pct_path=str(fake.pct)).get_option("node_become") is expected


def test_local_node_become_runs_pct_under_sudo(fake: Fake) -> None:
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_node_become=True, pct_node_become_exe=str(fake.sudo))
    rc, out, _err = conn.exec_command("printf %s ok")
    assert (rc, out) == (0, b"ok")
    sudo = fake.sudo_call()
    assert sudo is not None
    assert sudo["argv"] == [str(fake.sudo), "-n", "--", str(fake.pct), "exec", "200", "--keep-env", "1", "--", "/bin/sh", "-c", "printf %s ok"]
    assert sudo["env"]["PATH"] == CLEAN_PATH and "TRAINOPS_SECRET_CANARY" not in sudo["env"]


def test_remote_node_become_command_line(fake: Fake) -> None:
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_node="pve1", pct_node_user="trainops", pct_ssh_executable=str(fake.ssh),
                   pct_node_become=True, pct_node_become_exe=str(fake.sudo))
    rc, out, _err = conn.exec_command("printf %s \"$USER\"")
    assert (rc, out) == (0, b"trainops")  # the fake sudo keeps the environment; the real one resets it (see test_node_become.py)
    line = fake.argv("ssh_argv.bin")[-1].decode()
    assert shlex.split(line) == ["env", "-i", "-C", "/", "LANG=C.UTF-8", "LOGNAME=trainops", "PATH=" + CLEAN_PATH, "USER=trainops",
                                 str(fake.sudo), "-n", "--", str(fake.pct), "exec", "200", "--keep-env", "1", "--",
                                 "/bin/sh", "-c", "printf %s \"$USER\""]
    assert b"-l" in fake.argv("ssh_argv.bin") and b"trainops" in fake.argv("ssh_argv.bin")


@pytest.mark.parametrize("mode, expected", [
    ("password", "{sudo} refused to run pct as root for trainops on node pve1 without a password ({sudo} -n -- pct: "
                 "sudo: a password is required); allow NOPASSWD for pct in sudoers on node pve1, "
                 "e.g. `trainops ALL=(root) NOPASSWD: /usr/sbin/pct` in /etc/sudoers.d/"),
    ("tty", "{sudo} on node pve1 wants a terminal (requiretty in sudoers), which this connection never allocates "
            "(sudo: sorry, you must have a tty to run sudo); add `Defaults:trainops !requiretty` to sudoers, and allow NOPASSWD"),
])
def test_sudo_refusals_say_what_to_put_in_sudoers(fake: Fake, mode: str, expected: str) -> None:
    (fake.state / "sudo_mode").write_text(mode, encoding="utf-8")
    conn = connect(pct_vmid=200, pct_node="pve1", pct_node_user="trainops", pct_ssh_executable=str(fake.ssh), pct_node_become=True,
                   pct_node_become_exe=str(fake.sudo))
    with pytest.raises(AnsibleConnectionFailure) as failure:
        conn.exec_command("true")
    text = str(failure.value)
    assert text.startswith("Cannot run a command in container 200 on node pve1: "), text
    assert expected.format(sudo=fake.sudo) in text, text
    assert not (fake.state / "argv.bin").exists()  # pct never ran


def test_missing_local_sudo_is_named(fake: Fake, tmp_path: Path) -> None:
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_node_become=True, pct_node_become_exe=str(tmp_path / "no" / "sudo"))
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot reach container 200: .*/no/sudo was not found .* install it on the node"):
        conn.exec_command("true")


@pytest.mark.parametrize("value", ["-x", "su do"])
def test_invalid_become_exe(fake: Fake, value: Any) -> None:
    with pytest.raises(AnsibleError, match=r"Invalid pct_node_become_exe"):
        connect(pct_vmid=200, pct_path=str(fake.pct), pct_node_become=True, pct_node_become_exe=value).exec_command("true")


# --- node_command: a program on the node itself -----------------------------------------------------------


def test_node_command_local_runs_on_the_controller_without_sudo(fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINOPS_SECRET_CANARY", "leaked")
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_node_become=True, pct_node_become_exe=str(fake.sudo))
    rc, out, err = conn.node_command(["sh", "-c", 'echo "$$"; pwd; env; cat; echo err >&2; exit 4'], in_data=b"from stdin\n")
    assert (rc, err) == (4, b"err\n")
    lines = out.decode().splitlines()
    assert int(lines[0]) > 0 and lines[1] == "/" and "from stdin" in lines
    assert f"PATH={CLEAN_PATH}" in lines and not any(line.startswith("TRAINOPS_SECRET_CANARY") for line in lines)
    assert fake.sudo_call() is None and not (fake.state / "argv.bin").exists()  # neither sudo nor pct ran


def test_node_command_remote_goes_through_ssh_without_sudo(fake: Fake) -> None:
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_node="pve1", pct_node_user="trainops", pct_ssh_executable=str(fake.ssh),
                   pct_node_become=True, pct_node_become_exe=str(fake.sudo))
    rc, out, _err = conn.node_command(["printf", "%s|", "a b", "it's", "$(x)"])
    assert (rc, out) == (0, b"a b|it's|$(x)|")
    ssh = fake.argv("ssh_argv.bin")
    assert ssh[:8] == [os.fsencode(str(fake.ssh)), b"-T", b"-o", b"BatchMode=yes", b"-o", b"ConnectTimeout=10", b"-l", b"trainops"]
    assert shlex.split(ssh[-1].decode()) == ["env", "-i", "-C", "/", "LANG=C.UTF-8", "LOGNAME=trainops", "PATH=" + CLEAN_PATH, "USER=trainops",
                                             "printf", "%s|", "a b", "it's", "$(x)"]
    assert fake.sudo_call() is None


def test_node_command_returns_the_program_status(fake: Fake) -> None:
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_node="pve1", pct_ssh_executable=str(fake.ssh))
    rc, _out, err = conn.node_command(["sh", "-c", "echo no >&2; exit 3"])
    assert (rc, err) == (3, b"no\n")
    rc, _out, err = conn.node_command(["no-such-program-here"])
    assert rc == 127 and b"no-such-program-here" in err  # env's own message, the caller's business


def test_node_command_ssh_failure_raises(fake: Fake) -> None:
    (fake.state / "ssh_down").touch()
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_node="pve1", pct_ssh_executable=str(fake.ssh))
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot run nvidia-smi on node pve1: ssh could not run it \(exit status 255\): "
                                                       r"node pve1 cannot be reached: .*Connection refused; check that it is up"):
        conn.node_command(["nvidia-smi", "-L"])


def test_node_command_local_program_missing(fake: Fake) -> None:
    conn = connect(pct_vmid=200, pct_path=str(fake.pct))
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot run no-such-program-here on the local node: cannot start no-such-program-here: "):
        conn.node_command(["no-such-program-here"])
    with pytest.raises(AnsibleError, match=r"the argv is empty"):
        conn.node_command([])


# --- pct without --keep-env (pve-container before 5.0.9: Proxmox VE 7.4 to 8.1) --------------------------------------


def _exec_options(calls: list[list[str]]) -> list[list[str]]:
    """What each pct exec call put between the VMID and ``--``."""
    return [call[2:call.index("--")] for call in calls if call[0] == "exec"]


def test_old_pct_refuses_keep_env_and_the_command_runs_again_without_it(local: Any, fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto: the refused call ran nothing; the same command (stdin too) runs again without the option, and so do later ones."""
    warnings: list[str] = []
    monkeypatch.setattr(pct_connection_module().display, "warning", warnings.append)
    monkeypatch.setattr(pct_connection_module(), "_WARNED_KEEP_ENV", set())
    fake.mode("old")
    rc, out, err = local.exec_command("cat; echo done", in_data=b"module payload\n")
    assert (rc, out, err) == (0, b"module payload\ndone\n", b"")
    local.exec_command("true")
    assert _exec_options(fake.pct_calls()) == [["--keep-env", "1"], [], []]
    assert len(warnings) == 1 and warnings[0].startswith("pct on the local node does not know the option --keep-env of pct exec")
    assert "set the host variable pct_keep_env to false for the containers of the local node" in warnings[0]
    again = connect(pct_vmid=200, pct_path=str(fake.pct))  # the next task's connection: refused once more, no second warning
    again.exec_command("true")
    assert _exec_options(fake.pct_calls())[3:] == [["--keep-env", "1"], []] and len(warnings) == 1


def test_old_pct_transfers_are_sent_again(local: Any, fake: Fake, tmp_path: Path) -> None:
    fake.mode("old")
    data = _payload(tmp_path / "src", 200_000)
    local.put_file(str(tmp_path / "src"), str(tmp_path / "dest"))
    assert (tmp_path / "dest").read_bytes() == data
    fresh = connect(pct_vmid=200, pct_path=str(fake.pct))
    fresh.fetch_file(str(tmp_path / "dest"), str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == data
    assert _exec_options(fake.pct_calls()) == [["--keep-env", "1"], [], ["--keep-env", "1"], []]


def test_old_pct_over_ssh_and_sudo(fake: Fake) -> None:
    fake.mode("old")
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_node="pve1", pct_ssh_executable=str(fake.ssh), pct_node_become=True,
                   pct_node_become_exe=str(fake.sudo))
    assert conn.exec_command("printf %s ok")[:2] == (0, b"ok")
    assert _exec_options(fake.pct_calls()) == [["--keep-env", "1"], []]
    assert len(fake.ssh_calls()) == 2


@pytest.mark.parametrize("value", [False, "false", "no", "0"])
def test_keep_env_false_never_passes_the_option(fake: Fake, value: Any) -> None:
    fake.mode("old")
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_keep_env=value)
    assert conn.exec_command("printf %s ok")[:2] == (0, b"ok")
    assert _exec_options(fake.pct_calls()) == [[]]


def test_keep_env_true_fails_clearly_on_an_old_pct(fake: Fake) -> None:
    fake.mode("old")
    conn = connect(pct_vmid=200, pct_path=str(fake.pct), pct_keep_env=True)
    with pytest.raises(AnsibleConnectionFailure) as failure:
        conn.exec_command("true")
    assert str(failure.value).startswith("Cannot run a command in container 200: pct on the local node does not know the option --keep-env "
                                         "(pct: Unknown option: keep-env | 400 unable to parse option | pct exec <vmid> [<extra-args>]); "
                                         "pve-container before 5.0.9"), str(failure.value)
    assert "set the host variable pct_keep_env to false" in str(failure.value)
    assert _exec_options(fake.pct_calls()) == [["--keep-env", "1"]]


def test_keep_env_auto_on_a_new_pct_costs_nothing(local: Any, fake: Fake) -> None:
    local.exec_command("true")
    local.exec_command("true")
    assert _exec_options(fake.pct_calls()) == [["--keep-env", "1"], ["--keep-env", "1"]]
    assert local.get_option("keep_env") == "auto"


def test_invalid_keep_env(fake: Fake) -> None:
    with pytest.raises(AnsibleError, match=r"Invalid pct_keep_env 'sometimes': expected auto, true or false"):
        connect(pct_vmid=200, pct_path=str(fake.pct), pct_keep_env="sometimes").exec_command("true")


def test_a_command_that_prints_pct_words_is_not_run_twice(local: Any, fake: Fake) -> None:
    """Only pct's three lines together mean a refused option: a command saying "Unknown option: keep-env" ran, once."""
    rc, dummy, err = local.exec_command("echo 'Unknown option: keep-env' >&2; exit 25")
    assert rc == 25 and b"Unknown option" in err
    assert len(fake.pct_calls()) == 1


# --- a stopped container that is locked (vzdump in stop mode) ------------------------------------------------------


def test_stopped_and_locked_for_a_backup_says_wait(local: Any, fake: Fake) -> None:
    fake.mode("stopped")
    (fake.state / "config").write_text("hostname: ct\nlock: backup\n", encoding="utf-8")
    with pytest.raises(AnsibleConnectionFailure) as failure:
        local.exec_command("true")
    text = str(failure.value)
    assert text.startswith("Cannot run a command in container 200: the container is not running and is locked (backup) on the local node: "
                           "a vzdump backup in stop mode stops it and starts it again when it ends; wait for the backup"), text
    assert text.endswith("'pct unlock 200', then 'pct start 200' (pct: container '200' not running!)"), text
    assert type(failure.value).__name__ == "ContainerNotRunning"
    assert [call[0] for call in fake.pct_calls()] == ["exec", "config"]  # the config only on this failure


def test_stopped_without_lock_keeps_the_start_advice(local: Any, fake: Fake) -> None:
    fake.mode("stopped")
    with pytest.raises(AnsibleConnectionFailure, match=r"^Cannot run a command in container 200: the container is not running; start it"):
        local.exec_command("true")
    fake.mode("run")
    local.exec_command("true")
    assert [call[0] for call in fake.pct_calls()] == ["exec", "config", "exec"]  # a success asks no config


def pct_connection_module() -> Any:
    """The loaded connection plugin's module (for its display and warned nodes)."""
    return sys.modules[type(connect(pct_vmid=200)).__module__]
