# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests of plugins/module_utils/_job_end.py: the OOM kill counter, signal names and the classification of an end.

The cgroup trees are fake ones in tmp_path (v1, v2, both, a namespace's relative paths); one test reads this
machine's own counter. The torchelastic error files and torchrun summaries have the shapes PyTorch writes
(torch/distributed/elastic/multiprocessing/errors/error_handler.py and __init__.py).
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import threading
import typing as t
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_end
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_end import classify, oom_kills, signal_name

MODULE = Path(_job_end.__file__)
HEADER = "### trainops.pct_launch: session=train started_at=2026-12-01T10:00:00Z host=ct285 command=torchrun train.py"
TRAILER = "### trainops.pct_launch: session=train exit_status=1 ended_at=2026-12-01T11:00:00Z"
ATTEMPT_2 = "### trainops.pct_launch: session=train attempt=2 started_at=2026-12-01T10:30:00Z"
NO_TRACEBACK = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
CAUSES = {"exit_status", "signal", "oom_kill", "cuda_oom", "nccl", "python_exception", "torchelastic", "time_limit",
          "stall", "stop", "shutdown"}
MEMORY_EVENTS = "low 0\nhigh 0\nmax 12\noom 4\noom_kill {kills}\noom_group_kill 9\n"
OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n"


def traceback(*last: str, prefix: str = "") -> str:
    """A Python traceback ending in the lines ``last`` (each line with ``prefix``, as torch's ``[rankN]: ``)."""
    lines = ["Traceback (most recent call last):", '  File "/workspace/train.py", line 12, in <module>',
             "    main()", '  File "/workspace/train.py", line 9, in main', "    step(model)", *last]
    return "".join(f"{prefix}{line}\n" for line in lines)


def py_callstack(last: str) -> str:
    """``traceback.format_exc()`` of an exception whose last line is ``last``."""
    return traceback(last)


def torchrun_summary(root: dict[str, t.Any], others: t.Sequence[dict[str, t.Any]] = ()) -> str:
    """What torchrun prints when a worker failed: its own traceback, then ``ChildFailedError.format_msg``'s block.

    The block follows _MSG_FORMAT_TEMPLATE and _FAILURE_FORMAT_TEMPLATE of
    torch/distributed/elastic/multiprocessing/errors/__init__.py, a traceback indented by two spaces.
    """
    def failure(idx: int, item: dict[str, t.Any]) -> str:
        message = item.get("traceback", NO_TRACEBACK).replace("\n", "\n  ")
        return (f"[{idx}]:\n  time      : 2026-12-01_10:59:59\n  host      : ct285\n"
                f"  rank      : {item['rank']} (local_rank: {item.get('local_rank', item['rank'])})\n"
                f"  exitcode  : {item.get('exitcode', 1)} (pid: {2218 + idx})\n"
                f"  error_file: {item.get('error_file', '<N/A>')}\n  traceback : {message}")
    border, section = "=" * 60, "-" * 60
    other = "\n".join(failure(i + 1, item) for i, item in enumerate(others)) or "  <NO_OTHER_FAILURES>"
    block = (f"\n{border}\ntrain.py FAILED\n{section}\nFailures:\n{other}\n{section}\n"
             f"Root Cause (first observed failure):\n{failure(0, root)}\n{border}")
    launcher = traceback('  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 269, '
                         "in launch_agent", "    raise ChildFailedError(")
    return launcher + f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: {block}\n"


def error_file(tmp_path: Path, data: t.Any, name: str = "attempt-1-error.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


def recorded(message: str, error_code: int | None = None) -> dict[str, t.Any]:
    """An error file as ErrorHandler.record_exception writes it, with the errorCode dump_error_file adds."""
    data: dict[str, t.Any] = {"message": {"message": message,
                                          "extraInfo": {"py_callstack": py_callstack(message), "timestamp": "1764583199"}}}
    if error_code is not None:
        data["message"]["errorCode"] = error_code
    return data


def log_file(tmp_path: Path, *parts: str | bytes, header: bool = True) -> str:
    path = tmp_path / "train.log"
    data = b"".join(p if isinstance(p, bytes) else p.encode("utf-8") for p in ((HEADER + "\n") if header else "", *parts))
    path.write_bytes(data)
    return str(path)


def cgroup_tree(tmp_path: Path, proc: str, files: dict[str, str], pid: str = "self") -> dict[str, str]:
    """A fake /proc/PID/cgroup and a fake /sys/fs/cgroup with ``files`` (paths relative to it)."""
    (tmp_path / "proc" / pid).mkdir(parents=True)
    (tmp_path / "proc" / pid / "cgroup").write_text(proc, encoding="utf-8")
    for rel, text in files.items():
        (tmp_path / "cg" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "cg" / rel).write_text(text, encoding="utf-8")
    return {"proc_root": str(tmp_path / "proc"), "cgroup_root": str(tmp_path / "cg")}


def assert_one_line(reason: str) -> None:
    assert 0 < len(reason) <= 300
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", reason), reason
    assert reason == reason.strip()
    reason.encode("utf-8")


# --- oom_kills ---------------------------------------------------------------------------------------------------

V1_PROC = ("12:pids:/lxc.payload.285\n11:cpu,cpuacct:/lxc.payload.285\n4:memory:/lxc.payload.285/job\n"
           "1:name=systemd:/lxc.payload.285/init.scope\n0::/lxc.payload.285/init.scope\n")


def test_v2_reads_oom_kill_of_memory_events_of_the_process_cgroup(tmp_path: Path) -> None:
    roots = cgroup_tree(tmp_path, "0::/lxc/285/job\n", {
        "lxc/285/job/memory.events": MEMORY_EVENTS.format(kills=2), "lxc/285/memory.events": MEMORY_EVENTS.format(kills=5),
        "memory.events": MEMORY_EVENTS.format(kills=7)})
    assert oom_kills(**roots) == 2  # oom_kill exactly: not oom (4), not oom_group_kill (9), not the parent's


def test_v1_reads_oom_kill_of_memory_oom_control(tmp_path: Path) -> None:
    roots = cgroup_tree(tmp_path, V1_PROC, {"memory/lxc.payload.285/job/memory.oom_control": OOM_CONTROL.format(kills=3),
                                            "memory/memory.oom_control": OOM_CONTROL.format(kills=8)})
    assert oom_kills(**roots) == 3


@pytest.mark.parametrize("controllers", ["memory", "memory,cpuset", "cpuset,memory,blkio"])
def test_v1_finds_memory_among_comma_joined_controllers(tmp_path: Path, controllers: str) -> None:
    roots = cgroup_tree(tmp_path, f"3:cpu:/x\n5:{controllers}:/ct/job\n",
                        {"memory/ct/job/memory.oom_control": OOM_CONTROL.format(kills=1)})
    assert oom_kills(**roots) == 1


def test_hybrid_hierarchy_counts_in_v1_where_the_memory_controller_is(tmp_path: Path) -> None:
    """systemd's hybrid layout: a 0:: line for the unified tree, but the memory controller lives in v1."""
    roots = cgroup_tree(tmp_path, V1_PROC, {
        "memory/lxc.payload.285/job/memory.oom_control": OOM_CONTROL.format(kills=4),
        "lxc.payload.285/init.scope/memory.events": MEMORY_EVENTS.format(kills=99)})
    assert oom_kills(**roots) == 4


@pytest.mark.parametrize(("proc", "files", "expected"), [
    ("0::/lxc.payload.285/job\n", {"memory.events": MEMORY_EVENTS.format(kills=6)}, 6),
    ("0::/\n", {"memory.events": MEMORY_EVENTS.format(kills=1)}, 1),
    ("4:memory:/lxc.payload.285\n", {"memory/memory.oom_control": OOM_CONTROL.format(kills=2)}, 2),
    ("4:memory:/\n", {"memory/memory.oom_control": OOM_CONTROL.format(kills=0)}, 0),
    ("0::/../../outside/job\n", {"memory.events": MEMORY_EVENTS.format(kills=5), "outside/job/memory.events": "oom_kill 77\n"}, 5),
])
def test_a_path_the_namespace_mount_does_not_have_falls_back_to_the_mount_root(
        tmp_path: Path, proc: str, files: dict[str, str], expected: int) -> None:
    assert oom_kills(**cgroup_tree(tmp_path, proc, files)) == expected


def test_the_counter_of_another_process_by_pid(tmp_path: Path) -> None:
    roots = cgroup_tree(tmp_path, "0::/job\n", {"job/memory.events": MEMORY_EVENTS.format(kills=11)}, pid="4321")
    assert oom_kills(4321, **roots) == 11
    assert oom_kills(4322, **roots) is None
    assert oom_kills(**roots) is None  # this process ("self") has no entry in the fake /proc


@pytest.mark.parametrize(("proc", "files"), [
    (None, {"memory.events": MEMORY_EVENTS.format(kills=1)}),  # no /proc/PID/cgroup
    ("", {"memory.events": MEMORY_EVENTS.format(kills=1)}),
    ("3:cpu:/x\n1:name=systemd:/x\n", {"memory/memory.oom_control": OOM_CONTROL.format(kills=1)}),  # no memory, no 0::
    ("0::/job\n", {}),  # no counter file at all
    ("4:memory:/job\n", {}),
    ("0::/job\n", {"job/memory.events": "low 0\noom 3\noom_group_kill 1\n"}),  # no oom_kill key
    ("0::/job\n", {"job/memory.events": "oom_kill many\n"}),
    ("0::/job\n", {"job/memory.events": "oom_kill -1\n"}),
    ("garbage without colons\n", {"memory.events": MEMORY_EVENTS.format(kills=1)}),
])
def test_nothing_readable_is_none(tmp_path: Path, proc: str | None, files: dict[str, str]) -> None:
    roots = cgroup_tree(tmp_path, proc or "", files)
    if proc is None:
        (tmp_path / "proc" / "self" / "cgroup").unlink()
    assert oom_kills(**roots) is None


def test_the_own_cgroup_file_is_authoritative_even_without_a_counter(tmp_path: Path) -> None:
    """The mount root is a fallback for a missing path only: it is another cgroup's counter."""
    roots = cgroup_tree(tmp_path, "0::/job\n", {"job/memory.events": "low 0\n", "memory.events": MEMORY_EVENTS.format(kills=3)})
    assert oom_kills(**roots) is None


def test_an_unreadable_counter_is_none(tmp_path: Path) -> None:
    roots = cgroup_tree(tmp_path, "0::/job\n", {})
    (tmp_path / "cg" / "job" / "memory.events").mkdir(parents=True)  # exists, cannot be read as a file
    assert oom_kills(**roots) is None


def _counter_named_by_proc_self() -> int | None:
    """This machine's counter, read here without _job_end: the memory line of /proc/self/cgroup and its file."""
    entries = [line.split(":", 2) for line in Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()]
    v1 = [e[2] for e in entries if len(e) == 3 and e[0] != "0" and "memory" in e[1].split(",")]
    v2 = [e[2] for e in entries if len(e) == 3 and e[0] == "0" and e[1] == ""]
    if v1:
        base, name, path = Path("/sys/fs/cgroup/memory"), "memory.oom_control", v1[0]
    elif v2:
        base, name, path = Path("/sys/fs/cgroup"), "memory.events", v2[0]
    else:
        return None
    for candidate in (base / path.lstrip("/") / name, base / name):
        if candidate.exists():
            match = re.search(r"^oom_kill (\d+)$", candidate.read_text(encoding="ascii"), re.M)
            return int(match.group(1)) if match else None
    return None


def test_oom_kills_on_this_machine_is_the_counter_proc_self_cgroup_names() -> None:
    expected = _counter_named_by_proc_self()
    assert oom_kills() == expected
    assert oom_kills(os.getpid()) == expected
    assert isinstance(oom_kills(), int) == (expected is not None)
    child = subprocess.Popen(["sleep", "30"])  # pylint: disable=consider-using-with
    try:
        assert oom_kills(child.pid) == expected  # a child stays in its parent's cgroup
    finally:
        child.kill()
        child.wait()
    assert oom_kills(child.pid) is None  # gone


# --- signal_name -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "name"), [
    (129, "HUP"), (130, "INT"), (131, "QUIT"), (134, "ABRT"), (135, "BUS"), (137, "KILL"), (139, "SEGV"),
    (141, "PIPE"), (143, "TERM"), (138, "USR1"), (140, "USR2"), (152, "XCPU"),
])
def test_signal_name_of_128_plus_n(status: int, name: str) -> None:
    assert signal_name(status) == name
    assert getattr(signal, "SIG" + name) == status - 128


