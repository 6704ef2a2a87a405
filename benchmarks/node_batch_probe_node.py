# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The node's side of benchmarks/node_batch_probe.py (a probe of a design, not what the collection ships).

node_batch_probe.py sends this file's source to the node's Python on its standard input, followed by one line that
calls ``main`` with a program and the VMIDs of the node's containers. ``main`` runs the program in every container at
once, one ``pct exec`` each (the program on its standard input, as the pct connection pipelines a module), and prints
one line per container: its VMID, a space and the last line the program printed there (its JSON result).
Standard library only: it runs with the node's own Python.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile


def main(program: bytes, vmids: list[int]) -> None:
    """Run ``program`` in each container of ``vmids`` side by side; print each container's last output line."""
    with tempfile.NamedTemporaryFile(prefix="trainops-probe-") as handle:
        handle.write(program)
        handle.flush()
        running = {}
        for vmid in vmids:
            with open(handle.name, "rb") as stdin:
                running[vmid] = subprocess.Popen(  # pylint: disable=consider-using-with  # waited for below
                    ["pct", "exec", str(vmid), "--keep-env", "1", "--", "/bin/sh", "-c", "exec /usr/bin/python3"],
                    stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for vmid, proc in running.items():
            output = proc.communicate()[0].decode("utf-8", "replace").strip().splitlines()
            sys.stdout.write(f"{vmid} {output[-1] if output else ''}\n")
    sys.stdout.flush()
