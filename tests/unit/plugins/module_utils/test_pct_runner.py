# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for module_utils/_pct.py: argv, bootstrap (run with real shells), probe, errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils import _pct

SHELLS = [[s] for s in ("dash", "bash") if shutil.which(s)] + ([["busybox", "sh"]] if shutil.which("busybox") else [])
HOSTILE = ["it's", '"q"', "$(touch pwned)", "`touch pwned`", "new\nline", "*", "-n", "-", "--", "%s%d", "\\", "ü✓", "\r", "\x01\x7f"]


def _echo_program(values: list[str]) -> str:
    """A program printing each value between markers (values single-quoted by the test, as the modules do)."""
    import shlex  # pylint: disable=import-outside-toplevel
    return "".join("printf '<%s>\\n' " + shlex.quote(v) + "\n" for v in values)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_bootstrap_runs_the_program_byte_exact(shell: list[str]) -> None:
    program = _echo_program(HOSTILE) + "read -r line; printf 'stdin=<%s>\\n' \"$line\"; exit 3\n"
    data = _pct.bootstrap(program.encode(), b"from stdin\n")
    proc = subprocess.run([*shell, "-s"], input=data, capture_output=True, timeout=30, check=False)
    assert proc.returncode == 3, proc.stderr
    expected = "".join(f"<{v}>\n" for v in HOSTILE) + "stdin=<from stdin>\n"
    assert proc.stdout.decode() == expected


def test_bootstrap_is_short_printable_ascii_lines() -> None:
    program = ("x" * 1000 + "\n" + "".join(chr(c) for c in range(1, 256)) + "\n-m -s\n").encode("utf-8")
    for line in _pct.bootstrap(program).split(b"\n"):
        assert len(line) < 1024
        assert all(0x20 <= b < 0x7F for b in line), line


def test_no_printf_format_starts_with_a_dash() -> None:
    program = ("a" * (_pct._CHUNK - 1) + "\n-m x\n").encode()  # pylint: disable=protected-access
    for line in _pct.bootstrap(program).decode().splitlines():
        if line.startswith("printf "):
            assert not line.startswith("printf '-")
    proc = subprocess.run(["sh", "-s"], input=_pct.bootstrap(b"echo start\n" + program.replace(b"-m x", b"echo -m-x")),
                          capture_output=True, timeout=30, check=False)
    assert proc.stdout.decode().splitlines()[-1] == "-m-x"


@settings(max_examples=60)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=300), max_size=6))
def test_bootstrap_roundtrip_property(values: list[str]) -> None:
    program = _echo_program(values)
    proc = subprocess.run(["sh", "-s"], input=_pct.bootstrap(program.encode()), capture_output=True, timeout=30, check=False)
    assert proc.stdout.decode() == "".join(f"<{v}>\n" for v in values)


def test_program_commands_cannot_swallow_the_program() -> None:
    program = "cat > /dev/null\necho still-here\n"
    proc = subprocess.run(["sh", "-s"], input=_pct.bootstrap(program.encode()), capture_output=True, timeout=30, check=False)
    assert proc.stdout == b"still-here\n"


def test_pct_exec_argv_is_fixed() -> None:
    assert _pct.pct_exec_argv("/usr/sbin/pct", 201) == ["/usr/sbin/pct", "exec", "201", "--", "/bin/sh", "-s"]


@pytest.mark.parametrize("stderr, cls", [
    ("Configuration file 'nodes/pve1/lxc/201.conf' does not exist\n", _pct.ContainerNotFound),
    ("container '201' not running!\n", _pct.ContainerNotRunning),
    ("lxc-attach: 201: attach.c: Failed to get init pid\n", _pct.ContainerNotRunning),
    ('lxc-attach: 201: attach.c: Failed to exec "/bin/sh"\n', _pct.ContainerShellError),
])
def test_classify_pct_errors(stderr: str, cls: type) -> None:
    rc = 126 if cls is _pct.ContainerShellError else 2
    if "init pid" in stderr:
        rc = 1
    error = _pct.classify(201, rc, stderr)
    assert isinstance(error, cls)
    assert str(error).startswith("Cannot run a program in container 201: ")
    assert error.message("Cannot start session x in") .startswith("Cannot start session x in container 201: ")


def test_classify_ignores_other_containers_and_program_failures() -> None:
    assert _pct.classify(201, 2, "Configuration file 'nodes/pve1/lxc/202.conf' does not exist") is None
    assert _pct.classify(201, 0, "container '201' not running!") is None
    assert _pct.classify(201, 29, "trainops:error=spec_conflict") is None


def test_not_running_message_says_how_to_fix() -> None:
    error = _pct.classify(201, 2, "container '201' not running!")
    assert "pct start 201" in error.cause


def test_missing_pct_says_set_pct_path() -> None:
    with pytest.raises(_pct.PctNotFound) as info:
        _pct.run_in_container(object(), 201, "true", pct_path="/nonexistent/pct")
    assert "not a Proxmox node? set pct_path" in str(info.value)
    with pytest.raises(_pct.PctNotFound):
        _pct.run_in_container(object(), 201, "true", pct_path="pct-does-not-exist-here")


def test_runner_gets_argv_payload_and_timeout() -> None:
    calls = []

    def runner(argv, stdin, timeout, env):
        calls.append((argv, stdin, timeout, env))
        return 0, b"trainops:a=b\n", b""

    assert _pct.run_in_container(runner, 201, "echo hi\n", timeout=5) == (0, "trainops:a=b\n", "")
    argv, stdin, timeout, env = calls[0]
    assert argv == ["pct", "exec", "201", "--", "/bin/sh", "-s"] and timeout == 5
    assert stdin == _pct.bootstrap(b"echo hi\n") and "PATH" in env


