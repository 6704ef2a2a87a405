#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# Run inside a test container (StandinNode.install_tmux): install tmux with apt
# unless it is there (from the image's package lists first, refreshing them only
# when that fails), make the folders given as arguments, print `tmux -V`.
set -eu
export DEBIAN_FRONTEND=noninteractive
if ! command -v tmux >/dev/null; then
  if ! apt-get install -y -q tmux >/tmp/apt.log 2>&1; then
    { apt-get update -q && apt-get install -y -q tmux; } >/tmp/apt.log 2>&1 || { cat /tmp/apt.log >&2; exit 1; }
  fi
fi
for dir in "$@"; do
  mkdir -p "$dir"
done
tmux -V
