# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the argv builders of the pct connection plugin."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import (
    CLEAN_PATH,
    CONFIG_BATCH_SCRIPT,
    NODE_SHELL,
    VMID_MAX,
    VMID_MIN,
    KEEP_ENV,
    PctOptionError,
    PctTarget,
    build_command,
    clean_environment,
    config_batch_argv,
    fetch_command,
    list_argv,
    node_command_argv,
    parse_become_exe,
    parse_node,
    parse_ssh_args,
    parse_vmid,
    pct_exec_argv,
    pct_invocation,
    printable,
    put_command,
    remote_command_line,
    remote_environment,
    resolve_local_pct,
    shell_command,
    ssh_argv,
)

HOSTILE = [
    "it's",
    'say "hi"',
    "$(touch /tmp/pwned)",
    "`touch /tmp/pwned`",
    "line1\nline2",
    "two  spaces ",
    "-rf",
    "--",
    "--version",
    "ünïcödé ✓ 日本",
    "tab\there",
    "back\\slash",
    "semi;colon && or || pipe | amp &",
    "glob * ? [a]",
    "~root",
    "#comment",
    "",
    "'",
    '"',
    "$HOME ${PATH}",
    "\x01\x7f",
]
# Arguments can hold anything but NUL; lone surrogates stand for undecodable bytes.
ARG_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
ARGV = st.lists(ARG_TEXT, min_size=1, max_size=8)
ENV = clean_environment("root", "/root")
REMOTE = PctTarget(vmid=200, node="pve1", node_user="root", timeout=7)


@pytest.mark.parametrize("value, expected", [(100, 100), (200, 200), (999_999_999, 999_999_999), ("201", 201), (" 300 ", 300)])
def test_parse_vmid_accepts(value: object, expected: int) -> None:
    assert parse_vmid(value) == expected


@pytest.mark.parametrize("value", [99, 0, -200, 1_000_000_000, "abc", "20x", "-200", "1e3", "２００", True, 2.5, [200]])
def test_parse_vmid_rejects_and_names_the_variable(value: object) -> None:
    with pytest.raises(PctOptionError, match=r"pct_vmid \(or proxmox_vmid\) must be an integer from 100 to 999999999; fix the host variable"):
        parse_vmid(value)


def test_vmid_bounds_are_those_of_proxmox_ve() -> None:
    """The one definition of the VMID range (pve-container: 100 to 999999999), used by the connection and the inventory."""
    assert (VMID_MIN, VMID_MAX) == (100, 999_999_999)
    assert parse_vmid(VMID_MIN) == VMID_MIN and parse_vmid(str(VMID_MAX)) == VMID_MAX
    for value in (VMID_MIN - 1, VMID_MAX + 1, str(VMID_MAX + 1)):
        with pytest.raises(PctOptionError, match=rf"from {VMID_MIN} to {VMID_MAX}"):
            parse_vmid(value)


@given(st.integers(min_value=VMID_MIN, max_value=VMID_MAX))
def test_parse_vmid_accepts_every_vmid_of_the_range(vmid: int) -> None:
    assert parse_vmid(vmid) == vmid and parse_vmid(str(vmid)) == vmid


@pytest.mark.parametrize("value", [None, ""])
def test_parse_vmid_missing_names_the_variable(value: object) -> None:
    with pytest.raises(PctOptionError, match=r"^Missing container id: set the host variable pct_vmid \(proxmox_vmid, community.proxmox's name, "
                                             r"is accepted too\) to the VMID"):
        parse_vmid(value)


def test_parse_node() -> None:
    assert parse_node(None) is None
    assert parse_node("") is None
    assert parse_node("pve1.example.org") == "pve1.example.org"
    for bad in ("-oProxyCommand=x", "pve 1", "pve\n1", 5):
        with pytest.raises(PctOptionError, match="pct_node"):
            parse_node(bad)


