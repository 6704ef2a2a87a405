# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The POSIX sh code of a launch, as constants (see docs/launch-protocol.md).

Nothing here is formatted with values: ``_tmux_launch`` puts every value in front of this code as
``name=<shlex.quote(value)>`` assignments, and the code only expands those variables, quoted.

``LAUNCH`` defines the functions of the program that runs in the container (``t_main`` runs it).
``WRAPPER`` is the body of ``/run/trainops/NAME/run.sh``, which tmux runs in the session's pane.
"""

from __future__ import annotations

# Exit status per error code (docs/launch-protocol.md, "Output of the in-container programs").
ERROR_STATUS = {
    "tmux_missing": 20,
    "chdir_missing": 21,
    "venv_missing": 22,
    "script_missing": 23,
    "log_dir_missing": 24,
    "log_dir_not_writable": 25,
    "log_exists": 26,
    "user_missing": 27,
    "lock_timeout": 28,
    "spec_conflict": 29,
    "start_failed": 30,
    "stop_failed": 31,
}

CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_COMMON = r"""
set -u
umask 022
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
t_emit() { printf 'trainops:%s=%s\n' "$1" "$2"; }
t_emit_enc() {
  printf '%s\n' "$2" | LC_ALL=C awk -v k="$1" 'BEGIN { for (i = 1; i < 32; i++) e[sprintf("%c", i)] = sprintf("%%%02X", i)
    e["%"] = "%25"; e[sprintf("%c", 127)] = "%7F"; printf "trainops:%s=", k }
  { if (NR > 1) printf "%%0A"; n = length($0); for (i = 1; i <= n; i++) { c = substr($0, i, 1); printf "%s", ((c in e) ? e[c] : c) } }
  END { printf "\n" }'
}
t_fail() { t_emit error "$1"; t_emit_enc message "$3"; exit "$2"; }
t_now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
t_nap() { sleep 0.1 2>/dev/null || sleep 1; }
t_tmux() { env -i PATH="$PATH" HOME=/root tmux "$@"; }
# The exit record of log $1: LOG.exit; when that is missing or empty (its file system was full), the copy the
# wrapper keeps in $t_dir/exit, if the session's last launch wrote that log. Prints nothing when there is none.
t_exit_record() {
  if [ -s "$1.exit" ]; then printf '%s\n' "$1.exit"
  elif [ -s "$t_dir/exit" ] && [ -f "$t_dir/log_path" ] && [ "$(cat "$t_dir/log_path")" = "$1" ]; then printf '%s\n' "$t_dir/exit"
  elif [ -e "$1.exit" ]; then printf '%s\n' "$1.exit"
  fi
}
t_exit_status() { sed -n 's/^exit_status=//p' "$1" | head -n 1; }
"""

_PREFLIGHT = r"""
t_preflight_user() {
  t_home=/root
  [ -n "$t_user" ] || return 0
  id -u "$t_user" >/dev/null 2>&1 || t_fail user_missing 27 "user $t_user does not exist in the container"
  t_uid=$(id -u "$t_user"); t_gid=$(id -g "$t_user")
  t_home=$(awk -F: -v u="$t_user" '$1 == u { print $6; exit }' /etc/passwd 2>/dev/null)
  if [ -z "$t_home" ] && command -v getent >/dev/null 2>&1; then
    t_home=$(getent passwd "$t_user" | awk -F: 'NR == 1 { print $6 }')
  fi
}
t_preflight_paths() {
  t_cwd=${t_chdir:-$t_home}
  if [ -n "$t_chdir" ] && [ ! -d "$t_chdir" ]; then t_fail chdir_missing 21 "directory $t_chdir does not exist"; fi
  if [ -n "$t_venv" ] && [ ! -f "$t_venv/bin/activate" ] && [ ! -x "$t_venv/bin/python" ]; then
    t_fail venv_missing 22 "no virtual environment at $t_venv (neither bin/activate nor bin/python)"
  fi
  if [ -n "$t_script" ]; then
    if ! (cd -- "${t_cwd:-/}" 2>/dev/null && [ -f "$t_script" ]); then
      t_fail script_missing 23 "script $t_script does not exist (relative to ${t_cwd:-/})"
    fi
    if [ "$t_script_exec" = 1 ] && ! (cd -- "${t_cwd:-/}" && [ -x "$t_script" ]); then
      t_fix="make it executable (chmod +x $t_script) or run it through its interpreter (argv: [sh, $t_script])"
      t_fail script_missing 23 "script $t_script is not executable: $t_fix"
    fi
  fi
  [ -d "$t_logdir" ] || t_fail log_dir_missing 24 "log directory $t_logdir does not exist"
  [ -w "$t_logdir" ] || t_fail log_dir_not_writable 25 "log directory $t_logdir is not writable"
}
t_preflight() {
  if ! command -v tmux >/dev/null 2>&1; then
    [ "$t_action" = stop ] && { t_tmux_missing=1; return 0; }
    t_fail tmux_missing 20 "tmux is not installed"
  fi
  t_tmux_missing=0
  t_v=$(t_tmux -V 2>/dev/null)
  t_emit_enc tmux_version "${t_v#tmux }"
  [ "$t_action" = stop ] && return 0
  t_preflight_user
  t_preflight_paths
}
"""

_LOCK = r"""
t_unlock() { rm -rf "$t_dir/lock"; }
t_lock() {
  (umask 077; mkdir -p "$t_dir") || t_fail start_failed 30 "cannot create $t_dir"
  t_ticks=0; t_nopid=0
  while ! mkdir "$t_dir/lock" 2>/dev/null; do
    t_holder=$(cat "$t_dir/lock/pid" 2>/dev/null) || t_holder=
    if [ -n "$t_holder" ] && ! kill -0 "$t_holder" 2>/dev/null; then rm -rf "$t_dir/lock"; continue; fi
    if [ -z "$t_holder" ]; then t_nopid=$((t_nopid + 1)); else t_nopid=0; fi
    if [ "$t_nopid" -ge 50 ]; then rm -rf "$t_dir/lock"; t_nopid=0; continue; fi
    [ "$t_ticks" -ge "$t_lock_ticks" ] && t_fail lock_timeout 28 "another launch of session $t_name (pid ${t_holder:-unknown}) holds $t_dir/lock"
    t_ticks=$((t_ticks + 1)); t_nap
  done
  trap 't_unlock' EXIT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  trap 'exit 130' INT
  echo "$$" > "$t_dir/lock/pid"
}
"""

_PROBE = r"""
t_probe() {
  t_running=0; t_dead_session=0; t_pane_pid=; t_rspec=; t_rstarted=; t_rlog=; t_proven=0
  if [ "$t_tmux_missing" = 0 ] && t_tmux has-session -t "=$t_name" 2>/dev/null; then
    t_f='#{pane_dead}:#{pane_pid}:#{@trainops_spec}:#{?@trainops_proven,1,0}:#{@trainops_started_at}'
    t_i=$(t_tmux display-message -p -t "=$t_name:" "$t_f" 2>/dev/null) || t_i=
    t_dead=${t_i%%:*}; t_i=${t_i#*:}; t_pane_pid=${t_i%%:*}; t_i=${t_i#*:}; t_rspec=${t_i%%:*}; t_i=${t_i#*:}
    t_proven=${t_i%%:*}; t_rstarted=${t_i#*:}
    t_rlog=$(t_tmux -u show-options -v -t "=$t_name:" @trainops_log 2>/dev/null) || t_rlog=
    # Byte-exact from the file this launch wrote (tmux prints "_" for non-ASCII and control bytes without -u).
    if [ -n "$t_rlog" ] && [ -f "$t_dir/log_path" ]; then t_rlog=$(cat "$t_dir/log_path"); fi
    if [ "$t_dead" = 1 ]; then t_dead_session=1; else t_running=1; fi
  fi
  # Gone from tmux: the log the last launch of this name recorded (a stop without log_path still finds
  # the finished job's exit status, as tmux_session_info does).
  if [ -z "$t_rlog" ] && [ -z "$t_log" ] && [ -f "$t_dir/log_path" ]; then t_rlog=$(cat "$t_dir/log_path"); fi
  t_l=${t_log:-$t_rlog}
  t_before=absent
  if [ "$t_running" = 1 ]; then t_before=running
  elif [ -n "$t_l" ] && [ -n "$(t_exit_record "$t_l")" ]; then t_before=finished
  elif [ -n "$t_l" ] && [ -e "$t_l" ]; then t_before=vanished
  fi
  if [ "$t_running" = 1 ] && [ -f "$t_dir/spec" ]; then t_emit_enc running_summary "$(cat "$t_dir/spec")"; fi
  t_emit_enc before_log "$t_rlog"
  t_emit before_state "$t_before"
  t_emit before_pane_pid "$t_pane_pid"
  t_emit before_started_at "$t_rstarted"
  [ "$t_running" = 1 ] && t_emit before_proven "$t_proven"
}
t_same_spec() { [ "$t_rspec" = "$t_spec" ]; }
t_conflict() {
  t_emit running_spec "$t_rspec"
  t_fail spec_conflict 29 "session $t_name is running with a different spec"
}
"""

_STOP = r"""
# kill -SIG -PGID: the one form that dash, busybox sh and bash all accept ("--" is not portable).
t_group_alive() { [ -n "$t_pgid" ] && kill -0 "-$t_pgid" 2>/dev/null; }
t_wait_group() {
  t_n=0
  while t_group_alive && [ "$t_n" -lt "$1" ]; do t_nap; t_n=$((t_n + 1)); done
  ! t_group_alive
}
t_wait_session_end() {
  t_n=0
  while t_tmux has-session -t "=$t_name" 2>/dev/null && [ "$t_n" -lt "$1" ]; do t_nap; t_n=$((t_n + 1)); done
}
t_write_exit_killed() {
  t_x=${t_rlog:-$t_log}
  [ -n "$t_x" ] && [ -z "$(t_exit_record "$t_x")" ] || return 0
  t_rec=$(printf 'session_name=%s\nexit_status=137\nstarted_at=%s\nended_at=%s\nstopped_by=trainops' "$t_name" "$t_rstarted" "$(t_now)")
  (umask 077; printf '%s\n' "$t_rec" > "$t_dir/exit.tmp.$$" && mv -f "$t_dir/exit.tmp.$$" "$t_dir/exit") 2>/dev/null
  { printf '%s\n' "$t_rec" > "$t_x.exit.tmp.$$" && [ "$(cat "$t_x.exit.tmp.$$")" = "$t_rec" ] &&
    mv -f "$t_x.exit.tmp.$$" "$t_x.exit"; } 2>/dev/null || rm -f "$t_x.exit.tmp.$$"
}
t_stop() {
  t_pgid=$(cat "$t_dir/pgid" 2>/dev/null) || t_pgid=
  printf '%s\n' "$t_signal" > "$t_dir/stop_requested"
  t_killed=0
  if [ -n "$t_pgid" ]; then
    kill "-$t_signal" "-$t_pgid" 2>/dev/null || kill "-$t_signal" "$t_pgid" 2>/dev/null
    if ! t_wait_group "$t_stop_ticks"; then
      kill -KILL "-$t_pgid" 2>/dev/null || kill -KILL "$t_pgid" 2>/dev/null
      t_killed=1
      t_wait_group 50 || t_fail stop_failed 31 "process group $t_pgid survived SIGKILL"
    fi
  fi
  t_wait_session_end 50
  if t_tmux has-session -t "=$t_name" 2>/dev/null; then
    t_tmux kill-session -t "=$t_name" 2>/dev/null
    t_write_exit_killed
  fi
  t_emit killed "$t_killed"
  t_x=${t_rlog:-$t_log}
  t_xr=; [ -n "$t_x" ] && t_xr=$(t_exit_record "$t_x")
  [ -n "$t_xr" ] && [ -f "$t_xr" ] && t_emit exit_status "$(t_exit_status "$t_xr")"
  t_emit_enc stopped_log "$t_x"
}
"""

_START = r"""
# Before a rotation: the previous run's exit record that only /run kept (its log's file system was full) goes to
# LOG.exit, so that it moves to LOG.1.exit with its log (the next launch removes $t_dir/exit); whole or not at all.
t_keep_exit_record() {
  [ "$(t_exit_record "$t_log")" = "$t_dir/exit" ] || return 0
  t_rec=$(cat "$t_dir/exit")
  { printf '%s\n' "$t_rec" > "$t_log.exit.tmp.$$" && [ "$(cat "$t_log.exit.tmp.$$")" = "$t_rec" ] &&
    mv -f "$t_log.exit.tmp.$$" "$t_log.exit"; } 2>/dev/null || rm -f "$t_log.exit.tmp.$$"
}
t_rotate() {
  t_rotated=
  t_keep_exit_record
  [ -e "$t_log" ] || [ -e "$t_log.exit" ] || return 0
  t_k=$t_keep
  rm -f -- "$t_log.$t_k" "$t_log.$t_k.exit"
  while [ "$t_k" -gt 1 ]; do
    t_j=$((t_k - 1))
    if [ -e "$t_log.$t_j" ]; then mv -f -- "$t_log.$t_j" "$t_log.$t_k"; fi
    if [ -e "$t_log.$t_j.exit" ]; then mv -f -- "$t_log.$t_j.exit" "$t_log.$t_k.exit"; fi
    t_k=$t_j
  done
  if [ -e "$t_log" ]; then mv -f -- "$t_log" "$t_log.1" && t_rotated=$t_log.1; fi
  if [ -e "$t_log.exit" ]; then mv -f -- "$t_log.exit" "$t_log.1.exit"; fi
}
t_prepare_log() {
  t_rotated=
  case $t_mode in
    rotate) t_rotate || t_fail start_failed 30 "cannot rotate $t_log" ;;
    append) rm -f -- "$t_log.exit" ;;
    fail_if_exists) rm -f -- "$t_log.exit" ;;
  esac
  t_host=$(cat /proc/sys/kernel/hostname 2>/dev/null) || t_host=
  t_header=$(printf '### trainops.pct_launch: session=%s started_at=%s host=%s command=%s' "$t_name" "$t_started" "$t_host" "$t_display")
  t_new=0; [ -e "$t_log" ] || t_new=1
  if [ "$t_mode" = fail_if_exists ]; then
    (set -C; printf '%s\n' "$t_header" > "$t_log") 2>/dev/null || {
      [ "$t_new" = 1 ] || t_fail log_exists 26 "log file $t_log already exists"; t_header_failed; }
  else
    printf '%s\n' "$t_header" >> "$t_log" 2>/dev/null || t_header_failed
  fi
  if [ -n "$t_user" ]; then chown "$t_uid:$t_gid" "$t_log" 2>/dev/null || :; fi
}
# The header could not be written: remove the empty log this launch created (so that another attempt does not
# rotate the kept log away), and say why, a full file system in its own words.
t_header_failed() {
  if [ "$t_new" = 1 ] && [ -f "$t_log" ] && [ ! -s "$t_log" ]; then rm -f -- "$t_log"; fi
  t_kept=; [ -n "$t_rotated" ] && t_kept=" (the earlier log is kept as $t_rotated)"
  t_avail=$(df -Pk -- "$t_logdir" 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [ "$t_avail" = 0 ]; then
    t_fix="free space there or choose another log_path"
    t_fail start_failed 30 "cannot write the log header to $t_log: No space left on device, the file system of $t_logdir is full$t_kept; $t_fix"
  fi
  t_fail start_failed 30 "cannot write the log header to $t_log$t_kept"
}
t_write_files() {
  rm -f "$t_dir/pgid" "$t_dir/stop_requested" "$t_dir/env" "$t_dir/exit"
  (umask 077
   t_wrapper > "$t_dir/run.sh.tmp" && mv -f "$t_dir/run.sh.tmp" "$t_dir/run.sh" &&
   t_summary > "$t_dir/spec" &&
   printf '%s' "$t_log" > "$t_dir/log_path" &&
   if [ "$t_has_env" = 1 ]; then t_envfile > "$t_dir/env"; fi) || t_fail start_failed 30 "cannot write files in $t_dir"
}
t_new_session() {
  t_err=$(t_tmux new-session -d -s "$t_name" -x 200 -y 50 "sh $t_dir/run.sh $t_started" 2>&1) ||
    { rm -f "$t_dir/env"; t_fail start_failed 30 "tmux new-session failed: $t_err"; }
  t_tmux set-option -t "=$t_name:" @trainops_spec "$t_spec" \; set-option -t "=$t_name:" @trainops_started_at "$t_started" 2>/dev/null
  t_tmux set-option -t "=$t_name:" @trainops_log "$t_opt_log" 2>/dev/null
  t_tmux set-option -t "=$t_name:" @trainops_command "$t_opt_command" 2>/dev/null
  t_pane_pid=$(t_tmux display-message -p -t "=$t_name:" '#{pane_pid}' 2>/dev/null) || t_pane_pid=
}
t_wait_job() {
  t_n=0
  while [ ! -e "$t_dir/pgid" ] && [ -z "$(t_exit_record "$t_log")" ] && [ "$t_n" -lt 50 ]; do t_nap; t_n=$((t_n + 1)); done
  t_state=running
  t_xr=$(t_exit_record "$t_log")
  if [ -n "$t_xr" ] && ! t_tmux has-session -t "=$t_name" 2>/dev/null; then
    t_state=finished
    t_emit exit_status "$(t_exit_status "$t_xr")"
  fi
  t_emit job_pgid "$(cat "$t_dir/pgid" 2>/dev/null)"
}
t_start() {
  if [ "$t_mode" = fail_if_exists ] && [ -e "$t_log" ]; then t_fail log_exists 26 "log file $t_log already exists"; fi
  if [ "$t_dead_session" = 1 ]; then t_tmux kill-session -t "=$t_name" 2>/dev/null; fi
  t_started=$(t_now)
  t_prepare_log
  t_write_files
  t_new_session
  t_wait_job
  t_emit result started
  t_emit_enc rotated_log "$t_rotated"
  t_emit started_at "$t_started"
  t_emit pane_pid "$t_pane_pid"
  t_emit state "$t_state"
}
"""

_MAIN = r"""
t_plan() {
  case $t_action:$t_running in
    start:1) if t_same_spec; then t_emit would none; else t_conflict; fi ;;
    start:0) if [ "$t_mode" = fail_if_exists ] && [ -e "$t_log" ]; then t_fail log_exists 26 "log file $t_log already exists"; fi
             t_emit would start ;;
    stop:1) t_emit would stop ;;
    stop:0) t_emit would none ;;
    restart:1) t_emit would restart ;;
    restart:0) t_emit would start ;;
  esac
}
t_main() {
  t_preflight
  if [ "$t_check" = 1 ]; then t_probe; t_plan; exit 0; fi
  [ "$t_action" = stop ] && [ "$t_tmux_missing" = 1 ] && { t_probe; t_emit result unchanged; exit 0; }
  t_lock
  t_probe
  case $t_action:$t_running in
    start:1) if t_same_spec; then t_emit result unchanged; t_emit pane_pid "$t_pane_pid"; t_emit started_at "$t_rstarted"
             t_emit proven "$t_proven"; t_emit state running; else t_conflict; fi ;;
    start:0) t_start ;;
    stop:1) t_stop; t_emit result stopped ;;
    stop:0) if [ "$t_dead_session" = 1 ]; then t_tmux kill-session -t "=$t_name" 2>/dev/null; fi
            if [ "$t_before" = finished ]; then t_emit exit_status "$(t_exit_status "$(t_exit_record "$t_l")")"; fi
            t_emit result unchanged ;;
    restart:1) t_stop; t_start ;;
    restart:0) t_start ;;
  esac
  exit 0
}
"""

LAUNCH = _COMMON + _PREFLIGHT + _LOCK + _PROBE + _STOP + _START + _MAIN

# The wrapper; preceded by w_name, w_log, w_dir, w_chdir, w_venv, w_user assignments and `set -- JOB...`.
WRAPPER_HEAD = r"""#!/bin/sh
# trainops.pct_launch: wrapper of one tmux session, rewritten at every launch (docs/launch-protocol.md)
if [ "${TRAINOPS_WRAPPER-}" != 1 ]; then
  exec env -i TRAINOPS_WRAPPER=1 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 sh "$0" "$@"
