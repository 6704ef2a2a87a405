# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Wait inside a container until a job's log proves it started (``wait_for_log``).

Shared by the action plugin (controller: options, regex check, chunk loop, messages) and the module
(node: one chunk = one ``pct exec``). ``build_poll_program`` returns one sh program for
``_pct.run_in_container``: with python3 in the container it runs the poll loop in Python (the
patterns are Python regexes); without it, a POSIX sh + ``grep -E`` loop (``engine=sh``). The loop
reads the log incrementally from ``offset``, matches whole lines only, skips the protocol's own
``### trainops.pct_launch:`` lines, and stops at the first verdict or at the end of the chunk:

``started`` (pattern seen, or any output line without a pattern), ``fail_pattern``, ``died`` (the
session ended or is gone, or ``LOG.exit`` appeared), ``pending`` (chunk over; the caller decides
whether that is a timeout). Output: ``trainops:KEY=VALUE`` lines, see docs/launch-protocol.md.
"""

from __future__ import annotations

import json
import re
import shlex
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_report import (
    SESSION_NAME_RE,
    SH_HELPERS,
    parse_records,
    to_int,
    vmid_errors,
)

MODULE_NAME = "trainops.pct_launch.wait_for_log"
CHUNK_SECONDS = 10.0
MAX_SLEEP = 1.0
MAX_TAIL_LINES = 10000
MSG_TAIL_LINES = 5
PCT_MARGIN = 60.0

ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = {
    "vmid": {"type": "int"},
    "session_name": {"type": "str"},
    "log_path": {"type": "str"},
    "pattern": {"type": "str"},
    "fail_pattern": {"type": "str"},
    "timeout": {"type": "float", "default": 600},
    "sleep": {"type": "float", "default": 0.5},
    "tail_lines": {"type": "int", "default": 40},
    "offset": {"type": "int", "default": 0},
    "pct_path": {"type": "str", "default": "pct"},
    # the action plugin's (controller side): the module never sees it
    "fleet_id": {"type": "str"},
}
REQUIRED_ONE_OF = [["session_name", "log_path"]]


def _regex_error(option: str, value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as exc:
        return (f"Cannot use option {option} {value!r}: it is not a valid Python regular expression ({exc}); "
                "fix the expression, for example escape literal characters with a backslash")
    return None


def _range_errors(params: t.Mapping[str, t.Any]) -> list[str]:
    errors = vmid_errors(params["vmid"]) if params.get("vmid") is not None else []
    if not params["timeout"] > 0:
        errors.append(f"Cannot use option timeout {params['timeout']}: it must be more than 0 seconds")
    if not 0 < params["sleep"] <= MAX_SLEEP:
        errors.append(f"Cannot use option sleep {params['sleep']}: the poll interval must be more than 0 and at most {MAX_SLEEP:g} second")
    if not 0 <= params["tail_lines"] <= MAX_TAIL_LINES:
        errors.append(f"Cannot use option tail_lines {params['tail_lines']}: it must be from 0 to {MAX_TAIL_LINES}")
    if params["offset"] < 0:
        errors.append(f"Cannot use option offset {params['offset']}: it must be 0 or more")
    return errors


def check_options(params: t.Mapping[str, t.Any]) -> list[str]:
    """Problems with the options (after type checks), each ``Cannot use option X ...: cause; fix``."""
    errors = _range_errors(params)
    name = params.get("session_name")
    if name is not None and not SESSION_NAME_RE.match(name):
        errors.append(f"Cannot use option session_name {name!r}: a session name is 1 to 64 of A-Z a-z 0-9 _ -")
    path = params.get("log_path")
    if path is not None and (not path.startswith("/") or "\n" in path or "\0" in path):
        errors.append(f"Cannot use option log_path {path!r}: it must be an absolute path inside the container, without newlines")
    for option in ("pattern", "fail_pattern"):
        if params.get(option) is not None:
            error = _regex_error(option, params[option])
            if error:
                errors.append(error)
    return errors


def ere_from_python(pattern: str) -> str:
    """A best-effort POSIX ERE for ``grep -E`` from a Python regex (the sh fallback's patterns)."""
    return pattern.replace(r"\d", "[0-9]").replace(r"\D", "[^0-9]")


# The Python poll loop (runs in the container's python3, 3.5+: no f-strings, no annotations).
_PY_POLL = r'''
import json, os, re, shlex, subprocess, sys, time
P = json.loads(bytes.fromhex("__PARAMS_HEX__").decode("utf-8"))
PROTO = b"### trainops.pct_launch: "
PATH = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin") + ":/usr/local/sbin:/usr/local/bin"
# tmux as tmux_session runs it: the server of root's default socket, whatever the environment says
TMUX_ENV = {"PATH": PATH, "HOME": "/root"}
READ_MAX = 4 << 20
MAX_LINE = 1 << 20
SHOW = 2000


def emit(key, value):
    data = value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogateescape")
    out = bytearray()
    for byte in data:
        if byte == 37 or byte < 32 or byte == 127:
            out += b"%%%02X" % byte
        else:
            out.append(byte)
    sys.stdout.buffer.write(b"trainops:" + key.encode("ascii") + b"=" + bytes(out) + b"\n")


def show(line):
    return line.rstrip(b"\r\n")[:SHOW * 2].decode("utf-8", "replace")[:SHOW]


def tmux(*args):
    try:
        proc = subprocess.Popen(("tmux", "-u") + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=TMUX_ENV)
    except OSError:
        return None
    out = proc.communicate()[0].decode("utf-8", "surrogateescape").rstrip("\n")
    return out if proc.returncode == 0 else ""


def find_pane(session):
    out = tmux("display-message", "-p", "-t", "=" + session + ":", "#{pane_pid}\037#{pane_dead}\037#{@trainops_log}")
    if out is None:
        return "tmux_missing", None, ""
    fields = out.split("\037", 2)  # the log path, last, may hold a \037
    if len(fields) != 3 or not fields[0].isdigit():
        return "absent", None, ""
    if fields[1] == "1":
        return "ended", None, fields[2]
    return "alive", int(fields[0]), fields[2]


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:][:1] not in (b"Z", b"X")


def read_exit(path):
    try:
        with open(path, "rb") as handle:
            data = handle.read(65536)
    except OSError:
        return None
    return parse_exit(data)


def recorded_log_path(session):
    try:
        with open("/run/trainops/%s/log_path" % session, "rb") as handle:
            return handle.read(65536).decode("utf-8", "surrogateescape")
    except OSError:
        return None


def read_exit_record(log, session):
    """LOG.exit; when it is missing or empty (a full file system), /run/trainops/NAME/exit of the launch that wrote LOG."""
    info = read_exit(log + ".exit")
    if info or not session or recorded_log_path(session) != log:
        return info
    return read_exit("/run/trainops/%s/exit" % session) or info


def mark_proven(session):
    """Record on the session that its start is proven (tmux_session reports it; launch.yml then skips the proof)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        proc = subprocess.Popen(("tmux", "set-option", "-t", "=" + session + ":", "@trainops_proven", stamp),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=TMUX_ENV)
    except OSError:
        return False
    return proc.wait() == 0


def parse_exit(data):
    info = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and re.match(r"^[A-Za-z0-9_]+$", key):
            info[key] = value
    return info


def read_new(path, offset):
    try:
        handle = open(path, "rb")
    except OSError:
        return [], offset, None, False
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size < offset:
            offset = 0
        handle.seek(offset)
        buf = handle.read(min(size - offset, READ_MAX))
    more = offset + len(buf) < size
    cut = buf.rfind(b"\n")
    if cut < 0 and len(buf) < MAX_LINE:
        return [], offset, size, more
    complete = buf[:cut + 1] if cut >= 0 else buf
    lines = complete.split(b"\n")
    if complete.endswith(b"\n"):
        lines.pop()
    return lines, offset + len(complete), size, more


def compile_opt(key):
    if P.get(key) is None:
        return None
    try:
        return re.compile(P[key])
    except re.error as exc:
        emit("error", "pattern_invalid")
        emit("message", "option %s %r is not a valid regular expression for the container's python3: %s" % (key, P[key], exc))
        sys.exit(3)


def scan(lines, pat, fail):
    for line in lines:
        if line.startswith(PROTO):
            continue
        text = line.decode("utf-8", "replace").rstrip("\r")
        if fail is not None and fail.search(text):
            return "fail_pattern", line
        if pat is None or pat.search(text):
            return "started", line
    return None, None


def tail(path, count):
    if count <= 0:
        return []
    try:
        handle = open(path, "rb")
    except OSError:
        return []
    with handle:
        pos = handle.seek(0, 2)
        data = b""
        while pos > 0 and data.count(b"\n") <= count and len(data) < 4 * MAX_LINE:
            step = min(65536, pos)
            pos -= step
            handle.seek(pos)
            data = handle.read(step) + data
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if pos > 0 and lines:
        lines.pop(0)
    return lines[-count:]


def proc_table():
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as handle:
                stat = handle.read()
            with open("/proc/%s/cmdline" % name, "rb") as handle:
                cmd = handle.read(4096)
        except OSError:
            continue
        close = stat.rindex(b")")
        fields = stat[close + 2:].split()
        args = cmd.replace(b"\0", b" ").strip() or b"[" + stat[stat.index(b"(") + 1:close] + b"]"
        cpu = (int(fields[11]) + int(fields[12])) // os.sysconf("SC_CLK_TCK")
        rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
        table[int(name)] = (int(fields[1]), fields[0].decode(), cpu, rss, args)
    return table


def tree(root):
    table = proc_table()
    out = ["    PID    PPID STAT     TIME   RSS_KB COMMAND"]
    todo = [(root, 0)]
    while todo:
        pid, depth = todo.pop()
        if pid not in table:
            continue
        ppid, state, cpu, rss, args = table[pid]
        out.append("%7d %7d %-4s %3d:%02d %8d %s%s" % (pid, ppid, state, cpu // 60, cpu % 60, rss, "  " * depth, show(args)))
        todo.extend((child, depth + 1) for child in sorted(table, reverse=True) if table[child][0] == pid)
    return out if len(out) > 1 else []


def report(verdict, line, log, offset, size, session, pid, exit_info, started):
    emit("verdict", verdict)
    emit("offset", offset)
    emit("log_path", log)
    emit("log_exists", 0 if size is None else 1)
    if size is not None:
        emit("log_size", size)
    emit("session", session)
    if pid is not None:
        emit("pane_pid", pid)
    if line is not None:
        emit("matched_line", show(line))
    for key, value in sorted((exit_info or {}).items()):
        emit("exit." + key, value)
    for text in tail(log, P["tail_lines"]):
        emit("tail", show(text))
    if verdict == "pending" and pid is not None:
        for text in tree(pid):
            emit("ps", text)
    emit("chunk_elapsed", "%.3f" % (time.monotonic() - started))


def recorded_log(session):
    try:
        with open("/run/trainops/%s/log_path" % session, "rb") as handle:
            return handle.read(65536).decode("utf-8", "surrogateescape")
    except OSError:
        pass
    try:
        with open("/run/trainops/%s/run.sh" % session, "rb") as handle:
            text = handle.read(65536).decode("utf-8", "surrogateescape")
    except OSError:
        return ""
    for line in text.split("\n"):
        if line.startswith("w_log="):
            try:
                return (shlex.split(line[len("w_log="):]) or [""])[0]
            except ValueError:
                return ""
    return ""


def start(session, log):
    emit("engine", "python3")
    state, pid, opt_log = "none", None, ""
    if session:
        state, pid, opt_log = find_pane(session)
        if not (log or opt_log):
            opt_log = recorded_log(session)
    return state, pid, log or opt_log


def main():
    started = time.monotonic()
    pat, fail = compile_opt("pattern"), compile_opt("fail_pattern")
    session, offset = P["session_name"], P["offset"]
    state, pid, log = start(session, P["log_path"])
    if not log:
        report("died", None, "", offset, None, state, None, None, started)
        return
    if state == "tmux_missing":  # no tmux session can have written this log: its lines prove nothing
        size = os.path.getsize(log) if os.path.isfile(log) else None
        report("died", None, log, offset, size, state, None, read_exit(log + ".exit"), started)
        return
    deadline = started + P["duration"]
    while True:
        exit_info = read_exit_record(log, session)
        if state == "alive" and not pid_alive(pid):
            state = "ended"
        ended = exit_info is not None or state not in ("alive", "none")
        lines, offset, size, more = read_new(log, offset)
        verdict, line = scan(lines, pat, fail)
        if verdict is None and ended and not more:
            verdict, exit_info = "died", exit_info or read_exit_record(log, session)
        if verdict is None and time.monotonic() >= deadline:
            verdict = "pending"
        if verdict is not None:
            break
        if not more:
            time.sleep(max(0.0, min(P["sleep"], deadline - time.monotonic())))
    if verdict == "started" and state == "alive" and session and P["record_proof"]:
        emit("proof_recorded", 1 if mark_proven(session) else 0)
    report(verdict, line, log, offset, size, state, pid if state == "alive" else None, exit_info, started)


main()
'''

# The sh + grep -E poll loop, for containers without python3 (whole lines; no line longer than the log).
_SH_POLL = r"""
kv engine sh
alive() { [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null && ! ps -o stat= -p "$PID" 2>/dev/null | grep -q '^Z'; }
state=none; PID=
if [ -n "$SESSION" ]; then
  state=absent
  if ! command -v tmux >/dev/null 2>&1; then state=tmux_missing
  else
    out=$(tm display-message -p -t "=$SESSION:" '#{pane_pid} #{pane_dead}' 2>/dev/null)
    case $out in
      *" 1") state=ended ;;
      [0-9]*" 0") state=alive; PID=${out%% *} ;;
    esac
    [ -n "$LOG" ] || LOG=$(tm display-message -p -t "=$SESSION:" '#{@trainops_log}' 2>/dev/null)
  fi
  [ -n "$LOG" ] || LOG=$(recorded_log "$SESSION")
fi
newlines() { tail -c +"$((OFF + 1))" "$LOG" 2>/dev/null | head -c "$1"; }
first() { grep -v '^### trainops\.pct_launch: ' | grep -n -m 1 -E -e "$1" | cut -d: -f1; }
scan() {
  n=$(newlines "$1" | wc -l | tr -d ' ')
  [ "$n" -gt 0 ] || return 1
  a=; b=
  [ -n "$FAIL" ] && a=$(newlines "$1" | head -n "$n" | first "$FAIL")
  b=$(newlines "$1" | head -n "$n" | first "$PATTERN")
  bytes=$(newlines "$1" | head -n "$n" | wc -c | tr -d ' ')
  if [ -n "$a" ] && { [ -z "$b" ] || [ "$a" -le "$b" ]; }; then verdict=fail_pattern; hit=$a
  elif [ -n "$b" ]; then verdict=started; hit=$b
  else OFF=$((OFF + bytes)); return 1; fi
  line=$(newlines "$1" | head -n "$n" | grep -v '^### trainops\.pct_launch: ' | sed -n "${hit}p" | cut -b 1-2000)
  OFF=$((OFF + bytes))
}
verdict=; line=; size=; end=$(( $(date +%s) + DURATION ))
if [ "$state" = tmux_missing ]; then  # no tmux session can have written this log: its lines prove nothing
  verdict=died
  [ -f "$LOG" ] && size=$(wc -c < "$LOG" | tr -d ' ')
fi
while [ -z "$verdict" ] && [ -n "$LOG" ]; do
  ended=0
  [ -f "$(exit_path "$LOG" "$SESSION")" ] && ended=1
  if [ "$state" = alive ] && ! alive; then state=ended; fi
  case $state in alive | none) ;; *) ended=1 ;; esac
  size=
  if [ -f "$LOG" ]; then
    size=$(wc -c < "$LOG" | tr -d ' ')
    [ "$size" -lt "$OFF" ] && OFF=0
    [ "$size" -gt "$OFF" ] && scan "$((size - OFF))" && break
  fi
  [ "$ended" = 1 ] && { verdict=died; break; }
  [ "$(date +%s)" -ge "$end" ] && { verdict=pending; break; }
  sleep "$SLEEP"
done
[ -n "$verdict" ] || verdict=died
if [ "$verdict" = started ] && [ "$state" = alive ] && [ "$RECORD" = 1 ]; then
  if tm set-option -t "=$SESSION:" @trainops_proven "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >/dev/null 2>&1; then kv proof_recorded 1
  else kv proof_recorded 0; fi
fi
kv verdict "$verdict"
kv offset "$OFF"
kv log_path "$LOG"
if [ -n "$size" ]; then kv log_exists 1; kv log_size "$size"; else kv log_exists 0; fi
kv session "$state"
[ "$state" = alive ] && kv pane_pid "$PID"
[ -n "$line" ] && kv matched_line "$line"
[ -n "$LOG" ] && awk "$ENC"'
{ i = index($0, "="); k = substr($0, 1, i - 1)
  if (i > 1 && k ~ /^[A-Za-z0-9_]+$/) print "trainops:exit." k "=" enc(substr($0, i + 1)) }' "$(exit_path "$LOG" "$SESSION")" 2>/dev/null
[ -n "$LOG" ] && lines "$LOG" "$TAIL" tail
if [ "$verdict" = pending ] && [ "$state" = alive ]; then
  ps -e -o pid= -o ppid= -o stat= -o time= -o args= 2>/dev/null | awk -v root="$PID" "$ENC"'
{ pid[NR] = $1; ppid[NR] = $2; line[NR] = $0 }
END { keep[root] = 1; for (pass = 0; pass < 20; pass++) for (i = 1; i <= NR; i++) if (keep[ppid[i]]) keep[pid[i]] = 1
  print "trainops:ps=" enc("PID PPID STAT TIME COMMAND")
  for (i = 1; i <= NR; i++) if (keep[pid[i]]) print "trainops:ps=" enc(substr(line[i], 1, 2000)) }'
fi
"""

_DISPATCH = """if command -v python3 >/dev/null 2>&1; then
  exec python3 - <<'TRAINOPS_POLL_PY'
{python}
TRAINOPS_POLL_PY
fi
"""


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
    }


