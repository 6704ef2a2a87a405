# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for trainops.pct_launch.tmux_session_info with pct replaced by a local ``sh -c``."""

from __future__ import annotations

import json
import subprocess
import typing as t
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.trainops.pct_launch.plugins.module_utils._pct import ContainerNotFound
from ansible_collections.trainops.pct_launch.plugins.modules import tmux_session_info


def private_tmux(program: str) -> str:
    """The program with tmux talking to the test's private server (TMUX_TMPDIR) instead of root's default one."""
    patched = (program.replace('tm() { env -i PATH="$PATH" HOME=/root tmux -u "$@"; }', 'tm() { tmux -u "$@"; }')
               .replace('TMUX_ENV = {"PATH": PATH, "HOME": "/root"}', 'TMUX_ENV = None'))
    assert 'env -i PATH="$PATH" HOME=/root tmux' not in patched and '"HOME": "/root"}' not in patched
    return patched


class LocalContainer:
    """Runs programs here instead of in a container (private tmux socket dir); counts the calls."""

    def __init__(self, tmp_path: Path, error: Exception | None = None, fail: bool = False) -> None:
        self.calls = 0
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TMUX_TMPDIR": str(tmp_path), "LANG": "C.UTF-8"}
        self.error = error
        self.fail = fail

    def __call__(self, module: t.Any, vmid: int, program: str, stdin_data: bytes = b"", pct_path: str = "pct",
                 timeout: float | None = None) -> tuple[int, str, str]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        if self.fail:
            program = "echo 'sh: 9: Syntax error' >&2; exit 2\n" + program
        proc = subprocess.run(["/bin/sh", "-c", private_tmux(program)], capture_output=True, encoding="utf-8", errors="surrogateescape",
                              env=self.env, stdin=subprocess.DEVNULL, timeout=60, check=False)
        return proc.returncode, proc.stdout, proc.stderr


def run_module(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], container: LocalContainer,
               **args: t.Any) -> dict[str, t.Any]:
    """Run main() with these arguments; return its JSON result."""
    monkeypatch.setattr(tmux_session_info, "run_in_container", container)
    with patch_module_args(args), pytest.raises(SystemExit):
        tmux_session_info.main()
    return json.loads(capsys.readouterr().out)


def test_one_finished_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t.log"
    log.write_text("### trainops.pct_launch: session=t\n" + "".join(f"line {i}\n" for i in range(30)))
    (tmp_path / "t.log.exit").write_text("session_name=t\nexit_status=0\nended_at=2025-01-01T00:00:09Z\n")
    container = LocalContainer(tmp_path)
    result = run_module(monkeypatch, capsys, container, vmid=250, session_name="t", log_path=str(log), _ansible_check_mode=True)
    assert container.calls == 1 and result["changed"] is False
    session = result["session"]
    assert session["state"] == "finished" and session["exit_status"] == 0 and len(session["log_tail"]) == 20
    assert session["log_tail"][-1] == "line 29" and result["sessions"] == [session]


def test_no_server_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_module(monkeypatch, capsys, LocalContainer(tmp_path), vmid=250)
    assert not result.get("failed") and result["sessions"] == [] and result["tmux"] in ("no_server", "missing")
    assert "session" not in result


def test_pct_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    error = ContainerNotFound(251, "no such container on this node (Configuration file 'nodes/n/lxc/251.conf' does not exist)", 2)
    result = run_module(monkeypatch, capsys, LocalContainer(tmp_path, error=error), vmid=251, session_name="x")
    assert result["failed"] and result["msg"].startswith("Cannot report tmux session x in container 251: no such container")


def test_program_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_module(monkeypatch, capsys, LocalContainer(tmp_path, fail=True), vmid=250)
    assert result["failed"]
    assert result["msg"] == "Cannot report the tmux sessions of container 250: the report program failed (exit status 2): sh: 9: Syntax error"


def test_bad_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    container = LocalContainer(tmp_path)
    result = run_module(monkeypatch, capsys, container, vmid=250, session_name="bad name")
    assert result["failed"] and result["msg"].startswith("Cannot use option session_name 'bad name'") and container.calls == 0
