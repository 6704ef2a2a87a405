# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Report the tmux sessions of the host the module runs on (``tmux_session_info``).

It only reads: tmux, the run folders of the launches, each log and its exit record. It gathers the
facts of each session, decides its state with ``_tmux_cli.session_state`` (the one decision every
report uses) and turns them into one element of the module's ``sessions`` (``session_entry``): while the
job runs, its supervisor's live state (``RUN_DIR/state.json``), once it ended, its exit record
(docs/job-life.md). ``launch_history`` reads the target's history of launches (``_job_history``).
"""

from __future__ import annotations

import datetime
import json
import os
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_history import as_int, as_text, history_path
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_history import read as read_history
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_names import name_and_log_errors
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_notify import failures
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import LOG_PATH_FILE, OPT_COMMAND, OPT_LOG, OPT_STARTED_AT, STATE_FILE, run_root
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import exit_record_path, read_exit_record
from ansible_collections.trainops.pct_launch.plugins.module_utils._log_poll import tail
from ansible_collections.trainops.pct_launch.plugins.module_utils._proc_tree import show
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Tmux, read_text, session_state

MAX_LINE_BYTES = 4000
MAX_LINES = 10000
MAX_HISTORY = 1000
# The keys of the end, from state.json while the job runs, from the exit record once it ended.
_END_KEYS = ("end_state", "cause", "reason", "signal")

_SEP = "\037"
_FIELDS = ("session_name", "pane_pid", "pane_dead", "pane_dead_status", "session_created")
# The last field may hold the separator (a command line can).
_OPTIONS = [f"#{{?{OPT_LOG},1,0}}", f"#{{{OPT_STARTED_AT}}}", f"#{{{OPT_COMMAND}}}", "#{pane_start_command}"]
_FORMAT = _SEP.join([f"#{{{name}}}" for name in _FIELDS] + _OPTIONS)


def live_state(run_dir: str | None, log_path: str) -> dict[str, t.Any] | None:
    """The supervisor's ``RUN_DIR/state.json`` when that run dir belongs to the launch that writes ``log_path``;
    None when it is missing, partial, not a JSON object or of another launch."""
    if not run_dir or not log_path or read_text(os.path.join(run_dir, LOG_PATH_FILE)) != log_path:
        return None
    text = read_text(os.path.join(run_dir, STATE_FILE))
    try:
        value = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _files(facts: dict[str, t.Any], log_path: str, run_dir: str | None, lines: int) -> None:
    """The log's facts: path, size, last lines, its exit record and the supervisor's live state."""
    if not log_path:
        return
    facts["log_path"] = log_path
    live = live_state(run_dir, log_path)
    if live is not None:
        facts["live"] = live
    if run_dir and read_text(os.path.join(run_dir, LOG_PATH_FILE)) == log_path:
        facts["notify"] = failures(run_dir)
    if os.path.isfile(log_path):
        facts["log_size"] = str(os.path.getsize(log_path))
        facts["line"] = [show(line[:MAX_LINE_BYTES]) for line in tail(log_path, lines)]
    if exit_record_path(log_path, run_dir) is not None:
        facts["exit_file"] = "1"
        for key, value in (read_exit_record(log_path, run_dir) or {}).items():
            facts["exit." + key] = value


def in_tmux(tmux: Tmux, target: str, root: str, lines: int) -> dict[str, t.Any] | None:
    """The facts of a session tmux knows (``target`` is ``=NAME`` or a session id), or None."""
    out = tmux.display_target(target + ":", _FORMAT)
    fields = (out or "").split(_SEP, 8)
    if len(fields) < 9 or not fields[0]:
        return None
    facts: dict[str, t.Any] = dict(zip(_FIELDS, fields[:5]), session=fields[0], in_tmux="1", managed=fields[5],
                                   started_at=fields[6], command=fields[7] or fields[8], line=[])
    del facts["session_name"], facts["session_created"]
    facts["created"] = fields[4]
    run_dir, log = None, ""
    if fields[5] == "1":
        run_dir = os.path.join(root, fields[0])
        log = read_text(os.path.join(run_dir, LOG_PATH_FILE)) or tmux.display_target(target + ":", f"#{{{OPT_LOG}}}") or ""
        _files(facts, log, run_dir, lines)
    facts["state"] = session_state(fields[2] != "1", log, run_dir, in_tmux=True,
                                   pane_dead_status=fields[3] if fields[5] != "1" else None)
    return facts


def gone(name: str, log_path: str, root: str, lines: int) -> dict[str, t.Any]:
    """The facts of a launched session tmux no longer knows."""
    facts: dict[str, t.Any] = {"session": name, "in_tmux": "0", "managed": "1", "line": []}
    _files(facts, log_path, os.path.join(root, name), lines)
    facts["state"] = session_state(False, log_path, os.path.join(root, name))
    return facts


def _status(tmux: Tmux) -> str:
    if not tmux.installed:
        return "missing"
    return "running" if tmux.run("list-sessions")[0] == 0 else "no_server"


def report(session_name: str | None, log_path: str | None, lines: int) -> tuple[str, list[dict[str, t.Any]]]:
    """(tmux status ``missing``/``no_server``/``running``, the facts of one session or of all)."""
    tmux, root = Tmux(), run_root()
    status = _status(tmux)
    if session_name:
        facts = in_tmux(tmux, f"={session_name}", root, lines) if status == "running" and tmux.has_session(session_name) else None
        if facts is None:
            facts = gone(session_name, log_path or read_text(os.path.join(root, session_name, LOG_PATH_FILE)) or "", root, lines)
        return status, [facts]
    found: list[dict[str, t.Any]] = []
    if status == "running":
        ids = tmux.run("list-sessions", "-F", "#{session_id}")[1].split()
        found = [facts for facts in (in_tmux(tmux, sid, root, lines) for sid in ids) if facts is not None]
    seen = {facts["session"] for facts in found}
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        log = read_text(os.path.join(root, name, LOG_PATH_FILE))
        if name not in seen and os.path.isdir(os.path.join(root, name)) and log:
            found.append(gone(name, log, root, lines))
    return status, found


def check_info_options(params: t.Mapping[str, t.Any]) -> list[str]:
    """Problems with the options of ``tmux_session_info``, each naming the option."""
    errors = name_and_log_errors(params.get("session_name"), params.get("log_path"))
    if not 0 <= params["lines"] <= MAX_LINES:
        errors.append(f"Cannot use option lines {params['lines']}: it must be from 0 to {MAX_LINES}")
    limit = params.get("history_limit", 100)
    if not 1 <= limit <= MAX_HISTORY:
        errors.append(f"Cannot use option history_limit {limit}: it must be from 1 to {MAX_HISTORY}")
    return errors


def launch_history(session_name: str | None, limit: int) -> list[dict[str, t.Any]]:
    """The last ``limit`` launches of this host's history (of ``session_name`` only, when given), oldest first."""
    return read_history(history_path(), session_name=session_name or None, limit=limit)


