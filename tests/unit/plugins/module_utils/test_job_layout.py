# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The target's layout has one owner (``_job_layout.py``), and a session of an earlier release is still known.

An earlier release ran its supervisor as ``RUN_DIR/parent.py``; this one as ``RUN_DIR/supervisor.py``. Such a
session keeps running in users' containers across the upgrade: the test starts one with the earlier name (the
launch's own code, its supervisor's file name set back) and checks that it is found "the same job running",
reported, found by the log wait and stopped as before, and that the next start leaves one supervisor file.
"""

from __future__ import annotations

import ast
import os
import pwd
import shutil
import subprocess
import typing as t
import uuid
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import (
    _job_layout,
    _job_stage,
    _log_poll,
    _supervisor_entry,
    _tmux_cli,
    _tmux_job,
    _tmux_sessions,
)
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import CLEAN_PATH, read_exit_record
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_job import launch
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import LaunchSpec, spec_from_params

MODULE_UTILS = Path(_job_layout.__file__).parent
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None or os.geteuid() != 0, reason="needs tmux and root")


def _code_strings(path: Path) -> t.Iterator[tuple[int, str]]:
    """(line, text) of every string constant of a file that is not a docstring."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_no_other_file_spells_the_run_root_or_a_tmux_option() -> None:
    words = ("/run/trainops", "@trainops_", "/var/lib/trainops", "trainops-boot", "/etc/systemd")
    found = [f"{path.name}:{line}: {text!r}" for path in sorted(MODULE_UTILS.glob("*.py")) if path.name != "_job_layout.py"
             for line, text in _code_strings(path) if any(word in text for word in words)]
    assert not found, found


def test_the_entry_point_finds_the_lib_folder_the_stage_writes() -> None:
    # the entry runs before RUN_DIR/lib is on sys.path: it cannot import _job_layout and spells the name itself
    assert _supervisor_entry.LIB_DIR == _job_layout.LIB_DIR
    paths = [path for path, _text in _job_stage.program_files("/r")]
    assert paths[0] == "/r/supervisor.py" and all(path.startswith("/r/lib/") for path in paths[1:])


def test_run_root_of_root_and_of_other_users(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert _job_layout.run_root() == "/run/trainops"
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert _job_layout.run_root() == str(tmp_path / "trainops")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/dir")
    assert _job_layout.run_root() == "/tmp/trainops-1234"


@pytest.fixture()
def tmux_socket(monkeypatch: pytest.MonkeyPatch) -> t.Iterator[str]:
    """A tmux server of the test's own, killed at the end."""
    socket = f"trainops-ut-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", socket)
    yield socket
    _tmux(socket, "kill-server")
    Path("/tmp", f"tmux-{os.geteuid()}", socket).unlink(missing_ok=True)


def _tmux(socket: str, *args: str) -> str:
    env = {"PATH": CLEAN_PATH, "HOME": pwd.getpwuid(os.geteuid()).pw_dir or "/"}
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, env=env, check=False).stdout


def _earlier_release_session(spec: LaunchSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start ``spec`` as an earlier release did: its supervisor is ``RUN_DIR/parent.py``."""
    with monkeypatch.context() as earlier:
        earlier.setattr(_tmux_job, "SUPERVISOR_FILE", "parent.py")
        earlier.setattr(_job_stage, "SUPERVISOR_FILE", "parent.py")
        assert launch(spec)["result"] == "started"
    assert Path(spec.run_dir, "parent.py").is_file() and not Path(spec.run_dir, "supervisor.py").exists()


@needs_tmux
def test_a_session_an_earlier_release_started_is_known_reported_waited_for_and_stopped(
        tmp_path: Path, tmux_socket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    spec = spec_from_params({"session_name": "ut-earlier", "command": "echo ready; exec sleep 60",
                             "log_path": str(tmp_path / "earlier.log")})._replace(run_root=str(root))
    _earlier_release_session(spec, monkeypatch)
    assert "/parent.py " in _tmux(tmux_socket, "display-message", "-p", "-t", "=ut-earlier:", "#{pane_start_command}")
    again = launch(spec)
    assert (again["result"], again["before_state"]) == ("unchanged", "running"), "the same job running"
    monkeypatch.setattr(_tmux_sessions, "run_root", lambda: str(root))
    _status, (facts,) = _tmux_sessions.report("ut-earlier", None, 5)
    entry = _tmux_sessions.session_entry(facts)
    assert (entry["state"], entry["managed"], entry["log_path"]) == ("running", True, spec.log_path), entry
    assert entry["supervisor_state"] in ("starting", "running"), "its state.json is read"
    monkeypatch.setattr(_log_poll, "run_root", lambda: str(root))
    assert _log_poll.find_pane(_tmux_cli.Tmux(), "ut-earlier")[::2] == ("alive", spec.log_path)
    stopped = launch(spec._replace(state="stopped"))
    assert (stopped["result"], stopped["exit_status"]) == ("stopped", "143"), stopped
    record = read_exit_record(str(spec.log_path), spec.run_dir) or {}
    assert (record.get("stopped_by"), record.get("stop_signal")) == ("trainops", "TERM"), record
    assert launch(spec)["result"] == "started"
    assert Path(spec.run_dir, "supervisor.py").is_file() and not Path(spec.run_dir, "parent.py").exists()
    assert "/supervisor.py " in _tmux(tmux_socket, "display-message", "-p", "-t", "=ut-earlier:", "#{pane_start_command}")
    launch(spec._replace(state="stopped"))