@pytest.mark.parametrize("status", [-9, 0, 1, 2, 3, 126, 127, 128, 128 + 40, 193, 200, 255, 256, 265])
def test_signal_name_is_none_for_other_statuses(status: int) -> None:
    assert signal_name(status) is None


def test_signal_name_covers_every_known_signal_up_to_64() -> None:
    for sig in signal.Signals:
        if 1 <= sig.value <= 64:
            assert signal_name(128 + sig.value) == signal.Signals(sig.value).name[3:]


# --- classify: the order of precedence ---------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "flags", "end_state", "cause", "reason"), [
    (143, {"stopped": True, "timed_out": True, "stalled": True, "oom_kills_during": 1}, "stopped", "stop",
     "stopped by trainops (signal TERM)"),
    (0, {"stopped": True}, "stopped", "stop", "stopped by trainops (exit status 0)"),
    (137, {"timed_out": True, "stalled": True, "oom_kills_during": 2}, "timeout", "time_limit",
     "the time limit was reached (signal KILL)"),
    (0, {"timed_out": True}, "timeout", "time_limit", "the time limit was reached (exit status 0)"),
    (143, {"stalled": True, "oom_kills_during": 1}, "stalled", "stall", "the log stalled (signal TERM)"),
    (0, {"stalled": True}, "stalled", "stall", "the log stalled (exit status 0)"),
    (0, {"oom_kills_during": 3}, "finished", "exit_status", "exit status 0"),
    (0, {}, "finished", "exit_status", "exit status 0"),
    (137, {"oom_kills_during": 1}, "oom_killed", "oom_kill",
     "killed by the kernel's OOM killer (the container's memory limit; 1 OOM kill during the attempt)"),
    (137, {"oom_kills_during": 3}, "oom_killed", "oom_kill",
     "killed by the kernel's OOM killer (the container's memory limit; 3 OOM kills during the attempt)"),
    (1, {"oom_kills_during": 1}, "oom_killed", "oom_kill",
     "the kernel's OOM killer killed a process in the job's cgroup (the container's memory limit; 1 OOM kill during the attempt; "
     "exit status 1)"),
    (137, {"oom_kills_during": 0}, "failed", "signal", "killed by signal KILL"),
    (137, {"oom_kills_during": -2}, "failed", "signal", "killed by signal KILL"),  # a counter that went back (reset)
    (3, {}, "failed", "exit_status", "exit status 3"),
    (200, {}, "failed", "exit_status", "exit status 200"),
    (139, {}, "failed", "signal", "killed by signal SEGV"),
])
def test_the_first_rule_that_applies_decides(tmp_path: Path, status: int, flags: dict[str, t.Any], end_state: str,
                                             cause: str, reason: str) -> None:
    """Stop, time limit, stall, exit 0, OOM kill, then a failure; the log below would say cuda_oom if asked."""
    log = log_file(tmp_path, traceback("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"))
    result = classify(status, log, **flags) if end_state != "failed" else classify(status, str(tmp_path / "none"), **flags)
    expected = {"end_state": end_state, "cause": cause, "reason": reason}
    if signal_name(status):
        expected["signal"] = signal_name(status)
    assert result == expected


