# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: the pct calls of one remote node's containers in a ``fleet_run`` task, from one ssh session.

Each host of a ``fleet_run`` task runs in a thread with a pct connection of its own (``_fleet_run.py``). Per remote node,
those connections share one ``NodeBatch``: a host's thread joins it when its run starts and leaves it when its run ends.
A ``pct exec`` of a joined host waits until every joined host that is still running waits too (or a host leaves), then
the waiting calls go to the node together: one ssh session runs the node's ``python3 -`` with ``module_utils/_node_fanout.py``,
which starts each ``pct exec`` at once and prints each one's answer as soon as it ends, so that no host waits for a slower
one. Each host's connection then treats its answer as its own ``pct exec``'s (``Connection.exec_command``): the pct calls,
their commands and their errors are those of the calls one by one; only the ssh sessions are fewer (one per node and step
instead of one per container).

A call alone in its batch runs by itself (the caller's ``alone``), as do all calls to a node without ``python3`` (it exits 127
before any answer). A host whose call is on its way (or runs alone) is not waited for: it cannot make another call before
its answer. When the session ends before a call's answer, that call fails as the pct connection fails when ssh
``SessionLost``: the connection says why, as for a call of its own (exit status 255: ssh could not reach the node).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shlex
import subprocess
import threading
import typing as t

from ansible.module_utils.common.text.converters import to_bytes
from ansible.utils.display import Display

from ansible_collections.trainops.pct_launch.plugins.module_utils import _node_fanout

NOT_FOUND = _node_fanout.NOT_FOUND
# What runs on the node: its Python, reading the program from its standard input.
NODE_ARGV = ["python3", "-"]
Answer = t.Tuple[int, bytes, bytes]
display = Display()


@dataclasses.dataclass
class Call:
    """One pct call waiting for its batch: its argv on the node, its standard input, and then its answer or error."""

    argv: list[str]
    data: bytes | None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    answer: Answer | None = None
    lost: tuple[int, bytes] | None = None
    alone: bool = False


class SessionLost(Exception):
    """The batch's ssh session ended before this call's answer: its exit status and stderr."""

    def __init__(self, rc: int, stderr: bytes) -> None:
        super().__init__(f"exit status {rc}")
        self.rc, self.stderr = rc, stderr

    def cause(self) -> str:
        """Why, for a message: ``<what failed> <object>: <cause>``."""
        detail = " ".join(self.stderr.decode("utf-8", "replace").split())[-300:] or "no message"
        return (f"the node's python3, which ran the pct calls of its containers together, ended without this call's answer "
                f"(exit status {self.rc}): {detail}")


def program(calls: t.Sequence[Call]) -> bytes:
    """The node's Python program for ``calls``: ``_node_fanout.py``'s source and the line that calls ``main`` with them.

    Equal standard inputs (the same module run in each container) are sent once.
    """
    inputs: dict[bytes, int] = {}
    entries = []
    for call in calls:
        which = None if call.data is None else inputs.setdefault(call.data, len(inputs))
        entries.append({"argv": list(call.argv), "input": which})
    batch = {"inputs": [_node_fanout.encode(data) for data in inputs], "entries": entries}
    with open(_node_fanout.__file__, "rb") as handle:
        source = handle.read()
    return source + b"\nsys.exit(main(json.loads(" + repr(json.dumps(batch)).encode("ascii") + b")))\n"


def parse_answer(line: bytes, count: int) -> tuple[int, Answer] | None:
    """``(index, (rc, stdout, stderr))`` from one line the node printed, or None when it is no answer of this batch."""
    try:
        found = json.loads(line)
        index, rc = found["index"], found["rc"]
        if isinstance(index, int) and 0 <= index < count and isinstance(rc, int):
            return index, (rc, base64.b64decode(found["stdout"]), base64.b64decode(found["stderr"]))
    except (ValueError, KeyError, TypeError):
        pass
    return None


