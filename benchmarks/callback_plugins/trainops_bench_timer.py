# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark-only callback: appends a JSON line with a timestamp for every play, task and host result.

benchmarks/run.py enables it next to the default stdout callback:

    ANSIBLE_CALLBACK_PLUGINS=<this folder> ANSIBLE_CALLBACKS_ENABLED=trainops_bench_timer
    TRAINOPS_BENCH_TIMES=/path/times.jsonl

Each line is ``{"event", "time", ...}``: ``playbook_start``, ``play_start`` (``play``),
``task_start`` (``task``, ``action``), ``host_start`` (``task``, ``host``, ``action``, ``delegated``),
``host_end`` (``task``, ``host``, ``status``, ``changed``)
and ``stats``. ``time`` is ``time.time()``, comparable with the timestamps the job writes itself.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: trainops_bench_timer
type: aggregate
short_description: Timestamps of plays, tasks and host results to TRAINOPS_BENCH_TIMES (benchmarks only)
description:
  - Benchmark helper of the trainops.pct_launch collection; see the module docstring.
requirements:
  - enabled with ANSIBLE_CALLBACKS_ENABLED=trainops_bench_timer
"""

import json
import os
import time
import typing as t
from collections.abc import Mapping

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Append one JSON line per event to the file named by TRAINOPS_BENCH_TIMES."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "trainops_bench_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self._path = os.environ.get("TRAINOPS_BENCH_TIMES", "")

    def _write(self, event: str, **fields: t.Any) -> None:
        if not self._path:
            return
        entry = {"event": event, "time": time.time()}
        entry.update(fields)
        with open(self._path, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")

    def v2_playbook_on_start(self, playbook: t.Any) -> None:
        """The playbook file is loaded."""
        self._write("playbook_start")

    def v2_playbook_on_play_start(self, play: t.Any) -> None:
        """A play starts."""
        self._write("play_start", play=play.get_name())

    def v2_playbook_on_task_start(self, task: t.Any, is_conditional: bool) -> None:
        """A task starts (for all hosts)."""
        self._write("task_start", task=task.get_name(), action=task.action)

    def v2_playbook_on_handler_task_start(self, task: t.Any) -> None:
        """A handler starts (for all notified hosts)."""
        self._write("task_start", task=task.get_name(), action=task.action)

    def v2_runner_on_start(self, host: t.Any, task: t.Any) -> None:
        """A task starts on one host."""
        self._write("host_start", task=task.get_name(), host=host.get_name(), action=task.action, delegated=bool(task.delegate_to))

    def _end(self, result: t.Any, status: str) -> None:
        # ``host`` since ansible-core 2.19, ``_host`` before
        host = getattr(result, "host", None) or getattr(result, "_host")
        data = getattr(result, "result", None)
        if not isinstance(data, Mapping):
            data = getattr(result, "_result", {})  # pylint: disable=protected-access
        changed = bool(data.get("changed")) if isinstance(data, Mapping) else False
        self._write("host_end", task=result.task_name, host=host.get_name(), status=status, changed=changed)

    def v2_runner_on_ok(self, result: t.Any) -> None:
        """A task ended ok (or changed) on one host."""
        self._end(result, "ok")

    def v2_runner_on_failed(self, result: t.Any, ignore_errors: bool = False) -> None:
        """A task failed on one host."""
        self._end(result, "failed")

    def v2_runner_on_skipped(self, result: t.Any) -> None:
        """A task was skipped on one host."""
        self._end(result, "skipped")

    def v2_runner_on_unreachable(self, result: t.Any) -> None:
        """A host was unreachable."""
        self._end(result, "unreachable")

    def v2_playbook_on_stats(self, stats: t.Any) -> None:
        """The play recap."""
        self._write("stats")