def test_the_signal_key_is_there_exactly_when_the_status_is_a_signal(tmp_path: Path) -> None:
    log = str(tmp_path / "missing.log")
    assert classify(137, log)["signal"] == "KILL"
    assert classify(143, log, stopped=True)["signal"] == "TERM"
    assert classify(130, log, timed_out=True)["signal"] == "INT"
    for status in (0, 1, 127, 128, 200):
        assert "signal" not in classify(status, log)
    assert set(classify(1, log)) == {"end_state", "cause", "reason"}


# --- classify: the log's last lines ------------------------------------------------------------------------------

def test_the_last_python_exception_after_a_traceback(tmp_path: Path) -> None:
    log = log_file(tmp_path, "epoch 1 loss 0.3\n", traceback("RuntimeError: boom"), "wandb: Synced 5 W&B file(s)\n", TRAILER + "\n")
    assert classify(1, log) == {"end_state": "failed", "cause": "python_exception",
                                "reason": "RuntimeError: boom (the last Python exception in the log; exit status 1)"}


@pytest.mark.parametrize(("last", "status", "reason"), [
    ("KeyboardInterrupt", 130, "KeyboardInterrupt (the last Python exception in the log; killed by signal INT)"),
    ("SystemExit: 2", 2, "SystemExit: 2 (the last Python exception in the log; exit status 2)"),
    ("OSError: [Errno 28] No space left on device", 1,
     "OSError: [Errno 28] No space left on device (the last Python exception in the log; exit status 1)"),
    ("subprocess.CalledProcessError: Command '['nvidia-smi']' returned non-zero exit status 9.", 1,
     "subprocess.CalledProcessError: Command '['nvidia-smi']' returned non-zero exit status 9. "
     "(the last Python exception in the log; exit status 1)"),
    ("AssertionError", 1, "AssertionError (the last Python exception in the log; exit status 1)"),
    ("Exception: plain", 1, "Exception: plain (the last Python exception in the log; exit status 1)"),
    ("StopIteration", 1, "StopIteration (the last Python exception in the log; exit status 1)"),
    ("ValueError:", 1, "ValueError: (the last Python exception in the log; exit status 1)"),
])
def test_exception_lines_with_and_without_message(tmp_path: Path, last: str, status: int, reason: str) -> None:
    result = classify(status, log_file(tmp_path, traceback(last)))
    assert (result["cause"], result["reason"]) == ("python_exception", reason)


