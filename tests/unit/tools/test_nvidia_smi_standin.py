# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The nvidia-smi stand-in (tools/pve_standin/nvidia_smi.py) prints NVIDIA's CSV formats and errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SOURCE = Path(__file__).resolve().parents[3] / "tools" / "pve_standin" / "nvidia_smi.py"
UUID0 = "GPU-3f0c2a1e-7b4d-4e2a-9c1b-5d6e7f809a1b"
UUID1 = "GPU-8a1d5e02-4c3b-11ee-b962-0242ac120002"
NAME = "NVIDIA A100-SXM4-40GB"
GPU_QUERY = "--query-gpu=index,uuid,name,driver_version,utilization.gpu,memory.used,memory.total"
APP_QUERY = "--query-compute-apps=pid,gpu_uuid,process_name,used_memory"


def gpus() -> list[dict[str, Any]]:
    return [{"index": 0, "uuid": UUID0, "name": NAME, "pci_bus_id": "00000000:07:00.0", "memory_total": 40960,
             "memory_used": 3, "utilization": 35},
            {"index": 1, "uuid": UUID1, "name": NAME, "pci_bus_id": "00000000:0F:00.0", "memory_total": 40960,
             "memory_used": 0, "utilization": 0}]


@pytest.fixture(name="sleeper")
def fixture_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process with a known argv[0], standing in for a training job."""
    proc = subprocess.Popen(["/bin/sleep", "300"], stdin=subprocess.DEVNULL)  # pylint: disable=consider-using-with
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture(name="dead_pid")
def fixture_dead_pid() -> int:
    """The PID of a process that has ended and been reaped."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(proc.stdout)


class Smi:
    """An installed stand-in: ``<dir>/nvidia-smi`` and ``<dir>/nvidia-smi.json``."""

    def __init__(self, directory: Path) -> None:
        self.program = directory / "nvidia-smi"
        self.program.write_bytes(b"#!/usr/bin/env python3\n" + SOURCE.read_bytes())
        self.program.chmod(0o755)
        self.state = directory / "nvidia-smi.json"

    def write(self, **changes: Any) -> None:
        state = {"view": "node", "driver_version": "550.54.15", "driver_loaded": True, "gpus": gpus(), "processes": []}
        state.update(changes)
        self.state.write_text(json.dumps(state), encoding="utf-8")

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.program), *args], capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture(name="smi")
def fixture_smi(tmp_path: Path) -> Smi:
    smi = Smi(tmp_path)
    smi.write()
    return smi


GPU_ROWS_UNITS = [f"0, {UUID0}, {NAME}, 550.54.15, 35 %, 3 MiB, 40960 MiB", f"1, {UUID1}, {NAME}, 550.54.15, 0 %, 0 MiB, 40960 MiB"]
GPU_ROWS_BARE = [f"0, {UUID0}, {NAME}, 550.54.15, 35, 3, 40960", f"1, {UUID1}, {NAME}, 550.54.15, 0, 0, 40960"]
GPU_HEADER = "index, uuid, name, driver_version, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"


@pytest.mark.parametrize(("fmt", "expected"), [
    ("csv", [GPU_HEADER, *GPU_ROWS_UNITS]),
    ("csv,noheader", GPU_ROWS_UNITS),
    ("csv,nounits", [GPU_HEADER, *GPU_ROWS_BARE]),
    ("csv,noheader,nounits", GPU_ROWS_BARE),
    ("csv,nounits,noheader", GPU_ROWS_BARE),
])
def test_query_gpu_formats(smi: Smi, fmt: str, expected: list[str]) -> None:
    out = smi(GPU_QUERY, f"--format={fmt}")
    assert (out.returncode, out.stdout.splitlines()) == (0, expected)


def test_query_gpu_other_fields_and_option_forms(smi: Smi) -> None:
    out = smi("--query-gpu=pci.bus_id,memory.free", "--format", "csv,noheader", "-i", "1")
    assert out.stdout == "00000000:0F:00.0, 40960 MiB\n"
    assert smi("--query-gpu=index", "--format=csv,noheader", f"--id={UUID0}").stdout == "0\n"
    assert smi("--query-gpu=index", "--format=csv,noheader", "-i", "0,1").stdout == "0\n1\n"
    missing = smi("--query-gpu=index", "--format=csv", "-i", "7")
    assert (missing.returncode, missing.stdout) == (6, "No devices were found\n")


