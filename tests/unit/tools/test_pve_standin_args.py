# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Argument handling and configuration of the pct stand-in."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[3] / "tools" / "pve_standin"
sys.path.insert(0, str(STANDIN))

# pylint: disable=wrong-import-position
from standin_core import Knobs, Node, PctError, parse_args  # noqa: E402
from standin_image import host_mirrors, release_from, sources_text  # noqa: E402


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
