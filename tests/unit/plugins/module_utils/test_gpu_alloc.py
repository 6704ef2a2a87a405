# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The GPU request of tmux_session and the choice among the GPUs of a host."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _gpu_alloc as A

GPUS = [{"index": i, "uuid": f"GPU-{i}aaaaaaa-0000-4000-8000-00000000000{i}", "name": "NVIDIA A100"} for i in range(4)]


@pytest.mark.parametrize(("value", "parsed"), [
    (None, None), ("", None), ([], None),
    ("all", ("all", None)), ("ALL", ("all", None)),
    (2, ("count", 2)), ("2", ("count", 2)),
    ([0, 2], ("ids", ("0", "2"))), ("0,2", ("ids", ("0", "2"))), (["GPU-abc-1"], ("ids", ("GPU-abc-1",))),
    (["MIG-1f3b-2"], ("ids", ("MIG-1f3b-2",))),
])
def test_requests(value: object, parsed: object) -> None:
    assert A.parse_request(value) == parsed


@pytest.mark.parametrize(("value", "words"), [
    (0, "a count is from 1 to 1024"), (True, "Invalid gpus True"), ("two", "Invalid gpus item 'two'"),
    ([0, 0], "listed twice"), (["x;rm -rf /"], "Invalid gpus item"), ({"a": 1}, "Invalid gpus"), ([True], "Invalid gpus item True"),
])
def test_bad_requests_name_the_option(value: object, words: str) -> None:
    with pytest.raises(A.GpuError, match="gpus") as info:
        A.parse_request(value)
    assert words in str(info.value)


def test_a_count_takes_the_free_gpus_with_the_lowest_indices() -> None:
    holders = {GPUS[0]["uuid"]: "train-a"}
    chosen = A.allocate(("count", 2), GPUS, holders, exclude={GPUS[1]["uuid"]})
    assert [gpu["index"] for gpu in chosen] == [2, 3]
    assert [gpu["index"] for gpu in A.allocate(("count", 1), GPUS, {}, exclude={"0"})] == [1]
    assert A.environment(chosen) == {"CUDA_VISIBLE_DEVICES": f"{GPUS[2]['uuid']},{GPUS[3]['uuid']}"}


def test_too_few_free_gpus_names_what_holds_them() -> None:
    with pytest.raises(A.GpuError) as info:
        A.allocate(("count", 3), GPUS, {GPUS[0]["uuid"]: "train-a"}, exclude={GPUS[1]["uuid"]})
    text = str(info.value)
    assert text.startswith("3 GPUs asked for, 2 free of 4 (GPU 0 (")
    assert "held by session train-a" in text and f"GPU 1 ({GPUS[1]['uuid']}, NVIDIA A100) busy" in text


def test_all_and_named_gpus_fail_when_one_is_held_but_ignore_exclude() -> None:
    assert len(A.allocate(("all", None), GPUS, {}, exclude={GPUS[0]["uuid"]})) == 4
    assert [g["index"] for g in A.allocate(("ids", ("3", GPUS[1]["uuid"])), GPUS, {})] == [3, 1]
    with pytest.raises(A.GpuError, match="GPU 2 .* is held by session other in this container"):
        A.allocate(("all", None), GPUS, {GPUS[2]["uuid"]: "other"})
    with pytest.raises(A.GpuError, match="GPU 7 is not visible on this host"):
        A.allocate(("ids", ("7",)), GPUS, {})
    with pytest.raises(A.GpuError, match="no GPU is visible on this host"):
        A.allocate(("count", 1), [], {})


def _session(root: Path, name: str, gpus: object) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "job.json").write_text(json.dumps({"session_name": name, "gpus": gpus}), encoding="utf-8")


def test_held_reads_the_running_sessions_only(tmp_path: Path) -> None:
    _session(tmp_path, "a", ["GPU-1", "GPU-2"])
    _session(tmp_path, "b", ["GPU-3"])
    _session(tmp_path, "c", [])
    _session(tmp_path, "me", ["GPU-4"])
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "job.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "gpus.lock").write_text("", encoding="utf-8")
    assert A.held(str(tmp_path), lambda name: name != "b", "me") == {"GPU-1": "a", "GPU-2": "a"}
    assert A.held(str(tmp_path / "missing"), lambda name: True, "") == {}


def _mark(path: str, text: str) -> None:
    """Append a line to the marks file: one O_APPEND write, so the lines' order is the order of the writes
    (a multiprocessing.Queue's feeder thread may deliver one process's item after a later one of another's)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


def _marks(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split() if path.exists() else []


def _hold(root: str, name: str, marks: str, release: str) -> None:
    """Take the lock, mark it, hold it until ``release`` exists (when given), mark the release."""
    _mark(marks, f"{name}:waiting")
    with A.locked(root):
        _mark(marks, f"{name}:in")
        while release and not os.path.exists(release):
            time.sleep(0.01)
        _mark(marks, f"{name}:out")


def _until(what: str, check: t.Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_the_lock_serialises_the_choices_of_two_processes(tmp_path: Path) -> None:
    marks, release = tmp_path / "marks", tmp_path / "release"
    first = multiprocessing.Process(target=_hold, args=(str(tmp_path), "first", str(marks), str(release)))
    second = multiprocessing.Process(target=_hold, args=(str(tmp_path), "second", str(marks), ""))
    first.start()
    try:
        _until("the first process to hold the lock", lambda: "first:in" in _marks(marks))
        second.start()
        _until("the second process to ask for the lock", lambda: "second:waiting" in _marks(marks))
        time.sleep(0.2)
        assert "second:in" not in _marks(marks), "the second process took the lock while the first held it"
    finally:
        release.touch()  # the first lets go in every case, so that no process is left behind
        first.join(timeout=20)
        if second.pid is not None:
            second.join(timeout=20)
    assert _marks(marks) == ["first:waiting", "first:in", "second:waiting", "first:out", "second:in", "second:out"]
    assert oct(os.stat(tmp_path / A.GPU_LOCK).st_mode & 0o777) == "0o600"
