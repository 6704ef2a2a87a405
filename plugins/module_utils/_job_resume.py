# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Start a job again at the container's next boot, as the next attempt of the same launch (``restart_on_boot``;
docs/job-life.md, "A container that goes away"): a job the container's stop cut off, or one its clean shutdown ended.

The boot recorder (``_job_boot``) calls ``again`` for a lost job of a launch that asked for it, and ``after_shutdown``
for one a clean shutdown ended (its supervisor recorded ``stopped``, ``shutdown`` and kept the live record). Within
``restart_limit`` (a start at boot is a restart) and what is left of ``time_limit`` (``refusal``), the history gets a
``boot_restart`` line of the launch first (it opens an ended launch again), then ``start`` leaves ``RUN_DIR`` as a
launch does (``_tmux_job``): the supervisor staged (``_job_stage``), ``job.json`` from the live record with ``resume``
(the attempt to start and the seconds of ``time_limit`` used so far), ``notify_url`` with the URL kept by
``notify_url_keep``, the spec's summary, ``log_path``, and ``env`` with the values the launch kept (``public_env`` and
the GPUs' ``CUDA_VISIBLE_DEVICES``: a launch with ``env`` values cannot ask for ``restart_on_boot``); the supervisor
reads and deletes ``notify_url`` and ``env`` before the job starts. ``LOG.exit`` of a clean shutdown's end goes (the job runs again; the
history keeps that end). Then the live record, with this boot, and the tmux session with the launch's options (its
spec hash, start time, log and command: a launch of the same job finds it running) and ``@trainops_log_from``, the
log's size before the boot's mark, where a wait for the start reads from. The supervisor marks the attempt in the log
and gives the job ``TRAINOPS_ATTEMPT``, as for any restart. A start that fails ends the launch (again), the failure in
its reason. Standard library only, Python 3.7 or later; staged with the boot recorder.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_history, _job_live, _job_lost
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import ENV_FILE, EXIT_SUFFIX, JOB_FILE, LEFTOVERS, LOG_PATH_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import NOTIFY_URL_FILE, SECRET_FILES, SPEC_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import OPT_COMMAND, OPT_LOG, OPT_LOG_FROM, OPT_SPEC, OPT_STARTED_AT
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import SUPERVISOR_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import now, write_whole
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_restart import policy_of
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_stage import stage
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Tmux


def _fresh_run_dir(run_dir: str) -> str | None:
    """``RUN_DIR`` (mode 0700) without the files of an earlier life; None, or why it cannot be made."""
    old = os.umask(0o077)
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as exc:
        return f"cannot create {run_dir}: {exc.strerror or exc}"
    finally:
        os.umask(old)
    for name in LEFTOVERS:
        try:
            os.unlink(os.path.join(run_dir, name))
        except OSError:
            pass
    return None


def job_file(record: t.Mapping[str, t.Any], path: str, attempt: int, elapsed: float) -> dict[str, t.Any]:
    """``job.json`` of the start at boot: the launch's, its live record and ``resume`` (never ``notify_url``)."""
    job = dict(record.get("job") or {})
    job["supervise"] = dict(job.get("supervise") or {}, notify_url=None)
    job.update(live=path, resume={"attempt": attempt, "elapsed": round(elapsed, 3)})
    return job


def write_files(record: t.Mapping[str, t.Any], job: t.Mapping[str, t.Any], url: str | None = None) -> str | None:
    """``RUN_DIR``'s files of the start (``url``: the kept ``notify_url``, in ``RUN_DIR/notify_url`` until the supervisor
    reads it); None, or why they could not be written."""
    run_dir = str(record["run_dir"])
    failed = _fresh_run_dir(run_dir)
    if failed is not None:
        return failed
    failed = stage(run_dir)
    if failed is not None:
        return f"cannot write {failed}"
    tmux = record.get("tmux") or {}
    files = [(JOB_FILE, json.dumps(dict(job), ensure_ascii=False)), (SPEC_FILE, str(tmux.get("summary") or "{}")),
             (LOG_PATH_FILE, str(record.get("log_path") or ""))]
    if record.get("env"):
        files.append((ENV_FILE, json.dumps(record["env"], ensure_ascii=False)))
    if url is not None:
        files.append((NOTIFY_URL_FILE, url))
    _remove(str(record.get("log_path") or "") + EXIT_SUFFIX)  # a clean shutdown's end: the job runs again
    for name, text in files:
        if not write_whole(os.path.join(run_dir, name), text, 0o600):
            _remove_secrets(run_dir)
            return f"cannot write {name} in {run_dir}"
    return None


