# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The filters of launch.yml (plugins/filter/launch_fleet.py): their checks, and each one through a real Jinja template."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from jinja2.nativetypes import NativeEnvironment

from ansible_collections.trainops.pct_launch.plugins.filter.launch_fleet import FilterModule, job_gpu_count, launch_fleet


@pytest.mark.parametrize(("gpus", "expected"), [
    (None, 1), ("all", 3), ("ALL", 3), (2, 2), ("2", 2), ([0, 1], 2), ("0,1,2", 3), ("GPU-a", 1), (["GPU-a"], 1),
])
def test_job_gpu_count(gpus: object, expected: int) -> None:
    assert job_gpu_count(gpus, [{"index": 0}, {"index": 1}, {"index": 2}]) == expected


def test_job_gpu_count_refuses_what_is_no_request() -> None:
    with pytest.raises(AnsibleFilterError, match="job_gpus must be all, a count or a list"):
        job_gpu_count({"a": 1})


def test_launch_fleet_checks_its_input() -> None:
    with pytest.raises(AnsibleFilterError, match="its input must be the list of the play's hosts"):
        launch_fleet("ct200", {}, "train")
    with pytest.raises(AnsibleFilterError, match="master_port must be a port number, not 'x'"):
        launch_fleet(["ct200"], {"ct200": {}}, "train", master_port="x")


def test_the_filters_in_a_template() -> None:
    environment = NativeEnvironment()
    environment.filters.update(FilterModule().filters())
    variables = {
        "hosts": ["ct200", "ct201"],
        "hv": {"ct200": {"pct_vmid": 200, "job_launch": {"changed": True, "pane_pid": 5, "log_path": "/l"}},
               "ct201": {"pct_vmid": 201, "job_launch": {"failed": True, "msg": "tmux is missing"}, "job_launch_failure": {}}},
    }
    found = environment.from_string("{{ hosts | launch_fleet(hv, 'train', all_or_nothing=true) }}").render(variables)
    assert found["failures"] == {"ct200": "train in CT 200: started (job_all_or_nothing: ct201 failed)",
                                 "ct201": "train in CT 201: failed: tmux is missing"}
    assert found["to_stop"] == ["ct200"]
    assert environment.from_string("{{ 'all' | job_gpu_count([1, 2]) }}").render() == 2
