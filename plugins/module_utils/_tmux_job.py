# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Start, stop and restart a job in a detached tmux session on the host the module runs on.

``launch(spec, check_mode)`` is ``tmux_session`` on its target: preflight, lock, probe, then the
action, returning the facts ``_tmux_outcome`` turns into the result. It raises ``JobError`` with the protocol's error code.
The job's parent in the pane is its supervisor: ``_supervisor_entry.py``, staged as ``RUN_DIR/supervisor.py`` at each
start with the supervisor's modules (``_job_stage``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import sys
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._boot_stage import discard, keep
from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_alloc import environment
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_log import LogError, chown_to, header, prepare, remove_file
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_gpus import choose_gpus, gpu_lock, running_gpus
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_history import history_path
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import EARLIER_SUPERVISOR_FILES, ENV_FILE, JOB_FILE, LEFTOVERS, LOCK_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import NOTIFY_URL_FILE, SECRET_FILES
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import LOG_PATH_FILE, PGID_FILE, SPEC_FILE, STATE_FILE, SUPERVISOR_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import OPT_COMMAND, OPT_LOG, OPT_SPEC, OPT_STARTED_AT
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import hostname, now, read_exit_record, write_whole
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_stage import stage
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_stop import group_alive, stop
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_target import JobError, Target, check_room, preflight
from ansible_collections.trainops.pct_launch.plugins.module_utils._proc_tree import zombie
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Before, facts_of, probe, read_text
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import (
    LaunchSpec,
    display_command,
    job_argv,
    spec_hash,
    spec_summary,
)

LOCK_GRACE = 30
TICK = 0.1
# how often a start looks for the job's group: its supervisor writes it some 30 ms after tmux starts the pane
START_TICK = 0.01
START_WAIT = 5.0


def _lock(run_dir: str, seconds: float, name: str) -> int:
    """An exclusive lock of the session's launches (released when the process ends, however it ends)."""
    old = os.umask(0o077)
    try:
        os.makedirs(run_dir, exist_ok=True)
        fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise JobError("start_failed", f"cannot create {run_dir}: {exc.strerror or exc}") from None
    finally:
        os.umask(old)
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise JobError("lock_timeout", f"another launch of session {name} holds {run_dir}/{LOCK_FILE}") from None
            time.sleep(TICK)


def plan(spec: LaunchSpec, before: Before) -> str:
    """What a run would do: none, start, stop or restart (check mode). Raises JobError."""
    if spec.action == "start" and before.running:
        if before.spec != spec_hash(spec):
            raise JobError("spec_conflict", f"session {spec.session_name} is running with a different spec", running_spec=before.spec)
        return "none"
    if spec.action == "start" and spec.log_mode == "fail_if_exists" and os.path.lexists(spec.log_path or ""):
        raise JobError("log_exists", f"log file {spec.log_path} already exists")
    if spec.action == "stop":
        return "stop" if before.running else "none"
    if spec.action == "restart":
        return "restart" if before.running else "start"
    return "start"


def remove_secrets(run_dir: str) -> None:
    """The secrets of a start that failed (its ``env`` values, its ``notify_url``) are gone."""
    for name in SECRET_FILES:
        remove_file(os.path.join(run_dir, name))