@pytest.mark.parametrize(("fmt", "expected"), [
    ("csv", ["pid, gpu_uuid, process_name, used_gpu_memory [MiB]", "{pid}, " + UUID1 + ", /bin/sleep, 1024 MiB"]),
    ("csv,noheader", ["{pid}, " + UUID1 + ", /bin/sleep, 1024 MiB"]),
    ("csv,nounits", ["pid, gpu_uuid, process_name, used_gpu_memory [MiB]", "{pid}, " + UUID1 + ", /bin/sleep, 1024"]),
    ("csv,noheader,nounits", ["{pid}, " + UUID1 + ", /bin/sleep, 1024"]),
])
def test_query_compute_apps_formats(smi: Smi, sleeper: subprocess.Popen[bytes], fmt: str, expected: list[str]) -> None:
    smi.write(processes=[{"pid": sleeper.pid, "gpu_uuid": UUID1, "used_memory": 1024}])
    out = smi(APP_QUERY, f"--format={fmt}")
    assert (out.returncode, out.stdout.splitlines()) == (0, [line.format(pid=sleeper.pid) for line in expected])


def test_compute_apps_gpu_fields(smi: Smi, sleeper: subprocess.Popen[bytes]) -> None:
    smi.write(processes=[{"pid": sleeper.pid, "gpu_uuid": UUID0, "used_memory": 10}])
    out = smi("--query-compute-apps=gpu_name,gpu_bus_id,used_gpu_memory", "--format=csv")
    assert out.stdout.splitlines() == ["gpu_name, gpu_bus_id, used_gpu_memory [MiB]", f"{NAME}, 00000000:07:00.0, 10 MiB"]
    assert smi(APP_QUERY, "--format=csv,noheader", "-i", "1").stdout == ""


def test_no_processes(smi: Smi) -> None:
    assert smi(APP_QUERY, "--format=csv,noheader").stdout == ""
    assert smi(APP_QUERY, "--format=csv,noheader,nounits").stdout == ""
    assert smi(APP_QUERY, "--format=csv").stdout == "pid, gpu_uuid, process_name, used_gpu_memory [MiB]\n"


def test_dead_pid_is_dropped_and_memory_sums(smi: Smi, sleeper: subprocess.Popen[bytes], dead_pid: int) -> None:
    smi.write(processes=[{"pid": sleeper.pid, "gpu_uuid": UUID0, "used_memory": 1000},
                         {"pid": dead_pid, "gpu_uuid": UUID0, "used_memory": 500},
                         {"pid": os.getpid(), "gpu_uuid": UUID0, "used_memory": 20}])
    apps = smi("--query-compute-apps=pid", "--format=csv,noheader").stdout.split()
    assert apps == [str(sleeper.pid), str(os.getpid())]
    used = smi("--query-gpu=memory.used,memory.free", "--format=csv,noheader,nounits").stdout.splitlines()
    assert used == [f"1023, {40960 - 1023}", "0, 40960"]


def test_zombie_is_dropped(smi: Smi) -> None:
    proc = subprocess.Popen(["/bin/true"])  # pylint: disable=consider-using-with
    smi.write(processes=[{"pid": proc.pid, "gpu_uuid": UUID0, "used_memory": 1}])
    for _attempt in range(200):
        stat = Path(f"/proc/{proc.pid}/stat").read_text(encoding="utf-8")
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.01)
    try:
        assert smi("--query-compute-apps=pid", "--format=csv,noheader").stdout == ""
    finally:
        proc.wait()


def test_process_name_falls_back_to_comm(smi: Smi) -> None:
    smi.write(processes=[{"pid": 2, "gpu_uuid": UUID0, "used_memory": 1}])  # kthreadd: empty cmdline
    if not Path("/proc/2/comm").exists():
        pytest.skip("no PID 2 here")
    assert smi("--query-compute-apps=process_name", "--format=csv,noheader").stdout == "kthreadd\n"


