# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests of the node's side of a batch of pct calls (module_utils/_node_fanout.py), run with real processes."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import threading
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _node_fanout


def run_batch(entries: list[dict[str, t.Any]], inputs: list[bytes]) -> list[dict[str, t.Any]]:
    """Run ``main`` on a batch; the answer lines it printed, in their order."""
    out = io.StringIO()
    batch = {"inputs": [base64.b64encode(data).decode() for data in inputs], "entries": entries}
    assert _node_fanout.main(batch, out) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def decoded(answer: dict[str, t.Any]) -> tuple[int, bytes, bytes]:
    return answer["rc"], base64.b64decode(answer["stdout"]), base64.b64decode(answer["stderr"])


def test_each_command_gets_its_own_input_exit_status_and_output() -> None:
    answers = run_batch([
        {"argv": ["sh", "-c", "cat; echo oops >&2; exit 3"], "input": 0},
        {"argv": ["sh", "-c", "cat"], "input": 1},
        {"argv": ["sh", "-c", "test -t 0 || cat </dev/stdin; echo none"], "input": None},
    ], [b"first", b"second"])
    by_index = {answer["index"]: decoded(answer) for answer in answers}
    assert by_index == {0: (3, b"first", b"oops\n"), 1: (0, b"second", b""), 2: (0, b"none\n", b"")}


def test_a_command_that_cannot_start_answers_127_with_the_reason() -> None:
    answers = run_batch([{"argv": ["/nonexistent/pct", "exec", "200"], "input": None}], [])
    rc, out, err = decoded(answers[0])
    assert rc == 127 and out == b"" and b"/nonexistent/pct: No such file or directory" in err


def test_the_commands_run_side_by_side_and_each_answers_when_it_ends(tmp_path: t.Any) -> None:
    fifo = tmp_path / "fifo"
    subprocess.run(["mkfifo", str(fifo)], check=True)
    # The reader ends only when the writer, a later entry, has run: one after the other, it would time out.
    answers = run_batch([
        {"argv": ["timeout", "20", "cat", str(fifo)], "input": None},
        {"argv": ["sh", "-c", 'echo fast; echo through > "$1"', "sh", str(fifo)], "input": None},
    ], [])
    by_index = {answer["index"]: decoded(answer) for answer in answers}
    assert by_index == {0: (0, b"through\n", b""), 1: (0, b"fast\n", b"")}


class Unblocking(io.StringIO):
    """The output stream: once entry 1's answer is printed, it writes a line into the fifo entry 0 waits on."""

    def __init__(self, fifo: t.Any) -> None:
        super().__init__()
        self.fifo = fifo

    def write(self, text: str) -> int:
        written = super().write(text)
        if json.loads(text)["index"] == 1:
            with open(self.fifo, "w", encoding="ascii") as handle:
                handle.write("after 1\n")
        return written


def test_each_answer_is_printed_when_its_command_ends(tmp_path: t.Any) -> None:
    # Entry 0 ends only after entry 1's answer is printed: printed in the batch's order, entry 0 would time out.
    fifo = tmp_path / "fifo"
    subprocess.run(["mkfifo", str(fifo)], check=True)
    out = Unblocking(fifo)
    batch = {"inputs": [], "entries": [{"argv": ["timeout", "20", "cat", str(fifo)], "input": None}, {"argv": ["true"], "input": None}]}
    assert _node_fanout.main(batch, out) == 0
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [answer["index"] for answer in answers] == [1, 0]
    assert decoded(answers[1]) == (0, b"after 1\n", b"")


def test_hostile_arguments_reach_the_command_as_they_are() -> None:
    hostile = ["$(touch /tmp/x)", "a b", "'; rm -rf / #", "\\n", "--"]
    answers = run_batch([{"argv": [sys.executable, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *hostile], "input": None}], [])
    rc, out, dummy = decoded(answers[0])
    assert rc == 0 and json.loads(out) == hostile


def test_the_program_runs_as_the_nodes_python_reads_it_from_stdin() -> None:
    with open(_node_fanout.__file__, "rb") as handle:
        source = handle.read()
    batch = {"inputs": [base64.b64encode(b"in").decode()], "entries": [{"argv": ["cat"], "input": 0}]}
    program = source + b"\nsys.exit(main(json.loads(" + repr(json.dumps(batch)).encode() + b")))\n"
    proc = subprocess.run([sys.executable, "-"], input=program, capture_output=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert decoded(json.loads(proc.stdout)) == (0, b"in", b"")


def test_answers_are_whole_lines_from_many_threads() -> None:
    out = io.StringIO()
    printer = _node_fanout.Printer(out)
    threads = [threading.Thread(target=printer.answer, args=(index, {"rc": 0, "stdout": "x" * 10000, "stderr": ""})) for index in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(json.loads(line)["index"] for line in out.getvalue().splitlines()) == list(range(20))
