# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What the boot recorder writes of a job its container's stop cut off (docs/job-life.md, "A container that goes away").

The words (``lost_words``): ``lost: the container restarted at T; the job was running (attempt 2), its last log line
at T2: LINE``, from the supervisor's last state in the live record (``_job_live``) and the log's last line of output
and its time (``log_words``); one line of at most ``REASON_MAX`` characters whatever is added (``reason``). The marks:
the log's line (``mark_log``: ``### trainops.pct_launch: session=NAME attempt=N lost=container_restart boot_at=T``)
and the end (``write_end``): the exit record in ``LOG.exit`` and in ``RUN_DIR``, which it makes again with
``log_path`` so that readers find the session by its name, and the launch's end line in the history. The
recorder (``_job_boot``) and the start at boot (``_job_resume``) use them. Standard library only, Python 3.7 or later.
"""

from __future__ import annotations

import calendar
import os
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_end, _job_history, _job_live
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import JOB_FILE, LEFTOVERS, LOG_PATH_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import PROTOCOL, exit_record_text, hostname
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import write_exit_record, write_whole

CAUSE = "container_restart"
LINE_MAX = 120  # characters of the log's last line in the reason
REASON_MAX = 300
_DOING = {"restarting": "its supervisor was waiting to start attempt {next}", "stalled": "the job was running (attempt {n}, stalled)",
          "stopping": "the job was being stopped (attempt {n})"}


def epoch(text: t.Any) -> float | None:
    """Seconds since the epoch of an ISO 8601 UTC time of the protocol, or None."""
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def mtime(path: t.Any) -> float | None:
    """When a file was last written, or None."""
    try:
        return os.stat(str(path)).st_mtime if path else None
    except OSError:
        return None


def attempt_of(record: t.Mapping[str, t.Any]) -> int:
    """The attempt the record's supervisor noted last (0: none started)."""
    value = record.get("attempt")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def last_sign(path: str, record: t.Mapping[str, t.Any]) -> float | None:
    """When the job last showed life: the last write of its log or of its live record ``path``."""
    times = [when for when in (mtime(record.get("log_path")), mtime(path)) if when is not None]
    return max(times) if times else None


def what_ran(record: t.Mapping[str, t.Any]) -> str:
    """What the job was doing when the container went away, from the supervisor's last state."""
    attempt = attempt_of(record)
    if attempt == 0:
        return "the job had not started yet"
    return _DOING.get(str(record.get("state")), "the job was running (attempt {n})").format(n=attempt, next=attempt + 1)


def log_words(log_path: str) -> str:
    """``its last log line at T: LINE`` (the last attempt's output), or that it has none."""
    written = mtime(log_path)
    if written is None:
        return "its log is gone"
    lines = _job_end.last_lines(log_path, 1)
    if not lines:
        return "its log had no output of that attempt"
    line = _job_end.UNPRINTABLE_RE.sub(" ", lines[-1]).strip()
    return f"its last log line at {_job_live.iso(written)}: {line[:LINE_MAX]}"


def lost_words(record: t.Mapping[str, t.Any], boot_at: str) -> str:
    """``lost: the container restarted at T; ...``, read before the log's mark changes its last write."""
    return f"lost: the container restarted at {boot_at}; {what_ran(record)}, {log_words(str(record.get('log_path') or ''))}"


def reason(head: str, tail: str = "") -> str:
    """``head`` and ``tail`` in at most ``REASON_MAX`` characters, ``head`` cut when needed."""
    room = REASON_MAX - len(tail)
    return (head if len(head) <= room else head[:room - 1].rstrip() + "\u2026") + tail


def mark_log(record: t.Mapping[str, t.Any], words: str) -> int:
    """The log's line that says what became of the job (``lost=container_restart boot_at=T``); the log's size before it
    (0 when there is no log)."""
    try:
        fd = os.open(str(record.get("log_path") or ""), os.O_WRONLY | os.O_APPEND)
    except OSError:
        return 0
    try:
        size = os.fstat(fd).st_size
        os.write(fd, f"{PROTOCOL}session={record['session_name']} attempt={attempt_of(record)} {words}\n".encode("utf-8", "surrogateescape"))
        return size
    except OSError:
        return 0
    finally:
        os.close(fd)


def history_of(record: t.Mapping[str, t.Any]) -> str:
    """The history file of the record's launch."""
    return str(record.get("history_path") or _job_history.history_path())


def launch_of(record: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The keys of the record's launch in a history line or an event."""
    return {"session_name": record["session_name"], "host": record.get("host") or hostname(),
            "started_at": record.get("started_at"), "log_path": record.get("log_path")}


def run_dir_again(record: t.Mapping[str, t.Any]) -> str:
    """The session's ``RUN_DIR`` made again (mode 0700) with ``log_path``, without the files of the launch's life."""
    run_dir = str(record["run_dir"])
    old = os.umask(0o077)
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError:
        pass
    finally:
        os.umask(old)
    for name in LEFTOVERS + (JOB_FILE,):  # job.json too: it held notify_url
        try:
            os.unlink(os.path.join(run_dir, name))
        except OSError:
            pass
    write_whole(os.path.join(run_dir, LOG_PATH_FILE), str(record.get("log_path") or ""), 0o600)
    return run_dir


def write_end(record: t.Mapping[str, t.Any], status: int | None, ended_at: str, end: t.Mapping[str, t.Any]) -> None:
    """The exit record (``end``: attempts, end_state, cause, signal, reason), ``RUN_DIR`` with the log's path, and the
    launch's end in the history (``boot_restarts`` as the record counts them: a failed start's count undone)."""
    name, log = str(record["session_name"]), str(record.get("log_path") or "")
    text = exit_record_text(name, status, str(record.get("started_at") or ""), ended_at, None, end)
    write_exit_record(run_dir_again(record), log, text)
    _job_history.append(history_of(record), {"event": "end", **launch_of(record), "ended_at": ended_at, "end_state": end.get("end_state"),
                                             "exit_status": status, "cause": end.get("cause"), "reason": end.get("reason"),
                                             "attempts": _job_history.as_int(end.get("attempts")),
                                             "boot_restarts": int(record.get("boot_restarts") or 0)})
