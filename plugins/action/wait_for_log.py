# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.wait_for_log``: checks options, then runs the module in chunks.

The module (one ``pct exec`` per call, on the node the connection or ``delegate_to`` reaches) waits
at most ``CHUNK_SECONDS`` per call; this plugin calls it again with the log offset it reached until
the verdict or the deadline, printing a progress line after every chunk that ends without a verdict.

With ``fleet_id``, the waits of one fleet (each in its own worker process) end together: a member whose
wait fails posts it on the fleet board (``plugin_utils/_fleet_board.py``), and every other member, which
runs its chunk in a thread and looks at the board every ``FLEET_POLL`` seconds meanwhile, ends its wait
at once with the verdict ``fleet_failed``, naming the member that failed first. Its chunk still running
in the container ends by itself within ``CHUNK_SECONDS`` (it only reads).
"""

from __future__ import annotations

import threading
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
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._fleet_board import (
    fleet_id_error,
    first_failure,
    post_failure,
)

display = Display()

# Chunks shorter than this are not started; the deadline is as good as reached.
MIN_CHUNK = 0.2
# How often a fleet member looks at the fleet board while its chunk runs.
FLEET_POLL = 0.1


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


def fleet_message(args: t.Mapping[str, t.Any], first: t.Mapping[str, t.Any], elapsed: float) -> str:
    """The message of a member whose wait ended because another member of its fleet failed first."""
    who = f"session {args['session_name']}" if args.get("session_name") else f"log {args['log_path']}"
    status = f", exit status {first['exit_status']}" if first.get("exit_status") is not None else ""
    return (f"Stopped waiting for {who} in container {args['vmid']} after {elapsed:.1f} s: {first.get('host')} "
            f"(CT {first.get('vmid')} on {first.get('node')}) of fleet {args['fleet_id']} failed first "
            f"({first.get('verdict')}{status}): {first.get('msg', '')}; this container's job is not at fault")


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
        if args.get("fleet_id") is not None:
            errors += [error for error in [fleet_id_error(args["fleet_id"])] if error]
        if errors:
            result.update(failed=True, msg="; ".join(errors))
            return result
        result.update(self._wait(args, task_vars or {}))
        return result

    def _chunk(self, args: dict[str, t.Any], task_vars: dict[str, t.Any], seconds: float, offset: int) -> dict[str, t.Any]:
        module_args = {key: value for key, value in args.items() if key != "fleet_id"}
        module_args.update(timeout=round(seconds, 3), offset=offset)
        return self._execute_module(module_name=MODULE_NAME, module_args=module_args, task_vars=task_vars)

    def _peer_failure(self, args: dict[str, t.Any], host: str) -> dict[str, t.Any] | None:
        """The first failure of another member of the fleet, if any (never without fleet_id)."""
        if args.get("fleet_id") is None:
            return None
        first = first_failure(args["fleet_id"])
        return first if first and first.get("host") != host else None

    def _watched_chunk(self, args: dict[str, t.Any], task_vars: dict[str, t.Any], seconds: float, offset: int,
                       host: str) -> tuple[dict[str, t.Any] | None, dict[str, t.Any] | None]:
        """(chunk result, None), or (None, a peer's failure) as soon as the fleet board shows one."""
        if args.get("fleet_id") is None:
            return self._chunk(args, task_vars, seconds, offset), None
        box: dict[str, t.Any] = {}

        def work() -> None:
            try:
                box["result"] = self._chunk(args, task_vars, seconds, offset)
            except Exception as exc:  # pylint: disable=broad-exception-caught  # re-raised in the task's thread
                box["error"] = exc

        worker = threading.Thread(target=work, name=f"wait_for_log chunk {host}", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(FLEET_POLL)
            peer = self._peer_failure(args, host)
            if peer is not None and worker.is_alive():
                return None, peer
        if "error" in box:
            raise box["error"]
        peer = self._peer_failure(args, host)
        if peer is not None and box["result"].get("verdict") == "timeout":
            return None, peer
        return box["result"], None

    def _post(self, args: dict[str, t.Any], host: str, node: str, res: t.Mapping[str, t.Any]) -> bool:
        """Tell the fleet that this member failed; True when it is the first."""
        if args.get("fleet_id") is None:
            return False
        return post_failure(args["fleet_id"], {
            "host": host, "vmid": args["vmid"], "node": node, "verdict": res.get("verdict", "failed"),
            "exit_status": res.get("exit_status"), "msg": str(res.get("msg", ""))[:300]})

    def _node(self, host: str) -> str:
        delegate = self._task.delegate_to
        return delegate if isinstance(delegate, str) and delegate else host

    def _wait(self, args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        host = str(task_vars.get("inventory_hostname", "localhost"))
        started = time.monotonic()
        deadline = started + args["timeout"]
        offset, calls = args["offset"], 0
        while True:
            remaining = deadline - time.monotonic()
            # a member failed while this one was between chunks (or before its first): no chunk more
            res, peer = None, self._peer_failure(args, host)
            try:
                if peer is None:
                    res, peer = self._watched_chunk(args, task_vars, min(CHUNK_SECONDS, max(remaining, MIN_CHUNK)), offset, host)
                    calls += 1
            except AnsibleConnectionFailure as exc:  # the node went away: say which, and what it means for the job
                msg = unreachable_message(self._node(host), args, time.monotonic() - started, exc)
                self._post(args, host, self._node(host), {"verdict": "unreachable", "msg": msg})
                raise AnsibleConnectionFailure(msg) from None
            elapsed = time.monotonic() - started
            if peer is not None:
                return {"failed": True, "verdict": "fleet_failed", "fleet_failure": peer, "elapsed": round(elapsed, 3),
                        "pct_calls": calls, "msg": fleet_message(args, peer, elapsed)}
            res = t.cast("dict[str, t.Any]", res)  # a chunk ran: no peer failure means a result
            if res.get("verdict") != "timeout" or deadline - time.monotonic() < MIN_CHUNK:
                break
            offset = res.get("offset", offset)
            display.display(progress_line(host, args, res, elapsed))
        if "verdict" in res:
            res.update(elapsed=round(elapsed, 3), pct_calls=calls)
            res["msg"] = message(res, args)
            # ansible-core 2.19+ keeps the module's own failure summary (with the chunk's msg) here
            res.pop("exception", None)
        if res.get("failed") and args.get("fleet_id") is not None:
            res["fleet_first"] = self._post(args, host, self._node(host), res)
        return res