def test_runner_errors_are_classified() -> None:
    def runner(argv, stdin, timeout, env):
        return 255, b"", b"container '201' not running!\n"

    with pytest.raises(_pct.ContainerNotRunning):
        _pct.run_in_container(runner, 201, "true")


def _fake_pct(tmp_path: Path, body: str) -> str:
    path = tmp_path / "pct"
    path.write_text("#!" + sys.executable + "\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return str(path)


LOCAL_PCT = """import os, sys
assert sys.argv[1:5] == ["exec", "201", "--", "/bin/sh"], sys.argv
assert not os.isatty(0) and not os.isatty(1) and not os.isatty(2)
os.execvp("sh", ["sh", "-s"])
"""

# Throws away what arrives in the first 0.6 s, as lxc-attach does when it sets up a terminal.
FLUSHING_PCT = """import os, select, subprocess, sys, time
end = time.monotonic() + 0.6
while time.monotonic() < end:
    if select.select([0], [], [], 0.05)[0]:
        os.read(0, 65536)
os.execvp("sh", ["sh", "-s"])
"""


def test_default_runner_talks_to_a_local_shell(tmp_path: Path) -> None:
    pct = _fake_pct(tmp_path, LOCAL_PCT)
    rc, out, err = _pct.run_in_container(None, 201, "echo \"$((6*7))\"; echo err >&2; exit 4\n", pct_path=pct, timeout=20)
    assert rc == 4 and out.splitlines()[-1] == "42" and err == "err\n"


def test_probe_is_repeated_until_the_shell_answers(tmp_path: Path) -> None:
    pct = _fake_pct(tmp_path, FLUSHING_PCT)
    started = time.monotonic()
    rc, out, _err = _pct.run_in_container(None, 201, "echo payload-arrived\n", pct_path=pct, timeout=20)
    assert rc == 0 and "payload-arrived" in out.splitlines()
    assert time.monotonic() - started < 5


def test_big_program_and_big_output_do_not_deadlock(tmp_path: Path) -> None:
    pct = _fake_pct(tmp_path, LOCAL_PCT)
    program = "x='" + "y" * 300_000 + "'\nprintf '%s' \"$x\"\nprintf '%s' \"$x\" >&2\n"
    rc, out, err = _pct.run_in_container(None, 201, program, pct_path=pct, timeout=60)
    assert rc == 0 and out.endswith("y" * 300_000) and len(err) == 300_000


def test_timeout_raises_pct_timeout(tmp_path: Path) -> None:
    pct = _fake_pct(tmp_path, LOCAL_PCT)
    with pytest.raises(_pct.PctTimeout) as info:
        _pct.run_in_container(None, 201, "sleep 30\n", pct_path=pct, timeout=1)
    assert "raise timeout" in str(info.value)


def test_environment_keeps_the_callers_and_adds_sbin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/opt/x")
    monkeypatch.setenv("PVE_STANDIN_ROOT", "/tmp/node")
    env = _pct.pct_environment()
    assert env["PATH"].startswith("/opt/x:") and "/usr/sbin" in env["PATH"]
    assert env["PVE_STANDIN_ROOT"] == "/tmp/node"
    assert os.environ["PATH"] == "/opt/x"


def test_not_found_message_names_the_node() -> None:
    error = _pct.classify(201, 2, "Configuration file 'nodes/pve-b/lxc/201.conf' does not exist")
    assert error is not None and error.cause.startswith("no such container on this node, pve-b (Configuration file 'nodes/pve-b/lxc/201.conf'")


# Gives sh a pty, as pct exec does under a terminal (the stand-in's pty knob): echo on, an interactive shell.
PTY_PCT = """import os, sys
sys.path.insert(0, %r)
from standin_verbs import run_with_pty
sys.exit(run_with_pty(["sh", "-s"], dict(os.environ)))
""" % str(Path(__file__).resolve().parents[4] / "tools" / "pve_standin")


def test_output_lines_stay_clean_under_a_pty(tmp_path: Path) -> None:
    """Echo and prompts are off before the program is sent: no output line is polluted (20 runs)."""
    pct = _fake_pct(tmp_path, PTY_PCT)
    program = "x='" + "y" * 20_000 + "'\n" + "".join(f"echo trainops:line{i}=v{i}\n" for i in range(5))
    for _run in range(20):
        rc, out, _err = _pct.run_in_container(None, 201, program, pct_path=pct, timeout=60)
        lines = [line.rstrip("\r") for line in out.split("\n")]
        assert rc == 0 and [f"trainops:line{i}=v{i}" for i in range(5)] == [x for x in lines if "trainops:line" in x], out[-2000:]


def test_container_status_reads_pct_status() -> None:
    calls = []

    def runner(argv, stdin, timeout, env):
        calls.append(argv)
        return (0, b"status: stopped\n", b"") if argv[2] == "201" else (2, b"", b"Configuration file 'nodes/n/lxc/202.conf' does not exist\n")

    assert _pct.container_status(runner, 201) == "stopped" and calls == [["pct", "status", "201"]]
    assert _pct.container_status(runner, 202) is None
    assert _pct.container_status(object(), 201, pct_path="/nonexistent/pct") is None
