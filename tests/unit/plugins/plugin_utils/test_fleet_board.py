# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the fleet board (plugin_utils/_fleet_board.py): exactly one first failure, on real files."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _fleet_board as fleet_board


@pytest.fixture(autouse=True)
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The boards go to this test's own temporary directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_first_failure_wins_and_is_read_back() -> None:
    assert fleet_board.first_failure("run-1") is None
    assert fleet_board.post_failure("run-1", {"host": "ct361", "exit_status": 7}) is True
    assert fleet_board.post_failure("run-1", {"host": "ct360", "exit_status": 1}) is False
    first = fleet_board.first_failure("run-1")
    assert first is not None and first["host"] == "ct361" and first["exit_status"] == 7 and first["posted_at"] > 0
    assert fleet_board.first_failure("run-2") is None, "another fleet sees nothing"


def _post(fleet_id: str, host: str, tmp: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    tempfile.tempdir = tmp
    queue.put((host, fleet_board.post_failure(fleet_id, {"host": host})))


def test_exactly_one_of_many_processes_is_first(private_tmp: Path) -> None:
    queue: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    procs = [multiprocessing.Process(target=_post, args=("race", f"ct{n}", str(private_tmp), queue)) for n in range(8)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    answers = dict(queue.get(timeout=5) for _proc in procs)
    firsts = [host for host, first in answers.items() if first]
    assert len(firsts) == 1, answers
    assert (fleet_board.first_failure("race") or {})["host"] == firsts[0]


def test_the_board_is_private_and_old_boards_are_swept(private_tmp: Path) -> None:
    folder = fleet_board.board("new")
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.parent.stat().st_mode & 0o777 == 0o700
    old = folder.parent / "old"
    old.mkdir()
    stale = time.time() - fleet_board.MAX_AGE - 60
    os.utime(old, (stale, stale))
    fleet_board.board("newer")
    assert not old.exists() and folder.exists()


@pytest.mark.parametrize("fleet_id", ["", ".", "..", "a/b", "a b", "x" * 129, "ünï", "a\nb"])
def test_bad_fleet_ids_are_refused(fleet_id: str) -> None:
    error = fleet_board.fleet_id_error(fleet_id)
    assert error is not None and error.startswith("Cannot use option fleet_id ")


@pytest.mark.parametrize("fleet_id", ["train-20261201T101010123456-42", "a", "A.b_c-1", "x" * 128])
def test_good_fleet_ids_are_taken(fleet_id: str) -> None:
    assert fleet_board.fleet_id_error(fleet_id) is None
