# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The example launch, end to end, with the ansible-core on PATH.

The compat stage of tests/run.sh runs this with the oldest supported
ansible-core (.venv-2.17, TRAINOPS_EXPECT_ANSIBLE_CORE=2.17.): the checkout's
playbooks/launch.yml with examples/standin/job.yml on a fresh Debian 12
container of its own, then status.yml (the job runs and logs `step` lines),
stop.yml, and status.yml again (the job has ended).

Environment: TRAINOPS_COMPAT_VMID (default 520).
"""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.compat.launch_helpers import ROOT, STEP_LINE, ansible_core_version, ansible_env, owned_container, run, write_inventory

pytestmark = pytest.mark.integration

VMID = int(os.environ.get("TRAINOPS_COMPAT_VMID", "520"))
HOSTNAME = "trainops-compat"
JOB = ROOT / "examples" / "standin" / "job.yml"


def test_ansible_core_version() -> None:
    """The stage really runs the ansible-core it names."""
    expected = os.environ.get("TRAINOPS_EXPECT_ANSIBLE_CORE", "")
    version = ansible_core_version()
    print(f"ansible-core {version}")
    assert version.startswith(expected), f"ansible-playbook is ansible-core {version}, expected {expected}*"


def test_example_launch_status_stop(tmp_path: pathlib.Path) -> None:
    inventory = write_inventory(tmp_path / "inventory.yml", VMID, f"ct{VMID}")
    env = ansible_env(ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))

    def playbook(name: str) -> str:
        argv = ["ansible-playbook", "-i", str(inventory), str(ROOT / "playbooks" / name), "-e", f"@{JOB}"]
        return run(argv, env=env, cwd=tmp_path).stdout

    with owned_container(VMID, HOSTNAME):
        launched = playbook("launch.yml")
        assert "TASK [Start the job in its detached tmux session]" in launched
        assert "Wait for the job's log to prove it started" not in launched, "the launch task proves the start itself"
        assert f"train-example in CT {VMID}: started" in launched
        assert "failed=0" in launched

        status = playbook("status.yml")
        assert f"CT {VMID} session train-example: running" in status
        assert STEP_LINE.search(status), "status.yml shows no `step N loss X` line of the job"

        stopped = playbook("stop.yml")
        assert "changed=1" in stopped

        after = playbook("status.yml")
        assert f"CT {VMID} session train-example: finished" in after
