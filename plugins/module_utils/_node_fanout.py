# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs on a Proxmox VE node, never in a container: one batch of the ``pct exec`` calls of a node's containers.

``trainops.pct_launch.fleet_run`` gathers the calls its hosts of one node make at the same moment
(``plugin_utils/_node_batch.py``) and sends them from one ssh session: the node's ``python3 -`` reads this file's
source from its standard input, then a last line that calls ``main`` with the batch. Each entry of the batch is an argv
(the ``pct exec`` the pct connection would have run through ssh itself) and the index of its standard input among the
batch's distinct inputs (None: ``/dev/null``). Every command starts at once, in ``/``, with the node's environment of
the session (the connection's ``env -i``); for each, as soon as it ends, one line is printed:
``{"index": N, "rc": RC, "stdout": BASE64, "stderr": BASE64}``. A command that cannot be started gets exit status 127
and the reason on its stderr, as a shell would say it. Standard library only: it runs with the node's own Python.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import typing as t

NOT_FOUND = 127


def encode(data: bytes | None) -> str:
    """``data`` as base64 text (empty for None)."""
    return base64.b64encode(data or b"").decode("ascii")


def run_one(argv: t.Sequence[str], data: bytes | None) -> dict[str, t.Any]:
    """Run one command of the batch: its exit status and its output, base64."""
    try:
        with subprocess.Popen(list(argv), stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/") as proc:
            out, err = proc.communicate(data)
    except OSError as exc:
        return {"rc": NOT_FOUND, "stdout": "", "stderr": encode(f"{argv[0] if argv else ''}: {exc.strerror or exc}\n".encode())}
    return {"rc": proc.returncode, "stdout": encode(out), "stderr": encode(err)}


class Printer:
    """Prints one answer per line, whole, from any thread."""

    def __init__(self, stream: t.TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def answer(self, index: int, answer: t.Mapping[str, t.Any]) -> None:
        """Print the answer of entry ``index`` at once."""
        line = json.dumps(dict(answer, index=index))
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def main(batch: t.Mapping[str, t.Any], stream: t.TextIO | None = None) -> int:
    """Run every entry of ``batch`` side by side; print each one's answer when it ends. Returns 0."""
    inputs = [base64.b64decode(text) for text in batch.get("inputs", [])]
    printer = Printer(stream or sys.stdout)

    def work(index: int, entry: t.Mapping[str, t.Any]) -> None:
        which = entry.get("input")
        printer.answer(index, run_one(entry["argv"], None if which is None else inputs[which]))

    threads = [threading.Thread(target=work, args=(index, entry)) for index, entry in enumerate(batch.get("entries", []))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0