def _sh_assignments(poll: t.Mapping[str, t.Any]) -> str:
    pattern = poll["pattern"]
    values = {
        "SESSION": poll["session_name"] or "",
        "LOG": poll["log_path"] or "",
        "PATTERN": "" if pattern is None else ere_from_python(pattern),
        "FAIL": "" if poll["fail_pattern"] is None else ere_from_python(poll["fail_pattern"]),
        "DURATION": str(max(1, int(poll["duration"] + 0.999))),
        "SLEEP": f"{poll['sleep']:g}",
        "TAIL": str(poll["tail_lines"]),
        "OFF": str(poll["offset"]),
        "RECORD": "1" if poll["record_proof"] else "0",
    }
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())


def build_poll_program(params: t.Mapping[str, t.Any], duration: float, offset: int) -> str:
    """The sh program for one chunk of waiting: python3 loop when available, else sh + grep -E."""
    poll = poll_parameters(params, duration, offset)
    params_hex = json.dumps(poll, sort_keys=True).encode("utf-8").hex()
    python = _PY_POLL.strip("\n").replace("__PARAMS_HEX__", params_hex)
    dispatch = _DISPATCH.format(python=python)
    return "set -u\n" + dispatch + _sh_assignments(poll) + SH_HELPERS + _SH_POLL


