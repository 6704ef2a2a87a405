# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the action plugin of trainops.pct_launch.tmux_session: env only when pipelined, the container named.

Ansible's normal action (which would send and run the module) is replaced by a recorder that answers
with a given module result.
"""

from __future__ import annotations

import typing as t
from unittest.mock import MagicMock

import pytest
from ansible.plugins.action import normal

from ansible_collections.trainops.pct_launch.plugins.action.tmux_session import ActionModule, name_the_container, unpipelined_env_message

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
