# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests of fleet_run's rules: each host's own variables, the hosts left out and why, the summary of the results.

The runs themselves (threads, connections, the module on real containers) are tested in
tests/integration/test_fleet_run.py.
"""

from __future__ import annotations

import typing as t

import pytest
from ansible.template import Templar
from ansible.parsing.dataloader import DataLoader

from ansible_collections.trainops.pct_launch.plugins.action.fleet_run import summary
from ansible_collections.trainops.pct_launch.plugins.module_utils._fleet_spec import ARGUMENT_SPEC, MODULES, module_name
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._fleet_run import CONNECTION, HOST_VARIABLES, host_problem, host_variables


def templar(variables: t.Mapping[str, t.Any]) -> Templar:
    """A templar over ``variables``."""
    return Templar(loader=DataLoader(), variables=dict(variables))


def test_a_host_keeps_none_of_the_task_hosts_own_variables() -> None:
    task_vars = {"inventory_hostname": "ct200", "pct_vmid": 200, "pct_node": "pve-a", "ansible_python_interpreter": "/usr/bin/python3",
                 "job_session_name": "train", "ansible_play_hosts_all": ["ct200", "ct201"]}
    own = {"inventory_hostname": "ct201", "pct_vmid": 201}
    result = host_variables(task_vars, own, HOST_VARIABLES)
    assert result["inventory_hostname"] == "ct201" and result["pct_vmid"] == 201
    assert "pct_node" not in result and "ansible_python_interpreter" not in result  # ct201's node is local, its Python unknown
    assert result["job_session_name"] == "train" and result["ansible_play_hosts_all"] == ["ct200", "ct201"]
    assert task_vars["pct_vmid"] == 200  # the task's own variables are left as they were


@pytest.mark.parametrize(("host_vars", "expected"), [
    ({"ansible_connection": CONNECTION}, None),
    ({"ansible_connection": CONNECTION, "ansible_become": False}, None),
    ({"ansible_connection": "ssh"}, "its ansible_connection is ssh, not trainops.pct_launch.pct"),
    ({}, "its ansible_connection is not set, not trainops.pct_launch.pct"),
    ({"ansible_connection": CONNECTION, "ansible_become": "yes"}, "it asks for become, which fleet_run does not do"),
])
def test_which_hosts_are_left_out(host_vars: dict[str, t.Any], expected: str | None) -> None:
    assert host_problem(host_vars, templar(host_vars)) == expected


def test_the_summary_sorts_the_hosts_by_outcome() -> None:
    results = {"ct1": {"changed": False}, "ct2": {"changed": True, "failed": True, "msg": "died"},
               "ct3": {"changed": False, "failed": True, "unreachable": True, "msg": "not running"}}
    found = summary(results, {"srv": "its ansible_connection is ssh, not trainops.pct_launch.pct"})
    assert found["changed"] is True and found["ok_hosts"] == ["ct1"] and found["failed_hosts"] == ["ct2", "ct3"]
    assert found["unreachable_hosts"] == ["ct3"] and found["left_out"] == {"srv": "its ansible_connection is ssh, not trainops.pct_launch.pct"}
    assert summary({"ct1": {"changed": False}}, {})["changed"] is False


def test_every_module_by_either_name() -> None:
    choices = ARGUMENT_SPEC["module"]["choices"]
    for short in MODULES:
        assert short in choices and f"trainops.pct_launch.{short}" in choices
        assert module_name(short) == module_name(f"trainops.pct_launch.{short}") == short
    assert "command" not in choices and "ansible.builtin.command" not in choices
