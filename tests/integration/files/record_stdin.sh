#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# An ansible_python_interpreter for tests (test_prepare_info.py): keeps what the
# interpreter is given on its standard input in /tmp/python-stdin/N (N counts the
# runs), then runs python3 with the same arguments and that input.
set -eu
mkdir -p /tmp/python-stdin
count=$(find /tmp/python-stdin -type f | wc -l)
record="/tmp/python-stdin/$((count + 1))"
cat > "$record"
exec /usr/bin/python3 "$@" < "$record"