def test_a_chained_exception_names_the_last_one(tmp_path: Path) -> None:
    log = log_file(tmp_path, traceback("KeyError: 'lr'"), "\nDuring handling of the above exception, another exception occurred:\n\n",
                   traceback("ValueError: no learning rate"))
    assert classify(1, log)["reason"].startswith("ValueError: no learning rate (")


def test_rank_prefixed_traceback_lines_count(tmp_path: Path) -> None:
    """torch's excepthook after init_process_group (distributed_c10d.py) prefixes each line with ``[rankN]: ``."""
    log = log_file(tmp_path, traceback("ZeroDivisionError: division by zero", prefix="[rank3]: "))
    assert classify(1, log)["reason"] == "ZeroDivisionError: division by zero (the last Python exception in the log; exit status 1)"


@pytest.mark.parametrize("text", [
    "ValueError: printed by the job, no traceback\n",
    "Traceback is a word here, ValueError: x\n",
    "  ValueError: indented, inside some other text\n" + "x" * 10 + "\n",
    traceback("not an exception line") + "Note: done\nwandb: Run summary\n",
    traceback("2024-01-01 ERROR: something") + "Error happened: yes\n",
])
def test_without_a_traceback_and_an_exception_line_the_status_decides(tmp_path: Path, text: str) -> None:
    assert classify(3, log_file(tmp_path, text)) == {"end_state": "failed", "cause": "exit_status", "reason": "exit status 3"}


