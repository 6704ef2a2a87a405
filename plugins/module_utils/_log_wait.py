# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Options, results and messages of ``wait_for_log``, shared by its action plugin and its module.

The action plugin (controller) checks the options, regexes included, before anything runs, then calls
the module in chunks; the module (on the host the log is on) runs one chunk with ``_log_poll.poll``
and turns its facts into a result (``result_from_facts``). Verdicts with ``wait_until: started``:
``started`` (pattern seen, or any output line without a pattern), ``fail_pattern``, ``died`` (the session
ended or is gone, or an exit record appeared), ``timeout``. With ``wait_until: finished`` the wait goes on
after the start until the job ends: ``finished`` (exit status 0), ``failed`` (any other end, or no job to
wait for), ``fail_pattern``, ``timeout`` (the job still runs; nothing stops it). Patterns are Python
regular expressions, everywhere. A container that shuts down during the wait gives ``died`` (``failed``) at once,
with ``shutdown`` in the result, and a message that says so.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import EXIT_SUFFIX, LOG_PATH_FILE, OPT_LOG
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_names import name_and_log_errors
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_sessions import bus_ids, to_int

MODULE_NAME = "trainops.pct_launch.wait_for_log"
CHUNK_SECONDS = 10.0
MAX_SLEEP = 1.0
MAX_TAIL_LINES = 10000
MSG_TAIL_LINES = 5
WAIT_UNTIL = ("started", "finished")
# Verdicts of a wait that saw the job end (its session is not alive any more).
ENDED = ("died", "finished", "failed")
# Verdicts that are a success: the task does not fail.
SUCCESS = ("started", "finished")

ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = {
    "session_name": {"type": "str"},
    "log_path": {"type": "str"},
    "pattern": {"type": "str"},
    "fail_pattern": {"type": "str"},
    "timeout": {"type": "float", "default": 600},
    "sleep": {"type": "float", "default": 0.5},
    "tail_lines": {"type": "int", "default": 40},
    "offset": {"type": "int", "default": 0},
    "wait_until": {"type": "str", "default": "started", "choices": list(WAIT_UNTIL)},
    # None: true with wait_until finished, false with started (show_lines() resolves it)
    "show_lines": {"type": "bool"},
    # the action plugin's (controller side): the module never sees them
    "fleet_id": {"type": "str"},
    "node_kernel_log": {"type": "list", "elements": "str"},
}
REQUIRED_ONE_OF = [["session_name", "log_path"]]
# tmux_session's option wait: these options, for the wait after the start (the session and the log are the job's own;
# a fleet-wide wait, fleet_id, stays wait_for_log's)
WAIT_SPEC: dict[str, dict[str, t.Any]] = {key: value for key, value in ARGUMENT_SPEC.items()
                                          if key not in ("session_name", "log_path", "offset", "fleet_id", "node_kernel_log")}


