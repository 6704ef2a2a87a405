# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The boot recorder's entry point: ``BOOT_DIR/boot.py``, which the unit ``trainops-boot.service`` runs at each boot.

A launch as root stages this file as ``/var/lib/trainops/boot/boot.py`` (``_job_layout.BOOT_DIR``, ``BOOT_ENTRY``)
and the recorder's modules in ``BOOT_DIR/lib`` (``_boot_stage``); the unit (``roles/boot_recorder/files/``) runs
``BOOT_DIR/python -I BOOT_DIR/boot.py``. ``main`` only puts ``BOOT_DIR/lib`` first on ``sys.path`` and runs the
recorder, ``_job_boot.main``. Like ``_supervisor_entry`` it runs before ``lib`` is on ``sys.path``, so it imports
only the standard library and spells ``LIB_DIR`` itself (a unit test checks it against ``_job_layout``).
Python 3.7 or later.
"""

from __future__ import annotations

import importlib
import os
import sys
import typing as t

LIB_DIR = "lib"  # _job_layout.LIB_DIR: this file cannot import it before the folder is on sys.path
RECORDER = "ansible_collections.trainops.pct_launch.plugins.module_utils._job_boot"


def main(argv: t.Sequence[str]) -> int:
    """``BOOT_DIR/boot.py [LIVE_DIR [PROC_ROOT]]``: run the recorder staged in ``BOOT_DIR/lib`` (the unit gives no
    arguments: ``/var/lib/trainops/jobs`` and ``/proc``); 0, or 1 when a job could not be recorded."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), LIB_DIR))
    return int(importlib.import_module(RECORDER).main(*argv[1:3]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
