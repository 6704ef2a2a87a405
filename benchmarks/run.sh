#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# The collection's benchmark suite on the local Proxmox VE stand-in (see
# benchmarks/README.md): brings up the simulated nodes pve-g and pve-h with 32
# containers, measures, prints the table and writes it to benchmarks/results.md,
# then destroys the containers and stops both nodes. Needs root; makes what
# it needs first (the development venv with tools/bootstrap.sh, the stand-in's
# packages and `pct` with tools/pve_standin/setup.sh --no-container; node.sh
# installs the OpenSSH server); under 10 minutes on 2 cores (optional measurements are skipped,
# with a note in the table, when the run would overrun --budget).
#
# Usage: benchmarks/run.sh [--repeat N] [--fanout 1,8,32] [--output FILE] [--keep-workdir] [--launch-only]
#                          [--delay-mode sleep|cpu|both] [--budget S]
#   --launch-only: only the cases of benchmarks/launch_only.yml (pct calls, re-run, detection,
#   the fleet against the parallel launcher); prints the table and writes no file unless --output names one.
#   --delay-mode: how the stand-in's pct spends its 0.5 s per call: slept (sleep, the default), burnt as
#   CPU time as real pct does (cpu), or both (the one-container launch at 0.5 s and the fleet measured
#   sleeping, then again burning CPU). BENCH_DELAY_MODE=cpu|both in the environment does the same.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$(id -u)" -ne 0 ]; then
  echo "benchmarks: run as root: LXC containers behind the stand-in need it" >&2
  exit 1
fi
case " $* " in
  *" -h "* | *" --help "*) ;;
  *) "$root/tools/bootstrap.sh" && "$root/tools/pve_standin/setup.sh" --no-container ;;
esac
# shellcheck source=tools/env.sh
. "$root/tools/env.sh"
cd "$root"
exec python3 "$root/benchmarks/run.py" "$@"