def _regex_error(option: str, value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as exc:
        return (f"Cannot use option {option} {value!r}: it is not a valid Python regular expression ({exc}); "
                "fix the expression, for example escape literal characters with a backslash")
    return None


def _range_errors(params: t.Mapping[str, t.Any], prefix: str = "") -> list[str]:
    errors = []
    if not params["timeout"] > 0:
        errors.append(f"Cannot use option {prefix}timeout {params['timeout']}: it must be more than 0 seconds")
    if not 0 < params["sleep"] <= MAX_SLEEP:
        errors.append(f"Cannot use option {prefix}sleep {params['sleep']}: the poll interval must be more than 0 "
                      f"and at most {MAX_SLEEP:g} second")
    if not 0 <= params["tail_lines"] <= MAX_TAIL_LINES:
        errors.append(f"Cannot use option {prefix}tail_lines {params['tail_lines']}: it must be from 0 to {MAX_TAIL_LINES}")
    if params.get("offset", 0) < 0:
        errors.append(f"Cannot use option {prefix}offset {params['offset']}: it must be 0 or more")
    return errors


def _pattern_errors(params: t.Mapping[str, t.Any], prefix: str = "") -> list[str]:
    errors = [_regex_error(prefix + option, params[option]) for option in ("pattern", "fail_pattern") if params.get(option) is not None]
    return [error for error in errors if error]


def check_options(params: t.Mapping[str, t.Any]) -> list[str]:
    """Problems with the options (after type checks), each ``Cannot use option X ...: cause; fix``."""
    return _range_errors(params) + name_and_log_errors(params.get("session_name"), params.get("log_path")) + _pattern_errors(params)


def wait_option_errors(wait: t.Mapping[str, t.Any]) -> list[str]:
    """Problems with tmux_session's option ``wait`` (``WAIT_SPEC``, validated), each ``Cannot use option wait.X ...``."""
    return _range_errors(wait, "wait.") + _pattern_errors(wait, "wait.")


def show_lines(params: t.Mapping[str, t.Any]) -> bool:
    """Whether the wait shows the log's new lines: ``show_lines``, by default only with ``wait_until: finished``."""
    if params.get("show_lines") is not None:
        return bool(params["show_lines"])
    return params.get("wait_until") == "finished"


def poll_parameters(params: t.Mapping[str, t.Any], duration: float, offset: int) -> dict[str, t.Any]:
    """What the in-container loop needs, from the module's options."""
    return {
        "session_name": params.get("session_name"),
        "log_path": params.get("log_path"),
        "pattern": params.get("pattern"),
        "fail_pattern": params.get("fail_pattern"),
        "duration": float(duration),
        "sleep": float(params["sleep"]),
        "tail_lines": int(params["tail_lines"]),
        "offset": int(offset),
        # check mode writes nothing: no @trainops_proven on the session
        "record_proof": bool(params.get("record_proof", True)),
        "wait_until": params.get("wait_until") or "started",
        "show_lines": show_lines(params),
    }


def result_from_facts(facts: t.Mapping[str, t.Any], elapsed: float, chunks: int = 1) -> dict[str, t.Any]:
    """The task result (without ``msg``) from the facts of the last chunk."""
    verdict = facts.get("verdict", "died")
    exit_info = facts.get("exit", {})
    result = {
        "verdict": "timeout" if verdict == "pending" else verdict,
        "elapsed": round(elapsed, 3),
        "matched_line": facts.get("matched_line"),
        "log_tail": [line.rstrip("\r") for line in facts.get("tail", [])],
        "log_path": facts.get("log_path") or None,
        "log_exists": facts.get("log_exists") == "1",
        "log_size": to_int(facts.get("log_size")),
        "offset": to_int(facts.get("offset")) or 0,
        "session_state": facts.get("state", "unknown"),
        "session_alive": facts.get("session") == "alive" and verdict not in ENDED,
        "tmux_missing": facts.get("session") == "tmux_missing",
        "pane_pid": to_int(facts.get("pane_pid")),
        "exit_status": to_int(exit_info.get("exit_status")),
        "ended_at": exit_info.get("ended_at"),
        "stopped_by": exit_info.get("stopped_by"),
        "process_tree": list(facts.get("ps", [])),
        "pct_calls": chunks,
        "proof_recorded": facts.get("proof_recorded") == "1",
        # the exit record's keys of the supervisor (docs/job-life.md): None when the record has none
        "attempts": to_int(exit_info.get("attempts")),
        "end_state": exit_info.get("end_state"),
        "cause": exit_info.get("cause"),
        "end_reason": exit_info.get("reason"),
        "signal": exit_info.get("signal"),
        "attempt_started_at": exit_info.get("attempt_started_at"),
        "gpu_bus_ids": bus_ids(exit_info.get("gpu_bus_ids")),
        # the container shut down: what showed it in the container, else the reason of the exit record that says so
        "shutdown": facts.get("shutdown") or (exit_info.get("reason") if exit_info.get("cause") == "shutdown" else None),
    }
    if "proven_line" in facts:  # wait_until finished: the line that proved the start in this chunk, if any
        result["proven_line"] = facts["proven_line"]
    if "new_lines" in facts:  # show_lines: the chunk's new lines, for the action plugin to print
        result["new_lines"] = list(facts["new_lines"])
        result["lines_omitted"] = to_int(facts.get("lines_omitted")) or 0
    return result


def where(params: t.Mapping[str, t.Any]) -> str:
    """`` in container VMID`` (`` on node NODE`` for a remote one; the host's ``pct_vmid`` and ``pct_node`` the
    action plugin adds), `` on HOST`` or nothing."""
    vmid = params.get("pct_vmid")
    if vmid is not None:
        return f" in container {vmid}" + (f" on node {params['pct_node']}" if params.get("pct_node") else "")
    return f" on {params['host']}" if params.get("host") else ""


def subject(params: t.Mapping[str, t.Any]) -> str:
    """``session NAME in container VMID`` (or ``log PATH on HOST``): what a wait is about."""
    if params.get("session_name"):
        return f"session {params['session_name']}{where(params)}"
    return f"log {params['log_path']}{where(params)}"


def _expected(params: t.Mapping[str, t.Any]) -> str:
    if params.get("pattern") is not None:
        return f"a log line matching {params['pattern']!r}"
    return "the first line of output"


def _tail(result: t.Mapping[str, t.Any]) -> str:
    """``; last log lines: ...`` for a message, nothing for a reason (``log_tail`` None)."""
    return "" if result.get("log_tail") is None else "; " + _last_lines(result)


def reason(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any]) -> str:
    """The message without the log lines: why, in one line, for a summary (launch.yml's fleet summary)."""
    return message(dict(result, log_tail=None), params)


