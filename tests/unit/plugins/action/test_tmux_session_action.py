# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the action plugin of trainops.pct_launch.tmux_session: env only when pipelined, the container named,
the proof of option wait gone on from the module's first chunk.

Ansible's normal action (which would send and run the module) is replaced by a recorder that answers
with a given module result, and wait_for_log's chunks by a script of chunk results.
"""

from __future__ import annotations

import inspect
import typing as t
from unittest.mock import MagicMock

import pytest
from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import normal

from ansible_collections.trainops.pct_launch.plugins.action.tmux_session import ActionModule, name_the_container, unpipelined_env_message
from ansible_collections.trainops.pct_launch.plugins.action.wait_for_log import ActionModule as WaitAction
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import ContainerNotRunning

FAILED = {"failed": True, "msg": "Cannot start session train in host CT241: directory /w does not exist; create it or fix chdir",
          "error": "chdir_missing", "target": "host CT241"}


class Module:
    """Stands in for the normal action: records each run, answers with ``result``."""

    def __init__(self, result: dict[str, t.Any]) -> None:
        self.result = result
        self.runs: list[dict[str, t.Any] | None] = []

    def __call__(self, action: t.Any, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        self.runs.append(task_vars)
        return dict(self.result)


def make_action(args: dict[str, t.Any], pipelining: bool, monkeypatch: pytest.MonkeyPatch, module: Module) -> ActionModule:
    """The action plugin with a mocked task and connection, pipelining as given, the module run by ``module``."""
    task = MagicMock()
    task.args = args
    task.async_val = 0
    action = ActionModule(task, MagicMock(), MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    monkeypatch.setattr(action, "_is_pipelining_enabled", lambda *args, **kwargs: pipelining)
    monkeypatch.setattr(normal.ActionModule, "run", module)
    return action


@pytest.mark.parametrize("args", [
    {"session_name": "train", "command": "x", "log_path": "/l", "env": {"TOKEN": "s3cr3t"}},
    # the removed node path (vmid) no longer lets env travel without pipelining: the module refuses vmid anyway
    {"session_name": "train", "command": "x", "log_path": "/l", "env": {"TOKEN": "s3cr3t"}, "vmid": 241},
])
def test_env_without_pipelining_is_refused_before_anything_is_sent(monkeypatch: pytest.MonkeyPatch, args: dict[str, t.Any]) -> None:
    module = Module({"changed": True})
    result = make_action(args, False, monkeypatch, module).run(task_vars={"inventory_hostname": "ct241", "pct_vmid": 241})
    assert result == {"failed": True, "changed": False, "msg": unpipelined_env_message(args, "ct241")}
    assert result["msg"].startswith("Refusing to run session train on ct241 with env: pipelining is off for this host")
    assert "s3cr3t" not in result["msg"] and module.runs == []


@pytest.mark.parametrize("args, pipelining", [
    ({"session_name": "train", "command": "x", "log_path": "/l", "env": {"TOKEN": "s3cr3t"}}, True),
    ({"session_name": "train", "command": "x", "log_path": "/l"}, False),
    ({"session_name": "train", "command": "x", "log_path": "/l", "env": {}}, False),
])
def test_the_module_runs_when_no_env_value_would_be_written(monkeypatch: pytest.MonkeyPatch, args: dict[str, t.Any], pipelining: bool) -> None:
    module = Module({"changed": True, "state": "running"})
    result = make_action(args, pipelining, monkeypatch, module).run(task_vars={"inventory_hostname": "ct241"})
    assert result == {"changed": True, "state": "running"} and len(module.runs) == 1


def test_a_failure_on_a_container_names_the_container(monkeypatch: pytest.MonkeyPatch) -> None:
    module = Module(FAILED)
    result = make_action({"session_name": "train", "command": "x", "log_path": "/l"}, True, monkeypatch, module).run(
        task_vars={"inventory_hostname": "ct241", "pct_vmid": 241})
    assert result == {"failed": True, "error": "chdir_missing",
                      "msg": "Cannot start session train in container 241: directory /w does not exist; create it or fix chdir"}


def test_a_failure_on_another_host_keeps_its_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    module = Module(FAILED)
    result = make_action({"session_name": "train", "command": "x", "log_path": "/l"}, True, monkeypatch, module).run(
        task_vars={"inventory_hostname": "gpu-box"})
    assert result["msg"] == FAILED["msg"] and "target" not in result


@pytest.mark.parametrize("result, vmid, msg", [
    (dict(FAILED), 241, "Cannot start session train in container 241: directory /w does not exist; create it or fix chdir"),
    (dict(FAILED), None, FAILED["msg"]),
    (dict(FAILED, msg="Cannot stop session train in host CT241: in host CT241: x"), 7, "Cannot stop session train in container 7: in host CT241: x"),
    (dict(FAILED, msg="no target words here"), 241, "no target words here"),
    ({"failed": True, "msg": "Cannot start session train in host CT241: x"}, 241, "Cannot start session train in host CT241: x"),
])
def test_name_the_container(result: dict[str, t.Any], vmid: int | None, msg: str) -> None:
    named = name_the_container(result, vmid)
    assert named["msg"] == msg and "target" not in named


def test_name_the_container_leaves_other_results_alone() -> None:
    assert name_the_container({"changed": True, "state": "running"}, 241) == {"changed": True, "state": "running"}
    assert name_the_container({"failed": True, "msg": ["not", "text"], "target": "host X"}, 241) == {"failed": True, "msg": ["not", "text"]}


@pytest.mark.parametrize("task_vars, where", [({"inventory_hostname": "ct241", "pct_vmid": 241}, "container 241"),
                                              ({"inventory_hostname": "gpu1"}, "host gpu1")])
def test_a_module_that_could_not_run_names_the_host_and_the_fix(monkeypatch: pytest.MonkeyPatch, task_vars: dict[str, t.Any], where: str) -> None:
    module = Module({"failed": True, "rc": 127, "msg": "The module interpreter '/usr/bin/python3' was not found.",
                     "module_stderr": "/bin/sh: 1: /usr/bin/python3: not found"})
    result = make_action({"session_name": "train", "command": "x", "log_path": "/l"}, True, monkeypatch, module).run(task_vars=task_vars)
    assert result["failed"] and len(module.runs) == 1, result
    assert result["msg"].startswith(f"Cannot run session train in {where}: the module could not run there: "
                                    "The module interpreter '/usr/bin/python3' was not found."), result["msg"]
    assert "needs Python 3.7 or later" in result["msg"], result["msg"]


def test_a_module_error_with_its_code_is_not_rewritten(monkeypatch: pytest.MonkeyPatch) -> None:
    module = Module({"failed": True, "error": "log_exists", "msg": "Cannot start session train in host h: log exists", "target": "host h"})
    result = make_action({"session_name": "train", "command": "x", "log_path": "/l"}, True, monkeypatch, module).run(task_vars={"inventory_hostname": "h"})
    assert result == {"failed": True, "error": "log_exists", "msg": "Cannot start session train in host h: log exists"}


# ---- option wait: the proof goes on from the module's first chunk ----

LAUNCHED = {"changed": True, "state": "running", "session_name": "train", "log_path": "/w/train.log", "pane_pid": 42, "proven": False}
WAIT_ARGS = {"session_name": "train", "command": "x", "log_path": "/w/train.log", "wait": {"pattern": "step", "timeout": 600}}
CT241 = {"inventory_hostname": "ct241", "pct_vmid": 241}


def chunk(verdict: str, offset: int, elapsed: float = 0.2, **extra: t.Any) -> dict[str, t.Any]:
    """The result of one chunk of wait_for_log's module (as test_wait_for_log_action.py's)."""
    result = {"verdict": verdict, "offset": offset, "log_tail": ["warming up"], "log_path": "/w/train.log", "log_exists": True,
              "log_size": offset, "session_state": "running", "session_alive": True, "tmux_missing": False, "pane_pid": 42,
              "exit_status": None, "ended_at": None, "stopped_by": None, "process_tree": [], "matched_line": None,
              "elapsed": elapsed, "msg": "chunk msg"}
    if verdict not in ("started", "finished"):
        result["failed"] = True
    result.update(extra)
    return result


class Chunks:
    """Stands in for wait_for_log's ``_chunk``: records (args, seconds, offset), answers in turn."""

    def __init__(self, *results: dict[str, t.Any]) -> None:
        self.results = list(results)
        self.calls: list[tuple[dict[str, t.Any], float, int]] = []

    def __call__(self, action: t.Any, args: dict[str, t.Any], task_vars: t.Any, seconds: float, offset: int) -> dict[str, t.Any]:
        self.calls.append((args, seconds, offset))
        answer = self.results.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


