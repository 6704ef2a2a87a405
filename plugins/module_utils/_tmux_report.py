# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Report the tmux sessions of a container (``tmux_session_info``) and read ``trainops:KEY=VALUE`` output.

Runs on the Proxmox node (Python 3.8+). ``build_info_program`` returns one POSIX sh program for
``_pct.run_in_container`` (one ``pct exec`` per report); it only reads: tmux, the log, ``LOG.exit``.
It prints facts as ``trainops:KEY=VALUE`` lines (VALUE percent-encoded, see docs/launch-protocol.md);
``trainops:session=NAME`` starts the facts of one session. ``sessions_from_output`` turns them into
the module's result, deciding each session's state (running / finished / vanished / absent).
"""

from __future__ import annotations

import datetime
import re
import shlex
import typing as t
from urllib.parse import unquote_to_bytes

from ansible_collections.trainops.pct_launch.plugins.module_utils._pct import VMID_MAX, VMID_MIN

SESSION_NAME_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")  # \Z: "$" would accept a trailing newline
PREFIX = "trainops:"
MAX_LINE_BYTES = 4000
MAX_LINES = 10000

INFO_ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = {
    "vmid": {"type": "int"},
    "session_name": {"type": "str"},
    "log_path": {"type": "str"},
    "lines": {"type": "int", "default": 20},
    "pct_path": {"type": "str", "default": "pct"},
}

# awk (POSIX, run with LC_ALL=C) percent-encoding '%', control characters and DEL; other bytes stay.
AWK_ENC = r"""BEGIN { for (i = 1; i < 256; i++) { ch[i] = sprintf("%c", i); hx[i] = sprintf("%%%02X", i) } }
function enc(s,  i) {
  gsub(/%/, "%25", s)
  for (i = 1; i < 32; i++) if (index(s, ch[i])) gsub(ch[i], hx[i], s)
  if (index(s, ch[127])) gsub(ch[127], "%7F", s)
  return s
}"""

# sh helpers shared by the in-container programs: kv KEY VALUE, lines LOG N, exitfile FILE.
SH_HELPERS = r"""export LC_ALL=C
PATH=${PATH:-/usr/sbin:/usr/bin:/sbin:/bin}:/usr/local/sbin:/usr/local/bin
export PATH
ENC='""" + AWK_ENC + r"""'
kv() {
  case $2 in
    *[!A-Za-z0-9_./:@+=,-]*) printf '%s\n' "$2" | awk -v k="$1" "$ENC"'
{ v = v (NR > 1 ? "%0A" : "") enc($0) } END { print "trainops:" k "=" v }' ;;
    *) printf 'trainops:%s=%s\n' "$1" "$2" ;;
  esac
}
lines() {
  [ "$2" -gt 0 ] 2>/dev/null || return 0
  tail -n "$2" "$1" 2>/dev/null | cut -b 1-""" + str(MAX_LINE_BYTES) + r""" | awk -v k="$3" "$ENC"'
{ print "trainops:" k "=" enc($0) }'
}
# tmux as tmux_session runs it: the server of root's default socket, whatever the environment says
tm() { env -i PATH="$PATH" HOME=/root tmux -u "$@"; }
recorded_log() {
  [ -f "/run/trainops/$1/log_path" ] || return 0
  cat "/run/trainops/$1/log_path"
}
# The exit record of log $1 of session $2: LOG.exit; when it is missing or empty (its file system was full),
# /run/trainops/NAME/exit, the wrapper's copy, if the session's last launch wrote that log.
exit_path() {
  if [ ! -s "$1.exit" ] && [ -n "${2-}" ] && [ -s "/run/trainops/$2/exit" ] && [ "$(recorded_log "$2")" = "$1" ]; then
    printf '%s\n' "/run/trainops/$2/exit"
  else
    printf '%s\n' "$1.exit"
  fi
}
exitfile() {
  [ -f "$1" ] || return 0
  kv exit_file 1
  awk "$ENC"'
{ i = index($0, "="); k = substr($0, 1, i - 1)
  if (i > 1 && k ~ /^[A-Za-z0-9_]+$/) print "trainops:exit." k "=" enc(substr($0, i + 1)) }' "$1" 2>/dev/null
}
"""

# Facts of the tmux sessions; fields separated by \037 (unit separator) in one display-message. Only the last
# field may hold a \037 (a log path can: it is asked for on its own, here only whether it is set).
_INFO_BODY = r"""
F1='#{session_name}\037#{pane_pid}\037#{pane_dead}\037#{pane_dead_status}\037#{session_created}\037'
F2='#{?@trainops_log,1,0}\037#{@trainops_started_at}\037#{@trainops_command}\037#{pane_start_command}'
FIELDS=$(printf "$F1$F2")
tsession() {
  tm display-message -p -t "$1" "$FIELDS" 2>/dev/null | awk -v RS="$(printf '\036')" "$ENC"'
{ sub(/\n$/, ""); n = split($0, f, "\037"); if (n < 9 || f[1] == "") exit 1
  for (i = 10; i <= n; i++) f[9] = f[9] "\037" f[i]
  print "trainops:session=" enc(f[1]); print "trainops:in_tmux=1"
  print "trainops:pane_pid=" enc(f[2]); print "trainops:pane_dead=" enc(f[3])
  print "trainops:pane_dead_status=" enc(f[4]); print "trainops:created=" enc(f[5])
  print "trainops:managed=" (f[6] == "1" ? 1 : 0); print "trainops:started_at=" enc(f[7])
  print "trainops:command=" enc(f[8] == "" ? f[9] : f[8]); found = 1 }
END { exit found ? 0 : 1 }'
}
files() {
  [ -n "$1" ] || return 0
  kv log_path "$1"
  if [ -f "$1" ]; then
    kv log_size "$(wc -c < "$1" | tr -d ' ')"
    lines "$1" "$LINES" line
  fi
  exitfile "$(exit_path "$1" "${2-}")"
}
report_tmux() {
  tsession "$1" || return 1
  log=$(tm display-message -p -t "$1" '#{@trainops_log}' 2>/dev/null)
  name=; [ -s "$log.exit" ] || name=$(tm display-message -p -t "$1" '#{session_name}' 2>/dev/null)
  files "$log" "$name"
}
report_gone() {
  kv session "$1"
  kv in_tmux 0
  kv managed 1
  files "$2" "$1"
}
if ! command -v tmux >/dev/null 2>&1; then
  kv tmux missing
