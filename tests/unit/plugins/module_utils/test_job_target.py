# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The room a start needs on the log's filesystem (tmux_session's min_free_mb)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_target as T
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import SpecError, spec_from_params


def _spec(tmp_path: Path, min_free_mb: int) -> object:
    return spec_from_params({"session_name": "s", "command": "true", "log_path": str(tmp_path / "train.log"), "min_free_mb": min_free_mb})


def test_enough_room_and_no_check(tmp_path: Path) -> None:
    T.check_room(_spec(tmp_path, 0))
    T.check_room(_spec(tmp_path, 1))


def test_too_little_room_names_the_filesystem_and_the_option(tmp_path: Path) -> None:
    stats = os.statvfs(tmp_path)
    free = stats.f_bavail * stats.f_frsize // 1048576
    with pytest.raises(T.JobError) as info:
        T.check_room(_spec(tmp_path, free + 10_000_000))
    assert info.value.code == "log_dir_full"
    assert f" MiB free on the filesystem of {tmp_path}, " in str(info.value)
    assert str(info.value).endswith(f"min_free_mb is {free + 10_000_000}")


def test_a_bad_min_free_mb_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="Invalid min_free_mb -1"):
        _spec(tmp_path, -1)
