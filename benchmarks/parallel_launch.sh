#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# The hand-written parallel launcher, the floor benchmarks/run.py measures a
# fleet launch against: benchmarks/baseline_launch.sh fanned out with
# `xargs -P`, one process per container, each launching the same job into its
# container on its node and waiting for the pattern in its log. ssh is set up
# as a careful operator sets it: ControlMaster auto, ControlPersist 60 s, one
# ControlPath per node (%C), so every launch to a node shares one connection;
# open the masters before the launch (`ssh -S PATH -o ControlMaster=auto
# -o ControlPersist=60s NODE true`) and nothing waits for a key exchange.
# As baseline_launch.sh: no preflight, no log header, no exit status file.
#
# Usage: parallel_launch.sh [options] SESSION LOG PATTERN NODE:VMID... -- COMMAND [ARG...]
#   -F FILE      ssh configuration file (ssh -F)
#   -o OPTION    extra ssh option (ssh -o), may be repeated
#   -S PATH      ssh ControlPath (default ~/.ssh/cm-%C: one per node)
#   -t SECONDS   each launch gives up after this many seconds (default 300)
#   -i SECONDS   poll interval inside the containers (default 0.5)
#   -P JOBS      launches at a time (default: all, one process per container)
# Exit status: 0 when every container's log showed the pattern, 1 when any did
# not (each failure is named on stderr), 2 on bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/$(basename "${BASH_SOURCE[0]}")"

# One container, called by xargs: --one NOPTS OPTION... SESSION LOG PATTERN -- COMMAND... NODE:VMID
# (xargs appends the target last, so nothing in the command is ever substituted).
if [ "${1:-}" = --one ]; then
  nopts="$2"
  shift 2
  target="${!#}"
  set -- "${@:1:$#-1}"
  opts=("${@:1:$nopts}")
  shift "$nopts"
  session="$1" log="$2" pattern="$3"
  shift 3
  status=0
  "$here/baseline_launch.sh" -n "${target%%:*}" "${opts[@]}" "${target#*:}" "$session" "$log" "$pattern" "$@" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "parallel_launch: $target: exit status $status" >&2
    exit 1  # not 255: that would make xargs stop starting the others
  fi
  exit 0
fi

usage() { sed -n '15,23s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

opts=()
control="$HOME/.ssh/cm-%C"
jobs=0
while getopts 'F:o:S:t:i:P:h' opt; do
  case "$opt" in
    F) opts+=(-F "$OPTARG") ;;
    o) opts+=(-o "$OPTARG") ;;
    S) control="$OPTARG" ;;
    t | i) opts+=("-$opt" "$OPTARG") ;;
    P) jobs="$OPTARG" ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
if [ "$#" -lt 6 ]; then usage; fi
session="$1" log="$2" pattern="$3"
shift 3
targets=()
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
  case "$1" in
    ?*:[0-9]*) targets+=("$1") ;;
    *) echo "parallel_launch: not NODE:VMID: $1" >&2; usage ;;
  esac
  shift
done
if [ "$#" -lt 2 ] || [ "${#targets[@]}" -eq 0 ]; then usage; fi
shift
[ "$jobs" -gt 0 ] || jobs="${#targets[@]}"
# The operator's own -o options come first: for ssh the first value of an option wins.
opts+=(-o ControlMaster=auto -o ControlPersist=60s -o "ControlPath=$control")

status=0
printf '%s\0' "${targets[@]}" |
  xargs -0 -n 1 -P "$jobs" "$self" --one "${#opts[@]}" "${opts[@]}" "$session" "$log" "$pattern" -- "$@" || status=$?
if [ "$status" -ne 0 ]; then
  echo "parallel_launch: the launch failed in some containers (see above; xargs exit status $status)" >&2
  exit 1
fi
