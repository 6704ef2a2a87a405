# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The pct stand-in behaves as pve-container's pct on real LXC containers."""
from __future__ import annotations

import json
import os
import re
import secrets
import stat
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import StandinNode, lines
from .gpu_standin import wait_marked

pytestmark = pytest.mark.integration

CT = 281
STOPPED_CT = 282
OOM_CT = 285
UNLIMITED_CT = 286
PRIVILEGED_CT = 288
MEMORY_CT = 289
TURNED_CT = 290
BOTH_CT = 291
UMASK_CT = 292
STATE_ROOT = Path(os.environ.get("PVE_STANDIN_ROOT", "/var/lib/pve-standin"))
CGROUP = Path("/sys/fs/cgroup")
MIB = 1024 * 1024
JOB_END = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "_job_end.py"
OOM_KILLS = "import sys; sys.path.insert(0, '/root'); import _job_end; print(_job_end.oom_kills())"


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """A running Debian 12 container of this module's own."""
    return standin.create(CT)


@pytest.fixture(scope="module")
def stopped_ct(standin: StandinNode) -> int:
    """A container that exists but is stopped."""
    return standin.create(STOPPED_CT, start=False)


def test_list_prints_pct_columns(standin: StandinNode, ct: int, stopped_ct: int) -> None:
    out = lines(standin.pct("list", check=True).stdout)
    assert out[0] == f"{'VMID':<10} {'Status':<10} {'Lock':<12} {'Name':<20}"
    rows = {line.split()[0]: line for line in out[1:]}
    assert rows[str(ct)] == f"{ct:<10} {'running':<10} {'':<12} {'CT' + str(ct):<20}"
    assert rows[str(stopped_ct)].split()[1] == "stopped"


def test_list_prints_nothing_without_containers(private_node: StandinNode) -> None:
    result = private_node.pct("list")
    assert result.returncode == 0
    assert result.stdout == b""


def test_status_and_config(standin: StandinNode, ct: int, stopped_ct: int) -> None:
    assert standin.pct("status", ct, check=True).stdout == b"status: running\n"
    assert standin.pct("status", stopped_ct, check=True).stdout == b"status: stopped\n"
    config = lines(standin.pct("config", ct, check=True).stdout)
    keys = [line.split(": ", 1)[0] for line in config]
    assert keys == sorted(keys)
    assert f"hostname: CT{ct}" in config


@pytest.mark.parametrize("verb", [["status"], ["config"], ["start"], ["exec", "--", "true"]])
def test_unknown_vmid_fails_as_pct_does(private_node: StandinNode, verb: list[str]) -> None:
    result = private_node.pct(verb[0], 999, *verb[1:])
    assert result.returncode != 0
    assert result.stderr.decode().strip() == "Configuration file 'nodes/testnode/lxc/999.conf' does not exist"


def test_exec_on_stopped_container_fails(standin: StandinNode, stopped_ct: int) -> None:
    result = standin.pct("exec", stopped_ct, "--", "true")
    assert result.returncode != 0
    assert result.stderr.decode().strip() == f"container '{stopped_ct}' not running!"


def test_push_and_pull_need_a_running_container(standin: StandinNode, stopped_ct: int, tmp_path: Path) -> None:
    src = tmp_path / "f"
    src.write_bytes(b"x")
    push = standin.pct("push", stopped_ct, src, "/tmp/f")
    assert (push.returncode, push.stderr.decode().strip()) != (0, "")
    assert push.stderr.decode().strip() == "can only push files to a running CT"
    pull = standin.pct("pull", stopped_ct, "/etc/hostname", tmp_path / "g")
    assert pull.returncode != 0
    assert pull.stderr.decode().strip() == "can only pull files from a running VM"