def _last_lines(result: t.Mapping[str, t.Any]) -> str:
    lines = result["log_tail"][-MSG_TAIL_LINES:]
    if not lines:
        return "the log has no lines"
    return "last log lines: " + " | ".join(lines)


def _log_state(result: t.Mapping[str, t.Any]) -> str:
    if not result["log_path"]:
        return (f"the log path is unknown (no {OPT_LOG}, no RUN_DIR/{LOG_PATH_FILE}, and log_path is not set); "
                f"set log_path so that LOG{EXIT_SUFFIX} can tell how the job ended")
    if not result["log_exists"]:
        return f"log {result['log_path']} does not exist"
    return f"log {result['log_path']} exists ({result['log_size']} bytes) and has no such line"


def _shutdown_message(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any], head: str) -> str:
    """The job's container shut down (or is shutting down) during the wait: ``Job did not start`` / ``Job failed``."""
    status, when = result.get("exit_status"), f"after {result['elapsed']:.1f} s"
    before = f", before {_expected(params)}" if head == "Job did not start" else ""
    if result["shutdown"] == result.get("end_reason"):  # the exit record says so (the container may run again since)
        how = f"{result['shutdown']} (exit status {status}, {when})"
    else:  # seen in the container while it shut down
        ended = f"exit status {status}" if status is not None else "no exit record yet"
        how = f"the container shut down {when} ({result['shutdown']}), and the job with it ({ended})"
    return f"{head} in {subject(params)}: {how}{before}{_tail(result)}; launch the job again once the container runs"


def _lost_message(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any], head: str) -> str:
    """The boot recorder's exit record: the job was lost with its container (``end_state: lost``)."""
    why = result.get("end_reason") or "lost: the container restarted"
    return (f"{head} in {subject(params)}: {why}{_tail(result)}; launch the job again (with restart_on_boot, the "
            "container's boot starts such a job again)")


def _died_message(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any]) -> str:
    what, when = subject(params), f"after {result['elapsed']:.1f} s"
    state = result["session_state"]
    if result.get("shutdown"):
        return _shutdown_message(result, params, "Job did not start")
    if result.get("end_state") == "lost":
        return _lost_message(result, params, "Job did not start")
    if result["tmux_missing"] and state != "finished":
        return f"Cannot watch {what}: tmux is not installed there; install it (role trainops.pct_launch.tmux) and launch the job"
    if state == "finished":
        how = f"the job ended with exit status {result['exit_status']}" if result["exit_status"] is not None else "the job ended"
        if result["stopped_by"]:
            how += f" (stopped by {result['stopped_by']})"
        return (f"Job did not start in {what}: {how} {when}, before {_expected(params)}{_gpu_fault(result)}{_tail(result)}; "
                f"{_fix(result, 'fix the job and launch it again')}")
    if state == "vanished":
        return (f"Job did not start in {what}: the session is gone without an exit status {when} (tmux killed, SIGKILL, "
                "or the container restarted without the boot unit of role trainops.pct_launch.boot_recorder), "
                f"before {_expected(params)}{_tail(result)}; launch the job again")
    return (f"Cannot find {what}: no tmux session of that name is running and {_log_state(result)}; "
            "check session_name and log_path, and that the job was launched")


def _timeout_message(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any]) -> str:
    if result["session_alive"]:
        procs = [" ".join(line.split())[:160] for line in result["process_tree"][1:]]
        session = f"the session is alive (pane_pid {result['pane_pid']}"
        session += f", {len(procs)} processes: " + " || ".join(procs[:5]) + ")" if procs else ")"
    elif params.get("session_name"):
        session = "the session is gone"
    else:
        session = "no session_name was given, so whether the job is alive is unknown"
    return (f"Timed out after {params['timeout']:g} s waiting for {_expected(params)} in {subject(params)}: "
            f"{_log_state(result)}; {session}{_tail(result)}; raise timeout if the job starts slowly, or look at the job")


def _log_size(result: t.Mapping[str, t.Any]) -> str:
    if not result["log_path"]:
        return "the log path is unknown"
    if not result["log_exists"]:
        return f"log {result['log_path']} does not exist"
    return f"log {result['log_path']} ({result['log_size']} bytes)"


