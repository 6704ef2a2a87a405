# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Running ansible-playbook from the tests and reading what the trainops_results test callback wrote.

The callback (tests/integration/files/playbooks/callback_plugins/trainops_results.py) writes
``{"plays": [{"tasks": [{"name": ..., "hosts": {HOST: RESULT}}]}], "stats": {...}}``.
"""

from __future__ import annotations

import shutil
import sys
import typing as t
from pathlib import Path


def ansible_playbook() -> str:
    """The ansible-playbook of the running venv."""
    program = Path(sys.executable).with_name("ansible-playbook")
    return str(program) if program.exists() else (shutil.which("ansible-playbook") or "ansible-playbook")


def task_results(results: t.Mapping[str, t.Any], name: str, host: str) -> list[dict[str, t.Any]]:
    """Every result of the task (or handler) called ``name`` on ``host``, in order."""
    return [task["hosts"][host] for play in results.get("plays", []) for task in play["tasks"]
            if task["name"] == name and host in task["hosts"]]


def results_by_host(results: t.Mapping[str, t.Any], name: str) -> dict[str, dict[str, t.Any]]:
    """The last result of the task called ``name``, per host."""
    found: dict[str, dict[str, t.Any]] = {}
    for play in results.get("plays", []):
        for task in play["tasks"]:
            if task["name"] == name:
                found.update(task["hosts"])
    return found