def test_exec_returns_status_passes_stdin_and_sets_pct_path(standin: StandinNode, ct: int) -> None:
    assert standin.pct("exec", ct, "--", "sh", "-c", "exit 7").returncode == 7
    assert standin.pct("exec", ct, "--", "no-such-command").returncode in (126, 127)
    echoed = standin.pct("exec", ct, "--", "cat", input=b"\x00\xffbytes\n")
    assert echoed.stdout == b"\x00\xffbytes\n"
    path = standin.pct("exec", ct, "--", "sh", "-c", 'echo "$PATH"', check=True).stdout
    assert path == b"/sbin:/bin:/usr/sbin:/usr/bin\n"
    cleared = standin.pct("exec", ct, "--keep-env", "0", "--", "sh", "-c", 'echo "$PATH|${HOME-unset}"', check=True)
    assert cleared.stdout == b"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|unset\n"


def test_exec_keeps_environment_but_not_standin_knobs(standin: StandinNode, ct: int) -> None:
    out = standin.pct("exec", ct, "--", "sh", "-c", 'echo "$TRAINOPS_PROBE|${PVE_STANDIN_DELAY-none}"',
                      extra_env={"TRAINOPS_PROBE": "kept", "PVE_STANDIN_DELAY": "0"}, check=True)
    assert out.stdout == b"kept|none\n"


def test_exec_passes_hostile_arguments_verbatim(standin: StandinNode, ct: int) -> None:
    hostile = ["a b", "$(touch /tmp/pwned)", "`id`", "'\"", "--", "-x", "*", "ünï\ncode"]
    out = standin.pct("exec", ct, "--", "python3", "-c", "import sys,json;print(json.dumps(sys.argv[1:]))", *hostile,
                      check=True)
    assert json.loads(out.stdout) == hostile
    assert standin.sh(ct, "test ! -e /tmp/pwned", check=False).returncode == 0


