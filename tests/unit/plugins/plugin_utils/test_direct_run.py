# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""_direct_run on the controller: the options checked as AnsibleModule checks them (compared with the real module,
run as Ansible runs it, its options on stdin), the target's answer read, the target's Python found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core before 2.19 templates every string
    def trust_as_template(value: str) -> str:  # type: ignore[misc]
        return value

from ansible_collections.trainops.pct_launch.plugins.module_utils import _session_info, _tmux_run
from ansible_collections.trainops.pct_launch.plugins.module_utils._prepare_check import ARGUMENT_SPEC
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._direct_run import interpreter, parse, run_module, validate

NAME = "trainops.pct_launch.prepare_info"
MODULES = Path(__file__).resolve().parents[4] / "plugins" / "modules"


def module_answer(args: t.Mapping[str, t.Any], module: str = "prepare_info") -> dict[str, t.Any]:
    """The real module's result for ``args`` (AnsibleModule reads them from stdin when run as a script)."""
    root = Path(os.environ["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep)[0])  # tests/conftest.py sets it
    env = dict(os.environ, PYTHONPATH=str(root))
    internal = {"_ansible_module_name": f"trainops.pct_launch.{module}"}
    try:  # ansible-core 2.21 and later add invocation to a result only when asked to
        C.config.get_config_value("INJECT_INVOCATION")
        internal["_ansible_inject_invocation"] = True
    except AnsibleError:
        pass
    payload = {"ANSIBLE_MODULE_ARGS": dict(args, **internal)}
    proc = subprocess.run([sys.executable, str(MODULES / f"{module}.py")], input=json.dumps(payload).encode(), capture_output=True, env=env,
                          timeout=60, check=False)
    return dict(json.loads(proc.stdout.decode().strip().splitlines()[-1]))


@pytest.mark.parametrize("args", [
    {"bogus": 1, "workdir": "/w"},
    {"venv_site_packages": "maybe"},
    {"venv_requirements": "numpy", "files": "not a list"},
    {"files": [{"dest": "/x"}, "no dict"]},
    {"venv_requirements": {"numpy": 1}},
])
def test_wrong_options_get_the_modules_own_message(args: dict[str, t.Any]) -> None:
    dummy, dummy_secrets, message = validate(NAME, ARGUMENT_SPEC, args, {})
    answer = module_answer(args)
    assert answer.get("failed") is True, answer
    assert message is not None and message.split(" Valid booleans")[0] == answer["msg"].split(" Valid booleans")[0]


@pytest.mark.parametrize("args", [
    {"log_path": "/w/train.log"},
    {"lines": "many"},
    {"bogus": 1, "session_name": "train"},
    {"history": "maybe"},
])
def test_tmux_session_info_rules_give_the_modules_own_message(args: dict[str, t.Any]) -> None:
    dummy, dummy_secrets, message = validate("trainops.pct_launch.tmux_session_info", _session_info.ARGUMENT_SPEC, args, _session_info.RULES)
    answer = module_answer(args, "tmux_session_info")
    assert answer.get("failed") is True, answer
    assert message is not None and message.split(" Valid booleans")[0] == answer["msg"].split(" Valid booleans")[0]


def test_right_options_get_the_modules_defaults(tmp_path: Path) -> None:
    args = {"workdir": str(tmp_path), "venv_requirements": ["numpy==1.*"], "venv_site_packages": "yes"}
    params, secrets, message = validate(NAME, ARGUMENT_SPEC, args, {})
    assert message is None and secrets == set()
    assert params == module_answer(args)["invocation"]["module_args"]
    assert params["venv_site_packages"] is True and params["tmux_min_version"] == "3.0"


def test_a_rule_of_the_spec_is_kept() -> None:
    spec = {"command": {"type": "str"}, "argv": {"type": "list", "elements": "str"}, "token": {"type": "str", "no_log": True}}
    dummy, secrets, message = validate("x", spec, {"command": "a", "argv": ["b"], "token": "s3cret"}, {"mutually_exclusive": [("command", "argv")]})
    assert message == "parameters are mutually exclusive: command|argv" and secrets == {"s3cret"}


def test_the_answer_is_the_last_json_line() -> None:
    res = {"rc": 0, "stdout": 'noise\n{"not": json\n{"changed": false, "prepared": true}\n', "stderr": ""}
    assert parse(res, "/usr/bin/python3") == {"changed": False, "prepared": True}


@pytest.mark.parametrize("stderr", ["/bin/sh: 1: /opt/py/bin/python3: not found\n",
                                    "sh: /opt/py/bin/python3: No such file or directory\n",
                                    "bash: /opt/py/bin/python3: command not found\n"])
def test_a_missing_interpreter_is_named(stderr: str) -> None:
    result = parse({"rc": 127, "stdout": "", "stderr": stderr}, "/opt/py/bin/python3")
    assert result["failed"] is True and result["rc"] == 127 and result["module_stderr"] == stderr
    assert result["msg"].startswith("The module interpreter '/opt/py/bin/python3' was not found.")


def test_no_answer_is_a_module_failure_with_what_the_target_printed() -> None:
    result = parse({"rc": 1, "stdout": "  File \"<stdin>\", line 1\nSyntaxError: invalid syntax\n", "stderr": "boom"}, "/usr/bin/python3")
    assert result["failed"] is True and result["msg"].startswith("MODULE FAILURE")
    assert result["module_stdout"].endswith("SyntaxError: invalid syntax\n") and result["module_stderr"] == "boom" and result["rc"] == 1


class Action:  # pylint: disable=too-few-public-methods
    """What interpreter() reads of an action plugin: its templar."""

    def __init__(self, variables: dict[str, t.Any]) -> None:
        self._templar = Templar(loader=DataLoader(), variables=variables)


@pytest.mark.parametrize(("task_vars", "expected"), [
    ({"ansible_python_interpreter": "/usr/bin/python3"}, "/usr/bin/python3"),
    ({"ansible_python_interpreter": trust_as_template("{{ py }}"), "py": "/opt/py/bin/python3"}, "/opt/py/bin/python3"),
    ({"ansible_python_interpreter": "auto", "ansible_facts": {"discovered_interpreter_python": "/usr/bin/python3.11"}}, "/usr/bin/python3.11"),
    ({"ansible_facts": {"discovered_interpreter_python": "/usr/bin/python3.12"}}, "/usr/bin/python3.12"),
    ({"ansible_python_interpreter": "auto_silent"}, None),
    ({}, None),
    ({"ansible_python_interpreter": "/usr/bin/env python3"}, None),
    ({"ansible_python_interpreter": "python3"}, None),
])
def test_the_targets_python_is_the_one_a_module_would_get(task_vars: dict[str, t.Any], expected: str | None) -> None:
    assert interpreter(Action(task_vars), task_vars) == expected


class FakeAction:
    """What run_module uses of an action plugin: the task, the connection, and the module run it falls back to."""

    def __init__(self, async_val: int, native_async: bool = False) -> None:
        self._task = SimpleNamespace(async_val=async_val, delegate_to=None)
        self._connection = SimpleNamespace(has_native_async=native_async, _shell=SimpleNamespace(tmpdir="/tmp/ansible-tmp-x"))
        self.runs: list[dict[str, t.Any]] = []
        self.removed: list[str] = []

    def _execute_module(self, **kwargs: t.Any) -> dict[str, t.Any]:
        self.runs.append(kwargs)
        return {"ansible_job_id": "j1", "started": 1} if kwargs["wrap_async"] else {"changed": False}

    def _remove_tmp_path(self, path: str) -> None:
        self.removed.append(path)


@pytest.mark.parametrize(("async_val", "native", "wrapped"), [(30, False, True), (30, True, False), (0, False, False)])
def test_a_task_the_direct_run_cannot_take_runs_the_module_as_the_normal_action_does(async_val: int, native: bool, wrapped: bool) -> None:
    action = FakeAction(async_val, native)
    if not async_val:  # not pipelined: no direct run either
        action._is_pipelining_enabled = lambda *args: False  # type: ignore[attr-defined]  # pylint: disable=protected-access
    result = run_module(action, NAME, "_prepare_check", ARGUMENT_SPEC, {"workdir": "/w"}, {})
    assert [run["wrap_async"] for run in action.runs] == [wrapped] and action.runs[0]["module_name"] == NAME
    assert action.runs[0]["module_args"] == {"workdir": "/w"}
    assert ("ansible_job_id" in result) is wrapped
    assert action.removed == ([] if wrapped else ["/tmp/ansible-tmp-x"]), "an async job's files stay for async_wrapper"


def test_only_env_values_are_hidden_not_public_env_values() -> None:
    """Ansible masks a no_log value wherever it appears in a result: public_env's (NODE_RANK 0) must not be among them."""
    args = {"session_name": "rank", "command": "torchrun train.py", "log_path": "/w/rank.log",
            "env": {"WANDB_API_KEY": "s3cret"}, "public_env": {"NODE_RANK": "0", "NNODES": "4", "MASTER_PORT": "29500"}}
    params, secrets, message = validate("trainops.pct_launch.tmux_session", _tmux_run.ARGUMENT_SPEC, args, _tmux_run.RULES)
    assert message is None and secrets == {"s3cret"}, (message, secrets)
    assert params["public_env"] == {"NODE_RANK": "0", "NNODES": "4", "MASTER_PORT": "29500"}
