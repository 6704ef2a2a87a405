# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The CUDA probe (issue 35) on a real stand-in container: launch.yml's preflight refuses GPUs CUDA cannot initialise
and starts nothing, starts the job once CUDA initialises, and the supervisor ends the restarts of a job whose GPUs CUDA
cannot initialise any more.

No GPU exists here: the container has the GPU stand-in (tests/integration/gpu_standin.py: nvidia-smi, device files)
and, as its ``libcuda.so.550.54.15`` (``libcuda.so.1`` links to it), the stand-in libcuda built from
files/fake_libcuda.c, scripted by the container's ``/etc/fake-cuda.conf`` (fake_libcuda.CONF): the probe runs with the
job's environment alone, as the job's user. Its UUIDs are the stand-in GPUs', so the job's CUDA_VISIBLE_DEVICES names
them. Everything runs through ansible-playbook and the collection's pct connection, as users run it.

VMID: 750 (unprivileged, with tmux).
"""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from .conftest import StandinNode
from .fake_libcuda import CONF, conf_text
from .gpu_standin import GPU_UUIDS, gpu_entries, gpu_processes, install_in_container, install_node_smi, push_file
from .playbook_results import LAUNCH_TASK, container_host, launch_proof, run_playbook, run_tasks, task_results

pytestmark = pytest.mark.integration

CT = 750
GPUS = 4
PREFLIGHT_GPU = "Ask the node which processes hold the GPUs the container can open"
FIX = "`nvidia-modprobe -u -c=0`"


def _configure(standin: StandinNode, **settings: str) -> None:
    """The container's /etc/fake-cuda.conf: the stand-in GPUs' UUIDs, and ``settings`` (``FAIL="cuInit:999"``)."""
    text = conf_text(UUIDS=",".join(GPU_UUIDS[:GPUS]), **settings)
    push_file(standin, CT, CONF, text.encode("utf-8"))


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """750 with tmux, /w, the GPU stand-in with 4 GPUs and the stand-in libcuda as its driver's libcuda."""
    standin.create(CT)
    standin.install_tmux(CT, "/w")
    install_in_container(standin, CT, gpu_entries(GPUS))  # the stand-in libcuda too (gpu_standin.install_libraries)
    return CT


@pytest.fixture()
def node_smi(tmp_path: Path, standin: StandinNode, ct: int) -> t.Iterator[Path]:
    """The node's nvidia-smi with the container's 4 GPUs; the container's jobs and files gone after the test."""
    program = install_node_smi(tmp_path / "node-smi", gpu_entries(GPUS))
    with gpu_processes():
        yield program
    standin.sh(ct, f"tmux kill-server 2>/dev/null; rm -rf /run/trainops /w/*; rm -f {CONF}; true", check=False)


def _job(name: str, program: Path, **more: t.Any) -> dict[str, t.Any]:
    return dict({"job_session_name": name, "job_log_path": f"/w/{name}.log", "job_prepare": False, "job_gpus": 2,
                 "job_command": "echo \"CVD=$CUDA_VISIBLE_DEVICES\"; echo 'step 1 loss 0.5'; sleep 600",
                 "job_wait_pattern": "step [0-9]+", "job_wait_timeout": 60, "job_node_nvidia_smi": str(program)}, **more)


def _files(standin: StandinNode, *paths: str) -> str:
    """``ls -l --time-style=full-iso`` of the paths that exist, and the text of each."""
    script = 'for f in "$@"; do [ -e "$f" ] && ls -l --time-style=full-iso "$f" && cat "$f"; done; true'
    return standin.sh(CT, script, *paths).stdout.decode("utf-8", "replace")


