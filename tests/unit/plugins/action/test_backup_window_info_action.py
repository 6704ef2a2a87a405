# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the action plugin of trainops.pct_launch.backup_window_info: the node asked through the pct
connection's ``node_command`` (once, with the reader on standard input), a host that is the node itself, a host that
is neither, and a node that does not answer."""

from __future__ import annotations

import json
import typing as t
from unittest.mock import MagicMock

import pytest
from ansible.errors import AnsibleConnectionFailure

from ansible_collections.trainops.pct_launch.plugins.action.backup_window_info import MODULE_NAME, ActionModule, node_program

NOW = 1796385600  # Friday 2026-12-04 12:00 UTC
REPORT = {"pve_dir": "/etc/pve", "is_pve": True, "now": NOW, "utc_offset": "+0000", "timezone": "Etc/UTC", "nodename": "pve1",
          "login": "root", "node": "pve1", "errors": {},
          "files": {"jobs.cfg": "vzdump: backup-1\n\tschedule 21:00\n\tmode stop\n\tvmid 200\n", "vzdump.cron": None,
                    "user.cfg": "", "vzdump.conf": None}}


class Node:
    """A pct connection's ``node_command``: records each call, answers ``answer`` (or raises it)."""

    def __init__(self, answer: t.Any) -> None:
        self.answer = answer
        self.calls: list[tuple[list[str], bytes | None]] = []
        self._shell = MagicMock()  # what ActionBase.run looks at

    def node_command(self, argv: list[str], in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        self.calls.append((argv, in_data))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def make_action(args: dict[str, t.Any], connection: t.Any) -> ActionModule:
    task = MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.action = MODULE_NAME
    return ActionModule(task, connection, MagicMock(), loader=None, templar=None, shared_loader_obj=None)


def test_a_container_asks_its_node_once() -> None:
    node = Node((0, (json.dumps(REPORT) + "\n").encode(), b""))
    result = make_action({"time_limit": 10 * 3600, "pve_dir": "/var/lib/pve-standin"}, node).run(
        task_vars={"inventory_hostname": "ct200", "pct_vmid": 200, "pct_node": "pve1"})
    [(argv, in_data)] = node.calls
    assert argv == ["python3", "-", "--pve-dir", "/var/lib/pve-standin", "--vmid", "200"] and in_data == node_program()
    assert result["checked"] is True and result["changed"] is False and result["horizon"] == 36000
    [window] = result["windows"]
    assert window["id"] == "backup-1" and window["due_in"] == 9 * 3600
    assert window["message"].startswith("Backup job backup-1 stops CT 200 in 9 h: mode stop, schedule '21:00' ")


def test_without_a_time_limit_a_day() -> None:
    node = Node((0, json.dumps(REPORT).encode(), b""))
    result = make_action({}, node).run(task_vars={"pct_vmid": "200"})
    assert result["horizon"] == 86400 and len(result["windows"]) == 1
    assert node.calls[0][0][3] == "/etc/pve"


@pytest.mark.parametrize(("answer", "words"), [
    (AnsibleConnectionFailure("ssh: connect to host pve1 port 22: Connection refused"),
     "Cannot read the backup jobs of node pve1: ssh: connect to host pve1 port 22: Connection refused"),
    ((127, b"", b"sh: 1: python3: not found\n"),
     "Cannot read the backup jobs of node pve1: python3 there failed (exit status 127): sh: 1: python3: not found: the node needs python3"),
    ((0, b"not json\n", b""), "Cannot read the backup jobs of node pve1: python3 there failed (exit status 0): not json")])
def test_a_node_that_does_not_answer_is_a_problem_not_a_failure(answer: t.Any, words: str) -> None:
    result = make_action({}, Node(answer)).run(task_vars={"pct_vmid": 200, "pct_node": "pve1"})
    assert not result.get("failed") and result["checked"] is False and result["problems"] == [words]


def test_a_host_that_is_the_node_runs_the_module() -> None:
    connection = MagicMock(spec=["_shell"])  # no node_command: no pct connection
    action = make_action({"vmid": 200}, connection)
    calls: list[dict[str, t.Any]] = []

    def execute(**kwargs: t.Any) -> dict[str, t.Any]:
        calls.append(kwargs)
        return {"changed": False, "node_files": REPORT}

    action._execute_module = execute  # type: ignore[method-assign]  # pylint: disable=protected-access
    result = action.run(task_vars={"inventory_hostname": "pve1"})
    assert calls[0]["module_name"] == MODULE_NAME and calls[0]["module_args"] == {"vmid": 200}
    assert result["checked"] is True and [window["id"] for window in result["windows"]] == ["backup-1"]
    assert "node_files" not in result


def test_a_host_that_cannot_run_it() -> None:
    action = make_action({"vmid": 200}, MagicMock(spec=["_shell"]))
    failure = {"failed": True, "msg": "MODULE FAILURE", "rc": 127}
    action._execute_module = lambda **_kwargs: failure  # type: ignore[method-assign]  # pylint: disable=protected-access
    result = action.run(task_vars={"inventory_hostname": "pve1"})
    assert result["failed"] is True and result["msg"].startswith("Cannot read the backup jobs of host pve1: the module could not run there")


def test_any_other_host_is_not_checked() -> None:
    result = make_action({"time_limit": 90.5}, MagicMock(spec=["_shell"])).run(task_vars={"inventory_hostname": "gpu-server-1"})
    assert result == {"changed": False, "checked": False, "node": None, "timezone": None, "now": None, "jobs": [], "windows": [],
                      "problems": [], "horizon": 91,
                      "reason": "not a container of the trainops.pct_launch.pct connection, and no vmid given"}


def test_options_that_are_no_numbers() -> None:
    result = make_action({"time_limit": "soon"}, Node((0, b"{}", b""))).run(task_vars={"inventory_hostname": "ct200", "pct_vmid": 200})
    assert result["failed"] is True and result["msg"].startswith("Cannot check the backup windows of ct200: time_limit and vmid must be numbers")