fi
unset TRAINOPS_WRAPPER
w_started=${1-}
"""

WRAPPER_BODY = r"""
w_exitf=$w_log.exit
w_now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
w_home=/root
if [ -n "$w_user" ]; then
  w_uid=$(id -u "$w_user"); w_gid=$(id -g "$w_user")
  w_home=$(awk -F: -v u="$w_user" '$1 == u { print $6; exit }' /etc/passwd 2>/dev/null)
  [ -n "$w_home" ] || w_home=$(getent passwd "$w_user" 2>/dev/null | awk -F: 'NR == 1 { print $6 }')
  if w_tool=$(command -v setpriv); then
    set -- "$w_tool" --reuid "$w_uid" --regid "$w_gid" --init-groups -- "$@"
  else
    set -- "$(command -v su)" -m -s /bin/sh "$w_user" -c 'exec "$0" "$@"' "$@"
  fi
fi
HOME=${w_home:-/}; USER=${w_user:-root}; LOGNAME=$USER
export HOME USER LOGNAME
[ -n "$w_chdir" ] || w_chdir=$HOME
w_sh=$(command -v sh)
w_pgid_cmd='echo "$$" > "$1"; shift; exec "$@"'
# With job control (the pane is a terminal) the job gets its own process group and keeps SIGINT and
# SIGQUIT; without it, an "&" job starts with both ignored (POSIX), so env resets them when it can.
set -m 2>/dev/null
case $- in
  *m*) set -- "$w_sh" -c "$w_pgid_cmd" sh "$w_dir/pgid" "$@" ;;
  *)
    w_env=$(command -v env)
    if "$w_env" --default-signal=INT,QUIT true 2>/dev/null; then set -- "$w_env" --default-signal=INT,QUIT "$@"; fi
    if w_tool=$(command -v setsid); then
      set -- "$w_tool" "$w_sh" -c "$w_pgid_cmd" sh "$w_dir/pgid" "$@"
    else
      set -- "$w_sh" -c "$w_pgid_cmd" sh "$w_dir/pgid" "$@"
    fi ;;
