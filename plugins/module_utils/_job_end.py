# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The classification of a job's end (docs/job-life.md, "Classification of the end").

The job's supervisor runs this inside the target, next to the job: it imports nothing of the
collection and works with the target's Python 3.7 or later (standard library only).

``oom_kills`` reads the ``oom_kill`` counter of a process's memory cgroup (the supervisor reads it
before and after each attempt), ``signal_name`` names the signal of a ``128+N`` status and
``classify`` turns what the supervisor knows and the tail of the log into ``end_state``, ``cause``,
``reason`` (one line, at most 300 characters) and, for a status that is a signal, ``signal``; ``one_line``
makes such a line, its end kept (the supervisor adds the words of its restart decision with it).

What the torchelastic parts rely on, verified in PyTorch's sources (pytorch/pytorch):

- torch/distributed/elastic/multiprocessing/errors/error_handler.py: ``ErrorHandler.record_exception``
  writes ``TORCHELASTIC_ERROR_FILE`` as ``{"message": {"message": "TYPE: TEXT", "extraInfo":
  {"py_callstack": TRACEBACK, "timestamp": "SECONDS"}}}``; ``dump_error_file`` (torchrun's own
  ``@record`` main, torch/distributed/run.py, on a ``ChildFailedError``) copies the root cause's file
  into the launcher's ``TORCHELASTIC_ERROR_FILE`` and adds ``"errorCode": EXITCODE`` inside the
  ``message`` object when the exit code is not 0. A ``message`` may also be a plain string (with a
  top-level ``timestamp``). The file names no rank.
- torch/distributed/elastic/multiprocessing/errors/__init__.py: ``ChildFailedError.format_msg`` prints
  ``Root Cause (first observed failure):``, ``[0]:``, ``  rank      : R (local_rank: L)``,
  ``  exitcode  : C (pid: P)`` (C < 0: killed by signal -C), ``  error_file: PATH`` and
  ``  traceback : TEXT``, a traceback's further lines indented by two spaces, then a ``=`` border.
- torch/distributed/distributed_c10d.py: after ``init_process_group`` an uncaught exception's lines
  are printed with the prefix ``[rankN]: ``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import typing as t

PROTOCOL = "### trainops.pct_launch: "
TAIL_BYTES = 64 * 1024
TAIL_LINES = 200
REASON_MAX = 300
ERROR_FILE_MAX = 1024 * 1024
TRACEBACK = "Traceback (most recent call last):"
ROOT_CAUSE = "Root Cause (first observed failure):"
EXCEPTION_ENDINGS = ("Error", "Exception", "Interrupt", "Exit", "Iteration")
EXCEPTION_RE = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::(?: .*)?)?$")
# torch's "[rank0]: " and torchrun's "[default0]:" (--tee) in front of a worker's lines.
LINE_PREFIX_RE = re.compile(r"(?:\[[A-Za-z_][\w.-]*\]: ?)+")
FIELD_RE = re.compile(r"  (rank|exitcode|error_file|traceback)\s*: ?(.*)$")
RANK_RE = re.compile(r"(-?\d+) \(local_rank: (-?\d+)\)")
CODE_RE = re.compile(r"-?\d+")
UNPRINTABLE_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
CUDA_OOM = ("CUDA out of memory", "torch.OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED")
NCCL_FAILURE = ("error", "Error", "timeout", "Timeout", "Watchdog caught collective operation timeout",
                "ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError")


def cgroup_of(pid: int | None, proc_root: str) -> tuple[str, str] | None:
    """``("v1", PATH)`` or ``("v2", PATH)``: where the memory controller of ``pid`` counts it."""
    try:
        with open(os.path.join(proc_root, "self" if pid is None else str(pid), "cgroup"), "rb") as handle:
            text = handle.read(65536).decode("utf-8", "replace")
    except OSError:
        return None
    unified = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] != "0" and "memory" in parts[1].split(","):
            return "v1", parts[2]
        if parts[0] == "0" and not parts[1]:
            unified = parts[2]
    return None if unified is None else ("v2", unified)


