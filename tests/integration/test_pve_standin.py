# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The pct stand-in behaves as pve-container's pct on real LXC containers."""
from __future__ import annotations

import json
import subprocess
import re
import time
from pathlib import Path

import pytest

from .conftest import StandinNode, lines

pytestmark = pytest.mark.integration

CT = 281
STOPPED_CT = 282
OOM_CT = 285
UNLIMITED_CT = 286
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
