# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A test-only callback that writes every task result of a playbook run to a JSON file.

ansible-core has no ``json`` stdout callback any more (it lives in ansible.posix, which this
collection does not depend on), so tests/integration/test_playbooks.py enables this one next to
the default stdout callback:

    ANSIBLE_CALLBACK_PLUGINS=<this folder> ANSIBLE_CALLBACKS_ENABLED=trainops_results
    TRAINOPS_RESULTS_FILE=/path/results.json

The file holds ``{"plays": [{"name", "tasks": [{"name", "action", "handler", "hosts": {HOST: RESULT}}]}],
"stats": {HOST: {ok, changed, failures, ...}}}``, shaped like ansible.posix.json's output; RESULT is the
task's result without Ansible's internal keys, with ``status`` (ok, changed, failed, skipped or unreachable).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: trainops_results
type: aggregate
short_description: Write every task result to the JSON file TRAINOPS_RESULTS_FILE (tests only)
description:
  - Test helper of the trainops.pct_launch collection; see the module docstring.
requirements:
  - enabled with ANSIBLE_CALLBACKS_ENABLED=trainops_results
"""

import json
import os
import typing as t

from ansible.plugins.callback import CallbackBase
from ansible.vars.clean import module_response_deepcopy, strip_internal_keys


def _result_dict(result: t.Any) -> dict[str, t.Any]:
    """The result dictionary of a TaskResult (``result`` since ansible-core 2.19, ``_result`` before)."""
    data = getattr(result, "result", None)
    if data is None:
        data = result._result  # pylint: disable=protected-access
    return dict(strip_internal_keys(module_response_deepcopy(data)))


def _host_name(result: t.Any) -> str:
    host = getattr(result, "host", None) or result._host  # pylint: disable=protected-access
    return str(host.get_name())


class CallbackModule(CallbackBase):
    """Collect the results per play and task; write them when the playbook ends."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "trainops_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self.plays: list[dict[str, t.Any]] = []

    def _play(self) -> dict[str, t.Any]:
        if not self.plays:
            self.plays.append({"name": "", "tasks": []})
        return self.plays[-1]

    def v2_playbook_on_play_start(self, play: t.Any) -> None:
        """A new play."""
        self.plays.append({"name": str(play.get_name()), "tasks": []})

    def _task_start(self, task: t.Any, handler: bool) -> None:
        self._play()["tasks"].append({"name": str(task.get_name()), "action": str(task.action), "handler": handler,
                                      "uuid": str(task._uuid), "hosts": {}})  # pylint: disable=protected-access

    def v2_playbook_on_task_start(self, task: t.Any, is_conditional: bool) -> None:
        """A task starts."""
        self._task_start(task, handler=False)

    def v2_playbook_on_handler_task_start(self, task: t.Any) -> None:
        """A handler starts."""
        self._task_start(task, handler=True)

    def _record(self, result: t.Any, status: str) -> None:
        data = _result_dict(result)
        data["status"] = status
        tasks = self._play()["tasks"]
        task_uuid = str(result._task._uuid)  # pylint: disable=protected-access
        entry = next((task for task in reversed(tasks) if task["uuid"] == task_uuid), None)
        if entry is None:
            entry = {"name": str(result.task_name), "action": "", "handler": False, "uuid": task_uuid, "hosts": {}}
            tasks.append(entry)
        entry["hosts"][_host_name(result)] = data

    def v2_runner_on_ok(self, result: t.Any) -> None:
        """A task succeeded on a host."""
        self._record(result, "changed" if _result_dict(result).get("changed") else "ok")

    def v2_runner_on_failed(self, result: t.Any, ignore_errors: bool = False) -> None:
        """A task failed on a host."""
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result: t.Any) -> None:
        """A task was skipped on a host."""
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result: t.Any) -> None:
        """A host was unreachable."""
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats: t.Any) -> None:
        """The playbook ended: write the file."""
        path = os.environ.get("TRAINOPS_RESULTS_FILE")
        if not path:
            return
        summary = {host: stats.summarize(host) for host in sorted(stats.processed)}
        with open(path, "w", encoding="utf-8") as stream:
            json.dump({"plays": self.plays, "stats": summary}, stream, default=str, indent=1)
