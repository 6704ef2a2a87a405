# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests of the batches of a node's pct calls (plugin_utils/_node_batch.py), with real processes.

The "node" is this machine: its Python runs the node's program (``module_utils/_node_fanout.py``), and the "pct calls"
are plain commands. Through ssh and real ``pct exec`` they run in tests/integration/test_fleet_run.py.
"""

from __future__ import annotations

import ast
import base64
import json
import subprocess
import sys
import threading
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._node_batch import Call, NodeBatch, SessionLost, parse_answer, program

LOCAL_NODE = [sys.executable, "-"]
Answer = t.Tuple[int, bytes, bytes]


class Host:
    """A host of the batch in a thread of its own: its calls one after the other, then it leaves."""

    def __init__(self, batch: NodeBatch, calls: list[tuple[list[str], bytes | None]]) -> None:
        self.batch, self.calls = batch, calls
        self.answers: list[Answer | BaseException] = []
        self.alone = 0
        batch.join()
        self.thread = threading.Thread(target=self.run)

    def by_itself(self, argv: list[str], data: bytes | None) -> Answer:
        self.alone += 1
        proc = subprocess.run(argv, input=data, capture_output=True, check=False, timeout=60)
        return proc.returncode, proc.stdout, proc.stderr

    def run(self) -> None:
        try:
            for argv, data in self.calls:
                try:
                    self.answers.append(self.batch.answer(argv, data, lambda argv=argv, data=data: self.by_itself(argv, data)))
                except SessionLost as exc:
                    self.answers.append(exc)
        finally:
            self.batch.leave()


def run_hosts(batch: NodeBatch, hosts: list[Host]) -> None:
    for host in hosts:
        host.thread.start()
    for host in hosts:
        host.thread.join(60)
        assert not host.thread.is_alive()


def test_calls_of_every_host_go_in_one_session_each_with_its_own_answer() -> None:
    batch = NodeBatch(LOCAL_NODE)
    hosts = [Host(batch, [(["sh", "-c", f'cat; echo " {number}"; echo e{number} >&2; exit {number}'], f"in{number}".encode())])
             for number in range(5)]
    run_hosts(batch, hosts)
    assert batch.sessions == 1
    assert [host.answers for host in hosts] == [[(number, f"in{number} {number}\n".encode(), f"e{number}\n".encode())] for number in range(5)]
    assert all(host.alone == 0 for host in hosts)


def test_a_call_alone_runs_by_itself() -> None:
    batch = NodeBatch(LOCAL_NODE)
    hosts = [Host(batch, [(["sh", "-c", "echo only"], None)])]
    run_hosts(batch, hosts)
    assert batch.sessions == 0 and hosts[0].alone == 1 and hosts[0].answers == [(0, b"only\n", b"")]


def test_a_host_that_left_is_not_waited_for() -> None:
    batch = NodeBatch(LOCAL_NODE)
    done = Host(batch, [])
    run_hosts(batch, [done])  # joined, made no call, left
    hosts = [Host(batch, [(["echo", str(number)], None)]) for number in range(3)]
    run_hosts(batch, hosts)
    assert batch.sessions == 1 and [host.answers for host in hosts] == [[(0, f"{number}\n".encode(), b"")] for number in range(3)]


def test_a_host_whose_call_is_on_its_way_is_not_waited_for(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    subprocess.run(["mkfifo", str(fifo)], check=True)
    batch = NodeBatch(LOCAL_NODE)
    # The reader's call ends only when the writer's second call has run; had the batch waited for the reader
    # (its call on its way) before sending the others' second calls, the reader would have timed out (exit status 124).
    reader = Host(batch, [(["timeout", "30", "cat", str(fifo)], None)])
    writer = Host(batch, [(["true"], None), (["sh", "-c", 'echo through > "$1"', "sh", str(fifo)], None)])
    other = Host(batch, [(["true"], None), (["true"], None)])
    run_hosts(batch, [reader, writer, other])
    assert reader.answers == [(0, b"through\n", b"")]
    assert writer.answers == [(0, b"", b""), (0, b"", b"")] and other.answers == [(0, b"", b""), (0, b"", b"")]
    assert batch.sessions >= 1  # the second calls went together, or each alone when the other was still on its way


def test_a_node_without_python3_gets_each_call_alone() -> None:
    batch = NodeBatch(["sh", "-c", "cat >/dev/null; echo 'sh: 1: python3: not found' >&2; exit 127"])
    hosts = [Host(batch, [(["echo", str(number)], None), (["echo", "again"], None)]) for number in range(3)]
    run_hosts(batch, hosts)
    assert batch.sessions == 1  # the first batch found out; every later call ran alone at once
    assert [host.answers for host in hosts] == [[(0, f"{number}\n".encode(), b""), (0, b"again\n", b"")] for number in range(3)]
    assert all(host.alone == 2 for host in hosts)


@pytest.mark.parametrize("rc", [255, 1])
def test_a_lost_session_is_each_waiting_calls_error(rc: int) -> None:
    batch = NodeBatch(["sh", "-c", f"cat >/dev/null; echo 'Connection closed by 127.0.0.17' >&2; exit {rc}"])
    hosts = [Host(batch, [(["echo", str(number)], None)]) for number in range(2)]
    run_hosts(batch, hosts)
    for host in hosts:
        (error,) = host.answers
        assert isinstance(error, SessionLost) and error.rc == rc and b"Connection closed by 127.0.0.17" in error.stderr
        assert "ended without this call's answer (exit status" in error.cause() and "Connection closed" in error.cause()


def test_equal_inputs_are_sent_once_and_answers_are_checked() -> None:
    data = b"x" * 1000
    text = program([Call(["a"], data), Call(["b"], data), Call(["c"], None)]).decode()
    last = text.rstrip().splitlines()[-1]
    assert last.startswith("sys.exit(main(json.loads(") and last.endswith(")))")
    batch = json.loads(ast.literal_eval(last[len("sys.exit(main(json.loads("):-len(")))")]))
    assert batch["inputs"] == [base64.b64encode(data).decode()]  # the one input, once
    assert [(entry["argv"], entry["input"]) for entry in batch["entries"]] == [(["a"], 0), (["b"], 0), (["c"], None)]
    assert parse_answer(b'{"index": 1, "rc": 0, "stdout": "", "stderr": ""}', 2) == (1, (0, b"", b""))
    assert parse_answer(b'{"index": 2, "rc": 0, "stdout": "", "stderr": ""}', 2) is None  # no call of this batch
    assert parse_answer(b"Traceback (most recent call last):", 2) is None