def test_parse_ssh_args() -> None:
    assert parse_ssh_args("") == ()
    assert parse_ssh_args(None) == ()
    assert parse_ssh_args("-p 2222 -i '/k ey'") == ("-p", "2222", "-i", "/k ey")
    assert parse_ssh_args(["-p", "22"]) == ("-p", "22")
    with pytest.raises(PctOptionError, match="pct_ssh_args"):
        parse_ssh_args("-o 'unbalanced")
    with pytest.raises(PctOptionError, match="pct_ssh_args"):
        parse_ssh_args(5)


def test_clean_environment_is_login_like() -> None:
    assert clean_environment("alice", "/home/alice") == {
        "PATH": CLEAN_PATH,
        "LANG": "C.UTF-8",
        "LOGNAME": "alice",
        "USER": "alice",
        "HOME": "/home/alice",
    }
    assert "HOME" not in clean_environment("nobody", None)
    assert remote_environment(PctTarget(vmid=200, node="n"))["HOME"] == "/root"
    assert "HOME" not in remote_environment(PctTarget(vmid=200, node="n", node_user="admin"))


def test_in_container_commands() -> None:
    assert shell_command("echo hi") == ["/bin/sh", "-c", "echo hi"]
    assert put_command("-x y") == ["/bin/sh", "-c", 'cat > "$1"', "sh", "-x y"]
    assert fetch_command("-x y") == ["cat", "--", "-x y"]


def test_inventory_commands() -> None:
    assert list_argv(PctTarget(vmid=0, pct_path="/usr/sbin/pct")) == ["/usr/sbin/pct", "list"]
    assert config_batch_argv(PctTarget(vmid=0, pct_path="/opt/my pct"), [340, 341], "### m") == [
        NODE_SHELL, "-c", CONFIG_BATCH_SCRIPT, "sh", "### m", "340", "341", "--", "/opt/my pct"]
    assert config_batch_argv(PctTarget(vmid=0), [], "m")[-3:] == ["m", "--", "pct"]


def test_inventory_commands_under_sudo_run_only_pct_as_root() -> None:
    target = PctTarget(vmid=0, node_become=True)
    assert list_argv(target) == ["sudo", "-n", "--", "pct", "list"]
    assert config_batch_argv(target, [340], "m") == [NODE_SHELL, "-c", CONFIG_BATCH_SCRIPT, "sh", "m", "340", "--", "sudo", "-n", "--", "pct"]


def test_pct_invocation_is_the_one_place_that_adds_sudo() -> None:
    assert pct_invocation(PctTarget(vmid=200)) == ["pct"]
    assert pct_invocation(PctTarget(vmid=200, pct_path="/usr/sbin/pct", node_become=True)) == ["sudo", "-n", "--", "/usr/sbin/pct"]
    assert pct_invocation(PctTarget(vmid=200, node_become=True, node_become_exe="/usr/local/bin/sudo")) == ["/usr/local/bin/sudo", "-n", "--", "pct"]
    assert pct_invocation(PctTarget(vmid=200, node_become=False, node_become_exe="doas")) == ["pct"]


def test_local_argv_is_plain_pct_exec() -> None:
    target = PctTarget(vmid=200, pct_path="/usr/sbin/pct")
    assert KEEP_ENV == ("--keep-env", "1")
    assert build_command(target, ["/bin/sh", "-c", "a b"], ENV) == ["/usr/sbin/pct", "exec", "200", "--keep-env", "1", "--", "/bin/sh", "-c", "a b"]
    with pytest.raises(ValueError):
        pct_exec_argv(target, [])


def test_local_argv_with_become() -> None:
    target = PctTarget(vmid=200, pct_path="/usr/sbin/pct", node_become=True)
    assert build_command(target, ["true"], ENV) == ["sudo", "-n", "--", "/usr/sbin/pct", "exec", "200", "--keep-env", "1", "--", "true"]


