# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The GPU idle watchdog (``_job_gpu_idle``): nvidia-smi's CSV, the idle windows with an injected clock, the query."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_gpu_idle as G

A = "GPU-1a2b3c4d-0000-1111-2222-333344445555"
B = "GPU-3c4d5e6f-6666-7777-8888-999900001111"


def test_real_nvidia_smi_lines_are_parsed_with_values_the_gpu_does_not_report() -> None:
    text = f"{A}, 37\n{B}, 0\nGPU-aaaaaaaa-0000-0000-0000-000000000000, [N/A]\nGPU-bbbbbbbb-0000-0000-0000-000000000000, [Not Supported]\n\n"
    assert G.parse(text) == {A: 37, B: 0, "GPU-aaaaaaaa-0000-0000-0000-000000000000": None, "GPU-bbbbbbbb-0000-0000-0000-000000000000": None}
    assert G.parse(f"{A}, 100 %\n") == {A: 100}, "with units, as without nounits"
    assert G.parse("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\n") == {}


def test_a_gpu_below_the_threshold_for_the_whole_window_idles_and_is_named() -> None:
    windows = G.Windows([A, B], 5, 60)
    windows.reading({A: 0, B: 90}, 100.0)
    windows.reading({A: 3, B: 95}, 130.0)
    assert windows.idle() == []
    windows.reading({A: 1, B: 99}, 160.0)
    assert windows.idle() == [(A, 3)], "below 5 % since 100 s, the highest reading 3 %"
    assert windows.words(windows.idle()) == "1 of the job's 2 GPUs idled below 5 % for 60 s (gpu_idle_timeout): GPU-1a2b3c4d 3 %"


def test_all_gpus_idle_are_the_jobs_gpus_and_a_reading_at_the_threshold_ends_a_window() -> None:
    windows = G.Windows([A, B], 5, 60)
    for now in (0.0, 30.0, 60.0):
        windows.reading({A: 0, B: 1}, now)
    assert windows.words(windows.idle()) == "the job's GPUs idled below 5 % for 60 s (gpu_idle_timeout): GPU-1a2b3c4d 0 %, GPU-3c4d5e6f 1 %"
    windows.reading({A: 5, B: 1}, 70.0)
    assert windows.idle() == [(B, 1)]
    windows.reading({A: 0, B: 50}, 80.0)
    assert windows.idle() == [], "A's window began again at 80 s"
    single = G.Windows([A], 5, 60)
    single.reading({A: 0}, 0.0)
    single.reading({A: 0}, 60.0)
    assert single.words(single.idle()).startswith("the job's GPU idled below 5 %")


def test_no_value_no_idle_and_the_verdict_is_that_of_the_last_reading() -> None:
    windows = G.Windows([A, B], 5, 60)
    windows.reading({A: 0}, 0.0)  # B is not listed
    windows.reading({A: 0, B: None}, 61.0)  # [N/A]
    assert windows.idle() == [(A, 0)]
    assert G.Windows([A], 5, 60).idle() == [], "no reading, no verdict"
    windows.reading({A: 0, B: 0}, 62.0)
    assert windows.idle() == [(A, 0)], "B's window began at 62 s"


def _fake_smi(tmp_path: Path, body: str) -> Path:
    program = tmp_path / "nvidia-smi"
    program.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    program.chmod(0o755)
    return program


def _ticks(idle: G.GpuIdle, until: float) -> None:
    deadline = time.monotonic() + until
    while time.monotonic() < deadline:
        idle.tick()
        time.sleep(0.02)


def test_the_query_asks_nvidia_smi_with_its_documented_options(tmp_path: Path) -> None:
    argv = tmp_path / "argv"
    program = _fake_smi(tmp_path, f'echo "$@" > "{argv}"\necho "{A}, 0"\necho "{B}, 80"\n')
    idle = G.GpuIdle([A, B], 5, 0.4, str(program))
    assert idle.interval == 0.25
    idle.begin()
    _ticks(idle, 1.0)
    idle.end()
    assert argv.read_text(encoding="utf-8").split() == ["--query-gpu=uuid,utilization.gpu", "--format=csv,noheader,nounits"]
    assert idle.idle_words() == "1 of the job's 2 GPUs idled below 5 % for 0.4 s (gpu_idle_timeout): GPU-1a2b3c4d 0 %"
    assert idle.notes() == []


def test_a_missing_or_failing_nvidia_smi_gives_no_verdict_and_one_note(tmp_path: Path) -> None:
    missing = G.GpuIdle([A], 5, 0.4, str(tmp_path / "nowhere" / "nvidia-smi"))
    missing.begin()
    _ticks(missing, 0.6)
    assert missing.idle_words() is None
    assert [note.split(" is not found")[0] for note in missing.notes()] == [f"gpu_idle_timeout: {tmp_path}/nowhere/nvidia-smi"]
    missing.begin()
    assert missing.notes() == [], "noted once for the supervisor's life"
    program = _fake_smi(tmp_path, 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\nexit 9\n')
    failing = G.GpuIdle([A], 5, 0.4, str(program))
    failing.begin()
    _ticks(failing, 0.8)
    failing.end()
    assert failing.idle_words() is None
    assert failing.notes() == [f"gpu_idle_timeout: no reading of the GPUs' utilisation ({program} exited 9: NVIDIA-SMI has failed because it "
                               "couldn't communicate with the NVIDIA driver.); no verdict until one comes"]


def test_a_gpu_not_listed_or_without_utilisation_is_noted(tmp_path: Path) -> None:
    program = _fake_smi(tmp_path, f'echo "{A}, [N/A]"\n')
    idle = G.GpuIdle([A, B], 5, 0.4, str(program))
    idle.begin()
    _ticks(idle, 0.6)
    idle.end()
    assert idle.idle_words() is None
    assert idle.notes() == [f"gpu_idle_timeout: {A} does not report its utilisation; it is not watched",
                            f"gpu_idle_timeout: {B} is not in {program}'s list; it is not watched"]


def test_a_query_that_hangs_is_killed_and_never_blocks_a_tick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(G, "QUERY_TIMEOUT", 0.3)
    program = _fake_smi(tmp_path, "exec sleep 30\n")
    idle = G.GpuIdle([A], 5, 10, str(program))
    idle.begin()
    started = time.monotonic()
    idle.tick()
    assert time.monotonic() - started < 0.2
    _ticks(idle, 0.6)
    assert idle.notes() == [f"gpu_idle_timeout: no reading of the GPUs' utilisation ({program} did not answer within 0.3 s); no verdict until one comes"]
    idle.end()


def test_the_watchdog_is_there_only_with_a_timeout_and_gpus() -> None:
    assert G.from_job({"gpus": [A]}, {"gpu_idle_timeout": 0}) is None
    assert G.from_job({"gpus": []}, {"gpu_idle_timeout": 60}) is None
    idle = G.from_job({"gpus": [A, B], "nvidia_smi": "/opt/nv/nvidia-smi"}, {"gpu_idle_timeout": 600, "gpu_idle_utilization": 10})
    assert idle is not None and (idle.uuids, idle.threshold, idle.timeout, idle.nvidia_smi, idle.interval) == (
        [A, B], 10.0, 600.0, "/opt/nv/nvidia-smi", G.INTERVAL)
