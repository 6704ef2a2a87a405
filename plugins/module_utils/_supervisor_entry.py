# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The supervisor's entry point: the program tmux runs in the job's pane (docs/job-life.md).

``tmux_session`` stages this file as ``RUN_DIR/supervisor.py`` (``_job_layout.SUPERVISOR_FILE``; earlier releases
named it ``parent.py``) and the supervisor's modules in ``RUN_DIR/lib`` (``_job_stage``), and tmux runs
``PYTHON -I RUN_DIR/supervisor.py RUN_DIR``. ``main`` only puts ``RUN_DIR/lib`` first on ``sys.path`` and runs
the supervisor's loop, ``_job_supervise.run``; that loop is the supervisor, and the job's process and exit record
are ``_job_process``. This is not the supervisor's loop: it is the one file that runs before ``RUN_DIR/lib`` is
on ``sys.path``, so it imports only the standard library and spells ``LIB_DIR`` itself (a unit test checks it
against ``_job_layout``). Python 3.7 or later.
"""

from __future__ import annotations

import importlib
import os
import sys
import typing as t

LIB_DIR = "lib"  # _job_layout.LIB_DIR: this file cannot import it before the folder is on sys.path
SUPERVISOR = "ansible_collections.trainops.pct_launch.plugins.module_utils._job_supervise"


def main(argv: t.Sequence[str]) -> int:
    """``RUN_DIR/supervisor.py RUN_DIR``: run the supervisor staged in ``RUN_DIR/lib``; the job's last exit status."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), LIB_DIR))
    return int(importlib.import_module(SUPERVISOR).run(argv[1]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