def launch_with_wait(monkeypatch: pytest.MonkeyPatch, first: dict[str, t.Any] | None, chunks: Chunks,
                     args: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    """Run the action with option wait: the module answers LAUNCHED (with ``first`` as its wait), then ``chunks``."""
    def chunk(action: t.Any, *chunk_args: t.Any) -> dict[str, t.Any]:  # a function: the class's attribute becomes a method
        return chunks(action, *chunk_args)

    monkeypatch.setattr(WaitAction, "_chunk", chunk)
    module = Module(dict(LAUNCHED, **({"wait": first} if first is not None else {})))
    return make_action(dict(args or WAIT_ARGS), True, monkeypatch, module).run(task_vars=dict(CT241))


def test_a_start_proven_in_the_first_chunk_costs_no_more_call(monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = Chunks()
    result = launch_with_wait(monkeypatch, chunk("started", 80, matched_line="step 1 loss 2.5"), chunks)
    assert chunks.calls == [] and result["changed"] and not result.get("failed") and result["proven"] is True, result
    assert result["wait"]["verdict"] == "started" and result["wait"]["pct_calls"] == 0
    assert result["wait"]["msg"].startswith("Job started in session train in container 241: pattern 'step' matched after 0.2 s")


def test_a_first_chunk_without_verdict_goes_on_from_its_offset_and_time(monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = Chunks(chunk("started", 120, elapsed=1.0, matched_line="step 1"))
    result = launch_with_wait(monkeypatch, chunk("timeout", 30, elapsed=10.0), chunks)
    [(args, seconds, offset)] = chunks.calls
    assert offset == 30 and 0 < seconds <= 10 and args["session_name"] == "train" and args["log_path"] == "/w/train.log"
    assert args["pattern"] == "step" and args["timeout"] == 600
    assert result["proven"] is True and result["wait"]["pct_calls"] == 1 and result["wait"]["elapsed"] >= 10, result


def test_the_first_chunk_counts_in_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = Chunks()
    args = dict(WAIT_ARGS, wait={"pattern": "step", "timeout": 10})
    result = launch_with_wait(monkeypatch, chunk("timeout", 30, elapsed=10.0), chunks, args)
    assert chunks.calls == [] and result["failed"] and result["wait"]["verdict"] == "timeout", result
    assert "within 10 s" in result["msg"] or "10 s" in result["msg"], result["msg"]


def test_a_job_that_died_fails_the_task_with_its_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    died = chunk("died", 60, elapsed=0.4, exit_status=3, session_alive=False, session_state="finished",
                 log_tail=["Traceback (most recent call last):", "ValueError: no data"])
    result = launch_with_wait(monkeypatch, died, Chunks())
    assert result["failed"] and result["changed"] and result["pane_pid"] == 42 and result["proven"] is False, result
    assert result["msg"].startswith("Job did not start in session train in container 241: the job ended with exit status 3"), result["msg"]
    assert "ValueError: no data" in result["msg"] and "ValueError" not in result["reason"] and result["wait"]["exit_status"] == 3


def test_no_wait_for_a_job_found_running_or_in_check_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = Chunks()
    result = launch_with_wait(monkeypatch, None, chunks)
    assert chunks.calls == [] and "wait" not in result and result["proven"] is False


def test_a_node_lost_during_the_wait_is_unreachable_and_keeps_the_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = Chunks(AnsibleConnectionFailure("ssh: connect to host pve2 port 22: Connection refused"))  # type: ignore[arg-type]
    result = launch_with_wait(monkeypatch, chunk("timeout", 30, elapsed=10.0), chunks)
    assert result["unreachable"] and result["changed"] and result["pane_pid"] == 42, result
    assert result["msg"].startswith("Cannot wait for session train in container 241: the wait was cut off"), result["msg"]
    assert "Connection refused" in result["msg"] and "may still run" in result["msg"]


class LostModule(Module):
    """A module run whose connection is lost (``error``)."""

    def __init__(self, error: AnsibleConnectionFailure) -> None:
        super().__init__({})
        self.error = error

    def __call__(self, action: t.Any, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        self.runs.append(task_vars)
        raise self.error


def test_a_node_lost_during_the_launch_with_wait_says_the_job_may_run(monkeypatch: pytest.MonkeyPatch) -> None:
    module = LostModule(AnsibleConnectionFailure("node pve2 cannot be reached: Connection refused"))
    with pytest.raises(AnsibleConnectionFailure) as raised:
        make_action(dict(WAIT_ARGS), True, monkeypatch, module).run(task_vars=dict(CT241))
    text = str(raised.value)
    assert text.startswith("node pve2 cannot be reached: Connection refused. The launch of session train was cut off"), text
    assert "the job may have started and may still run" in text and "playbooks/status.yml" in text, text
    assert len(module.runs) == 1


@pytest.mark.parametrize("error, args", [
    (AnsibleConnectionFailure("node pve2 cannot be reached"), {"session_name": "train", "command": "x"}),
    (ContainerNotRunning("container 241 is not running; start it with 'pct start 241'"), WAIT_ARGS),
])
def test_other_lost_launches_keep_the_connection_s_message(monkeypatch: pytest.MonkeyPatch, error: AnsibleConnectionFailure,
                                                           args: dict[str, t.Any]) -> None:
    with pytest.raises(AnsibleConnectionFailure) as raised:
        make_action(dict(args), True, monkeypatch, LostModule(error)).run(task_vars=dict(CT241))
    assert raised.value is error


def test_a_first_chunk_that_failed_unforeseen_is_waited_for_from_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = Chunks(chunk("started", 90, matched_line="step 1"))
    result = launch_with_wait(monkeypatch, {"first_chunk_error": "PermissionError: ..."}, chunks)
    assert [(offset, args["session_name"]) for args, _seconds, offset in chunks.calls] == [(0, "train")]
    assert result["proven"] is True and result["wait"]["verdict"] == "started" and result["wait"]["pct_calls"] == 1, result


# ansible-core before 2.21 leaves an async task to a connection with native async (no async_wrapper); 2.21 wraps it
# whatever the connection: the action runs the module as the installed normal action does.
NATIVE_ASYNC_UNWRAPPED = "has_native_async" in inspect.getsource(normal.ActionModule.run)


@pytest.mark.parametrize("async_val, native_async, wrapped",
                         [(0, False, False), (60, False, True), (60, True, not NATIVE_ASYNC_UNWRAPPED)])
def test_the_module_runs_as_the_normal_action_runs_it(monkeypatch: pytest.MonkeyPatch, async_val: int, native_async: bool,
                                                      wrapped: bool) -> None:
    """One ``_execute_module`` of the task's module; an async task is passed on as wrap_async (async_wrapper's files stay)."""
    calls: list[dict[str, t.Any]] = []
    removed: list[t.Any] = []
    task = MagicMock()
    task.args = {"session_name": "train", "command": "x", "log_path": "/l"}
    task.async_val = async_val
    task.check_mode = False
    task.action = "trainops.pct_launch.tmux_session"
    connection = MagicMock()
    connection.has_native_async = native_async
    action = ActionModule(task, connection, MagicMock(), loader=None, templar=None, shared_loader_obj=None)

    def execute(**kwargs: t.Any) -> dict[str, t.Any]:
        calls.append(kwargs)
        return {"changed": True, "state": "running"}

    monkeypatch.setattr(action, "_execute_module", execute)
    monkeypatch.setattr(action, "_remove_tmp_path", lambda tmp_path, force=False: removed.append(tmp_path))
    result = action.run(task_vars={"inventory_hostname": "ct241", "pct_vmid": 241})
    assert result["changed"] and result["state"] == "running", result
    assert [bool(call["wrap_async"]) for call in calls] == [wrapped] and calls[0]["task_vars"]["pct_vmid"] == 241
    assert len(removed) == (0 if wrapped else 1)
