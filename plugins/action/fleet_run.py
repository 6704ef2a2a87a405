# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.fleet_run``: one of the collection's modules on many containers, one task.

The work is ``plugin_utils/_fleet_run.py``'s: each host's run of the module's own action plugin, in threads of this
one worker, each with the host's own pct connection. This plugin checks its options and sums the hosts' results up.
"""

from __future__ import annotations

import typing as t

from ansible.plugins.action import ActionBase

from ansible_collections.trainops.pct_launch.plugins.module_utils._fleet_spec import ARGUMENT_SPEC, module_name
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._fleet_run import run_on_hosts


def summary(results: t.Mapping[str, t.Mapping[str, t.Any]], left_out: t.Mapping[str, str]) -> dict[str, t.Any]:
    """fleet_run's result from each host's: changed when any host changed; the hosts by outcome."""
    return {
        "changed": any(bool(result.get("changed")) for result in results.values()),
        "results": dict(results),
        "left_out": dict(left_out),
        "ok_hosts": [host for host, result in results.items() if not result.get("failed")],
        "failed_hosts": [host for host, result in results.items() if result.get("failed")],
        "unreachable_hosts": [host for host, result in results.items() if result.get("unreachable")],
    }


class ActionModule(ActionBase):
    """Run the module's action plugin for every host of ``hosts`` from this one task."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """Each host's result under ``results``; the task fails only when its own options are wrong."""
        result = super().run(tmp, task_vars)
        del tmp
        _validation, options = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)  # raises naming a wrong option
        module = module_name(options["module"])
        if options["parallel"] < 1:
            result.update(failed=True, msg=f"Cannot run fleet_run with parallel {options['parallel']}: parallel must be 1 or more")
            return result
        results, left_out = run_on_hosts(self, module, options["args"], options["hosts"], task_vars or {}, options["parallel"])
        result.update(summary(results, left_out))
        return result