def test_remote_argv_with_become_runs_sudo_inside_env_i() -> None:
    target = PctTarget(vmid=201, node="pve1", node_user="trainops", node_become=True)
    env = remote_environment(target)
    argv = build_command(target, ["cat", "--", "/x"], env)
    assert argv[:9] == ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-l", "trainops", "pve1"]
    assert shlex.split(argv[-1]) == [
        "env", "-i", "-C", "/", "LANG=C.UTF-8", "LOGNAME=trainops", "PATH=" + CLEAN_PATH, "USER=trainops",
        "sudo", "-n", "--", "pct", "exec", "201", "--keep-env", "1", "--", "cat", "--", "/x",
    ]


def test_node_command_argv_never_uses_sudo() -> None:
    local = PctTarget(vmid=200, node_become=True)
    assert node_command_argv(local, ["nvidia-smi", "-L"], ENV) == ["nvidia-smi", "-L"]
    remote = PctTarget(vmid=200, node="pve1", node_user="trainops", node_become=True, ssh_args=("-p", "2222"))
    argv = node_command_argv(remote, ["sh", "-c", "echo $$; hostname"], remote_environment(remote))
    assert argv[:-1] == ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-l", "trainops", "-p", "2222", "pve1", "--"]
    assert shlex.split(argv[-1]) == ["env", "-i", "-C", "/", "LANG=C.UTF-8", "LOGNAME=trainops", "PATH=" + CLEAN_PATH, "USER=trainops",
                                     "sh", "-c", "echo $$; hostname"]
    assert "sudo" not in shlex.split(argv[-1])
    with pytest.raises(ValueError):
        node_command_argv(remote, [], ENV)


@given(ARGV)
@settings(max_examples=100)
def test_node_command_line_round_trips_through_shlex(argv: list[str]) -> None:
    line = node_command_argv(REMOTE, argv, ENV)[-1]
    assert shlex.split(line)[-len(argv):] == argv


def test_parse_become_exe() -> None:
    assert parse_become_exe(None) == "sudo" and parse_become_exe("") == "sudo"
    assert parse_become_exe("/usr/bin/sudo") == "/usr/bin/sudo"
    for bad in ("-s", "sudo -E", 5):
        with pytest.raises(PctOptionError, match=r"^Invalid pct_node_become_exe"):
            parse_become_exe(bad)


def test_remote_argv_wraps_in_ssh_without_pty() -> None:
    target = PctTarget(vmid=201, node="pve1", node_user="root", ssh_executable="/usr/bin/ssh", ssh_args=("-p", "2222"), timeout=7)
    argv = build_command(target, ["cat", "--", "/x"], ENV)
    line = remote_command_line(["pct", "exec", "201", "--keep-env", "1", "--", "cat", "--", "/x"], ENV)
    assert argv == ["/usr/bin/ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=7", "-l", "root", "-p", "2222", "pve1", "--", line]
    assert "-t" not in argv and "-tt" not in argv
    assert shlex.split(line) == [
        "env", "-i", "-C", "/",
        "HOME=/root", "LANG=C.UTF-8", "LOGNAME=root", "PATH=" + CLEAN_PATH, "USER=root",
        "pct", "exec", "201", "--keep-env", "1", "--", "cat", "--", "/x",
    ]


def test_ssh_argv_without_user_and_local_target() -> None:
    argv = ssh_argv(PctTarget(vmid=200, node="n"), "true")
    assert argv == ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "n", "--", "true"]
    with pytest.raises(ValueError):
        ssh_argv(PctTarget(vmid=200), "true")


def test_ssh_argv_node_address_keeps_node_as_destination() -> None:
    argv = ssh_argv(PctTarget(vmid=200, node="pve-a", node_address="fe80::1%eth0", node_user="root"), "true")
    assert argv == ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "HostName=fe80::1%%eth0", "-l", "root",
                    "pve-a", "--", "true"]
    assert parse_node("192.0.2.11", "pct_node_address") == "192.0.2.11"
    with pytest.raises(PctOptionError, match="pct_node_address"):
        parse_node("-oProxyCommand=x", "pct_node_address")