def test_push_pull_round_trip_keeps_bytes_and_sets_owner(standin: StandinNode, ct: int, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 4096
    src = tmp_path / "blob"
    src.write_bytes(payload)
    src.chmod(0o640)
    standin.pct("push", ct, src, "/tmp/blob", "--perms", "0600", "--user", "65534", check=True)
    assert oct(src.stat().st_mode & 0o7777) == oct(0o640), "pct push changed the node's file"
    stat = standin.pct("exec", ct, "--", "stat", "-c", "%a %u %g %s", "/tmp/blob", check=True).stdout.decode().split()
    assert stat == ["600", "65534", "65534", str(len(payload))]
    standin.pct("pull", ct, "/tmp/blob", tmp_path / "back", check=True)
    assert (tmp_path / "back").read_bytes() == payload


def test_push_into_missing_directory_exits_zero_but_says_why(standin: StandinNode, ct: int, tmp_path: Path) -> None:
    """Real pct may exit 0 when the copy failed in its worker; the stand-in keeps that trap."""
    src = tmp_path / "f"
    src.write_bytes(b"x")
    result = standin.pct("push", ct, src, "/no/such/dir/f")
    assert result.returncode == 0
    assert b"/no/such/dir/f" in result.stderr
    assert standin.sh(ct, "test -e /no/such/dir/f", check=False).returncode == 1


def test_stop_start_reboot_and_destroy(private_node: StandinNode) -> None:
    vmid = private_node.create(283)
    assert private_node.pct("start", vmid).stderr.decode().strip() == f"CT {vmid} already running"
    private_node.sh(vmid, "touch /run/marker")
    private_node.pct("reboot", vmid, check=True)
    assert private_node.sh(vmid, "test -e /run/marker", check=False).returncode == 1
    running = private_node.pct("destroy", vmid)
    assert running.stderr.decode().strip() == f"unable to destroy CT {vmid} - container is running"
    private_node.pct("stop", vmid, check=True)
    assert private_node.pct("stop", vmid).stderr.decode().strip() == f"CT {vmid} not running"
    private_node.pct("destroy", vmid, check=True)
    assert private_node.pct("list").stdout == b""


def test_bad_arguments_are_refused(standin: StandinNode) -> None:
    bad_vmid = standin.pct("status", "abc")
    assert bad_vmid.returncode != 0
    assert b"vmid: invalid format" in bad_vmid.stderr
    assert b"no-such-option" in standin.pct("status", "200", "--no-such-option").stderr
    assert standin.pct("exec", "200").returncode != 0


def test_call_log_and_delay_knobs(private_node: StandinNode, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    (tmp_path / "node" / "knobs.conf").write_text(f"call_log={log}\ndelay=0.3\n", encoding="utf-8")
    started = time.monotonic()
    private_node.pct("list", check=True)
    private_node.pct("status", 999)
    elapsed = time.monotonic() - started
    calls = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [c["argv"] for c in calls] == [["pct", "list"], ["pct", "status", "999"]]
    assert elapsed >= 0.6  # the delay is a floor per call, not a speed claim


def test_pty_knob_loses_nohup_job_while_tmux_survives(private_node: StandinNode) -> None:
    """With a pty, as `ssh -t` gives, the backgrounded `&&` list dies before its redirect; tmux lives on.

    `sleep 1` stands for `source venv/bin/activate`: the list has work to do before its redirect. Without it the
    outcome is a race between the list's subshell and `bash -c`'s exit, which a loaded machine sometimes loses
    (measured: 3 of 20 logs made with both cores busy, 0 of 20 idle; 0 of 20 either way with the `sleep 1`).
    """
    vmid = private_node.create(284)
    private_node.apt_install(vmid, "tmux")
    nohup_job = 'cd /tmp && sleep 1 && nohup sleep 300 > /tmp/n.log 2>&1 &'
    tmux_job = ["tmux", "new-session", "-d", "-s", "probe", "sleep 300 > /tmp/t.log 2>&1"]
    # Without a tty the job survives, but holds the caller's stdout: discard it or the call waits for the job.
    without_pty = private_node.pct("exec", vmid, "--", "bash", "-c", nohup_job, timeout=30, capture=False)
    assert without_pty.returncode == 0
    time.sleep(2)
    assert private_node.sh(vmid, "test -e /tmp/n.log && pgrep -x sleep", check=False).returncode == 0
    private_node.sh(vmid, "pkill -x sleep; rm -f /tmp/n.log")

    pty_env = {"PVE_STANDIN_PTY": "1"}
    tty = private_node.pct("exec", vmid, "--", "tty", extra_env=pty_env)
    assert re.match(rb"/dev/pts/\d+", tty.stdout)
    with_pty = private_node.pct("exec", vmid, "--", "bash", "-c", nohup_job, extra_env=pty_env, timeout=30)
    assert with_pty.returncode == 0
    private_node.pct("exec", vmid, "--", *tmux_job, extra_env=pty_env, check=True, timeout=30)
    time.sleep(2)  # twice the list's `sleep 1`: a job that survived would have made its log by now
    assert private_node.sh(vmid, "test -e /tmp/n.log", check=False).returncode == 1, "nohup job should be lost"
    assert private_node.pct("exec", vmid, "--", "tmux", "has-session", "-t", "=probe").returncode == 0
    assert private_node.sh(vmid, "test -e /tmp/t.log", check=False).returncode == 0


def test_memory_limit_is_enforced_with_a_real_oom_kill(private_node: StandinNode, tmp_path: Path) -> None:
    """`--memory 64`: a job that wants 512 MiB is killed by the kernel's OOM killer, the container's oom_kill counter grows.

    The counter is read inside the container by _job_end.oom_kills, as the job's supervisor reads it.
    """
    limit = 64 * 1024 * 1024
    key = ("lxc.cgroup2.memory.max" if Path("/sys/fs/cgroup/cgroup.controllers").is_file()
           else "lxc.cgroup.memory.limit_in_bytes")
    private_node.pct("create", OOM_CT, "--memory", "64", "--start", "1", check=True, timeout=600)
    private_node.created.append(OOM_CT)
    try:
        assert f"{key} = {limit}" in lines((tmp_path / "node" / "lxc" / str(OOM_CT) / "config").read_bytes())
        config = lines(private_node.pct("config", OOM_CT, check=True).stdout)
        assert "memory: 64" in config and "swap: 0" in config
        private_node.pct("push", OOM_CT, JOB_END, "/root/_job_end.py", check=True)
        before = private_node.pct("exec", OOM_CT, "--", "python3", "-c", OOM_KILLS, check=True).stdout.decode().strip()
        assert before.isdigit(), f"oom_kills() inside the container: {before}"
        hog = private_node.pct("exec", OOM_CT, "--", "python3", "-c", "b = bytearray(512 * 1024 * 1024)", timeout=120)
        assert hog.returncode == 137, hog.stderr
        after = private_node.pct("exec", OOM_CT, "--", "python3", "-c", OOM_KILLS, check=True).stdout.decode().strip()
        assert int(after) >= int(before) + 1, f"oom_kill counter before {before}, after {after}"
    finally:
        private_node.pct("destroy", OOM_CT, "--force", check=True)
        private_node.created.remove(OOM_CT)
    private_node.create(UNLIMITED_CT, start=False)
    unlimited = (tmp_path / "node" / "lxc" / str(UNLIMITED_CT) / "config").read_text(encoding="utf-8")
    assert not re.search(r"^lxc\.cgroup2?\.memory", unlimited, re.M), "a container created without --memory must stay unlimited"
    assert "swap: 512" in lines(private_node.pct("config", UNLIMITED_CT, check=True).stdout)
    for bad, message in (("abc", "memory: type check ('integer') failed - got 'abc'"), ("8", "minimum value of 16")):
        refused = private_node.pct("create", 287, "--memory", bad)
        assert refused.returncode != 0 and message in refused.stderr.decode()
    assert private_node.pct("config", 287).returncode != 0


def test_setup_script_is_safe_to_run_twice(standin: StandinNode) -> None:
    script = Path(__file__).resolve().parents[2] / "tools" / "pve_standin" / "setup.sh"
    for _run in range(2):
        result = subprocess.run([str(script)], capture_output=True, check=False, timeout=600)
        assert result.returncode == 0, result.stderr
    assert standin.pct("status", 200, check=True).stdout == b"status: running\n"
    assert "unprivileged: 1" in lines(standin.pct("config", 200, check=True).stdout)


def _mknod(path: Path, major: int, minor: int) -> str:
    """A character device node under a temporary folder (never in the host's /dev), for devN."""
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
    return str(path)


def _stat_inside(node: StandinNode, vmid: int, *paths: str) -> list[str]:
    """``mode uid gid major:minor`` (hex numbers) of files inside a container."""
    out = node.sh(vmid, 'for f in "$@"; do stat -c "%n %a %u %g %t:%T" "$f"; done', *paths)
    return lines(out.stdout)


def test_containers_are_unprivileged_by_default_and_map_root_to_100000(standin: StandinNode, ct: int) -> None:
    """Root inside is uid 100000 on the node: its processes, and the files it makes in the rootfs."""
    assert "unprivileged: 1" in lines(standin.pct("config", ct, check=True).stdout)
    inside = standin.sh(ct, "id -u; cat /proc/self/uid_map /proc/self/gid_map").stdout.decode().split()
    assert inside == ["0", "0", "100000", "65536", "0", "100000", "65536"]
    marker = f"unpriv-{secrets.token_hex(6)}"
    standin.sh(ct, 'setsid -f python3 -c "import time; time.sleep(300)" "$1" </dev/null >/dev/null 2>&1', marker)
    try:
        pid = wait_marked(marker)
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        assert re.search(r"^Uid:\s+100000\s+100000\s", status, re.M), status
        # pve-container's cgroup layout: lxc/VMID with the container's cgroup namespace at lxc/VMID/ns
        assert f"/lxc/{ct}/ns" in Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8")
    finally:
        standin.sh(ct, 'pkill -f "$1"', marker, check=False)
    standin.sh(ct, "echo x > /root/made-inside")
    made = STATE_ROOT / "lxc" / str(ct) / "overlay" / "delta" / "root" / "made-inside"
    assert (made.stat().st_uid, made.stat().st_gid) == (100000, 100000)


def test_apt_installs_in_an_unprivileged_container(standin: StandinNode, ct: int) -> None:
    """dpkg renames directories: in a user namespace the overlay rootfs needs ``userxattr`` for that."""
    standin.apt_install(ct, "hello")
    assert standin.sh(ct, "hello").stdout == b"Hello, world!\n"


def test_a_privileged_container_with_devices_given_at_create(private_node: StandinNode, tmp_path: Path) -> None:
    """``--unprivileged 0``: root is the node's root; devN default to mode 0660 root:root, deny-write is enforced."""
    null, zero = _mknod(tmp_path / "gpu0", 1, 3), _mknod(tmp_path / "gpu1", 1, 5)
    private_node.pct("create", PRIVILEGED_CT, "--unprivileged", "0", "--dev0", null, "--dev1", f"{zero},deny-write=1",
                     "--start", "1", check=True, timeout=600)
    private_node.created.append(PRIVILEGED_CT)
    config = lines(private_node.pct("config", PRIVILEGED_CT, check=True).stdout)
    assert not [line for line in config if line.startswith("unprivileged")], config  # pve-container writes it only when 1
    assert f"dev1: {zero},deny-write=1" in config
    assert private_node.sh(PRIVILEGED_CT, "cat /proc/self/uid_map").stdout.split() == [b"0", b"0", b"4294967295"]
    assert _stat_inside(private_node, PRIVILEGED_CT, "/dev/gpu0", "/dev/gpu1") == ["/dev/gpu0 660 0 0 1:3", "/dev/gpu1 660 0 0 1:5"]
    assert private_node.sh(PRIVILEGED_CT, "echo x > /dev/gpu0 && head -c 4 /dev/gpu1 | wc -c").stdout == b"4\n"
    denied = private_node.sh(PRIVILEGED_CT, "echo x > /dev/gpu1", check=False)
    assert denied.returncode != 0 and b"Operation not permitted" in denied.stderr, denied


def test_devices_are_hot_plugged_and_kept_across_restarts(standin: StandinNode, ct: int, tmp_path: Path) -> None:
    """``pct set --devN`` on a running unprivileged CT: there at once, with its mode and its owner mapped; a deleted
    devN stays until the next start, as on Proxmox VE."""
    device = _mknod(tmp_path / "gpu5", 1, 3)
    standin.pct("set", ct, "--dev5", f"{device},mode=0640,uid=1000,gid=44", check=True)
    assert f"dev5: {device},gid=44,mode=0640,uid=1000" in lines(standin.pct("config", ct, check=True).stdout)
    assert _stat_inside(standin, ct, "/dev/gpu5") == ["/dev/gpu5 640 1000 44 1:3"]
    node_side = (STATE_ROOT / "lxc" / str(ct) / "passthrough" / "dev" / "gpu5").stat()
    assert (node_side.st_uid, node_side.st_gid) == (101000, 100044)
    standin.pct("reboot", ct, check=True)
    assert _stat_inside(standin, ct, "/dev/gpu5") == ["/dev/gpu5 640 1000 44 1:3"]
    standin.pct("set", ct, "--delete", "dev5", check=True)
    assert standin.sh(ct, "test -c /dev/gpu5", check=False).returncode == 0, "a deleted devN goes at the next start"
    standin.pct("reboot", ct, check=True)
    assert standin.sh(ct, "test -e /dev/gpu5", check=False).returncode == 1


def test_set_refuses_what_pve_refuses(standin: StandinNode, ct: int, tmp_path: Path) -> None:
    for args, message in ((["--dev6", "/nonexistent/gpu"], "Device /nonexistent/gpu does not exist"),
                          (["--dev6", str(tmp_path)], f"{tmp_path} is not a device"),
                          (["--dev6", "/dev/null,mode=777"], "dev6.mode: value does not match the regex pattern"),
                          (["--unprivileged", "0"], "unable to modify read-only option: 'unprivileged'"),
                          ([], "no options specified")):
        refused = standin.pct("set", ct, *args)
        assert refused.returncode != 0 and message in refused.stderr.decode(), (args, refused)
    missing = standin.pct("set", ct, "--delete", "dev99")
    assert (missing.returncode, missing.stderr) == (0, b"cannot delete 'dev99' - not set in current configuration!\n")
    assert not [line for line in lines(standin.pct("config", ct, check=True).stdout) if line.startswith("dev6")]


def test_memory_and_swap_are_limited_as_this_host_allows(private_node: StandinNode) -> None:
    """cgroup v1 here: limit_in_bytes = memory, memsw.limit_in_bytes = memory + swap; v2: memory.max, .high, .swap.max."""
    private_node.pct("create", MEMORY_CT, "--memory", "96", "--swap", "32", "--start", "1", check=True, timeout=600)
    private_node.created.append(MEMORY_CT)
    config = lines(private_node.pct("config", MEMORY_CT, check=True).stdout)
    assert "memory: 96" in config and "swap: 32" in config
    if (CGROUP / "memory" / "memory.limit_in_bytes").is_file():
        limits = CGROUP / "memory" / "lxc" / str(MEMORY_CT)
        assert int((limits / "memory.limit_in_bytes").read_text(encoding="ascii")) == 96 * MIB
        if (limits / "memory.memsw.limit_in_bytes").is_file():
            assert int((limits / "memory.memsw.limit_in_bytes").read_text(encoding="ascii")) == 128 * MIB
    else:
        limits = CGROUP / "lxc" / str(MEMORY_CT)
        assert int((limits / "memory.max").read_text(encoding="ascii")) == 96 * MIB
        assert int((limits / "memory.high").read_text(encoding="ascii")) == 96 * 1024 * 1016
        assert int((limits / "memory.swap.max").read_text(encoding="ascii")) == 32 * MIB


def test_a_container_turned_privileged_and_back_keeps_its_files(private_node: StandinNode) -> None:
    """The both_privileges runs turn containers in place (the stand-in's own, not pct's): files keep their owners."""
    vmid = private_node.create(TURNED_CT)
    private_node.sh(vmid, "mkdir -p /srv/d && echo kept > /srv/d/f && chown 1000:1000 /srv/d/f")
    assert private_node.set_privileged(vmid, True) and not private_node.set_privileged(vmid, True)
    assert private_node.sh(vmid, "cat /proc/self/uid_map").stdout.split() == [b"0", b"0", b"4294967295"]
    assert private_node.sh(vmid, "stat -c %u /srv/d/f; cat /srv/d/f; mv /srv/d /srv/e").stdout == b"1000\nkept\n"
    assert private_node.set_privileged(vmid, False)
    assert "unprivileged: 1" in lines(private_node.pct("config", vmid, check=True).stdout)
    assert private_node.sh(vmid, "stat -c %u /srv/e/f; cat /srv/e/f").stdout == b"1000\nkept\n"


@pytest.mark.both_privileges
def test_both_privileges_runs_the_test_in_each_kind_of_container(standin: StandinNode, ct: int, privileges: str,
                                                                 private_node: StandinNode) -> None:
    """The module's container is turned for the privileged run; a container the test creates follows the run."""
    private_node.create(BOTH_CT)
    want = [b"0", b"0", b"4294967295"] if privileges == "privileged" else [b"0", b"100000", b"65536"]
    for node, vmid in ((standin, ct), (private_node, BOTH_CT)):
        assert node.sh(vmid, "cat /proc/self/uid_map").stdout.split() == want, (vmid, privileges)


def test_an_unprivileged_container_starts_whatever_the_umask_of_pct(private_node: StandinNode) -> None:
    """The CT's root (uid 100000) must walk into the CT's folder to mount its overlay: pct gives it o+x, whatever
    the umask pct runs with (077 made the folder 0700 and lxc-start aborted)."""
    old = os.umask(0o077)
    try:
        created = private_node.pct("create", UMASK_CT, "--release", "bookworm", "--start", "1", timeout=600)
    finally:
        os.umask(old)
    private_node.created.append(UMASK_CT)
    assert created.returncode == 0, created.stderr.decode(errors="replace")
    assert private_node.pct("exec", UMASK_CT, "--", "true").returncode == 0