def _still_running_message(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any]) -> str:
    """wait_until finished, timeout: the job still runs (or nobody can tell), and nothing stopped it."""
    if result["session_alive"]:
        procs = [" ".join(line.split())[:160] for line in result["process_tree"][1:]]
        running = f"the job still runs (pane_pid {result['pane_pid']}"
        running += f", {len(procs)} processes: " + " || ".join(procs[:5]) + ")" if procs else ")"
    else:
        running = "whether the job still runs is unknown (no session_name was given)"
    if result.get("proven_line") is not None:
        start = f"its start was proven by {result['proven_line']!r}"
    else:
        start = f"{_expected(params)} was not seen in the log during the wait"
    return (f"Timed out after {params['timeout']:g} s waiting for the job in {subject(params)} to end: {running}, and it was "
            f"not stopped; {start}; {_log_size(result)}{_tail(result)}; wait longer (raise timeout), or stop the job "
            "(playbooks/stop.yml)")


def _gpu_fault(result: t.Mapping[str, t.Any]) -> str:
    """``; cause gpu_xid: the job's GPU ... logged Xid 79 (...)`` when the node's kernel log named a fault of the job's
    GPUs during its last attempt (``plugins/plugin_utils/_job_xid``), else nothing."""
    return f"; cause gpu_xid: {result['xid_reason']}" if result.get("xid_reason") else ""


def _fix(result: t.Mapping[str, t.Any], fix: str) -> str:
    """The fix: NVIDIA's action first when the GPU faulted."""
    return "follow NVIDIA's action for the Xid, then launch the job again" if result.get("xid_reason") else fix


def _end_notes(result: t.Mapping[str, t.Any]) -> str:
    """`` (reason: ..., 3 attempts, stopped by trainops)`` from the exit record, or nothing."""
    notes = []
    if result.get("end_reason"):
        notes.append(f"reason: {result['end_reason']}")
    elif result.get("signal"):
        notes.append(f"signal {result['signal']}")
    if (result.get("attempts") or 0) > 1:
        notes.append(f"{result['attempts']} attempts")
    if result.get("stopped_by"):
        notes.append(f"stopped by {result['stopped_by']}")
    return f" ({', '.join(notes)})" if notes else ""


def _failed_message(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any]) -> str:
    """wait_until finished: the job ended in any other way than exit status 0 (or there is no job to wait for)."""
    what, when = subject(params), f"after {result['elapsed']:.1f} s"
    state = result["session_state"]
    if result.get("shutdown"):
        return _shutdown_message(result, params, "Job failed")
    if result.get("end_state") == "lost":
        return _lost_message(result, params, "Job failed")
    if state == "finished":
        how = f"exit status {result['exit_status']}" if result["exit_status"] is not None else "the job ended without an exit status"
        fix = "launch it again" if result.get("stopped_by") else "fix the job and launch it again"
        return f"Job failed in {what}: {how} {when}{_end_notes(result)}{_gpu_fault(result)}{_tail(result)}; {_fix(result, fix)}"
    if result["tmux_missing"]:
        return f"Cannot watch {what}: tmux is not installed there; install it (role trainops.pct_launch.tmux) and launch the job"
    if state == "vanished":
        return (f"Job failed in {what}: the session is gone without an exit status {when} (tmux killed, SIGKILL, "
                "or the container restarted without the boot unit of role trainops.pct_launch.boot_recorder)"
                f"{_tail(result)}; launch the job again")
    return (f"Cannot find {what}: no tmux session of that name is running and {_log_state(result)}; "
            "check session_name and log_path, and that the job was launched")


def message(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any]) -> str:
    """The task's ``msg`` for a result: ``<what failed> <object>: <cause>; <fix>`` (or what succeeded)."""
    verdict = result["verdict"]
    if verdict == "started":
        what = f"pattern {params['pattern']!r} matched" if params.get("pattern") is not None else "the log has output"
        return f"Job started in {subject(params)}: {what} after {result['elapsed']:.1f} s: {result['matched_line']!r}"
    if verdict == "fail_pattern":
        return (f"Job failed in {subject(params)}: a log line matches fail_pattern {params['fail_pattern']!r} "
                f"after {result['elapsed']:.1f} s: {result['matched_line']!r}{_tail(result)}; fix the job and launch it again")
    if verdict == "finished":
        attempts = f" ({result['attempts']} attempts)" if (result.get("attempts") or 0) > 1 else ""
        return f"Job finished in {subject(params)}: exit status 0 after {result['elapsed']:.1f} s{attempts}"
    if verdict == "failed":
        return _failed_message(result, params)
    if verdict == "timeout":
        if params.get("wait_until") == "finished":
            return _still_running_message(result, params)
        return _timeout_message(result, params)
    return _died_message(result, params)