@given(ARGV)
@settings(max_examples=300)
def test_remote_line_round_trips_through_shlex(argv: list[str]) -> None:
    line = remote_command_line(pct_exec_argv(REMOTE, argv), ENV)
    assert shlex.split(line)[-len(argv):] == argv


def _recorder(tmp_path: Path) -> tuple[Path, Path]:
    """A program that writes its argv, NUL-terminated, as raw bytes."""
    record = tmp_path / "argv.bin"
    script = tmp_path / "record"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        f"with open({str(record)!r}, 'wb') as out:\n"
        "    out.write(b''.join(os.fsencode(a) + b'\\0' for a in sys.argv[1:]))\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script, record


def _through_posix_sh(tmp_path: Path, argv: list[str]) -> list[bytes]:
    """Run the remote command line as sshd would (``sh -c LINE``); return what pct received."""
    script, record = _recorder(tmp_path)
    target = PctTarget(vmid=200, pct_path=str(script), node="pve1")
    line = remote_command_line(pct_exec_argv(target, argv), remote_environment(target))
    subprocess.run([b"/bin/sh", b"-c", os.fsencode(line)], check=True, env={}, cwd=tmp_path)
    return record.read_bytes().split(b"\0")[:-1]


def test_hostile_arguments_pass_posix_sh_byte_exact(tmp_path: Path) -> None:
    argv = [*HOSTILE, "\udcff\udcfe raw bytes"]
    received = _through_posix_sh(tmp_path, argv)
    assert received == [b"exec", b"200", b"--keep-env", b"1", b"--", *(os.fsencode(a) for a in argv)]
    assert not Path("/tmp/pwned").exists()


def test_hostile_arguments_reach_sudo_byte_exact(tmp_path: Path) -> None:
    """With node_become the recorder stands in for sudo: it gets -n -- pct exec ... and every argument byte-exact."""
    script, record = _recorder(tmp_path)
    target = PctTarget(vmid=200, node="pve1", node_user="trainops", node_become=True, node_become_exe=str(script))
    line = remote_command_line(pct_exec_argv(target, HOSTILE), remote_environment(target))
    subprocess.run([b"/bin/sh", b"-c", os.fsencode(line)], check=True, env={}, cwd=tmp_path)
    assert record.read_bytes().split(b"\0")[:-1] == [b"-n", b"--", b"pct", b"exec", b"200", b"--keep-env", b"1", b"--",
                                                     *(os.fsencode(a) for a in HOSTILE)]
    assert not Path("/tmp/pwned").exists()


@given(ARGV)
@settings(max_examples=25)
def test_any_arguments_pass_posix_sh_byte_exact(tmp_path_factory: pytest.TempPathFactory, argv: list[str]) -> None:
    received = _through_posix_sh(tmp_path_factory.mktemp("sh"), argv)
    assert received[5:] == [os.fsencode(a) for a in argv]


def test_resolve_local_pct(tmp_path: Path) -> None:
    assert resolve_local_pct("sh") in {"/usr/bin/sh", "/bin/sh"}
    assert resolve_local_pct("no-such-pct-here") is None
    program = tmp_path / "pct"
    program.write_text("#!/bin/sh\n", encoding="utf-8")
    assert resolve_local_pct(str(program)) is None
    program.chmod(0o755)
    assert resolve_local_pct(str(program)) == str(program)


def test_printable_survives_undecodable_bytes() -> None:
    assert printable(["pct", "exec", "a b", "\udcff"]) == "pct exec 'a b' '\ufffd'"


def test_describe() -> None:
    assert PctTarget(vmid=200).describe() == "container 200"
    assert PctTarget(vmid=200, node="pve1").describe() == "container 200 on node pve1"
    assert PctTarget(vmid=200).describe_node() == "the local node"