@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity)",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "torch.OutOfMemoryError: out of memory",
])
def test_cuda_out_of_memory(tmp_path: Path, line: str) -> None:
    result = classify(1, log_file(tmp_path, traceback(line)))
    assert result == {"end_state": "failed", "cause": "cuda_oom", "reason": f"CUDA out of memory: {line}"}


def test_cuda_out_of_memory_without_an_exception_line_takes_the_first_mention(tmp_path: Path) -> None:
    log = log_file(tmp_path, "step 10\n[W] CUDA out of memory on rank 0, retrying with a smaller batch\n",
                   "[W] CUDA out of memory on rank 0 again\nexiting\n")
    assert classify(1, log)["reason"] == "CUDA out of memory: [W] CUDA out of memory on rank 0, retrying with a smaller batch"


@pytest.mark.parametrize(("lines", "picked"), [
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
     "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\nncclSystemError: System call failed\n",
     "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
     "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"),
    ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
     "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.\n"
     "[rank0]:[E ProcessGroupNCCL.cpp:577] Some NCCL operations have failed or timed out. Timeout follows.\n",
     "[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
     "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out."),
    ("ct285:1:2 [0] misc/socket.cc:49 NCCL WARN ncclInternalError: Net : Call to recv from 10.0.0.2 failed\n",
     "ct285:1:2 [0] misc/socket.cc:49 NCCL WARN ncclInternalError: Net : Call to recv from 10.0.0.2 failed"),
])
def test_nccl_errors_win_over_the_plain_exception(tmp_path: Path, lines: str, picked: str) -> None:
    log = log_file(tmp_path, "ct285:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0> error-free timeout 20\n", lines,
                   traceback("RuntimeError: the job gave up"))
    assert classify(1, log) == {"end_state": "failed", "cause": "nccl", "reason": f"NCCL error: {picked}"}


def test_nccl_info_lines_and_nccl_without_error_are_no_nccl_error(tmp_path: Path) -> None:
    log = log_file(tmp_path, "ct285:1:2 [0] NCCL INFO NET/Socket : error-free, timeout 20\n",
                   "Using NCCL_ASYNC_ERROR_HANDLING=1 and NCCL version 2.20.5\n", traceback("RuntimeError: boom"))
    assert classify(1, log)["cause"] == "python_exception"


def test_cuda_out_of_memory_wins_over_nccl(tmp_path: Path) -> None:
    log = log_file(tmp_path, traceback("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB", prefix="[rank1]: "),
                   "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)\n")
    assert classify(1, log)["cause"] == "cuda_oom"


def test_protocol_lines_are_not_the_jobs_output(tmp_path: Path) -> None:
    header = "### trainops.pct_launch: session=t started_at=2026-12-01T10:00:00Z host=h command=python t.py 'CUDA out of memory'"
    log = log_file(tmp_path, header + "\n", "### trainops.pct_launch: RuntimeError: NCCL error not really\n",
                   "### trainops.pct_launch: session=t exit_status=1 ended_at=2026-12-01T10:00:01Z\n", header=False)
    assert classify(1, log)["cause"] == "exit_status"


def test_only_the_last_attempt_counts(tmp_path: Path) -> None:
    """Attempt 1's CUDA OOM, before the supervisor's mark of attempt 2, is not attempt 2's cause."""
    log = log_file(tmp_path, traceback("torch.OutOfMemoryError: CUDA out of memory."), ATTEMPT_2 + "\n",
                   traceback("ValueError: attempt two"))
    assert classify(1, log)["reason"].startswith("ValueError: attempt two (")
    log = log_file(tmp_path, traceback("torch.OutOfMemoryError: CUDA out of memory."), ATTEMPT_2 + "\n", "clean exit 4\n")
    assert classify(4, log)["cause"] == "exit_status"


def test_an_earlier_run_appended_before_the_header_does_not_count(tmp_path: Path) -> None:
    log = log_file(tmp_path, traceback("RuntimeError: the previous launch"), TRAILER + "\n", HEADER + "\n", "bye\n", header=False)
    assert classify(5, log)["reason"] == "exit status 5"


def test_a_huge_log_is_read_from_its_end(tmp_path: Path) -> None:
    filler = ("x" * 1023 + "\n").encode() * 16 * 1024  # 16 MiB
    log = log_file(tmp_path, filler, traceback("RuntimeError: at the end"))
    assert classify(1, log)["reason"].startswith("RuntimeError: at the end (")
    log = log_file(tmp_path, traceback("RuntimeError: at the start"), filler)
    assert classify(1, log)["reason"] == "exit status 1"


def test_only_the_last_200_lines_count(tmp_path: Path) -> None:
    log = log_file(tmp_path, traceback("RuntimeError: 200 lines ago"), "step\n" * 200)
    assert classify(1, log)["reason"] == "exit status 1"
    log = log_file(tmp_path, traceback("RuntimeError: 190 lines ago"), "step\n" * 190)
    assert classify(1, log)["cause"] == "python_exception"


