# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Argument handling and configuration of the pct stand-in."""
from __future__ import annotations

import os
import resource
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[3] / "tools" / "pve_standin"
sys.path.insert(0, str(STANDIN))

# pylint: disable=wrong-import-position
from standin_core import Call, Knobs, Node, PctError, parse_args  # noqa: E402
from standin_devices import Device, cgroup_lines, devices_conf, devices_of, make_node, parse_device  # noqa: E402
from standin_image import (CtSpec, HostCgroups, container_config, host_mirrors, lxc_config, memory_constraints,  # noqa: E402
                           memory_limits, release_from, shift_acl, shift_caps, shift_tree, sources_text)
from standin_verbs import _create_conf  # noqa: E402


@pytest.mark.parametrize(
    ("argv", "verb", "args", "opts", "extra"),
    [
        (["exec", "200", "--", "ls", "-la"], "exec", ["200"], {}, ["ls", "-la"]),
        (["exec", "200", "--keep-env", "0", "--", "sh", "-c", "x"], "exec", ["200"], {"keep-env": "0"}, ["sh", "-c", "x"]),
        (["exec", "200", "--keep-env=1", "--", "true"], "exec", ["200"], {"keep-env": "1"}, ["true"]),
        (["exec", "200", "--", "--", "-x"], "exec", ["200"], {}, ["--", "-x"]),
        (["status", "200", "--verbose"], "status", ["200"], {"verbose": "1"}, []),
        (["list"], "list", [], {}, []),
        (["push", "200", "/a", "/b", "--perms", "0600", "--user", "1000"], "push", ["200", "/a", "/b"],
         {"perms": "0600", "user": "1000"}, []),
        (["create", "201", "local:vztmpl/debian-11-standard.tar.zst", "--start"], "create",
         ["201", "local:vztmpl/debian-11-standard.tar.zst"], {"start": "1"}, []),
        (["create", "201", "--release", "trixie", "--start", "0"], "create", ["201"], {"release": "trixie", "start": "0"}, []),
        (["destroy", "201", "--force", "1"], "destroy", ["201"], {"force": "1"}, []),
        (["create", "201", "--unprivileged", "0", "--memory", "64", "--swap", "32"], "create", ["201"],
         {"unprivileged": "0", "memory": "64", "swap": "32"}, []),
        (["create", "201", "--unprivileged", "--dev0", "/dev/null,mode=0666"], "create", ["201"],
         {"unprivileged": "1", "dev0": "/dev/null,mode=0666"}, []),
        (["set", "201", "--dev255=/dev/null", "--delete", "dev1,dev2"], "set", ["201"],
         {"dev255": "/dev/null", "delete": "dev1,dev2"}, []),
    ],
)
def test_parse_args_accepts_pct_forms(argv: list[str], verb: str, args: list[str], opts: dict[str, str],
                                      extra: list[str]) -> None:
    call = parse_args(argv)
    assert (call.verb, call.args, call.opts, call.extra) == (verb, args, opts, extra)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no command specified"),
        (["frobnicate", "200"], "unknown command 'pct frobnicate'"),
        (["status"], "wrong number of arguments"),
        (["status", "200", "201"], "wrong number of arguments"),
        (["status", "12"], "vmid: invalid format"),
        (["status", "abc"], "vmid: invalid format"),
        (["status", "0200"], "vmid: invalid format"),
        (["status", "200", "--bogus"], "bogus: property is not defined"),
        (["stop", "200", "--timeout"], "timeout: missing value"),
        (["destroy", "200", "--force=maybe"], "force: type check ('boolean') failed"),
        (["push", "200", "/a"], "wrong number of arguments"),
        (["create", "200", "--unprivileged=maybe"], "unprivileged: type check ('boolean') failed"),
        (["set", "200", "--dev256", "/dev/null"], "dev256: property is not defined"),
        (["set", "200", "--memory", "64"], "memory: property is not defined"),
        (["set"], "wrong number of arguments"),
    ],
)
def test_parse_args_refuses_bad_calls(argv: list[str], message: str) -> None:
    with pytest.raises(PctError) as err:
        parse_args(argv)
    assert message in err.value.message
    assert err.value.code != 0


