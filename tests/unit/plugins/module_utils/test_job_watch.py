# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The supervisor's watch of one attempt: the GPU watchdog's notes in the log are not the job's output, the job's are."""

from __future__ import annotations

import types
import typing as t
from pathlib import Path

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_watch import Watch, size_of


class Gpu:
    """The GPU idle watchdog as Watch asks it: one note once, then none."""

    def __init__(self) -> None:
        self.pending = ["gpu_idle_timeout: nvidia-smi is not found"]

    def begin(self) -> None:
        """An attempt starts."""

    def tick(self) -> None:
        """A reading (none here)."""

    def notes(self) -> list[str]:
        """The notes not written yet."""
        found, self.pending = self.pending, []
        return found


def watch(tmp_path: Path, log: t.BinaryIO) -> Watch:
    """A watch of an attempt whose log is ``tmp_path/job.log``, the GPU watchdog with one note to write."""
    path = tmp_path / "job.log"
    sup = types.SimpleNamespace(policy={"stall_pattern": None}, log=log, log_path=str(path), name="job", state={"attempt": 1},
                                gpu_idle=Gpu())
    return Watch(sup, types.SimpleNamespace(pid=1), size_of(str(path)))


def test_a_note_alone_is_not_output(tmp_path: Path) -> None:
    with open(tmp_path / "job.log", "ab") as log:
        seen = watch(tmp_path, log)
        seen.gpus()
        seen.output()
    assert "last_output_at" not in seen.sup.state
    assert (tmp_path / "job.log").read_text() == "### trainops.pct_launch: session=job attempt=1 gpu_idle_timeout: nvidia-smi is not found\n"


def test_the_job_s_output_of_the_same_tick_still_counts(tmp_path: Path) -> None:
    with open(tmp_path / "job.log", "ab") as log:
        seen = watch(tmp_path, log)
        log.write(b"Epoch 1/9\n")
        log.flush()
        seen.gpus()
        seen.output()
    assert seen.sup.state.get("last_output_at"), "the job's line before the note is output"