def parse_poll_output(stdout: str) -> dict[str, t.Any]:
    """The facts printed by the poll program; ``tail`` and ``ps`` are lists, ``exit`` a dict."""
    records = parse_records(stdout)
    facts: dict[str, t.Any] = {"tail": [], "ps": [], "exit": {}}
    for key, value in records:
        if key in ("tail", "ps"):
            facts[key].append(value)
        elif key.startswith("exit."):
            facts["exit"][key[len("exit."):]] = value
        else:
            facts[key] = value
    return facts


def _session_state(facts: t.Mapping[str, t.Any]) -> str:
    """running / finished / vanished / absent / unknown (no session_name) for the result."""
    session = facts.get("session", "none")
    if session == "alive" and facts.get("verdict") != "died":
        return "running"
    if facts.get("exit"):
        return "finished"
    if session == "none":
        return "unknown"
    return "vanished" if facts.get("log_exists") == "1" else "absent"


def result_from_facts(facts: t.Mapping[str, t.Any], elapsed: float, chunks: int = 1) -> dict[str, t.Any]:
    """The task result (without ``msg``) from the facts of the last chunk."""
    verdict = facts.get("verdict", "died")
    exit_info = facts.get("exit", {})
    return {
        "verdict": "timeout" if verdict == "pending" else verdict,
        "elapsed": round(elapsed, 3),
        "matched_line": facts.get("matched_line"),
        "log_tail": [line.rstrip("\r") for line in facts.get("tail", [])],
        "log_path": facts.get("log_path") or None,
        "log_exists": facts.get("log_exists") == "1",
        "log_size": to_int(facts.get("log_size")),
        "offset": to_int(facts.get("offset")) or 0,
        "session_state": _session_state(facts),
        "session_alive": facts.get("session") == "alive" and verdict != "died",
        "tmux_missing": facts.get("session") == "tmux_missing",
        "pane_pid": to_int(facts.get("pane_pid")),
        "exit_status": to_int(exit_info.get("exit_status")),
        "ended_at": exit_info.get("ended_at"),
        "stopped_by": exit_info.get("stopped_by"),
        "process_tree": list(facts.get("ps", [])),
        "engine": facts.get("engine"),
        "pct_calls": chunks,
        "proof_recorded": facts.get("proof_recorded") == "1",
    }


