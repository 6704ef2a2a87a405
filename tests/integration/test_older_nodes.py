# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""README's example launch on an older Proxmox VE node: the stand-in's pct as pve-container 5.0.8 (knob pve_container).

pve-container before 5.0.9 (Proxmox VE 7.4, 8.0 and 8.1) has no ``pct exec --keep-env`` and refuses it before anything
runs in the container (tools/pve_standin/standin_faults.py says from which sources). ``playbooks/launch.yml`` with
``examples/standin/job.yml`` runs with a static inventory as README's (the connection's default ``pct_keep_env: auto``:
each task's first call refused, the same call again without the option, one warning naming the node); then
``status.yml`` and ``stop.yml`` run with the ``pct_containers`` inventory, which learns from ``pct help exec`` that the node's
pct has no ``--keep-env`` and sets ``pct_keep_env: false``: no call refused. The knobs reach the stand-in through a
``pct_path`` wrapper (conftest.knob_pct), so the node's other users see none of them. Container 560, destroyed afterwards.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from tests.compat.launch_helpers import ROOT, STEP_LINE, ansible_env, owned_container, run, write_inventory

from .conftest import knob_pct

pytestmark = pytest.mark.integration

VMID = 560
HOSTNAME = "trainops-older-node"
JOB = ROOT / "examples" / "standin" / "job.yml"
WARNING = "pct on the local node does not know the option --keep-env of pct exec"


def exec_calls(log: pathlib.Path) -> list[list[str]]:
    """The pct exec calls of container VMID in the call log (argv after ``pct``), and empties the log."""
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    calls = [json.loads(line)["argv"][1:] for line in lines]
    return [call for call in calls if call[:2] == ["exec", str(VMID)]]


def test_example_launch_status_stop_on_pve_container_5_0_8(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "calls.jsonl"
    pct_path = knob_pct(tmp_path, pve_container="5.0.8", call_log=str(log))
    env = ansible_env(ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    static = write_inventory(tmp_path / "inventory.yml", VMID, f"ct{VMID}")
    data = yaml.safe_load(static.read_text(encoding="utf-8"))
    data["training"]["hosts"][f"ct{VMID}"]["pct_path"] = pct_path
    static.write_text(yaml.safe_dump(data), encoding="utf-8")
    source = tmp_path / "older.pct_containers.yml"
    source.write_text(yaml.safe_dump({
        "plugin": "trainops.pct_launch.pct_containers", "pct_path": pct_path, "status": ["running"],
        "compose": {"ansible_python_interpreter": "'/usr/bin/python3'"}, "groups": {"training": f"pct_vmid == {VMID}"},
    }), encoding="utf-8")

    def playbook(name: str, inventory: pathlib.Path) -> str:
        argv = ["ansible-playbook", "-i", str(inventory), str(ROOT / "playbooks" / name), "-e", f"@{JOB}"]
        result = run(argv, env=env, cwd=tmp_path)
        return result.stdout + result.stderr

    with owned_container(VMID, HOSTNAME):
        log.unlink(missing_ok=True)
        launched = playbook("launch.yml", static)
        assert f"train-example in CT {VMID}: started" in launched and "failed=0" in launched
        assert " ".join(launched.split()).count(WARNING) == 1, "one warning per run, naming the node"
        calls = exec_calls(log)
        refused = [i for i, call in enumerate(calls) if call[2:4] == ["--keep-env", "1"]]
        assert refused and all(calls[i + 1] == calls[i][:2] + calls[i][4:] for i in refused), "each refused call ran again without it"
        print(f"launch.yml: {len(calls)} pct exec, {len(refused)} of them refused (one per task)")

        status = playbook("status.yml", source)
        assert f"CT {VMID} session train-example: running" in status and STEP_LINE.search(status), status[-3000:]
        stopped = playbook("stop.yml", source)
        assert "changed=1" in stopped
        after = playbook("status.yml", source)
        assert f"CT {VMID} session train-example: finished" in after
        for text in (status, stopped, after):
            assert WARNING not in " ".join(text.split()), "the inventory's pct_keep_env: false saves the refused calls"
        calls = exec_calls(log)
        assert calls and all(call[2] == "--" for call in calls), calls
        print(f"status, stop, status with the pct_containers inventory: {len(calls)} pct exec, none refused")
