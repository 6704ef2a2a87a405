#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# The hand-written launch that benchmarks/run.py measures the collection
# against: what a careful operator writes without Ansible. One `pct exec` starts
# the job in a detached tmux session (removing an old log first, so a stale
# line cannot prove anything), one more `pct exec` polls the log inside the
# container until a line matches PATTERN. No preflight, no log header, no
# rotation, no exit status file, no check that the job is still alive: the
# poll only ends at the pattern or at the timeout.
#
# Usage: baseline_launch.sh [options] VMID SESSION LOG PATTERN -- COMMAND [ARG...]
#   -n NODE      run pct on NODE over ssh (default: the local pct)
#   -F FILE      ssh configuration file (ssh -F)
#   -o OPTION    extra ssh option (ssh -o), may be repeated
#   -t SECONDS   give up after this many seconds (default 300)
#   -i SECONDS   poll interval inside the container (default 0.5)
# Exit status: 0 when the pattern was seen, 1 on timeout, 2 on bad usage,
# else the status of pct or ssh.
set -euo pipefail

node=''
ssh_opts=()
timeout=300
interval=0.5

usage() { sed -n '13,19s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

while getopts 'n:F:o:t:i:h' opt; do
  case "$opt" in
    n) node="$OPTARG" ;;
    F) ssh_opts+=(-F "$OPTARG") ;;
    o) ssh_opts+=(-o "$OPTARG") ;;
    t) timeout="$OPTARG" ;;
    i) interval="$OPTARG" ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
if [ "$#" -lt 6 ] || [ "$5" != -- ]; then usage; fi
vmid="$1" session="$2" log="$3" pattern="$4"
shift 5

# Single-quote each word for the shell at the other end of ssh.
quote_words() {
  local word out=''
  for word in "$@"; do
    out+="'${word//\'/\'\\\'\'}' "
  done
  printf '%s' "${out% }"
}

# Run `pct ARG...` locally, or on the node through ssh (no terminal).
on_node() {
  if [ -z "$node" ]; then
    pct "$@"
  else
    ssh -T "${ssh_opts[@]}" "$node" "$(quote_words pct "$@")"
  fi
}

job_line="exec $(quote_words "$@") >$(quote_words "$log") 2>&1"
# shellcheck disable=SC2016 # expanded by the container's shell
start='rm -f "$2" && exec tmux new-session -d -s "$1" "$3"'
on_node exec "$vmid" -- sh -c "$start" sh "$session" "$log" "$job_line"

polls="$(awk -v t="$timeout" -v i="$interval" 'BEGIN { n = int(t / i); print (n < 1 ? 1 : n) }')"
# shellcheck disable=SC2016 # expanded by the container's shell
poll='n=0; until grep -Eq -- "$1" "$2" 2>/dev/null; do n=$((n + 1)); [ "$n" -gt "$3" ] && exit 1; sleep "$4"; done'
on_node exec "$vmid" -- sh -c "$poll" sh "$pattern" "$log" "$polls" "$interval"