def test_container_view_lists_no_processes(smi: Smi, sleeper: subprocess.Popen[bytes]) -> None:
    smi.write(view="container", processes=[{"pid": sleeper.pid, "gpu_uuid": UUID0, "used_memory": 100}])
    assert smi(APP_QUERY, "--format=csv,noheader").stdout == ""
    assert smi("--query-gpu=memory.used", "--format=csv,noheader,nounits").stdout.splitlines() == ["103", "0"]
    assert "No running processes found" in smi().stdout


def test_list_gpus(smi: Smi) -> None:
    expected = [f"GPU 0: {NAME} (UUID: {UUID0})", f"GPU 1: {NAME} (UUID: {UUID1})"]
    assert smi("-L").stdout.splitlines() == expected
    assert smi("--list-gpus").stdout.splitlines() == expected
    assert smi("-L", "-i", "1").stdout.splitlines() == expected[1:]


@pytest.mark.parametrize(("query", "topic"), [("--query-gpu=index,bogus", "gpu"),
                                              ("--query-compute-apps=pid,memory.used", "compute-apps")])
def test_invalid_field(smi: Smi, query: str, topic: str) -> None:
    bad = query.rsplit(",", 1)[1]
    out = smi(query, "--format=csv")
    assert out.returncode == 2
    assert out.stdout == f'Field "{bad}" is not a valid field to query.\n\nRun \'nvidia-smi --help-query-{topic}\' for usage.\n'


@pytest.mark.parametrize("argv", [["--query-gpu=index"], ["--format=csv"], ["-L", "--format=csv"],
                                  ["--query-gpu=index", "--query-compute-apps=pid", "--format=csv"]])
def test_invalid_combination(smi: Smi, argv: list[str]) -> None:
    out = smi(*argv)
    assert (out.returncode, out.stdout) == (2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")


def test_unknown_option_and_format(smi: Smi) -> None:
    out = smi("--bogus")
    assert (out.returncode, out.stdout) == (2, "ERROR: Option --bogus is not recognized. Please run 'nvidia-smi -h' for help.\n")
    assert smi("--query-gpu=index", "--format=csv,xml").returncode == 2


def test_library_mismatch(smi: Smi) -> None:
    smi.write(library_version="550.67.01")
    for argv in ([GPU_QUERY, "--format=csv"], [APP_QUERY, "--format=csv"], ["-L"], []):
        out = smi(*argv)
        assert (out.returncode, out.stdout) == (18, "Failed to initialize NVML: Driver/library version mismatch\n"
                                                    "NVML library version: 550.67\n")
    smi.write(library_version="550.54.15")
    assert smi("-L").returncode == 0


def test_driver_not_loaded(smi: Smi) -> None:
    smi.write(driver_loaded=False)
    message = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n")
    for argv in ([GPU_QUERY, "--format=csv"], ["-L"], []):
        out = smi(*argv)
        assert (out.returncode, out.stdout) == (9, message)
    smi.state.unlink()
    assert smi("-L").returncode == 9


def test_state_found_through_a_symlink(smi: Smi, tmp_path: Path) -> None:
    link_dir = tmp_path / "bin"
    link_dir.mkdir()
    (link_dir / "nvidia-smi").symlink_to(smi.program)
    out = subprocess.run([str(link_dir / "nvidia-smi"), "-L"], capture_output=True, text=True, check=False)
    assert out.stdout.startswith(f"GPU 0: {NAME}")


def test_summary_and_help(smi: Smi, sleeper: subprocess.Popen[bytes]) -> None:
    smi.write(processes=[{"pid": sleeper.pid, "gpu_uuid": UUID0, "used_memory": 64}])
    table = smi().stdout
    assert "Driver Version: 550.54.15" in table and f"{sleeper.pid}" in table and "/bin/sleep" in table
    assert len({len(line) for line in table.splitlines()}) == 1
    assert '"memory.used"' in smi("--help-query-gpu").stdout
    assert '"used_memory"' in smi("--help-query-compute-apps").stdout