def test_knobs_file_and_environment(tmp_path: Path) -> None:
    assert Knobs.load(tmp_path, {}) == Knobs(pty=False, delay=0.0, call_log="")
    (tmp_path / "knobs.conf").write_text("# comment\npty=on\ndelay = 0.5\ncall_log=/tmp/x\n", encoding="utf-8")
    assert Knobs.load(tmp_path, {}) == Knobs(pty=True, delay=0.5, call_log="/tmp/x")
    env = {"PVE_STANDIN_PTY": "0", "PVE_STANDIN_DELAY": "2"}
    assert Knobs.load(tmp_path, env) == Knobs(pty=False, delay=2.0, call_log="/tmp/x")


def test_knobs_delay_mode(tmp_path: Path) -> None:
    assert Knobs.load(tmp_path, {"PVE_STANDIN_DELAY_MODE": "CPU"}).delay_mode == "cpu"
    (tmp_path / "knobs.conf").write_text("delay=0.5\ndelay_mode=cpu\n", encoding="utf-8")
    assert Knobs.load(tmp_path, {}) == Knobs(delay=0.5, delay_mode="cpu")
    assert Knobs.load(tmp_path, {"PVE_STANDIN_DELAY_MODE": "sleep"}).delay_mode == "sleep"
    assert Knobs.load(tmp_path, {"PVE_STANDIN_DELAY_MODE": ""}).delay_mode == "sleep"


@pytest.mark.parametrize("in_file", [False, True])
def test_knobs_refuse_an_unknown_delay_mode(tmp_path: Path, in_file: bool) -> None:
    if in_file:
        (tmp_path / "knobs.conf").write_text("delay_mode=busy\n", encoding="utf-8")
    with pytest.raises(PctError) as err:
        Knobs.load(tmp_path, {} if in_file else {"PVE_STANDIN_DELAY_MODE": "busy"})
    assert err.value.message.startswith("invalid stand-in knob ")
    assert "PVE_STANDIN_DELAY_MODE" in err.value.message and "'busy' is not one of sleep, cpu" in err.value.message
    assert ("knobs.conf" in err.value.message) is in_file