elif ! tm list-sessions >/dev/null 2>&1; then
  kv tmux no_server
else
  kv tmux running
fi
if [ -n "$ONE" ]; then
  if tm has-session -t "=$ONE" 2>/dev/null && report_tmux "=$ONE:"; then :; else
    log=$LOG_OPT
    [ -n "$log" ] || log=$(recorded_log "$ONE")
    report_gone "$ONE" "$log"
  fi
else
  seen=' '
  for id in $(tm list-sessions -F '#{session_id}' 2>/dev/null); do
    report_tmux "$id" && seen="$seen$(tm display-message -p -t "$id" '#{session_name}' 2>/dev/null) "
  done
  for dir in /run/trainops/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    case $seen in *" $name "*) continue ;; esac
    log=$(recorded_log "$name")
    [ -n "$log" ] && report_gone "$name" "$log"
  done
fi
kv done 1
"""


def vmid_errors(vmid: int) -> list[str]:
    """The problem with option ``vmid`` (outside Proxmox VE's VMID range), as a list of none or one."""
    if VMID_MIN <= vmid <= VMID_MAX:
        return []
    return [f"Cannot use option vmid {vmid}: a VMID is an integer from {VMID_MIN} to {VMID_MAX}"]


def check_info_options(params: t.Mapping[str, t.Any]) -> list[str]:
    """Problems with the options of ``tmux_session_info``, each ``Cannot use option X ...: cause``."""
    errors = vmid_errors(params["vmid"]) if params.get("vmid") is not None else []
    name = params.get("session_name")
    if name is not None and not SESSION_NAME_RE.match(name):
        errors.append(f"Cannot use option session_name {name!r}: a session name is 1 to 64 of A-Z a-z 0-9 _ -")
    path = params.get("log_path")
    if path is not None and (not path.startswith("/") or "\n" in path or "\0" in path):
        errors.append(f"Cannot use option log_path {path!r}: it must be an absolute path inside the container, without newlines")
    if path is not None and name is None:
        errors.append("Cannot use option log_path without session_name: it is the log of that one session; set session_name")
    if not 0 <= params["lines"] <= MAX_LINES:
        errors.append(f"Cannot use option lines {params['lines']}: it must be from 0 to {MAX_LINES}")
    return errors


def build_info_program(session_name: str | None, log_path: str | None, lines: int) -> str:
    """The sh program reporting one session (``session_name``) or all sessions of the container."""
    assigns = "ONE={0}\nLOG_OPT={1}\nLINES={2}\n".format(
        shlex.quote(session_name or ""), shlex.quote(log_path or ""), int(lines))
    return "set -u\n" + assigns + SH_HELPERS + _INFO_BODY


def decode_value(value: str) -> str:
    """Percent-decode a VALUE (text read with surrogateescape) into text; bad UTF-8 becomes U+FFFD."""
    raw = unquote_to_bytes(value.encode("utf-8", "surrogateescape"))
    return raw.decode("utf-8", "replace")


def parse_records(stdout: str) -> list[tuple[str, str]]:
    """The ``trainops:KEY=VALUE`` lines of ``stdout`` as (key, decoded value) pairs, in order."""
    records = []
    # "\n" only: str.splitlines would also split at U+0085, U+2028 and U+2029, which VALUEs keep raw
    for line in stdout.split("\n"):
        line = line.rstrip("\r")
        if line.startswith(PREFIX) and "=" in line:
            key, _sep, value = line[len(PREFIX):].partition("=")
            records.append((key, decode_value(value)))
    return records


def group_sessions(records: t.Iterable[tuple[str, str]]) -> tuple[dict[str, t.Any], list[dict[str, t.Any]]]:
    """Split records into global facts and per-session facts (``session`` starts one; ``line`` repeats)."""
    header: dict[str, t.Any] = {}
    sessions: list[dict[str, t.Any]] = []
    current = header
    for key, value in records:
        if key == "session":
            current = {"session": value, "line": []}
            sessions.append(current)
        elif key == "done":
            header[key] = value
        elif key == "line" and current is not header:
            current["line"].append(value)
        else:
            current[key] = value
    return header, sessions


def to_int(value: str | None) -> int | None:
    """An integer fact, or None when missing or not a number."""
    if value is None or not value.strip().lstrip("-").isdigit():
        return None
    return int(value.strip())


def epoch_to_iso(value: str | None) -> str | None:
    """tmux ``session_created`` (seconds since the epoch) as ISO 8601 UTC."""
    seconds = to_int(value)
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def session_state(facts: t.Mapping[str, t.Any]) -> str:
    """running / finished / vanished / absent, as docs/launch-protocol.md defines them."""
    in_tmux = facts.get("in_tmux") == "1"
    if in_tmux and facts.get("pane_dead") != "1":
        return "running"
    if facts.get("exit_file") == "1":
        return "finished"
    if in_tmux and to_int(facts.get("pane_dead_status")) is not None and facts.get("managed") != "1":
        return "finished"
    if in_tmux or "log_size" in facts:
        return "vanished"
    return "absent"


def _exit_status(facts: t.Mapping[str, t.Any], state: str) -> int | None:
    if state != "finished":
        return None
    status = to_int(facts.get("exit.exit_status"))
    return status if status is not None else to_int(facts.get("pane_dead_status"))


def session_entry(facts: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """One element of the module's ``sessions`` result."""
    state = session_state(facts)
    started = facts.get("started_at") or facts.get("exit.started_at") or epoch_to_iso(facts.get("created"))
    return {
        "name": facts["session"],
        "state": state,
        "managed": facts.get("managed") == "1",
        "pane_pid": to_int(facts.get("pane_pid")) if state == "running" else None,
        "command": facts.get("command") or None,
        "started_at": started or None,
        "exit_status": _exit_status(facts, state),
        "ended_at": (facts.get("exit.ended_at") or None) if state == "finished" else None,
        "stopped_by": facts.get("exit.stopped_by") or None,
        "log_path": facts.get("log_path") or None,
        "log_size": to_int(facts.get("log_size")),
        "log_tail": [line.rstrip("\r") for line in facts.get("line", [])],
    }


def sessions_from_output(stdout: str) -> tuple[str, list[dict[str, t.Any]], bool]:
    """(tmux status ``missing``/``no_server``/``running``, session entries, whether the program finished)."""
    header, sessions = group_sessions(parse_records(stdout))
    return header.get("tmux", "unknown"), [session_entry(s) for s in sessions], header.get("done") == "1"