def _write_files(spec: LaunchSpec, started_at: str, chosen: t.Sequence[t.Mapping[str, t.Any]]) -> str | None:
    """``RUN_DIR``'s files of a start, and the live record for the next boot (``_boot_stage.keep``): its path, or None."""
    run_dir = spec.run_dir
    for leftover in LEFTOVERS + EARLIER_SUPERVISOR_FILES:  # parent.py: the supervisor of an earlier release
        remove_file(os.path.join(run_dir, leftover))
    url = dict(spec.supervise).get("notify_url")  # a secret: in RUN_DIR/notify_url until the supervisor reads it, as env
    job = {"session_name": spec.session_name, "log_path": spec.log_path, "argv": job_argv(spec), "chdir": spec.chdir,
           "venv": spec.venv, "user": spec.user, "started_at": started_at, "host": hostname(),
           "supervise": dict(spec.supervise, notify_url=None), "history_path": history_path(), "gpus": [gpu["uuid"] for gpu in chosen]}
    if chosen:  # what the GPU idle watchdog asks (gpu_idle_timeout), and the exit record's GPUs for the Xid readers
        job["nvidia_smi"] = spec.nvidia_smi
        job["gpu_bus_ids"] = [str(gpu.get("pci_bus_id")) for gpu in chosen if gpu.get("pci_bus_id")]
    failed = stage(run_dir)
    if failed is not None:
        raise JobError("start_failed", f"cannot write {failed}")
    summary = json.dumps(spec_summary(spec), sort_keys=True, ensure_ascii=True)
    env = dict(spec.env, **(environment(chosen) if chosen else {}))
    job["live"], failed = keep(spec, job, env, summary, url)  # for the container's next boot (_boot_stage)
    if failed is not None and (job["supervise"].get("restart_on_boot") or job["supervise"].get("notify_url_keep")):
        raise JobError("start_failed", f"{failed}, which restart_on_boot and notify_url_keep need")
    files = [(JOB_FILE, json.dumps(job, ensure_ascii=False)), (SPEC_FILE, summary), (LOG_PATH_FILE, spec.log_path or "")]
    if env:
        files.append((ENV_FILE, json.dumps(env, ensure_ascii=False)))
    if url is not None:
        files.append((NOTIFY_URL_FILE, url))
    for name, text in files:
        if not write_whole(os.path.join(run_dir, name), text, 0o600):
            remove_secrets(run_dir)
            discard(job["live"])
            raise JobError("start_failed", f"cannot write {name} in {run_dir}")
    return job["live"]


def _new_session(spec: LaunchSpec, target: Target, started_at: str) -> str:
    """Start the pane running the supervisor; its pane_pid."""
    command = " ".join(shlex.quote(word) for word in (sys.executable or "python3", "-I", os.path.join(spec.run_dir, SUPERVISOR_FILE), spec.run_dir))
    options = ((OPT_SPEC, spec_hash(spec)), (OPT_STARTED_AT, started_at),
               (OPT_LOG, spec.log_path or ""), (OPT_COMMAND, display_command(spec)))
    rc, pane_pid, err = target.tmux.new_session(spec.session_name, command, options)
    if rc != 0:
        remove_secrets(spec.run_dir)
        raise JobError("start_failed", f"tmux new-session failed: {err.strip()}")
    return pane_pid


def _wait_started(spec: LaunchSpec, target: Target) -> dict[str, str]:
    """Until the job's group exists or it already ended (at most START_WAIT s); ended: its exit record is there."""
    pgid_file = os.path.join(spec.run_dir, PGID_FILE)
    log = spec.log_path or ""
    deadline = time.monotonic() + START_WAIT
    while not os.path.exists(pgid_file) and read_exit_record(log, spec.run_dir) is None and time.monotonic() < deadline:
        time.sleep(START_TICK)
    pgid = (read_text(pgid_file) or "").strip()
    # a job already over (its group gone): its supervisor writes the record in a moment, unless it restarts the job
    while _attempt_over(pgid) and read_exit_record(log, spec.run_dir) is None \
            and not _restarting(spec.run_dir, pgid_file, pgid) and time.monotonic() < deadline:
        time.sleep(START_TICK)
    facts = {"state": "running", "job_pgid": pgid}
    record = read_exit_record(log, spec.run_dir)
    if record is not None:  # this launch's (the start rotated or removed any earlier one): the supervisor is ending
        facts.update(state="finished", exit_status=record.get("exit_status", ""))
    return facts


def _attempt_over(pgid: str) -> bool:
    """Whether the job's attempt ``pgid`` ended: its group is gone, or its leader is a zombie not yet reaped."""
    return pgid.isdigit() and (not group_alive(int(pgid)) or zombie(int(pgid)))


def _restarting(run_dir: str, pgid_file: str, pgid: str) -> bool:
    """Whether the supervisor waits to restart the job, or restarted it (another group)."""
    try:
        state = json.loads(read_text(os.path.join(run_dir, STATE_FILE)) or "{}")
    except ValueError:
        state = {}
    return (isinstance(state, dict) and state.get("state") == "restarting") or (read_text(pgid_file) or "").strip() != pgid


