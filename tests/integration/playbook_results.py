# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Running ansible-playbook from the tests and reading what the trainops_results test callback wrote.

The callback (tests/integration/files/playbooks/callback_plugins/trainops_results.py) writes
``{"plays": [{"tasks": [{"name": ..., "hosts": {HOST: RESULT}}]}], "stats": {...}}``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import typing as t
import uuid
from pathlib import Path


def ansible_playbook() -> str:
    """The ansible-playbook of the running venv."""
    program = Path(sys.executable).with_name("ansible-playbook")
    return str(program) if program.exists() else (shutil.which("ansible-playbook") or "ansible-playbook")


def task_results(results: t.Mapping[str, t.Any], name: str, host: str) -> list[dict[str, t.Any]]:
    """Every result of the task (or handler) called ``name`` on ``host``, in order."""
    return [task["hosts"][host] for play in results.get("plays", []) for task in play["tasks"]
            if task["name"] == name and host in task["hosts"]]


# launch.yml's launch task, and the handler that proves the start of an all-or-nothing or multi-node launch
LAUNCH_TASK = "Start the job in its detached tmux session"
PROOF_HANDLER = "Wait for the job's log to prove it started"
# prepare.yml's check of what the containers lack
PREPARE_TASK = "Find out what the container lacks for the job"


def launch_results(results: t.Mapping[str, t.Any], host: str) -> list[dict[str, t.Any]]:
    """Every tmux_session result of launch.yml's launches on ``host``, in order."""
    return task_results(results, LAUNCH_TASK, host)


def launch_proof(results: t.Mapping[str, t.Any], host: str) -> dict[str, t.Any] | None:
    """The proof of launch.yml's last start on ``host``: the launch task's ``wait`` (tmux_session's option wait, the
    proof of a launch that is no fleet-wide wait), else the handler's result; None when neither ran."""
    launches = [result for result in launch_results(results, host) if isinstance(result.get("wait"), dict)]
    handlers = [result for result in task_results(results, PROOF_HANDLER, host) if result.get("status") != "skipped"]
    if launches:
        return launches[-1]["wait"]
    return handlers[-1] if handlers else None


# launch.yml's summary of the fleet and report of the job: each one task run once, the report a line per container
# where the job runs
SUMMARY_TASK = "Summarize the launch per container"
REPORT_TASK = "Report the job"


def summary_lines(results: t.Mapping[str, t.Any]) -> list[str]:
    """The lines of launch.yml's summary of the fleet (the one run of it that was not skipped)."""
    found = [result for play in results.get("plays", []) for task in play["tasks"] if task["name"] == SUMMARY_TASK
             for result in task["hosts"].values() if result.get("status") != "skipped"]
    assert len(found) == 1, f"the summary ran {len(found)} times: {found}"
    return list(found[0]["msg"])


def report_msg(results: t.Mapping[str, t.Any], host: str) -> str | None:
    """The last report of the job on ``host`` ("Report the job": launch.yml's one task, whose msg is a line per host
    where the job runs, or a task's own result on ``host``); None when there is none (the job does not run there)."""
    found: list[str] = []
    for play in results.get("plays", []):
        for task in play["tasks"]:
            if task["name"] != REPORT_TASK:
                continue
            for where, result in task["hosts"].items():
                if isinstance(result.get("msg"), dict):
                    found.extend(str(line) for name, line in result["msg"].items() if name == host)
                elif where == host and "msg" in result:
                    found.append(str(result["msg"]))
    return found[-1] if found else None


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


CALLBACKS = Path(__file__).resolve().parent / "files" / "playbooks" / "callback_plugins"
PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
PYTHON_IN_TARGET = "/usr/bin/python3"


def container_host(vmid: int, **host_vars: t.Any) -> dict[str, t.Any]:
    """Inventory variables of a stand-in container reached with the collection's pct connection (pipelined)."""
    return {"ansible_connection": "trainops.pct_launch.pct", "pct_vmid": vmid, "ansible_python_interpreter": PYTHON_IN_TARGET,
            "ansible_pipelining": True, **host_vars}


class PlayRun(t.NamedTuple):
    """One finished ansible-playbook run: its process and every task result (trainops_results callback)."""

    proc: subprocess.CompletedProcess[str]
    results: dict[str, t.Any]

    def result(self, task: str, host: str) -> dict[str, t.Any]:
        """The last result of ``task`` on ``host``; fails the test (with the output) when there is none."""
        found = task_results(self.results, task, host)
        assert found, f"no result of {task!r} on {host}:\n{self.proc.stdout[-6000:]}\n{self.proc.stderr[-3000:]}"
        return found[-1]


def run_tasks(folder: Path, hosts: t.Mapping[str, t.Mapping[str, t.Any]], tasks: list[dict[str, t.Any]], *,
              handlers: list[dict[str, t.Any]] | None = None, options: t.Sequence[str] = (),
              env: t.Mapping[str, str] | None = None, timeout: float = 600) -> PlayRun:
    """Run one play of ``tasks`` on ``hosts`` (name -> host variables) with ansible-playbook.

    ``options`` are more ansible-playbook options (``--check``, ``--diff``, ``-vvv``, ``-e ...``).
    The play has ``gather_facts: false``; the results come from the trainops_results callback.
    """
    folder.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    inventory, playbook, results = folder / f"inventory-{tag}.json", folder / f"play-{tag}.yml", folder / f"results-{tag}.json"
    inventory.write_text(json.dumps({"all": {"hosts": {name: dict(v) for name, v in hosts.items()}}}), encoding="utf-8")
    play: dict[str, t.Any] = {"name": "tasks of a test", "hosts": "all", "gather_facts": False, "tasks": tasks}
    if handlers:
        play["handlers"] = handlers
    playbook.write_text(json.dumps([play]), encoding="utf-8")
    run_env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0",
                   ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS), ANSIBLE_CALLBACKS_ENABLED="trainops_results",
                   ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_HOST_KEY_CHECKING="0", TRAINOPS_RESULTS_FILE=str(results), **(env or {}))
    proc = subprocess.run([ansible_playbook(), "-i", str(inventory), *options, str(playbook)], capture_output=True, text=True,
                          env=run_env, timeout=timeout, stdin=subprocess.DEVNULL, cwd=folder, check=False)
    data = json.loads(results.read_text(encoding="utf-8")) if results.exists() else {}
    return PlayRun(proc, data)


def run_playbook(tmp_path: Path, playbook: str, hosts: dict[str, dict[str, t.Any]], extra: dict[str, t.Any],
                 *options: str) -> tuple[subprocess.CompletedProcess[str], dict[str, t.Any]]:
    """ansible-playbook of the collection's PLAYBOOK on ``hosts`` (group training), ``extra`` as -e @file; (process, results)."""
    tag = uuid.uuid4().hex[:8]
    inventory, variables, results = tmp_path / f"inv-{tag}.json", tmp_path / f"vars-{tag}.json", tmp_path / f"res-{tag}.json"
    inventory.write_text(json.dumps({"training": {"hosts": hosts}}), encoding="utf-8")
    variables.write_text(json.dumps(extra), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS), ANSIBLE_CALLBACKS_ENABLED="trainops_results",
               ANSIBLE_RETRY_FILES_ENABLED="0", TRAINOPS_RESULTS_FILE=str(results))
    proc = subprocess.run([ansible_playbook(), "-i", str(inventory), "-e", f"@{variables}", *options, str(PLAYBOOKS / playbook)],
                          capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL, check=False)
    return proc, json.loads(results.read_text(encoding="utf-8")) if results.exists() else {}