def to_int(value: str | None) -> int | None:
    """An integer fact, or None when missing or not a number."""
    if value is None or not value.strip().lstrip("-").isascii():
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def _epoch_to_iso(value: str | None) -> str | None:
    """tmux ``session_created`` (seconds since the epoch) as ISO 8601 UTC."""
    seconds = to_int(value)
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(iso: str | None, now: float | None = None) -> int | None:
    """Whole seconds from an ISO 8601 time (``...Z``, or with an offset) to ``now``, never negative; None when unreadable."""
    if not iso:
        return None
    try:
        moment = datetime.datetime.fromisoformat(iso[:-1] + "+00:00" if iso.endswith("Z") else iso)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return max(0, int((time.time() if now is None else now) - moment.timestamp()))


def life(facts: t.Mapping[str, t.Any], now: float | None = None) -> dict[str, t.Any]:
    """The supervisor's keys of a session: from ``state.json`` while it runs, from the exit record once it ended.

    Records and run folders of launches made before the supervisor have none of them: None everywhere.
    """
    live = facts.get("live") or {}
    progress = as_text(live.get("last_progress_at"))
    keys: dict[str, t.Any] = {"last_output_at": as_text(live.get("last_output_at")), "last_progress_at": progress,
                              "last_progress_age": age(progress, now)}
    if facts["state"] == "running":
        keys.update({key: as_text(live.get(key)) for key in _END_KEYS})
        keys.update(attempts=as_int(live.get("attempt")), since=as_text(live.get("since")), supervisor_state=as_text(live.get("state")))
        return keys
    attempts = to_int(facts.get("exit.attempts"))
    keys.update({key: facts.get("exit." + key) or None for key in _END_KEYS})
    keys.update(attempts=attempts if attempts is not None else as_int(live.get("attempt")),
                since=(facts.get("exit.ended_at") or None) if facts["state"] == "finished" else None, supervisor_state=None)
    return keys


def bus_ids(text: object) -> list[str]:
    """The exit record's ``gpu_bus_ids`` (comma-separated PCI bus ids) as a list."""
    return [item for item in str(text or "").split(",") if item]


def session_entry(facts: t.Mapping[str, t.Any], now: float | None = None) -> dict[str, t.Any]:
    """One element of the module's ``sessions`` result (``now``: the time the ages count to, the clock's by default)."""
    state = facts["state"]
    finished = state == "finished"
    status = to_int(facts.get("exit.exit_status"))
    started = facts.get("started_at") or facts.get("exit.started_at") or _epoch_to_iso(facts.get("created"))
    return {
        "name": facts["session"],
        "state": state,
        "managed": facts.get("managed") == "1",
        "pane_pid": to_int(facts.get("pane_pid")) if state == "running" else None,
        "command": facts.get("command") or None,
        "started_at": started or None,
        "exit_status": (status if status is not None else to_int(facts.get("pane_dead_status"))) if finished else None,
        "ended_at": (facts.get("exit.ended_at") or None) if finished else None,
        "stopped_by": facts.get("exit.stopped_by") or None,
        "attempt_started_at": (facts.get("exit.attempt_started_at") or None) if finished else None,
        "gpu_bus_ids": bus_ids(facts.get("exit.gpu_bus_ids")) if finished else [],
        "log_path": facts.get("log_path") or None,
        "log_size": to_int(facts.get("log_size")),
        "log_tail": [line.rstrip("\r") for line in facts.get("line", [])],
        "notify_failures": (facts.get("notify") or (0, None))[0],
        "notify_failure": (facts.get("notify") or (0, None))[1],
        **life(facts, now),
    }
