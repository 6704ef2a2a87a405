# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""One node answer per key, shared by forked processes through files in the run's DEFAULT_LOCAL_TMP."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import typing as t
from pathlib import Path

import pytest

from ansible import constants as C

from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _node_once as N

FORK = multiprocessing.get_context("fork")


@pytest.fixture()
def run_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh DEFAULT_LOCAL_TMP, as ansible-playbook makes one per run."""
    folder = tmp_path / "ansible-local-1"
    folder.mkdir()
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(folder))
    return folder


def _asker(log: Path, answer: dict[str, t.Any], delay: float) -> t.Callable[[], dict[str, t.Any]]:
    def ask() -> dict[str, t.Any]:
        with open(log, "a", encoding="utf-8") as handle:  # one line per query of the "node"
            handle.write(f"{os.getpid()}\n")
        time.sleep(delay)
        return dict(answer)
    return ask


def _worker(key: str, log: str, answer: dict[str, t.Any], delay: float, out: t.Any) -> None:
    out.put(N.shared_answer(key, _asker(Path(log), answer, delay)))


def _run(keys: list[str], log: Path, answer: dict[str, t.Any], delay: float = 0.3) -> list[tuple[dict[str, t.Any], bool]]:
    """Each key in its own forked process, all at once; their (answer, shared)."""
    out = FORK.Queue()
    procs = [FORK.Process(target=_worker, args=(key, str(log), answer, delay, out)) for key in keys]
    for proc in procs:
        proc.start()
    found = [out.get(timeout=30) for _proc in procs]
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    return found


def _asked(log: Path) -> int:
    return len(log.read_text(encoding="utf-8").splitlines()) if log.exists() else 0


GOOD = {"gpus": [{"index": 0, "uuid": "GPU-1"}], "driver_version": "550.54.15", "error": None, "processes": []}
BAD = {"gpus": [], "driver_version": None, "error": "ssh: connect to host pve-a port 22: Connection refused", "processes": []}


def test_the_key_names_task_reach_and_program() -> None:
    key = N.answer_key("uuid-1", ["ssh", "-T", "pve-a", "--", "python3 -"], "nvidia-smi")
    assert len(key) == 64 and int(key, 16) >= 0
    assert key == N.answer_key("uuid-1", ["ssh", "-T", "pve-a", "--", "python3 -"], "nvidia-smi")
    others = {N.answer_key("uuid-2", ["ssh", "-T", "pve-a", "--", "python3 -"], "nvidia-smi"),
              N.answer_key("uuid-1", ["ssh", "-T", "pve-b", "--", "python3 -"], "nvidia-smi"),
              N.answer_key("uuid-1", ["ssh", "-T", "-l", "ops", "pve-a", "--", "python3 -"], "nvidia-smi"),
              N.answer_key("uuid-1", ["ssh", "-T", "pve-a", "--", "python3 -"], "/opt/nvidia-smi")}
    assert key not in others and len(others) == 4


def test_one_query_for_many_processes_of_one_key(run_tmp: Path, tmp_path: Path) -> None:
    log = tmp_path / "asked.log"
    found = _run(["k1"] * 8, log, GOOD)
    assert _asked(log) == 1
    assert all(answer == GOOD for answer, _shared in found)
    assert sorted(shared for _answer, shared in found) == [False] + [True] * 7
    assert json.loads((run_tmp / N.SUBDIR / "k1.json").read_text(encoding="utf-8")) == GOOD
    assert not [p for p in (run_tmp / N.SUBDIR).iterdir() if p.name.startswith(".answer-")], "no temporary file is left"


def test_two_keys_are_two_queries(run_tmp: Path, tmp_path: Path) -> None:
    del run_tmp
    log = tmp_path / "asked.log"
    found = _run(["node-a", "node-b"] * 4, log, GOOD)
    assert _asked(log) == 2
    assert sorted(shared for _answer, shared in found) == [False] * 2 + [True] * 6


def test_a_failed_answer_is_not_shared(run_tmp: Path, tmp_path: Path) -> None:
    log = tmp_path / "asked.log"
    found = _run(["k"] * 4, log, BAD, delay=0.1)
    assert _asked(log) == 4, "each host asks itself"
    assert all(answer == BAD and not shared for answer, shared in found)
    assert not (run_tmp / N.SUBDIR / "k.json").exists()
    # a later good answer is shared again
    assert N.shared_answer("k", _asker(log, GOOD, 0)) == (GOOD, False)
    assert N.shared_answer("k", _asker(log, GOOD, 0)) == (GOOD, True)
    assert _asked(log) == 5


def test_failed_hosts_do_not_wait_for_each_other(run_tmp: Path, tmp_path: Path) -> None:
    del run_tmp
    log = tmp_path / "asked.log"
    N.shared_answer("slow", _asker(log, BAD, 0))  # the first host's query failed
    started = time.monotonic()
    _run(["slow"] * 6, log, BAD, delay=1.0)
    assert _asked(log) == 7
    assert time.monotonic() - started < 4, "after a failure the hosts ask in parallel, not one after the other"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_an_unwritable_directory_means_asking_directly(run_tmp: Path, tmp_path: Path) -> None:
    log = tmp_path / "asked.log"
    run_tmp.chmod(0o500)
    try:
        assert N.shared_answer("k", _asker(log, GOOD, 0)) == (GOOD, False)
        assert N.shared_answer("k", _asker(log, GOOD, 0)) == (GOOD, False)
    finally:
        run_tmp.chmod(0o700)
    assert _asked(log) == 2


@pytest.mark.parametrize("where", ["a-file", "/proc"])
def test_a_directory_that_cannot_be_used_means_asking_directly(where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file where the directory should be; /proc, where not even root can make a directory."""
    log = tmp_path / "asked.log"
    folder = tmp_path / where if not where.startswith("/") else Path(where)
    if not where.startswith("/"):
        folder.write_text("not a directory", encoding="utf-8")
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(folder))
    assert N.shared_answer("k", _asker(log, GOOD, 0)) == (GOOD, False)
    assert N.shared_answer("k", _asker(log, GOOD, 0)) == (GOOD, False)
    assert _asked(log) == 2


def test_an_unwritable_answer_is_still_returned(run_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    del run_tmp
    log = tmp_path / "asked.log"

    def refuse(*_args: t.Any, **_kwargs: t.Any) -> t.NoReturn:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(N.tempfile, "mkstemp", refuse)
    assert N.shared_answer("k", _asker(log, GOOD, 0)) == (GOOD, False)
    assert N.shared_answer("k", _asker(log, GOOD, 0)) == (GOOD, False)
    assert _asked(log) == 2