esac
w_envtext=
if [ -f "$w_dir/env" ]; then w_envtext=$(cat "$w_dir/env"); fi
rm -f "$w_dir/env"
w_child=
w_forward() { [ -n "$w_child" ] && { kill "-$1" "-$w_child" 2>/dev/null || kill "-$1" "$w_child" 2>/dev/null; }; }
trap 'w_trapped=1; w_forward TERM' TERM
trap 'w_trapped=1; w_forward INT' INT
trap 'w_trapped=1; w_forward HUP' HUP
# One top-level command with the fork: with job control on, dash reaps and forgets a finished job before it
# reads each top-level command, and a fast job's wait then says 127. Job control is not needed after the fork.
{
(
  eval "$w_envtext"
  unset w_envtext
  if [ -n "$w_venv" ]; then VIRTUAL_ENV=$w_venv; PATH=$w_venv/bin:$PATH; export VIRTUAL_ENV PATH; unset PYTHONHOME; fi
  cd -- "$w_chdir" || { echo "trainops.pct_launch: cannot change to directory $w_chdir"; exit 126; }
  exec "$@"
) </dev/null >>"$w_log" 2>&1 &
w_child=$!
set +m 2>/dev/null
}
w_envtext=
printf 'trainops.pct_launch: session %s runs pid %s; output goes to %s\n' "$w_name" "$w_child" "$w_log"
# A trapped signal interrupts wait (status > 128): wait again for the job's own status.
w_rc=; w_last=
while [ -z "$w_rc" ]; do
  w_trapped=0
  wait "$w_child"
  w_st=$?
  if [ "$w_st" = 127 ] && [ -n "$w_last" ]; then w_rc=$w_last
  elif [ "$w_trapped" = 0 ] || [ "$w_st" -le 128 ]; then w_rc=$w_st
  else w_last=$w_st
  fi
