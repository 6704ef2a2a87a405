# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Report the tmux sessions of the host the module runs on (``tmux_session_info``).

It only reads: tmux, the run folders of the launches, each log and its exit record. It gathers the
facts of each session, decides its state with ``_tmux_cli.session_state`` (the one decision every
report uses) and turns them into one element of the module's ``sessions`` (``session_entry``).
"""

from __future__ import annotations

import datetime
import os
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_parent import exit_record_path, read_exit_record
from ansible_collections.trainops.pct_launch.plugins.module_utils._log_poll import tail
from ansible_collections.trainops.pct_launch.plugins.module_utils._proc_tree import show
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Tmux, read_text, run_root, session_state
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import name_and_log_errors

MAX_LINE_BYTES = 4000
MAX_LINES = 10000

_SEP = "\037"
_FIELDS = ("session_name", "pane_pid", "pane_dead", "pane_dead_status", "session_created")
# The last field may hold the separator (a command line can).
_OPTIONS = ["#{?@trainops_log,1,0}", "#{@trainops_started_at}", "#{@trainops_command}", "#{pane_start_command}"]
_FORMAT = _SEP.join([f"#{{{name}}}" for name in _FIELDS] + _OPTIONS)


def _files(facts: dict[str, t.Any], log_path: str, run_dir: str | None, lines: int) -> None:
    """The log's facts: path, size, last lines, and its exit record."""
    if not log_path:
        return
    facts["log_path"] = log_path
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
        log = read_text(os.path.join(run_dir, "log_path")) or tmux.display_target(target + ":", "#{@trainops_log}") or ""
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
            facts = gone(session_name, log_path or read_text(os.path.join(root, session_name, "log_path")) or "", root, lines)
        return status, [facts]
    found: list[dict[str, t.Any]] = []
    if status == "running":
        ids = tmux.run("list-sessions", "-F", "#{session_id}")[1].split()
        found = [facts for facts in (in_tmux(tmux, sid, root, lines) for sid in ids) if facts is not None]
    seen = {facts["session"] for facts in found}
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        log = read_text(os.path.join(root, name, "log_path"))
        if name not in seen and os.path.isdir(os.path.join(root, name)) and log:
            found.append(gone(name, log, root, lines))
    return status, found


def check_info_options(params: t.Mapping[str, t.Any]) -> list[str]:
    """Problems with the options of ``tmux_session_info``, each naming the option."""
    errors = name_and_log_errors(params.get("session_name"), params.get("log_path"))
    if not 0 <= params["lines"] <= MAX_LINES:
        errors.append(f"Cannot use option lines {params['lines']}: it must be from 0 to {MAX_LINES}")
    return errors


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


def session_entry(facts: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """One element of the module's ``sessions`` result."""
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
        "log_path": facts.get("log_path") or None,
        "log_size": to_int(facts.get("log_size")),
        "log_tail": [line.rstrip("\r") for line in facts.get("line", [])],
    }
