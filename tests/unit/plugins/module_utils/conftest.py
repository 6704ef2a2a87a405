# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Fixtures the unit tests of plugins/module_utils share: small real file systems (tmpfs, root only)."""

from __future__ import annotations

import os
import subprocess
import typing as t
from pathlib import Path

import pytest


@pytest.fixture()
def small_empty_fs(tmp_path: Path) -> t.Iterator[Path]:
    """An empty 16 KiB tmpfs (root only; skipped otherwise), for a job or a log to fill."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)],
                                           capture_output=True, check=False).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


@pytest.fixture()
def small_fs(small_empty_fs: Path) -> Path:
    """The same tmpfs, full: a file ``filler`` takes all its space."""
    subprocess.run(["dd", "if=/dev/zero", f"of={small_empty_fs / 'filler'}", "bs=1k"], capture_output=True, check=False)
    return small_empty_fs