def test_the_preflight_refuses_gpus_cuda_cannot_initialise_and_starts_nothing(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """cuInit 999 (the uvm module not loaded on the node): refused with the error, its number and the fix; no session,
    no log, no run dir, and the log of an earlier run untouched."""
    _configure(standin, FAIL="cuInit:999")
    standin.sh(CT, "printf 'an earlier run\\n' > /w/kept.log; touch -d '2026-01-01 00:00:00' /w/kept.log")
    before = _files(standin, "/w/kept.log")
    hosts = {"trainer": container_host(CT)}
    for name in ("fresh", "kept"):
        proc, results = run_playbook(tmp_path, "launch.yml", hosts, _job(name, node_smi))
        flat = " ".join(proc.stdout.split())
        assert proc.returncode != 0 and f"Cannot launch {name} on GPUs in CT {CT}: " in flat, proc.stdout[-4000:]
        assert "cuInit failed with CUDA_ERROR_UNKNOWN (999, unknown error)" in flat and FIX in flat, proc.stdout[-4000:]
        assert "Nothing was started" in flat, proc.stdout[-4000:]
        cuda = task_results(results, PREFLIGHT_GPU, "trainer")[-1]["cuda"]
        assert (cuda["ran"], cuda["ok"], cuda["call"], cuda["code"], cuda["name"]) == (True, False, "cuInit", 999, "CUDA_ERROR_UNKNOWN"), cuda
        assert not task_results(results, LAUNCH_TASK, "trainer") or task_results(results, LAUNCH_TASK, "trainer")[-1].get("status") == "skipped"
        assert standin.sh(CT, f"tmux has-session -t ={name}", check=False).returncode != 0, "no session"
        assert standin.sh(CT, f"ls -d /run/trainops/*{name}* 2>/dev/null", check=False).stdout == b"", "no run dir"
    assert _files(standin, "/w/fresh.log", "/w/fresh.log.exit") == "", "no log created"
    assert _files(standin, "/w/kept.log", "/w/kept.log.exit", "/w/kept.log.1") == before, "the earlier log untouched"


def test_once_cuda_initialises_the_same_launch_starts_and_proves_the_job(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    _configure(standin)
    proc, results = run_playbook(tmp_path, "launch.yml", {"trainer": container_host(CT)}, _job("cudaok", node_smi))
    assert proc.returncode == 0, proc.stdout[-4000:]
    cuda = task_results(results, PREFLIGHT_GPU, "trainer")[-1]["cuda"]
    assert cuda["ran"] and cuda["ok"] and cuda["count"] == GPUS, cuda
    assert [gpu["uuid"] for gpu in cuda["devices"]] == list(GPU_UUIDS[:GPUS]), cuda
    launch = task_results(results, LAUNCH_TASK, "trainer")[-1]
    assert launch["changed"] and launch["gpus"] == list(GPU_UUIDS[:2]), launch
    proof = launch_proof(results, "trainer")
    assert proof is not None and proof["verdict"] == "started" and proof["matched_line"].startswith("step "), proof
    log = standin.sh(CT, "cat /w/cudaok.log").stdout.decode()
    assert f"CVD={GPU_UUIDS[0]},{GPU_UUIDS[1]}" in log, log


def test_the_supervisor_ends_the_restarts_when_cuda_cannot_initialise(tmp_path: Path, standin: StandinNode, node_smi: Path) -> None:
    """A job with a GPU and restart on_failure whose first attempt exits 1 while cuInit answers 999: not restarted,
    its end names the CUDA error and the fix."""
    del node_smi
    _configure(standin, FAIL="cuInit:999")
    task = {"name": "start", "trainops.pct_launch.tmux_session": {
        "session_name": "cudarestart", "command": "echo attempt $TRAINOPS_ATTEMPT; sleep 1; exit 1", "log_path": "/w/cudarestart.log",
        "gpus": 1, "restart": "on_failure", "restart_limit": 3, "restart_delay": 0.5}}
    wait = {"name": "wait", "ignore_errors": True, "trainops.pct_launch.wait_for_log": {
        "session_name": "cudarestart", "log_path": "/w/cudarestart.log", "wait_until": "finished", "timeout": 60}}
    run = run_tasks(tmp_path, {"ct": container_host(CT)}, [task, wait])
    started = run.result("start", "ct")
    assert started["changed"] and started["gpus"] == [GPU_UUIDS[0]], started
    waited = run.result("wait", "ct")
    assert (waited.get("end_state"), waited.get("cause")) == ("failed", "cuda_probe"), waited
    record = dict(line.split("=", 1) for line in standin.sh(CT, "cat /w/cudarestart.log.exit").stdout.decode().splitlines() if "=" in line)
    assert (record["attempts"], record["end_state"], record["cause"], record["exit_status"]) == ("1", "failed", "cuda_probe", "1"), record
    assert "not restarted: CUDA cannot initialise GPU GPU-" in record["reason"], record
    assert "cuInit failed with CUDA_ERROR_UNKNOWN (999, unknown error)" in record["reason"] and FIX in record["reason"], record
    log = standin.sh(CT, "cat /w/cudarestart.log").stdout.decode()
    assert log.count("attempt 1") == 1 and "attempt 2" not in log.replace("attempt 2 not started", ""), log
    assert "trainops.pct_launch: attempt 2 not started: CUDA cannot initialise" in log, log