class NodeBatch:
    """The pct calls of one node's hosts in one ``fleet_run`` task, sent to the node together (see the module's docstring)."""

    def __init__(self, argv: t.Sequence[str]) -> None:
        """``argv``: what runs ``NODE_ARGV`` on the node from the controller."""
        self.argv = list(argv)
        self._cond = threading.Condition()
        self._active = 0  # hosts whose run has started and not ended
        self._busy = 0  # calls on their way: sent, or run alone, and not answered yet
        self._pending: list[Call] = []
        self._no_python = False
        self.sessions = 0  # the ssh sessions the batch opened

    def join(self) -> None:
        """A host's run starts: its calls are waited for."""
        with self._cond:
            self._active += 1

    def leave(self) -> None:
        """A host's run ended: its calls are no longer waited for."""
        with self._cond:
            self._active -= 1
            self._flush_if_all_wait()

    def answer(self, argv: t.Sequence[str], data: bytes | None, alone: t.Callable[[], Answer]) -> Answer:
        """The answer of this pct call (``argv`` on the node), sent with the others' calls, or ``alone()``'s.

        Raises ``SessionLost`` when the batch's session ended before its answer.
        """
        call = Call([str(arg) for arg in argv], data)
        with self._cond:
            if self._no_python:
                call.alone = True
                self._busy += 1
            else:
                self._pending.append(call)
                self._flush_if_all_wait()
        if not call.alone:
            call.done.wait()
            if call.lost is not None:
                raise SessionLost(*call.lost)
            if not call.alone:
                return t.cast(Answer, call.answer)
        try:
            return alone()
        finally:
            with self._cond:
                self._busy -= 1

    def _flush_if_all_wait(self) -> None:
        """Under the lock: when every running host waits for its call, send the waiting calls (a call alone runs by itself)."""
        if not self._pending or len(self._pending) + self._busy < self._active:
            return
        calls, self._pending = self._pending, []
        self._busy += len(calls)
        if len(calls) == 1:
            calls[0].alone = True
            calls[0].done.set()
            return
        self.sessions += 1
        display.vvv(f"NODE BATCH of {len(calls)} pct calls from one ssh session: {shlex.join(self.argv)}")
        threading.Thread(target=self._send, args=(calls,), daemon=True).start()

    def _done(self, call: Call) -> None:
        """Hand ``call`` its answer (or loss, or its run alone)."""
        with self._cond:
            if not call.alone:
                self._busy -= 1
        call.done.set()

    def _send(self, calls: list[Call]) -> None:
        """One ssh session to the node for ``calls``; each call gets its answer as soon as the node prints it."""
        try:
            rc, stderr = self._run(calls)
        except OSError as exc:
            rc, stderr = 255, to_bytes(f"cannot start {self.argv[0]}: {exc}")
        left = [call for call in calls if not call.done.is_set()]
        no_python = rc == NOT_FOUND and len(left) == len(calls)  # nothing ran: each call runs alone
        if no_python:
            with self._cond:
                self._no_python = True
        for call in left:
            if no_python:
                call.alone = True
            else:
                call.lost = (rc, stderr)
            self._done(call)

    def _run(self, calls: list[Call]) -> tuple[int, bytes]:
        """Run the node's program for ``calls``, handing out each answer as it comes; (exit status, stderr)."""
        with subprocess.Popen([to_bytes(arg, errors="surrogate_or_strict") for arg in self.argv], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/") as proc:
            errors: list[bytes] = []
            reader = threading.Thread(target=lambda: errors.append(proc.stderr.read() if proc.stderr else b""), daemon=True)
            reader.start()
            feeder = threading.Thread(target=_feed, args=(proc, program(calls)), daemon=True)
            feeder.start()
            for line in proc.stdout or ():
                found = parse_answer(line, len(calls))
                if found is not None and not calls[found[0]].done.is_set():
                    calls[found[0]].answer = found[1]
                    self._done(calls[found[0]])
            feeder.join()
            reader.join()
            proc.wait()
        return proc.returncode, b"".join(errors)


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    """Write the program to the node's Python and close its standard input (a closed pipe is the session's own error)."""
    try:
        if proc.stdin is not None:
            with proc.stdin:
                proc.stdin.write(data)
    except OSError:
        pass