def _pct_list(root: Path, **knobs: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run the stand-in's ``pct list`` on an empty node: its result, CPU seconds (user + system) and wall seconds."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PVE_STANDIN_")}
    env.update(PVE_STANDIN_ROOT=str(root), PVE_STANDIN_CACHE=str(root / "cache"), **knobs)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = subprocess.run([str(STANDIN / "pct"), "list"], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, timeout=60, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def test_delay_mode_cpu_burns_the_delay_as_cpu_time(tmp_path: Path) -> None:
    result, cpu, wall = _pct_list(tmp_path, PVE_STANDIN_DELAY="0.2", PVE_STANDIN_DELAY_MODE="cpu")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert cpu >= 0.2 and wall >= 0.2, (cpu, wall)
    # the default mode sleeps: the same call's CPU is the start-up of the stand-in only
    result, cpu, wall = _pct_list(tmp_path, PVE_STANDIN_DELAY="0.2")
    assert result.returncode == 0, result.stderr
    assert wall >= 0.2 and cpu < 0.2, (cpu, wall)


def test_delay_mode_unknown_fails_the_call(tmp_path: Path) -> None:
    result, _cpu, _wall = _pct_list(tmp_path, PVE_STANDIN_DELAY="0.2", PVE_STANDIN_DELAY_MODE="spin")
    assert result.returncode == 255
    assert result.stderr == "invalid stand-in knob PVE_STANDIN_DELAY_MODE: 'spin' is not one of sleep, cpu\n"


def test_node_name_comes_from_state_root(tmp_path: Path) -> None:
    (tmp_path / "node").write_text("pve-a\n", encoding="utf-8")
    node = Node(tmp_path, tmp_path / "cache", {})
    assert node.name == "pve-a"
    with pytest.raises(PctError) as err:
        node.read_conf("123")
    assert err.value.message == "Configuration file 'nodes/pve-a/lxc/123.conf' does not exist"
    node.write_conf("123", {"hostname": "x", "arch": "amd64"})
    assert node.conf_path("123").read_text(encoding="utf-8") == "arch: amd64\nhostname: x\n"
    assert node.vmids() == ["123"]


def test_release_from_option_or_template() -> None:
    assert release_from(None, None) == "bookworm"
    assert release_from("bullseye", None) == "bullseye"
    assert release_from(None, "local:vztmpl/debian-13-standard_13.1-1_amd64.tar.zst") == "trixie"
    with pytest.raises(PctError, match="enumeration"):
        release_from("jessie", None)
    with pytest.raises(PctError, match="no template 'ubuntu-24.04-standard'"):
        release_from(None, "ubuntu-24.04-standard")


def test_host_mirrors_reads_deb822_and_one_line_sources(tmp_path: Path) -> None:
    assert host_mirrors(tmp_path) == ("http://deb.debian.org/debian", "http://deb.debian.org/debian-security")
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://mirror.example/debian bookworm main\n"
                                           "deb http://mirror.example/debian-security bookworm-security main\n",
                                           encoding="utf-8")
    assert host_mirrors(tmp_path) == ("http://mirror.example/debian", "http://mirror.example/debian-security")
    text = sources_text("bullseye", ("http://m/debian", "http://m/debian-security"))
    assert "Suites: bullseye bullseye-updates\n" in text
    assert "Suites: bullseye-security\n" in text


@pytest.mark.parametrize(("value", "device", "text"), [
    ("/dev/nvidia0", Device("/dev/nvidia0"), "/dev/nvidia0"),
    ("path=/dev/dri/card0,mode=0666,uid=0,gid=44", Device("/dev/dri/card0", "0666", 0, 44), "/dev/dri/card0,gid=44,mode=0666,uid=0"),
    ("/dev/nvidia0,deny-write=1", Device("/dev/nvidia0", deny_write=True), "/dev/nvidia0,deny-write=1"),
    ("/tmp/x/nvidia1,deny-write=0", Device("/tmp/x/nvidia1"), "/tmp/x/nvidia1"),
])
def test_parse_device_reads_and_prints_pve_entries(value: str, device: Device, text: str) -> None:
    assert parse_device("dev0", value) == device
    assert device.text() == text
    assert parse_device("dev0", text) == device


def test_device_path_inside_the_container() -> None:
    assert Device("/dev/dri/card0").inside() == "/dev/dri/card0"
    assert Device("/tmp/pytest-1/nvidia-uvm").inside() == "/dev/nvidia-uvm"  # the stand-in's paths outside /dev


@pytest.mark.parametrize(("value", "message"), [
    ("/dev/nvidia0,mode=666", "dev3.mode: value does not match the regex pattern"),
    ("/dev/nvidia0,mode=0666,mode=0600", "dev3.mode: duplicate key"),
    ("/dev/nvidia0,uid=-1", "dev3.uid: type check ('integer') failed - got '-1'"),
    ("/dev/nvidia0,owner=root", "dev3.owner: property is not defined in schema"),
    ("/dev/nvidia0,deny-write=maybe", "dev3.deny-write: type check ('boolean') failed"),
    ("mode=0666", "dev3: Path has to be defined"),
    ("dev/nvidia0", "dev/nvidia0 is not a valid device path"),
    ("/dev/../etc/shadow", "is not a valid device path"),
])
def test_parse_device_refuses_bad_entries(value: str, message: str) -> None:
    with pytest.raises(PctError) as err:
        parse_device("dev3", value)
    assert err.value.message.startswith("400 Parameter verification failed.\n")
    assert message in err.value.message


def test_devices_of_a_config_in_index_order() -> None:
    conf = {"dev10": "/dev/b", "dev2": "/dev/a,mode=0600", "memory": "512"}
    assert devices_of(conf) == [("dev2", Device("/dev/a", "0600")), ("dev10", Device("/dev/b"))]


def test_device_cgroup_and_mount_lines() -> None:
    """/dev/null is character device 1:3 on every Linux host."""
    null = Device("/dev/null")
    assert cgroup_lines(null, v1=True) == ["lxc.cgroup.devices.allow = c 1:3 rw"]
    assert cgroup_lines(Device("/dev/null", deny_write=True), v1=False) == [
        "lxc.cgroup2.devices.allow = c 1:3 r", "lxc.cgroup2.devices.deny = c 1:3 w"]
    with pytest.raises(PctError, match="^Device /tmp/no-such-dir/nvidia0 does not exist$"):
        devices_conf([(Device("/tmp/no-such-dir/nvidia0"), Path("/s/lxc/9/passthrough/dev/nvidia0"))], v1=True)
    with pytest.raises(PctError, match="^/tmp is not a device$"):
        cgroup_lines(Device("/tmp"), v1=True)
    text = devices_conf([(null, Path("/s/lxc/9/passthrough/dev/null"))], v1=True)
    assert text.splitlines()[1:] == ["lxc.mount.entry = /s/lxc/9/passthrough/dev/null dev/null none bind,create=file 0 0",
                                     "lxc.cgroup.devices.allow = c 1:3 rw"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod and chown need root")
@pytest.mark.parametrize(("device", "shift", "owner"), [
    (Device("/dev/null"), 0, (0, 0, 0o660)),
    (Device("/dev/null", "0666", 1000, 44), 100000, (101000, 100044, 0o666)),
])
def test_passthrough_node_has_mode_and_mapped_owner(tmp_path: Path, device: Device, shift: int,
                                                    owner: tuple[int, int, int]) -> None:
    node = make_node(tmp_path, device, shift)
    info = node.stat()
    assert node == tmp_path / "dev" / "null"
    assert stat.S_ISCHR(info.st_mode) and info.st_rdev == os.stat("/dev/null").st_rdev
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == owner
    with pytest.raises(PctError, match="failed to map uid 70000"):
        make_node(tmp_path, Device("/dev/null", uid=70000), 100000)


def test_memory_constraints_as_pve_container() -> None:
    assert memory_constraints(512) == (512 << 20, 512 * 1024 * 1016)
    assert memory_constraints(32 * 1024) == (32 << 30, (32 * 1024 - 128) << 20)


def test_memory_limits_per_cgroup_version() -> None:
    v2 = memory_limits("9", 64, 32, HostCgroups(v2_memory=True))
    assert v2 == (f"lxc.cgroup2.memory.max = {64 << 20}\nlxc.cgroup2.memory.high = {64 * 1024 * 1016}\n"
                  f"lxc.cgroup2.memory.swap.max = {32 << 20}\n")
    v1 = memory_limits("9", 64, 32, HostCgroups(v1_memory=True, v1_memsw=True))
    assert v1 == f"lxc.cgroup.memory.limit_in_bytes = {64 << 20}\nlxc.cgroup.memory.memsw.limit_in_bytes = {96 << 20}\n"
    assert memory_limits("9", 64, 32, HostCgroups(v1_memory=True)) == f"lxc.cgroup.memory.limit_in_bytes = {64 << 20}\n"
    with pytest.raises(PctError, match="^limiting the memory of CT 9 failed: the host has no memory cgroup controller"):
        memory_limits("9", 64, 0, HostCgroups())


def test_host_cgroups_probe(tmp_path: Path) -> None:
    assert HostCgroups.probe(tmp_path) == HostCgroups()
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("0\n", encoding="ascii")
    assert HostCgroups.probe(tmp_path) == HostCgroups(v1_memory=True)
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n", encoding="ascii")
    assert HostCgroups.probe(tmp_path).v2_memory


def test_lxc_config_of_unprivileged_and_privileged_containers(tmp_path: Path) -> None:
    spec = CtSpec("290", "train", tmp_path / "lxc" / "290", Path("/cache/rootfs-userns"), memory=64)
    unprivileged = container_config(spec, HostCgroups(v1_memory=True)).splitlines()
    for line in ("lxc.cgroup.relative = 0", "lxc.cgroup.dir.monitor = lxc.monitor/290", "lxc.cgroup.dir.container = lxc/290",
                 "lxc.cgroup.dir.container.inner = ns", "lxc.include = /usr/share/lxc/config/debian.userns.conf",
                 "lxc.idmap = u 0 100000 65536", "lxc.idmap = g 0 100000 65536", "lxc.rootfs.options = userxattr",
                 "lxc.mount.auto = proc:mixed cgroup:mixed:force", "lxc.mount.entry = /sys sys none rbind,create=dir,optional 0 0",
                 f"lxc.rootfs.path = overlay:/cache/rootfs-userns:{tmp_path}/lxc/290/overlay/delta",
                 f"lxc.cgroup.memory.limit_in_bytes = {64 << 20}", "lxc.uts.name = train"):
        assert line in unprivileged
    assert unprivileged.index("lxc.mount.auto =") < unprivileged.index("lxc.mount.auto = proc:mixed cgroup:mixed:force")
    privileged = lxc_config("291", "overlay:/a:/b", "h").splitlines()
    assert "lxc.cgroup.dir.container = lxc/291" in privileged
    assert not [line for line in privileged if "idmap" in line or "userns" in line or "mount.auto" in line]


def test_create_conf_shows_what_proxmox_would(tmp_path: Path) -> None:
    spec = CtSpec("290", "train", tmp_path, Path())
    conf = _create_conf(Call("create", ["290"], {"dev1": "/dev/null,uid=0"}, []), spec, "bookworm", None)
    assert (conf["memory"], conf["swap"], conf["unprivileged"], conf["dev1"]) == ("512", "512", "1", "/dev/null,uid=0")
    limited = _create_conf(Call("create", ["290"], {}, []), CtSpec("290", "t", tmp_path, Path(), False, 64), "bookworm", None)
    assert (limited["memory"], limited["swap"], "unprivileged" in limited) == ("64", "0", False)
    with pytest.raises(PctError, match="^Device /nonexistent/nvidia0 does not exist$"):
        _create_conf(Call("create", ["290"], {"dev0": "/nonexistent/nvidia0"}, []), spec, "bookworm", None)


def _acl(*entries: tuple[int, int, int]) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def test_shift_acl_and_capabilities() -> None:
    # user_obj, a named user 4, a named group 4, mask, other: only the named ones carry ids
    acl = _acl((0x01, 7, 0xFFFFFFFF), (0x02, 5, 4), (0x08, 5, 4), (0x10, 7, 0xFFFFFFFF), (0x20, 5, 0xFFFFFFFF))
    assert shift_acl(acl, 100000) == _acl((0x01, 7, 0xFFFFFFFF), (0x02, 5, 100004), (0x08, 5, 100004),
                                          (0x10, 7, 0xFFFFFFFF), (0x20, 5, 0xFFFFFFFF))
    assert shift_acl(shift_acl(acl, 100000), -100000) == acl
    v2 = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)  # cap_net_raw, effective
    v3 = shift_caps(v2, 100000)
    assert v3 == struct.pack("<IIIIII", 0x03000001, 1 << 13, 0, 0, 0, 100000)
    assert shift_caps(v3, -100000) == v2


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_shift_tree_moves_ids_and_keeps_setuid(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "usr" / "bin").mkdir(parents=True)
    su = root / "usr" / "bin" / "su"
    su.write_bytes(b"")
    su.chmod(0o4755)
    (root / "nobody").write_bytes(b"")
    os.chown(root / "nobody", 65534, 65534)
    (root / "link").symlink_to("usr/bin/su")
    shift_tree(root, 100000)
    owners = {p.name: (p.lstat().st_uid, p.lstat().st_gid) for p in (root, su, root / "nobody", root / "link")}
    assert owners == {"rootfs": (100000, 100000), "su": (100000, 100000), "nobody": (165534, 165534), "link": (100000, 100000)}
    assert stat.S_IMODE(su.stat().st_mode) == 0o4755
    shift_tree(root, -100000)
    assert (su.stat().st_uid, (root / "nobody").stat().st_uid) == (0, 65534)