def start(spec: LaunchSpec, target: Target, before: Before) -> dict[str, str]:
    """Choose the GPUs, rotate the log, write the header and the files, start the session; the start's facts."""
    with gpu_lock(spec):
        chosen = choose_gpus(spec, target)
        facts = _start(spec, target, before, chosen)
    if chosen:
        facts["gpus"] = ",".join(gpu["uuid"] for gpu in chosen)
    return facts


def _start(spec: LaunchSpec, target: Target, before: Before, chosen: list[dict[str, t.Any]]) -> dict[str, str]:
    if spec.log_mode == "fail_if_exists" and os.path.lexists(spec.log_path or ""):
        raise JobError("log_exists", f"log file {spec.log_path} already exists")
    if before.dead_pane or before.lingering:  # a lingering supervisor finishes on its own
        target.tmux.kill_session(spec.session_name)
    started_at = now()
    log = spec.log_path or ""
    try:
        rotated = prepare(log, spec.log_mode, spec.log_keep, spec.run_dir, header(spec.session_name, started_at, display_command(spec)))
    except LogError as exc:
        raise JobError(exc.code, str(exc)) from None
    chown_to(log, target.ids)
    live = _write_files(spec, started_at, chosen)
    try:
        pane_pid = _new_session(spec, target, started_at)
    except JobError:
        discard(live)  # nothing runs: nothing for the next boot to record
        raise
    facts = {"result": "started", "rotated_log": rotated or "", "started_at": started_at, "pane_pid": pane_pid}
    facts.update(_wait_started(spec, target))
    return facts


def _act(spec: LaunchSpec, target: Target, before: Before) -> dict[str, str]:
    if spec.action == "start" and before.running:
        plan(spec, before)  # raises on another spec
        return {"result": "unchanged", "pane_pid": before.pane_pid, "started_at": before.started_at,
                "proven": "1" if before.proven else "0", "state": "running", "gpus": running_gpus(spec.run_dir),
                "log_size": _size(spec.log_path)}
    if spec.action == "stop":
        if before.running:
            return dict(stop(spec, target, before), result="stopped")
        if before.dead_pane or before.lingering:  # a lingering supervisor finishes on its own
            target.tmux.kill_session(spec.session_name)
        facts = {"result": "unchanged"}
        record = read_exit_record(spec.log_path or before.log_path, spec.run_dir) if before.state == "finished" else None
        if record is not None:
            facts["exit_status"] = record.get("exit_status", "")
        return facts
    facts: dict[str, str] = {}
    if spec.action == "restart" and before.running:
        facts.update(stop(spec, target, before))
    facts.update(start(spec, target, before))
    return facts


def _size(path: str | None) -> str:
    """The size of the log of a job found running (where a wait for its end starts), "" when it cannot be read."""
    try:
        return str(os.stat(path or "").st_size)
    except OSError:
        return ""


def launch(spec: LaunchSpec, check_mode: bool = False) -> dict[str, str]:
    """Run ``tmux_session`` on this host; its facts. Raises JobError (with ``facts`` gathered so far)."""
    target = Target(spec)
    facts: dict[str, str] = {}
    try:
        facts.update(preflight(spec, target))
        before = probe(target.tmux, spec.session_name, spec.run_dir, spec.log_path)
        facts.update(facts_of(before))
        if spec.action != "stop" and not before.running:
            check_room(spec)
        if check_mode:
            facts["would"] = plan(spec, before)
            if facts["would"] in ("start", "restart"):  # a request that cannot be given fails in check mode too
                facts["gpus"] = ",".join(gpu["uuid"] for gpu in choose_gpus(spec, target))
            return facts
        if spec.action == "stop" and not target.tmux.installed:
            facts["result"] = "unchanged"
            return facts
        lock = _lock(spec.run_dir, spec.stop_timeout + LOCK_GRACE, spec.session_name)
        try:
            before = probe(target.tmux, spec.session_name, spec.run_dir, spec.log_path)
            facts.update(facts_of(before))
            facts.update(_act(spec, target, before))
        finally:
            os.close(lock)
    except JobError as exc:
        exc.facts = dict(facts, **exc.facts)
        raise
    return facts