done
w_ended=$(w_now)
printf '### trainops.pct_launch: session=%s exit_status=%s ended_at=%s\n' "$w_name" "$w_rc" "$w_ended" >> "$w_log"
# The exit record: first to $w_dir/exit (/run, always writable; lost at a reboot), then to LOG.exit (kept), only
# when it was written whole (a full file system leaves an empty or short file, and then no LOG.exit).
w_record=$(
  printf 'session_name=%s\nexit_status=%s\nstarted_at=%s\nended_at=%s' "$w_name" "$w_rc" "$w_started" "$w_ended"
  if [ -f "$w_dir/stop_requested" ]; then printf '\nstopped_by=trainops\nstop_signal=%s' "$(cat "$w_dir/stop_requested")"; fi
)
(umask 077; printf '%s\n' "$w_record" > "$w_dir/exit.tmp.$$" && mv -f "$w_dir/exit.tmp.$$" "$w_dir/exit") 2>/dev/null
{ printf '%s\n' "$w_record" > "$w_exitf.tmp.$$" && [ "$(cat "$w_exitf.tmp.$$")" = "$w_record" ] &&
  mv -f "$w_exitf.tmp.$$" "$w_exitf"; } 2>/dev/null || rm -f "$w_exitf.tmp.$$"
rm -f "$w_dir/pgid"
exit "$w_rc"
"""