def where(params: t.Mapping[str, t.Any]) -> str:
    """`` in container VMID`` (``vmid``, or the host's ``pct_vmid`` the action plugin adds), `` on HOST`` or nothing."""
    vmid = params["vmid"] if params.get("vmid") is not None else params.get("pct_vmid")
    if vmid is not None:
        return f" in container {vmid}"
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
        return ("the log path is unknown (no @trainops_log, no /run/trainops/NAME/run.sh, and log_path is not set); "
                "set log_path so that LOG.exit can tell how the job ended")
    if not result["log_exists"]:
        return f"log {result['log_path']} does not exist"
    return f"log {result['log_path']} exists ({result['log_size']} bytes) and has no such line"


def _died_message(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any]) -> str:
    what, when = subject(params), f"after {result['elapsed']:.1f} s"
    state = result["session_state"]
    if result["tmux_missing"] and state != "finished":
        return f"Cannot watch {what}: tmux is not installed in the container; install it (role trainops.pct_launch.tmux) and launch the job"
    if state == "finished":
        how = f"the job ended with exit status {result['exit_status']}" if result["exit_status"] is not None else "the job ended"
        if result["stopped_by"]:
            how += f" (stopped by {result['stopped_by']})"
        return f"Job did not start in {what}: {how} {when}, before {_expected(params)}{_tail(result)}; fix the job and launch it again"
    if state == "vanished":
        return (f"Job did not start in {what}: the session is gone without an exit status {when} (tmux killed, SIGKILL, "
                f"or the container restarted), before {_expected(params)}{_tail(result)}; launch the job again")
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


