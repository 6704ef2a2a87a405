# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.wait_for_log``: checks options, then runs the module in chunks.

The module (one ``pct exec`` per call, on the node the connection or ``delegate_to`` reaches) waits
at most ``CHUNK_SECONDS`` per call; this plugin calls it again with the log offset it reached until
the verdict or the deadline, printing a progress line after every chunk that ends without a verdict.
"""

from __future__ import annotations

import time
import typing as t

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import (
    ARGUMENT_SPEC,
    CHUNK_SECONDS,
    MODULE_NAME,
    REQUIRED_ONE_OF,
    check_options,
    message,
)

display = Display()

# Chunks shorter than this are not started; the deadline is as good as reached.
MIN_CHUNK = 0.2


def progress_line(host: str, args: t.Mapping[str, t.Any], result: t.Mapping[str, t.Any], elapsed: float) -> str:
    """One progress line: elapsed time, log size, whether the session is alive."""
    who = args.get("session_name") or args.get("log_path")
    if result.get("log_exists"):
        log = f"log {result.get('log_size')} bytes"
    else:
        log = "log missing"
    if args.get("session_name"):
        alive = "session alive" if result.get("session_alive") else "session gone"
    else:
        alive = "session unknown"
    return f"[{host}] wait_for_log {who} in container {args['vmid']}: {elapsed:.0f} s of {args['timeout']:g} s, {log}, {alive}"


def unreachable_message(node: str, args: t.Mapping[str, t.Any], elapsed: float, cause: object) -> str:
    """The message when the node cannot be reached for a chunk: the wait is over, the job's fate unknown."""
    who = f"session {args['session_name']}" if args.get("session_name") else f"log {args['log_path']}"
    detail = " ".join(str(cause).split()).rstrip(":").strip() or "no detail"
    return (f"Cannot wait for {who} in container {args['vmid']}: node {node} cannot be reached "
            f"({elapsed:.0f} s into the wait of {args['timeout']:g} s): {detail}. The job's start is not proven and the job may "
            f"still run: once node {node} can be reached, check it (playbooks/status.yml) or launch again (a running job is left alone)")


class ActionModule(ActionBase):
    """Wait for a job's log in chunks of one ``pct exec`` each."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """Validate the options (regexes included) before any pct call, then wait."""
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, required_one_of=REQUIRED_ONE_OF)
        errors = check_options(args)
        if errors:
            result.update(failed=True, msg="; ".join(errors))
            return result
        result.update(self._wait(args, task_vars or {}))
        return result

    def _chunk(self, args: dict[str, t.Any], task_vars: dict[str, t.Any], seconds: float, offset: int) -> dict[str, t.Any]:
        module_args = dict(args, timeout=round(seconds, 3), offset=offset)
        return self._execute_module(module_name=MODULE_NAME, module_args=module_args, task_vars=task_vars)

    def _wait(self, args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        host = str(task_vars.get("inventory_hostname", "localhost"))
        started = time.monotonic()
        deadline = started + args["timeout"]
        offset, calls = args["offset"], 0
        while True:
            remaining = deadline - time.monotonic()
            try:
                res = self._chunk(args, task_vars, min(CHUNK_SECONDS, max(remaining, MIN_CHUNK)), offset)
            except AnsibleConnectionFailure as exc:  # the node went away: say which, and what it means for the job
                node = self._task.delegate_to if isinstance(self._task.delegate_to, str) and self._task.delegate_to else host
                raise AnsibleConnectionFailure(unreachable_message(node, args, time.monotonic() - started, exc)) from None
            calls += 1
            elapsed = time.monotonic() - started
            if res.get("verdict") != "timeout" or deadline - time.monotonic() < MIN_CHUNK:
                break
            offset = res.get("offset", offset)
            display.display(progress_line(host, args, res, elapsed))
        if "verdict" not in res:
            return res
        res.update(elapsed=round(elapsed, 3), pct_calls=calls)
        res["msg"] = message(res, args)
        # ansible-core 2.19+ keeps the module's own failure summary (with the chunk's msg) here
        res.pop("exception", None)
        return res