def test_the_cut_first_line_of_the_window_is_dropped(tmp_path: Path) -> None:
    """A line the 64 KiB window starts inside is not a line: here its rest would read as a traceback's start."""
    body = traceback("ValueError: in a partial line").encode()
    filler = b"".join(b"." * 999 + b"\n" for _line in range(64))
    pad = _job_end.TAIL_BYTES - len(body) - len(filler)
    path = tmp_path / "train.log"
    path.write_bytes(b"#" * 100 + b"x" + body + filler + b"." * (pad - 1) + b"\n")  # the window starts at body's "T"
    assert path.stat().st_size - _job_end.TAIL_BYTES == 101
    assert classify(1, str(path))["reason"] == "exit status 1"


def test_a_binary_log_gives_a_printable_one_line_reason(tmp_path: Path) -> None:
    log = log_file(tmp_path, bytes(range(256)) * 64, b"\n", traceback("X").encode()[:-2],
                   b"RuntimeError: b\x00o\x1b[31mo\x7fm \xff\xfe\xc3(\x0b\x0c\xe2\x80\xa8 end\n", os.urandom(100).replace(b"\n", b""))
    result = classify(1, log)
    assert result["cause"] == "python_exception"
    assert_one_line(result["reason"])
    assert result["reason"].startswith("RuntimeError: b o [31mo m \ufffd\ufffd\ufffd(")