def message(result: t.Mapping[str, t.Any], params: t.Mapping[str, t.Any]) -> str:
    """The task's ``msg`` for a result: ``<what failed> <object>: <cause>; <fix>`` (or what succeeded)."""
    verdict = result["verdict"]
    if verdict == "started":
        what = f"pattern {params['pattern']!r} matched" if params.get("pattern") is not None else "the log has output"
        return f"Job started in {subject(params)}: {what} after {result['elapsed']:.1f} s: {result['matched_line']!r}"
    if verdict == "fail_pattern":
        return (f"Job failed in {subject(params)}: a log line matches fail_pattern {params['fail_pattern']!r} "
                f"after {result['elapsed']:.1f} s: {result['matched_line']!r}{_tail(result)}; fix the job and launch it again")
    if verdict == "timeout":
        return _timeout_message(result, params)
    return _died_message(result, params)


def stopped_message(params: t.Mapping[str, t.Any]) -> str:
    """The message when the container stopped while the poll program ran in it."""
    return (f"Cannot wait for {subject(params)}: the container is not running any more (it stopped during the wait, "
            f"and the job with it); start it with 'pct start {params['vmid']}' and launch the job again")


def program_failure(rc: int, stdout: str, stderr: str, params: t.Mapping[str, t.Any]) -> str | None:
    """A message when the poll program itself failed (no verdict), else None."""
    facts = parse_poll_output(stdout)
    if facts.get("verdict") and rc == 0:
        return None
    cause = facts.get("message") or " | ".join(line for line in stderr.splitlines()[-3:] if line.strip()) or "no error output"
    return f"Cannot wait for {subject(params)}: the poll program in the container failed (exit status {rc}): {cause}"