def _oom_kill_counter(path: str) -> int | None:
    try:
        with open(path, "rb") as handle:
            text = handle.read(65536).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _sep, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def oom_kills(pid: int | None = None, *, proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """The ``oom_kill`` counter of the memory cgroup of ``pid`` (default: this process); None when unreadable.

    cgroup v2 counts kills in the cgroup's whole subtree (``memory.events``); v1 (``memory.oom_control``)
    only kills of processes in the cgroup itself. Inside a cgroup namespace whose mount does not show
    the path, the mount root is the namespace's cgroup.
    """
    found = cgroup_of(pid, proc_root)
    if found is None:
        return None
    version, path = found
    base, name = (os.path.join(cgroup_root, "memory"), "memory.oom_control") if version == "v1" else (cgroup_root, "memory.events")
    own = None if ".." in path.split("/") else os.path.join(base, path.strip("/"), name)
    for candidate in (own, os.path.join(base, name)):
        if candidate is not None and os.path.exists(candidate):
            return _oom_kill_counter(candidate)
    return None


def _signal_of(number: int) -> str | None:
    try:
        name = signal.Signals(number).name
    except ValueError:
        return None
    return name[3:] if name.startswith("SIG") else name


def signal_name(status: int) -> str | None:
    """``KILL`` for 137: the signal N of a status 128+N (129..192) when N is a known signal, else None."""
    return _signal_of(status - 128) if 129 <= status <= 192 else None


def one_line(text: str, suffix: str = "") -> str:
    """``text`` + ``suffix`` as one printable line of at most REASON_MAX characters (``text`` is cut)."""
    text = UNPRINTABLE_RE.sub(" ", text).strip()
    suffix = UNPRINTABLE_RE.sub(" ", suffix)
    room = REASON_MAX - len(suffix)
    if len(text) > room:
        text = text[:room - 1].rstrip() + "\u2026"
    return text + suffix


def _tail_lines(log_path: str) -> list[str]:
    """The last lines of the log's last attempt, without protocol lines and without rank prefixes."""
    try:
        if not stat.S_ISREG(os.stat(log_path).st_mode):
            return []
        with open(log_path, "rb") as handle:
            start = max(0, handle.seek(0, os.SEEK_END) - TAIL_BYTES)
            handle.seek(start)
            lines = handle.read(TAIL_BYTES).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    kept: list[str] = []
    for line in lines[1:] if start else lines:
        if line.startswith(PROTOCOL):
            if " started_at=" in line:  # the header or an attempt's start: what came before is not this attempt's
                kept = []
            continue
        prefix = LINE_PREFIX_RE.match(line)
        kept.append(line[prefix.end():] if prefix else line)
    return kept[-TAIL_LINES:]


def last_lines(log_path: str, count: int) -> list[str]:
    """The last ``count`` lines of output of the log's last attempt (protocol lines left out), for a notification."""
    return _tail_lines(log_path)[-count:] if count > 0 else []


def _is_exception(line: str) -> bool:
    match = EXCEPTION_RE.match(line)
    return match is not None and match.group(1).rsplit(".", 1)[-1].endswith(EXCEPTION_ENDINGS)


def _exceptions(lines: t.Sequence[str]) -> list[str]:
    """The lines that look like a Python exception's last line, after a traceback's first line."""
    found: list[str] = []
    after_traceback = False
    for line in lines:
        if line.startswith(TRACEBACK):
            after_traceback = True
        elif after_traceback and _is_exception(line):
            found.append(line)
    return found


def _error_file(path: str | None) -> tuple[str, int | None] | None:
    """The first line of the message of a torchelastic error file and its ``errorCode``; None when unusable."""
    try:
        info = os.stat(path) if path else None
        if info is None or not stat.S_ISREG(info.st_mode) or info.st_size > ERROR_FILE_MAX:
            return None
        with open(path, "rb") as handle:
            data = json.loads(handle.read(ERROR_FILE_MAX).decode("utf-8", "replace"))
    except (OSError, ValueError, RecursionError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    code = None
    if isinstance(message, dict):
        code = message.get("errorCode")
        message = message.get("message")
    lines = [line.strip() for line in message.splitlines() if line.strip()] if isinstance(message, str) else []
    if not lines or lines[0] in ("<NONE>", "<N/A>"):
        return None
    return lines[0], code if isinstance(code, int) and not isinstance(code, bool) else None


def _torchrun_failure(lines: t.Sequence[str]) -> dict[str, t.Any] | None:
    """The root cause of the last ``ChildFailedError`` summary torchrun printed: rank, local rank, code, message."""
    starts = [i for i, line in enumerate(lines) if line.strip() == ROOT_CAUSE]
    if not starts:
        return None
    fields: dict[str, str] = {}
    trace: list[str] = []
    for line in lines[starts[-1] + 1:]:
        if line.startswith("=="):
            break
        match = FIELD_RE.match(line)
        if match and match.group(1) not in fields:
            fields[match.group(1)] = match.group(2).strip()
        elif "traceback" in fields and line.startswith("  "):
            trace.append(line[2:])
    rank = RANK_RE.match(fields.get("rank", ""))
    if rank is None:
        return None
    code = CODE_RE.match(fields.get("exitcode", ""))
    value = fields.get("traceback", "")
    if value.startswith(TRACEBACK):
        raised = [line for line in trace if _is_exception(line)]
        message = raised[-1] if raised else None
    else:
        message = value if value and not value.startswith("To enable traceback") else None
    return {"rank": rank.group(1), "local_rank": rank.group(2), "code": int(code.group()) if code else None,
            "message": message}


def _torchelastic(error_file: str | None, lines: t.Sequence[str]) -> str | None:
    """The reason from torchelastic's error file and torchrun's summary in the log; None without either."""
    recorded = _error_file(error_file)
    failure = _torchrun_failure(lines)
    if recorded is None and failure is None:
        return None
    failure = failure or {}
    message = recorded[0] if recorded else failure.get("message")
    if message is None:  # no traceback in the summary: the worker's own, printed before torchrun's
        raised = [line for line in _exceptions(lines) if not line.split(":", 1)[0].endswith("ChildFailedError")]
        message = raised[-1] if raised else None
    code = failure.get("code")
    if code is None and recorded:
        code = recorded[1]
    who = f"rank {failure['rank']} (local rank {failure['local_rank']})" if failure else "a worker"
    if code is not None and code < 0 and _signal_of(-code):
        head = f"torchelastic: {who} was killed by signal {_signal_of(-code)}"
    elif code is not None:
        head = f"torchelastic: {who} failed with exit code {code}"
    else:
        head = f"torchelastic: {who} failed" if failure or not message else "torchelastic"
    return f"{head}: {message}" if message else head


def _pick(lines: t.Sequence[str], matches: t.Callable[[str], bool]) -> str | None:
    """The last matching line that is an exception's, else the first matching line (the first error seen)."""
    found = [line for line in lines if matches(line)]
    raised = [line for line in found if _is_exception(line.strip())]
    return raised[-1] if raised else (found[0] if found else None)


def _is_cuda_oom(line: str) -> bool:
    return any(pattern in line for pattern in CUDA_OOM)


def _is_nccl(line: str) -> bool:
    return "NCCL" in line and "NCCL INFO" not in line and any(pattern in line for pattern in NCCL_FAILURE)


def _failure(status: int, sig: str | None, log_path: str, error_file: str | None) -> tuple[str, str]:
    """``(cause, reason)`` of a failed end (step 6 of the classification)."""
    how = f"killed by signal {sig}" if sig else f"exit status {status}"
    lines = _tail_lines(log_path)
    elastic = _torchelastic(error_file, lines)
    if elastic is not None:
        return "torchelastic", one_line(elastic)
    for cause, label, matches in (("cuda_oom", "CUDA out of memory", _is_cuda_oom), ("nccl", "NCCL error", _is_nccl)):
        line = _pick(lines, matches)
        if line is not None:
            return cause, one_line(f"{label}: {line.strip()}")
    raised = _exceptions(lines)
    if raised:
        return "python_exception", one_line(raised[-1], f" (the last Python exception in the log; {how})")
    return ("signal" if sig else "exit_status"), how


def classify(status: int, log_path: str, *, stopped: bool = False, timed_out: bool = False, stalled: bool = False,
             oom_kills_during: int = 0, error_file: str | None = None, shutdown: str | None = None,
             memory: str | None = None) -> dict[str, str]:
    """``end_state``, ``cause``, ``reason`` and (for a status 128+N of a signal) ``signal`` of a job's end.

    ``shutdown``: the evidence that the container was shutting down (``_job_shutdown``); ``memory``: what the memory
    counters said during the attempt (``_job_memory.note``), added to the reason.
    """
    sig = signal_name(status)
    short = f"signal {sig}" if sig else f"exit status {status}"
    if stopped:
        end = ("stopped", "stop", f"stopped by trainops ({short})")
    elif shutdown:
        end = ("stopped", "shutdown", f"the container shut down (its init stopped every process; {shutdown}): {short}")
    elif timed_out:
        end = ("timeout", "time_limit", f"the time limit was reached ({short})")
    elif stalled:
        end = ("stalled", "stall", f"the log stalled ({short})")
    elif status == 0:
        end = ("finished", "exit_status", "exit status 0")
    elif oom_kills_during > 0:
        kills = f"{oom_kills_during} OOM kill{'' if oom_kills_during == 1 else 's'} during the attempt"
        if sig == "KILL":
            end = ("oom_killed", "oom_kill", f"killed by the kernel's OOM killer (the container's memory limit; {kills})")
        else:
            end = ("oom_killed", "oom_kill", f"the kernel's OOM killer killed a process in the job's cgroup "
                                             f"(the container's memory limit; {kills}; {short})")
    else:
        end = ("failed",) + _failure(status, sig, log_path, error_file)
    result = {"end_state": end[0], "cause": end[1], "reason": one_line(end[2], f"; meanwhile {memory}" if memory else "")}
    if sig:
        result["signal"] = sig
    return result
