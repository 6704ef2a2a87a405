# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One member of a fleet-wide wait (``wait_for_log``'s ``fleet_id``), on the controller.

Every member runs in its own Ansible worker process. A member:

* is marked *waiting* on the fleet board (``_fleet_board.py``) from the start of its wait until its own
  job's start is proven or its wait ends;
* runs each chunk of waiting in a thread and looks at the board every ``POLL`` seconds meanwhile: when
  another member failed first, its wait ends at once (the chunk in the container ends by itself);
* posts its own failure, so that the others end theirs;
* once proven, keeps watching its own job (chunks with a pattern that never matches, so only the job's
  end or ``fail_pattern`` ends them) while other members still wait: a rank that dies after its own proof
  (any end but exit status 0: a failure, a signal, a vanished session) ends the fleet's wait too; one
  that finishes with exit status 0 is done, not failed. It stops watching as soon as no member waits.
"""

from __future__ import annotations

import threading
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import subject
from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _fleet_board as board

POLL = 0.1
# A Python regular expression that matches nothing: a watching chunk ends only on a death or fail_pattern.
NEVER = "(?!)"


class FleetMember:
    """One member (inventory host) of fleet ``fleet_id``."""

    def __init__(self, fleet_id: str, host: str, vmid: int, node: str) -> None:
        self.fleet_id, self.host, self.vmid, self.node = fleet_id, host, vmid, node

    def __enter__(self) -> FleetMember:
        board.mark_waiting(self.fleet_id, self.host)
        return self

    def __exit__(self, *exc: object) -> None:
        board.mark_done(self.fleet_id, self.host)

    def proven(self) -> None:
        """This member's job proved its start: it no longer holds the fleet's wait."""
        board.mark_done(self.fleet_id, self.host)

    def peer_failure(self) -> dict[str, t.Any] | None:
        """The first failure of another member, if any."""
        first = board.first_failure(self.fleet_id)
        return first if first and first.get("host") != self.host else None

    def others_waiting(self) -> bool:
        """Whether another member still waits for its proof."""
        return any(host != self.host for host in board.waiting(self.fleet_id))

    def post(self, res: t.Mapping[str, t.Any]) -> bool:
        """Post this member's failure; True when it is the first of the fleet."""
        return board.post_failure(self.fleet_id, {
            "host": self.host, "vmid": self.vmid, "node": self.node, "verdict": res.get("verdict", "failed"),
            "exit_status": res.get("exit_status"), "msg": str(res.get("msg", ""))[:300]})


def run_until(chunk: t.Callable[[], dict[str, t.Any]], until: t.Callable[[], bool]) -> dict[str, t.Any] | None:
    """Run ``chunk`` in a thread; its result, or None as soon as ``until()`` holds while it still runs."""
    box: dict[str, t.Any] = {}

    def work() -> None:
        try:
            box["result"] = chunk()
        except Exception as exc:  # pylint: disable=broad-exception-caught  # re-raised in the task's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="wait_for_log chunk", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(POLL)
        if worker.is_alive() and until():
            return None
    if "error" in box:
        raise box["error"]
    return dict(box["result"])


def cut_short_message(args: t.Mapping[str, t.Any], first: t.Mapping[str, t.Any], elapsed: float) -> str:
    """The message of a member whose wait ended because another member of its fleet failed first."""
    status = f", exit status {first['exit_status']}" if first.get("exit_status") is not None else ""
    place = f" (CT {first.get('vmid')} on {first.get('node')})" if first.get("vmid") is not None else ""
    return (f"Stopped waiting for {subject(args)} after {elapsed:.1f} s: {first.get('host')}{place} of fleet {args['fleet_id']} failed first "
            f"({first.get('verdict')}{status}): {first.get('msg', '')}; this container's job is not at fault")


def died_after_proof_message(args: t.Mapping[str, t.Any], proof: t.Mapping[str, t.Any], watch: t.Mapping[str, t.Any],
                             with_lines: bool = True) -> str:
    """The message of a member whose job died (or logged fail_pattern) after its proof, while others still waited.

    Without ``with_lines``, the reason: the same without the log lines.
    """
    if watch.get("verdict") == "fail_pattern":
        how = f"a log line matches fail_pattern {args.get('fail_pattern')!r}: {watch.get('matched_line')!r}"
    elif watch.get("exit_status") is not None:
        how = f"the job ended with exit status {watch['exit_status']}"
    else:
        how = str(watch.get("msg") or "the job ended")
    lines = " | ".join(list(watch.get("log_tail") or [])[-10:]) or "the log has no lines"
    return (f"Job failed in {subject(args)} after its start was proven "
            f"({proof.get('matched_line')!r}), while other containers of fleet {args['fleet_id']} still waited for theirs: "
            f"{how}{'; last log lines: ' + lines if with_lines else ''}; fix the job and launch it again")