def test_a_long_reason_is_cut_to_300_and_keeps_its_end(tmp_path: Path) -> None:
    log = log_file(tmp_path, traceback("RuntimeError: " + "long message " * 1000))
    reason = classify(1, log)["reason"]
    assert len(reason) == 300
    assert reason.endswith("\u2026 (the last Python exception in the log; exit status 1)")
    assert_one_line(reason)
    log = log_file(tmp_path, "NCCL error " + "y" * 5000 + "\n")
    reason = classify(1, log)["reason"]
    assert len(reason) == 300 and reason.startswith("NCCL error: NCCL error yyy") and reason.endswith("y\u2026")


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "fifo", "unreadable"])
def test_a_log_that_cannot_be_read_leaves_the_status(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "train.log"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer
    elif kind == "unreadable":
        path.write_text(traceback("RuntimeError: hidden"), encoding="utf-8")
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("root reads any file")
    results: list[dict[str, str]] = []
    worker = threading.Thread(target=lambda: results.append(classify(137, str(path))), daemon=True)
    worker.start()
    worker.join(10)
    assert results == [{"end_state": "failed", "cause": "signal", "reason": "killed by signal KILL", "signal": "KILL"}]


# --- classify: torchelastic --------------------------------------------------------------------------------------

def test_an_error_file_as_record_exception_writes_it(tmp_path: Path) -> None:
    path = error_file(tmp_path, recorded("RuntimeError: boom"))
    result = classify(1, str(tmp_path / "none.log"), error_file=path)
    assert result == {"end_state": "failed", "cause": "torchelastic", "reason": "torchelastic: RuntimeError: boom"}


def test_the_launchers_dumped_copy_carries_the_exit_code(tmp_path: Path) -> None:
    path = error_file(tmp_path, recorded("ValueError: bad shape\n  more detail on the next line", error_code=1))
    result = classify(1, str(tmp_path / "none.log"), error_file=path)
    assert result["reason"] == "torchelastic: a worker failed with exit code 1: ValueError: bad shape"


def test_the_rank_comes_from_torchruns_summary_in_the_log(tmp_path: Path) -> None:
    path = error_file(tmp_path, recorded("RuntimeError: boom", error_code=1))
    summary = torchrun_summary({"rank": 1, "local_rank": 1, "exitcode": 1, "error_file": "/tmp/torchelastic_x/1/error.json",
                                "traceback": py_callstack("RuntimeError: boom")})
    log = log_file(tmp_path, traceback("RuntimeError: boom", prefix="[rank1]: "), summary)
    result = classify(1, log, error_file=path)
    assert result == {"end_state": "failed", "cause": "torchelastic",
                      "reason": "torchelastic: rank 1 (local rank 1) failed with exit code 1: RuntimeError: boom"}


def test_the_error_file_wins_over_the_logs_cuda_oom(tmp_path: Path) -> None:
    """The doc's order: torchelastic's error file before the log's lines."""
    message = "OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"
    log = log_file(tmp_path, traceback("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"))
    result = classify(1, log, error_file=error_file(tmp_path, recorded(message, error_code=1)))
    assert (result["cause"], result["reason"]) == ("torchelastic", f"torchelastic: a worker failed with exit code 1: {message}")


def test_a_message_as_a_plain_string(tmp_path: Path) -> None:
    path = error_file(tmp_path, {"message": "Signal 9 (SIGKILL) received by PID 2218", "timestamp": 1764583199})
    assert classify(1, str(tmp_path / "none.log"), error_file=path)["reason"] == "torchelastic: Signal 9 (SIGKILL) received by PID 2218"


@pytest.mark.parametrize("content", [
    None, "", "not json {", "[]", "null", "42", '"a string"', {}, {"message": 3}, {"message": None}, {"message": ""},
    {"message": "   \n  "}, {"message": "<NONE>"}, {"message": {"message": ""}}, {"message": {"extraInfo": {}}},
    {"message": {"message": ["RuntimeError"]}}, "[" * 100000, "\udcff",
])
def test_an_unusable_error_file_falls_back_to_the_log(tmp_path: Path, content: t.Any) -> None:
    path = str(tmp_path / "attempt-1-error.json")
    if content == "\udcff":
        Path(path).write_bytes(b"\xff\xfe{")
    elif content is not None:
        error_file(tmp_path, content)
    log = log_file(tmp_path, traceback("RuntimeError: from the log"))
    assert classify(1, log, error_file=path)["reason"] == "RuntimeError: from the log (the last Python exception in the log; exit status 1)"
    assert classify(1, log, error_file=None)["cause"] == "python_exception"


def test_a_huge_error_file_is_ignored(tmp_path: Path) -> None:
    data = recorded("RuntimeError: huge")
    data["message"]["extraInfo"]["py_callstack"] = "x" * (2 * 1024 * 1024)
    log = log_file(tmp_path, "nothing\n")
    assert classify(1, log, error_file=error_file(tmp_path, data))["reason"] == "exit status 1"


def test_an_error_file_that_is_a_directory_or_a_fifo_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    log = log_file(tmp_path, "nothing\n")
    for name in ("dir", "fifo"):
        assert classify(2, log, error_file=str(tmp_path / name))["reason"] == "exit status 2"


def test_an_error_code_that_is_not_an_int_is_left_out(tmp_path: Path) -> None:
    for code in (True, "1", 1.5, None):
        data = recorded("RuntimeError: boom")
        data["message"]["errorCode"] = code
        assert classify(1, str(tmp_path / "x"), error_file=error_file(tmp_path, data))["reason"] == "torchelastic: RuntimeError: boom"


def test_torchruns_summary_alone_takes_the_workers_exception_from_the_log(tmp_path: Path) -> None:
    """No error file (the job's entry point is not @record): torchrun says "To enable traceback see", the worker printed it."""
    log = log_file(tmp_path, traceback("RuntimeError: boom", prefix="[rank1]: "), torchrun_summary({"rank": 1, "local_rank": 1}))
    assert classify(1, log, error_file=str(tmp_path / "attempt-1-error.json")) == {
        "end_state": "failed", "cause": "torchelastic",
        "reason": "torchelastic: rank 1 (local rank 1) failed with exit code 1: RuntimeError: boom"}


def test_torchruns_summary_with_the_traceback_in_it(tmp_path: Path) -> None:
    summary = torchrun_summary({"rank": 3, "local_rank": 1, "exitcode": 2, "error_file": "/tmp/torchelastic_a/3/error.json",
                                "traceback": py_callstack("torch.OutOfMemoryError: CUDA out of memory.")})
    log = log_file(tmp_path, summary)
    assert classify(1, log)["reason"] == "torchelastic: rank 3 (local rank 1) failed with exit code 2: torch.OutOfMemoryError: CUDA out of memory."


def test_torchruns_summary_of_a_worker_killed_by_a_signal(tmp_path: Path) -> None:
    summary = torchrun_summary({"rank": 0, "exitcode": -9, "traceback": "Signal 9 (SIGKILL) received by PID 2218"})
    assert classify(1, log_file(tmp_path, summary))["reason"] == (
        "torchelastic: rank 0 (local rank 0) was killed by signal KILL: Signal 9 (SIGKILL) received by PID 2218")


def test_torchruns_summary_names_the_root_cause_not_the_other_failures(tmp_path: Path) -> None:
    summary = torchrun_summary({"rank": 0, "exitcode": 85}, others=[{"rank": 1, "exitcode": 1}, {"rank": 2, "exitcode": 1}])
    assert classify(1, log_file(tmp_path, summary))["reason"] == "torchelastic: rank 0 (local rank 0) failed with exit code 85"


def test_the_last_summary_in_the_log_counts(tmp_path: Path) -> None:
    log = log_file(tmp_path, torchrun_summary({"rank": 4}), "restarting workers\n", torchrun_summary({"rank": 5, "exitcode": 3}))
    assert classify(1, log)["reason"] == "torchelastic: rank 5 (local rank 5) failed with exit code 3"


def test_a_summary_without_its_rank_line_is_not_torchelastic(tmp_path: Path) -> None:
    summary = "\n".join(line for line in torchrun_summary({"rank": 1}).splitlines() if "rank      :" not in line)
    result = classify(1, log_file(tmp_path, summary + "\n"))
    assert result["cause"] == "python_exception"
    assert result["reason"].startswith("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: (")


# --- a clean shutdown of the container, memory pressure ---------------------------------------------------------

SHUTDOWN = "PID 1 was systemd-shutdown"


SHUTDOWN_ENDS = [(143, "TERM", "signal TERM"), (129, "HUP", "signal HUP"), (0, None, "exit status 0"), (3, None, "exit status 3")]


@pytest.mark.parametrize(("status", "signal_", "short"), SHUTDOWN_ENDS)
def test_a_shutdown_stops_the_job_whatever_its_status(tmp_path: Path, status: int, signal_: str | None, short: str) -> None:
    """systemd-shutdown's SIGTERM (or the SIGHUP the pane's end forwards), or a job that saved and exited on it."""
    result = classify(status, log_file(tmp_path, traceback("RuntimeError: interrupted")), shutdown=SHUTDOWN, oom_kills_during=1)
    assert (result["end_state"], result["cause"], result.get("signal")) == ("stopped", "shutdown", signal_)
    assert result["reason"] == f"the container shut down (its init stopped every process; {SHUTDOWN}): {short}"


def test_a_stop_by_trainops_wins_over_a_shutdown(tmp_path: Path) -> None:
    assert classify(143, log_file(tmp_path), stopped=True, shutdown=SHUTDOWN)["cause"] == "stop"


@pytest.mark.parametrize(("status", "kills", "cause"), [(1, 0, "exit_status"), (137, 1, "oom_kill"), (0, 0, "exit_status")])
def test_the_memory_note_ends_the_reason_and_survives_the_cut(tmp_path: Path, status: int, kills: int, cause: str) -> None:
    memory = "its container was at its memory limit (memory.high reached 152 times)"
    result = classify(status, log_file(tmp_path, "x" * 400 + "\n"), oom_kills_during=kills, memory=memory)
    assert result["cause"] == cause and result["reason"].endswith(f"; meanwhile {memory}"), result
    assert_one_line(result["reason"])
    long = classify(1, log_file(tmp_path, traceback("ValueError: " + "y" * 400)), memory=memory)["reason"]
    assert long.endswith(f"; meanwhile {memory}") and long.startswith("ValueError: yyy") and len(long) == 300


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=4096), st.integers(min_value=0, max_value=255), st.integers(min_value=-3, max_value=3))
def test_any_log_gives_a_known_cause_and_a_one_line_reason(tmp_path_factory: pytest.TempPathFactory, data: bytes,
                                                           status: int, kills: int) -> None:
    folder = tmp_path_factory.mktemp("any")
    log = log_file(folder, traceback("X")[:-2].encode(), data, b"\nNCCL error " + data[:300] + b"\n")
    result = classify(status, log, oom_kills_during=kills, error_file=error_file(folder, data.decode("utf-8", "replace")))
    assert result["cause"] in CAUSES
    assert_one_line(result["reason"])
    assert set(result) - {"signal"} == {"end_state", "cause", "reason"}


