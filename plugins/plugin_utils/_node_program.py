# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A program the action of an info module sends to the Proxmox VE node (``Connection.node_command``): ``python3 -``
there reads one module_utils file on its standard input and prints its report as JSON on its last line
(``gpu_info``: ``_gpu_smi.py``; ``backup_window_info``: ``_pve_backup_files.py``).
"""

from __future__ import annotations

import json
import types
import typing as t

from ansible.module_utils.common.text.converters import to_text

CAUSE_LENGTH = 300


def source_of(module: types.ModuleType) -> bytes:
    """The source of ``module``, as the node's python3 reads it from its standard input."""
    with open(str(module.__file__), "rb") as handle:
        return handle.read()


def answer(rc: int, out: bytes, err: bytes) -> tuple[dict[str, t.Any] | None, str]:
    """(the node's report, "") when its last line of output is a JSON object; else (None, why not, in one line, with a
    hint when the node has no python3)."""
    text = to_text(out, errors="surrogate_or_replace").strip()
    if rc == 0:
        try:
            report = json.loads(text.splitlines()[-1] if text else "")
            if isinstance(report, dict):
                return report, ""
        except ValueError:
            pass
    cause = " ".join(to_text(err or out, errors="surrogate_or_replace").split())[:CAUSE_LENGTH] or f"exit status {rc}"
    hint = ": the node needs python3" if rc == 127 else ""
    return None, f"{cause}{hint}"
