# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the tmux_session module's main(): options, the launch on this host, results and errors.

Most tests replace ``launch`` (tested in test_tmux_job.py) with a recorder that answers with given
facts; the last ones run the real launch with a tmux server of the test's own.
"""

from __future__ import annotations

import json
import os
import shutil
import typing as t
import uuid
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_cli, _tmux_outcome, _tmux_run
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_target import JobError
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import LaunchSpec
from ansible_collections.trainops.pct_launch.plugins.modules import tmux_session

ARGS = {"session_name": "train", "command": "python train.py", "log_path": "/srv/train.log"}
HOSTNAME = "ct-unit-201"
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None or os.geteuid() != 0, reason="needs tmux and root")


class Launches:
    """Stands in for ``launch``: records (spec, check_mode), answers with ``facts`` or raises ``error``."""

    def __init__(self, facts: dict[str, str] | None = None, error: JobError | None = None) -> None:
        self.facts = facts or {}
        self.error = error
        self.calls: list[tuple[LaunchSpec, bool]] = []

    def __call__(self, spec: LaunchSpec, check_mode: bool = False) -> dict[str, str]:
        self.calls.append((spec, check_mode))
        if self.error is not None:
            raise self.error
        return dict(self.facts)


@pytest.fixture(autouse=True)
def on_this_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The module's run root in the test's temp dir, and a fixed host name for its messages."""
    monkeypatch.setattr(_tmux_run, "run_root", lambda: str(tmp_path / "run"))
    monkeypatch.setattr(_tmux_outcome, "hostname", lambda: HOSTNAME)
    return tmp_path / "run"


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: dict[str, t.Any], launches: Launches) -> dict[str, t.Any]:
    """Run main() with ``args`` and ``launch`` replaced; return its JSON result."""
    monkeypatch.setattr(_tmux_run, "launch", launches)
    with patch_module_args(args), pytest.raises(SystemExit):
        tmux_session.main()
    return json.loads(capsys.readouterr().out)


def test_the_options_have_no_container() -> None:
    assert not {"vmid", "pct_path", "timeout"} & set(tmux_session.ARGUMENT_SPEC)
    assert tmux_session.ARGUMENT_SPEC["session_name"]["required"] is True


@pytest.mark.parametrize("change, fragment", [
    ({"session_name": "bad.name"}, "Invalid session_name 'bad.name'"),
    ({"log_path": "rel.log"}, "Invalid log_path 'rel.log'"),
    ({"chdir": "~/w"}, "Invalid chdir '~/w'"),
    ({"argv": ["x"]}, "parameters are mutually exclusive: command|argv"),
    ({"command": None}, "command, argv"),
    ({"log_path": None}, "log_path"),
    ({"log_keep": 0}, "Invalid log_keep 0"),
    ({"vmid": 201}, "Unsupported parameters for (basic.py) module: vmid."),
    ({"vmid": 201, "pct_path": "/usr/sbin/pct"}, "Unsupported parameters for (basic.py) module: pct_path, vmid."),
    ({"timeout": 120}, "Unsupported parameters for (basic.py) module: timeout."),
])
def test_bad_input_fails_before_anything_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], change: dict[str, t.Any],
                                              fragment: str) -> None:
    launches = Launches()
    args = {k: v for k, v in {**ARGS, **change}.items() if v is not None}
    result = run(monkeypatch, capsys, args, launches)
    assert result["failed"] and fragment in result["msg"], result["msg"]
    assert launches.calls == []


@pytest.mark.parametrize("change, fragment", [
    ({"notify_url_keep": True}, "notify_url_keep is True but all of the following are missing: notify_url"),
    ({"restart_on_boot": True, "env": {"TOKEN": "s3cr3t-v"}}, "Invalid env (TOKEN) together with restart_on_boot"),
    ({"restart_on_boot": True, "restart_limit": 0}, "Invalid restart_limit 0 with restart_on_boot"),
    ({"restart_on_boot": True}, "Invalid restart_on_boot: the container's boot knows only the jobs of launches as root"),
    ({"notify_url": "https://h.example/T", "notify_url_keep": True, "restart_on_boot": True},
     "Invalid restart_on_boot and notify_url_keep: the container's boot knows only the jobs of launches as root"),
])
def test_the_options_for_the_next_boot_are_refused_where_they_cannot_work(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                                          change: dict[str, t.Any], fragment: str) -> None:
    launches = Launches()
    result = run(monkeypatch, capsys, {**ARGS, **change}, launches)  # the run root of the test: not root's
    assert result["failed"] and fragment in result["msg"] and "s3cr3t-v" not in json.dumps(result), result["msg"]
    assert launches.calls == []