# --- the module runs inside the target -----------------------------------------------------------------------------

def test_the_module_is_python_37_standard_library_and_imports_nothing_of_the_collection() -> None:
    source = MODULE.read_text(encoding="utf-8")
    assert source.startswith("# SPDX-License-Identifier: GPL-3.0-or-later\n# Copyright: Contributors to the trainops.pct_launch collection\n")
    tree = ast.parse(source, feature_version=(3, 7))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    assert max(len(line) for line in source.splitlines()) <= 160


def test_the_module_runs_as_a_file_of_its_own(tmp_path: Path) -> None:
    """As the supervisor's copy would: ``python3 -I`` with only this file, no collection on the path."""
    (tmp_path / "_job_end.py").write_bytes(MODULE.read_bytes())
    log = log_file(tmp_path, traceback("RuntimeError: alone"))
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import _job_end; "
            "print(json.dumps([_job_end.classify(1, sys.argv[2]), _job_end.oom_kills(), _job_end.signal_name(137)]))")
    out = subprocess.run([sys.executable, "-I", "-c", code, str(tmp_path), log], capture_output=True, check=True, cwd=str(tmp_path))
    end, kills, name = json.loads(out.stdout)
    assert end["reason"] == "RuntimeError: alone (the last Python exception in the log; exit status 1)"
    assert kills == _counter_named_by_proc_self() and name == "KILL"


def test_last_lines_are_the_last_attempts_output_without_protocol_lines(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("### trainops.pct_launch: session=s started_at=2026-01-01T00:00:00Z host=h command=x\nold 1\n"
                   "### trainops.pct_launch: session=s attempt=2 started_at=2026-01-01T00:00:09Z\nnew 1\nnew 2\nnew 3\n"
                   "### trainops.pct_launch: session=s exit_status=0 ended_at=2026-01-01T00:00:19Z\n", encoding="utf-8")
    assert _job_end.last_lines(str(log), 2) == ["new 2", "new 3"]
    assert _job_end.last_lines(str(log), 10) == ["new 1", "new 2", "new 3"]
    assert _job_end.last_lines(str(log), 0) == [] and _job_end.last_lines(str(tmp_path / "missing"), 5) == []
