# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Running ansible-playbook from the tests and reading what the trainops_results test callback wrote.

The callback (tests/integration/files/playbooks/callback_plugins/trainops_results.py) writes
``{"plays": [{"tasks": [{"name": ..., "hosts": {HOST: RESULT}}]}], "stats": {...}}``.
"""

from __future__ import annotations

import re
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


def exec_calls(stdout: str, host: str) -> dict[str, int]:
    """``EXEC`` lines of ``host`` per task (or handler) name in the screen output of a ``-vvv`` run.

    With the pct connection and pipelining each is one ``pct exec``: the pct calls of a module task.
    The linear strategy prints a task's header before any of its output, so the lines between two
    headers belong to the first.
    """
    counts: dict[str, int] = {}
    task = ""
    for line in stdout.splitlines():
        header = re.match(r"^(?:TASK|RUNNING HANDLER) \[(?:[^\]]* : )?(.*)\] \**$", line)
        if header:
            task = header.group(1)
        elif line.startswith(f"<{host}> EXEC "):
            counts[task] = counts.get(task, 0) + 1
    return counts