def test_restart_on_and_its_window_are_options_with_their_choices() -> None:
    spec = tmux_session.ARGUMENT_SPEC
    assert spec["restart_on"] == {"type": "list", "elements": "str", "default": ["any"],
                                  "choices": ["any", "exit_status", "signal", "oom_kill", "cuda_oom", "nccl", "python_exception", "torchelastic",
                                              "stall"]}
    assert spec["restart_limit_window"] == {"type": "float", "default": 0}


@pytest.mark.parametrize("change, fragment", [
    ({"restart": "on_failure", "restart_on": ["nccl", "segfault"]}, "value of restart_on must be one or more of: any, exit_status"),
    ({"restart_on": ["nccl"]}, "Invalid restart_on nccl with restart never"),
    ({"restart": "on_failure", "restart_limit_window": -5}, "Invalid restart_limit_window -5"),
])
def test_bad_restart_settings_fail_before_anything_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                        change: dict[str, t.Any], fragment: str) -> None:
    launches = Launches()
    result = run(monkeypatch, capsys, {**ARGS, **change}, launches)
    assert result["failed"] and fragment in result["msg"], result["msg"]
    assert launches.calls == []


def test_restart_on_and_its_window_reach_the_supervisor(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    launches = Launches({"before_state": "absent", "result": "started", "pane_pid": "42", "state": "running"})
    args = {**ARGS, "restart": "on_failure", "restart_on": ["nccl", "oom_kill", "signal", "torchelastic"], "restart_limit_window": "3600"}
    assert run(monkeypatch, capsys, args, launches)["changed"]
    [(spec, _check)] = launches.calls
    assert dict(spec.supervise)["restart_on"] == ("nccl", "oom_kill", "signal", "torchelastic")
    assert dict(spec.supervise)["restart_limit_window"] == 3600.0


def test_the_gpu_idle_watchdog_reaches_the_supervisor_only_with_gpus(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert (tmux_session.ARGUMENT_SPEC["gpu_idle_timeout"], tmux_session.ARGUMENT_SPEC["gpu_idle_utilization"]) == (
        {"type": "float", "default": 0}, {"type": "float", "default": 5})
    refused = Launches()
    result = run(monkeypatch, capsys, {**ARGS, "gpu_idle_timeout": 600}, refused)
    assert result["failed"] and "Invalid gpu_idle_timeout 600 without gpus" in result["msg"], result["msg"]
    assert refused.calls == []
    launches = Launches({"before_state": "absent", "result": "started", "pane_pid": "42", "state": "running"})
    assert run(monkeypatch, capsys, {**ARGS, "gpus": 2, "gpu_idle_timeout": "600", "gpu_idle_utilization": 10}, launches)["changed"]
    [(spec, _check)] = launches.calls
    assert (dict(spec.supervise)["gpu_idle_timeout"], dict(spec.supervise)["gpu_idle_utilization"]) == (600.0, 10.0)


def test_a_launch_by_root_may_ask_for_the_next_boot(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_tmux_run, "run_root", lambda: _tmux_run.RUN_ROOT)
    launches = Launches({"before_state": "absent", "result": "started", "pane_pid": "42", "state": "running"})
    args = {**ARGS, "restart_on_boot": True, "notify_url": "https://h.example/T0KEN", "notify_url_keep": True, "public_env": {"E": "3"}}
    result = run(monkeypatch, capsys, args, launches)
    assert result["changed"] and "T0KEN" not in json.dumps(result)
    [(spec, _check)] = launches.calls
    assert (dict(spec.supervise)["restart_on_boot"], dict(spec.supervise)["notify_url_keep"]) == (True, True)


def test_started(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], on_this_host: Path) -> None:
    launches = Launches({"tmux_version": "3.3a", "before_state": "absent", "result": "started", "pane_pid": "42", "started_at": "T",
                         "state": "running", "rotated_log": ""})
    result = run(monkeypatch, capsys, {**ARGS, "env": {"SECRET": "s3cr3t-v"}}, launches)
    assert result["changed"] and result["pane_pid"] == 42 and result["state"] == "running" and result["started_at"] == "T"
    assert result["tmux_version"] == "3.3a" and result["rotated_log"] is None and "diff" not in result and result["proven"] is False
    assert result["log_path"] == "/srv/train.log" and result["session_name"] == "train"
    assert "s3cr3t-v" not in json.dumps(result)
    [(spec, check_mode)] = launches.calls
    assert check_mode is False and spec.run_root == str(on_this_host) and spec.run_dir == str(on_this_host / "train")
    assert spec.command == "python train.py" and dict(spec.env) == {"SECRET": "s3cr3t-v"}


def test_check_mode_and_diff(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    launches = Launches({"before_state": "absent", "would": "start"})
    result = run(monkeypatch, capsys, {**ARGS, "_ansible_check_mode": True, "_ansible_diff": True}, launches)
    assert result["changed"] and launches.calls[0][1] is True
    assert result["diff"]["before"] == "state: absent\n" and "state: running" in result["diff"]["after"]
    assert result["proven"] is None


def test_stop(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    launches = Launches({"before_state": "running", "result": "stopped", "exit_status": "143", "killed": "0", "stopped_log": "/srv/train.log"})
    result = run(monkeypatch, capsys, {"session_name": "train", "state": "stopped"}, launches)
    assert result["changed"] and result["state"] == "finished" and result["exit_status"] == 143 and result["log_path"] == "/srv/train.log"
    assert launches.calls[0][0].action == "stop" and launches.calls[0][0].log_path is None


def test_a_failed_launch_is_explained_and_names_the_host(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    launches = Launches(error=JobError("chdir_missing", "directory /w does not exist"))
    result = run(monkeypatch, capsys, {**ARGS, "chdir": "/w"}, launches)
    assert result["failed"] and result["error"] == "chdir_missing" and result["session_name"] == "train"
    assert result["msg"] == f"Cannot start session train in host {HOSTNAME}: directory /w does not exist; create it or fix chdir"
    assert result["target"] == f"host {HOSTNAME}", "the words the action plugin replaces with the container's VMID"


def test_tmux_missing_is_explained(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(monkeypatch, capsys, ARGS, Launches(error=JobError("tmux_missing", "tmux is not installed")))
    assert result["failed"] and result["error"] == "tmux_missing"
    assert result["msg"] == f"Cannot start session train in host {HOSTNAME}: tmux is not installed there: apply role trainops.pct_launch.tmux"


def test_a_conflict_names_the_difference(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    summary = json.dumps({"command": "python old.py", "argv": None, "chdir": None, "venv": None, "user": None,
                          "log_path": "/srv/train.log", "env_salt": "s", "env": {}})
    error = JobError("spec_conflict", "session train is running with a different spec", running_summary=summary)
    result = run(monkeypatch, capsys, ARGS, Launches(error=error))
    assert result["error"] == "spec_conflict" and 'command differs (running: "python old.py", wanted: "python train.py")' in result["msg"]


# ---- the real launch on this host, with a tmux server of the test's own ----


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch) -> t.Iterator[str]:
    """A tmux server of the test's own (killed at the end, with any job it left)."""
    socket = f"trainops-ut-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", socket)
    try:
        yield socket
    finally:
        _tmux_cli.Tmux().run("kill-server")
        Path("/tmp", f"tmux-{os.geteuid()}", socket).unlink(missing_ok=True)


def invoke(capsys: pytest.CaptureFixture[str], args: dict[str, t.Any]) -> dict[str, t.Any]:
    """Run the real main() with ``args``; return its JSON result."""
    with patch_module_args(args), pytest.raises(SystemExit):
        tmux_session.main()
    return json.loads(capsys.readouterr().out)


@needs_tmux
def test_start_then_unchanged_then_stop_on_this_host(server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    del server
    log = tmp_path / "train.log"
    args = {"session_name": "ut-module", "command": "echo up; exec sleep 30", "log_path": str(log)}
    started = invoke(capsys, args)
    assert started["changed"] and started["state"] == "running" and started["pane_pid"] > 1 and started["tmux_version"], started
    again = invoke(capsys, args)
    assert not again["changed"] and again["pane_pid"] == started["pane_pid"] and again["proven"] is False, again
    stopped = invoke(capsys, {"session_name": "ut-module", "state": "stopped"})
    assert stopped["changed"] and stopped["state"] == "finished" and stopped["exit_status"] == 143 and stopped["log_path"] == str(log), stopped
    assert log.read_text(encoding="utf-8").startswith("### trainops.pct_launch: session=ut-module started_at=")
    assert (tmp_path / "run" / "ut-module" / "exit").is_file(), "the run dir is the module's run_root()"


@pytest.mark.parametrize("wait, fragment", [
    ({"pattern": "step ("}, "Cannot use option wait.pattern 'step ('"),
    ({"fail_pattern": "[Trace"}, "Cannot use option wait.fail_pattern '[Trace'"),
    ({"timeout": 0}, "Cannot use option wait.timeout 0"),
    ({"sleep": 2}, "Cannot use option wait.sleep 2"),
    ({"tail_lines": -1}, "Cannot use option wait.tail_lines -1"),
    ({"offset": 5}, "Unsupported parameters for (basic.py) module: wait.offset."),
    ({"fleet_id": "f1"}, "Unsupported parameters for (basic.py) module: wait.fleet_id."),
    ({"wait_until": "ready"}, "value of wait_until must be one of: started, finished"),
])
def test_bad_wait_options_fail_before_anything_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                    wait: dict[str, t.Any], fragment: str) -> None:
    launches = Launches()
    result = run(monkeypatch, capsys, {**ARGS, "wait": wait}, launches)
    assert result["failed"] and fragment in result["msg"], result["msg"]
    assert launches.calls == []


def test_no_wait_without_a_start(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    found = Launches({"before_state": "running", "result": "unchanged", "pane_pid": "42", "started_at": "T", "state": "running"})
    assert "wait" not in run(monkeypatch, capsys, {**ARGS, "wait": {"pattern": "x"}}, found)
    planned = Launches({"before_state": "absent", "would": "start"})
    assert "wait" not in run(monkeypatch, capsys, {**ARGS, "wait": {"pattern": "x"}, "_ansible_check_mode": True}, planned)


@needs_tmux
def test_a_start_with_wait_proves_it_in_the_same_run(server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    del server
    args = {"session_name": "ut-wait", "command": "echo warming; sleep 0.3; echo 'step 1 loss 2.5'; exec sleep 30",
            "log_path": str(tmp_path / "train.log"), "wait": {"pattern": r"step \d+ loss", "timeout": 30}}
    started = invoke(capsys, args)
    assert started["changed"] and started["wait"]["verdict"] == "started", started
    assert started["wait"]["matched_line"] == "step 1 loss 2.5" and started["wait"]["proof_recorded"] is True
    again = invoke(capsys, args)
    assert not again["changed"] and again["proven"] is True and "wait" not in again, again


@needs_tmux
def test_a_job_that_dies_during_the_first_chunk_reports_its_exit_status(
        server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    del server
    args = {"session_name": "ut-wait-dies", "command": "echo 'Traceback: no data'; exit 3", "log_path": str(tmp_path / "train.log"),
            "wait": {"pattern": "step", "timeout": 30}}
    started = invoke(capsys, args)
    assert started["changed"] and started["wait"]["verdict"] == "died" and started["wait"]["exit_status"] == 3, started
    assert started["wait"]["failed"] and "exit status 3" in started["wait"]["msg"] and "Traceback: no data" in started["wait"]["msg"]


@needs_tmux
def test_a_first_chunk_that_fails_unforeseen_still_returns_the_start(
        server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    del server
    from ansible_collections.trainops.pct_launch.plugins.module_utils import _log_chunk  # pylint: disable=import-outside-toplevel

    def broken(params: t.Mapping[str, t.Any], check_mode: bool) -> dict[str, t.Any]:
        raise PermissionError(13, "Permission denied", params["log_path"])

    monkeypatch.setattr(_log_chunk, "chunk", broken)
    args = {"session_name": "ut-wait-broken", "command": "exec sleep 30", "log_path": str(tmp_path / "train.log"),
            "wait": {"timeout": 30}}
    started = invoke(capsys, args)
    assert started["changed"] and started["state"] == "running" and started["pane_pid"] > 1, started
    assert started["wait"] == {"first_chunk_error": f"PermissionError: [Errno 13] Permission denied: '{tmp_path / 'train.log'}'"}