def new_session(record: t.Mapping[str, t.Any], log_from: int) -> str | None:
    """The job's tmux session, running its supervisor; None, or why it could not start."""
    run_dir, tmux = str(record["run_dir"]), record.get("tmux") or {}
    command = " ".join(shlex.quote(word) for word in (sys.executable or "python3", "-I", os.path.join(run_dir, SUPERVISOR_FILE), run_dir))
    options = ((OPT_SPEC, str(tmux.get("spec") or "")), (OPT_STARTED_AT, str(record.get("started_at") or "")),
               (OPT_LOG, str(record.get("log_path") or "")), (OPT_COMMAND, str(tmux.get("command") or "")), (OPT_LOG_FROM, str(log_from)))
    server = Tmux()
    if not server.installed:
        return "tmux is not installed"
    rc, _pane_pid, err = server.new_session(str(record["session_name"]), command, options)
    return None if rc == 0 else f"tmux new-session failed: {err.strip() or f'exit status {rc}'}"


def start(path: str, record: t.Mapping[str, t.Any], attempt: int, elapsed: float, url: str | None, log_from: int) -> str | None:
    """Start the job of the live record ``path`` again as ``attempt``; None, or why it could not (nothing runs then)."""
    if not record.get("tmux") or not (record.get("job") or {}).get("argv"):
        return "its launch kept nothing to start it with"
    if not Tmux().installed:
        return "tmux is not installed"
    failed = write_files(record, job_file(record, path, attempt, elapsed), url)
    if failed is None and not _job_live.write(path, dict(record, state="starting", since=now())):
        failed = f"cannot write {path}"
    if failed is None:
        failed = new_session(record, log_from)
    if failed is not None:
        _remove_secrets(str(record["run_dir"]))
    return failed


def _remove_secrets(run_dir: str) -> None:
    for name in SECRET_FILES:
        _remove(os.path.join(run_dir, name))


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def refusal(record: t.Mapping[str, t.Any], attempt: int, elapsed: float) -> str | None:
    """Why ``restart_on_boot`` does not start the job again as ``attempt`` after ``elapsed`` s of its launch, or None."""
    policy = policy_of(record.get("job") or {})
    if attempt - 1 > int(policy["restart_limit"]):
        return f"restart_limit {policy['restart_limit']} reached"
    limit = float(policy["time_limit"])
    if limit > 0 and elapsed >= limit:
        return f"its time_limit of {limit:g} s was used up ({elapsed:.0f} s)"
    return None


def again(path: str, record: t.Mapping[str, t.Any], head: str, boot: str, sign: float, url: str | None, log_from: int,
          before: t.Callable[[str], None] | None = None) -> tuple[str, bool]:
    """Start the job of the live record ``path`` again, its history line first: (the reason's end, whether it runs).

    ``head``: the reason so far; ``boot``: this boot's key; ``sign``: the job's last sign of life (what ``time_limit``
    counts to); ``url``: the kept ``notify_url``; ``log_from``: the log's size before the boot's mark; ``before``: called
    with the reason's end once the start is decided, before it (the ``lost`` event goes out before the job's own).
    """
    attempt = _job_lost.attempt_of(record) + 1
    elapsed = max(0.0, sign - (_job_lost.epoch(record.get("started_at")) or sign))
    why = refusal(record, attempt, elapsed)
    if why is not None:
        return f"; not started again: {why}", False
    tail = f"; started again as attempt {attempt} (restart_on_boot)"
    if before is not None:
        before(tail)
    restarts = int(record.get("boot_restarts") or 0) + 1
    _job_history.append(_job_lost.history_of(record), {"event": "boot_restart", **_job_lost.launch_of(record), "time": now(),
                                                       "attempts": attempt, "boot_restarts": restarts, "reason": _job_lost.reason(head, tail)})
    why = start(path, dict(record, boot=boot, boot_restarts=restarts), attempt, elapsed, url, log_from)
    return (tail, True) if why is None else (f"; could not start it again: {why}", False)


def after_shutdown(path: str, record: t.Mapping[str, t.Any], recorded: t.Mapping[str, str], boot: str, boot_at: str) -> bool:
    """``restart_on_boot`` after a clean shutdown, whose end the supervisor recorded (``recorded``: its exit record):
    start the job again; whether it runs. A start that failed ends the launch again, the failure in its reason."""
    ended = recorded.get("ended_at") or boot_at
    head = (f"the container shut down at {ended} and restarted at {boot_at}; "
            f"the job had ended (attempt {_job_lost.attempt_of(record)}, shutdown)")
    log_from = _job_lost.mark_log(record, f"ended=shutdown boot_at={boot_at}")
    url = _job_live.kept_url(path) if record.get("notify_url_kept") else None
    tail, runs = again(path, record, head, boot, _job_lost.epoch(ended) or time.time(), url, log_from)
    sys.stdout.write(f"session {record['session_name']}: {_job_lost.reason(head, tail)}\n")
    if tail.startswith("; could not"):  # its boot_restart line opened the launch again: its end, once more
        end = {key: recorded.get(key) for key in ("attempts", "end_state", "cause", "signal")}
        _job_lost.write_end(record, _job_history.as_int(recorded.get("exit_status")), ended,
                            dict(end, reason=_job_lost.reason(recorded.get("reason") or "", tail)))
    return runs
