# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Benchmark suite of trainops.pct_launch on the Proxmox VE stand-in (run it with benchmarks/run.sh).

Brings up the simulated nodes pve-g and pve-h, 32 containers, measures, prints the table and
writes it to benchmarks/results.md, then destroys the containers and stops the nodes.
``--launch-only`` measures only the runs of benchmarks/launch_only.yml (with the baseline it is
compared with) and writes no file unless ``--output`` names one. ``--delay-mode`` says how the
stand-in's pct spends its per-call delay: slept (``sleep``, the default), burnt as CPU time as real
pct does (``cpu``), or both (``both``: the rows with a delay are measured sleeping, then again with
the delay burnt as CPU).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench_cases import (LAUNCH, LAUNCH_ONLY, MAIN, JOB_COMMAND, Row, breakdown_rows, count_rows, detection_rows, first_launch_rows, fleet_death_rows,
                         job_vars, launch_runs, pipelining_off_rows, stop_sessions, wall_rows)
from bench_env import BENCH, DELAY_MODES, SHIPPED, Context
from bench_fleet import FLEET_DELAY, fleet_rows, parallel_rows
from bench_overheads import overhead_rows
from bench_report import conditions, render
from bench_setup import log, set_up, tear_down
from bench_summary import summary_rows

# Seconds the measurements may take before the optional ones are skipped: with set-up, tear-down and
# run.sh's checks, one run stays under 10 minutes.
BUDGET = 500
# The environment variable that gives --delay-mode its default.
DELAY_MODE_ENV = "BENCH_DELAY_MODE"
DELAY_MODE_TEXT = {
    "sleep": "the delay of each call is slept (a fixed wait that uses no CPU)",
    "cpu": "the delay of each call is burnt as CPU time, as real pct's Perl start-up does, so calls at the same moment "
           "compete for the cores and take longer than the delay",
    "both": "the rows with a delay are measured with it slept, then again with it burnt as CPU time (sections "
            "\"of CPU (delay_mode cpu)\"), as real pct's Perl start-up does",
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command line options."""
    parser = argparse.ArgumentParser(prog="benchmarks/run.sh", description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="runs per cheap measurement, the median is reported (default 3)")
    parser.add_argument("--fanout", default="1,8,32", help="container counts of the fan-out (default 1,8,32; at most 32)")
    parser.add_argument("--output", type=Path, default=None,
                        help="where to write the table (default benchmarks/results.md; with --launch-only, none)")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the work folder with every run's output")
    parser.add_argument("--launch-only", action="store_true",
                        help="only the cases of benchmarks/launch_only.yml: its pct calls, re-run and wall time against the baseline "
                             "at delay 0, detection on one container, the fleet (launch_only.yml) and the parallel "
                             "launcher (quick check; the table is printed, not written)")
    parser.add_argument("--delay-mode", choices=(*DELAY_MODES, "both"), default=None,
                        help="how the stand-in's pct spends its delay of 0.5 s per call: sleep (a fixed wait, the default), cpu "
                             "(burnt as CPU time, as real pct's Perl start-up does: calls at the same moment compete for the cores), "
                             "or both (the rows with a delay, namely the one-container launch at 0.5 s and the fleet, are measured "
                             f"sleeping, then again burning CPU); default: ${DELAY_MODE_ENV}, else sleep")
    parser.add_argument("--budget", type=float, default=BUDGET,
                        help=f"seconds from the start after which optional measurements are skipped (default {BUDGET})")
    args = parser.parse_args(argv)
    if args.delay_mode is None:
        args.delay_mode = os.environ.get(DELAY_MODE_ENV, "").strip().lower() or "sleep"
        if args.delay_mode not in (*DELAY_MODES, "both"):
            parser.error(f"invalid {DELAY_MODE_ENV} {args.delay_mode!r}: not one of {', '.join((*DELAY_MODES, 'both'))}")
    if args.output is None and not args.launch_only:
        args.output = BENCH / "results.md"
    counts = [int(count) for count in args.fanout.split(",")]
    if any(count < 1 or count > 32 or (count > 1 and count % 2) for count in counts):
        parser.error("--fanout: counts from 1 to 32, even when more than 1 (half on each node)")
    args.counts = counts
    return args


def section(rows: list[Row], name: str, measure: Callable[[], list[Row]]) -> None:
    """Run one group of measurements; a failure becomes a row and the others still run."""
    try:
        rows.extend(measure())
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
        traceback.print_exc()
        rows.append(Row(name, "FAILED", str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__))


def launch_rows(ctx: Context, delay: float, whole: bool = True) -> list[Row]:
    """pct calls (delay 0) and wall times against the baseline of the launch variants on one container."""
    runs = launch_runs(ctx, delay, whole)
    if delay == 0:
        return count_rows(runs) + wall_rows(runs, ctx.delay_text(delay))
    return wall_rows(runs, ctx.delay_text(delay))


def optional(ctx: Context, rows: list[Row], name: str, estimate: float, measure: Callable[[], list[Row]]) -> None:
    """A measurement that is skipped, with a row that says so, when it would end after the time budget."""
    if ctx.time_left() < estimate:
        used = time.monotonic() - ctx.started
        log(f"{name}: skipped (time budget: {used:.0f} s used, about {estimate:.0f} s needed, {max(ctx.time_left(), 0):.0f} s left)")
        rows.append(Row("skipped for the time budget", name, "skipped", f"{used:.0f} s used of {ctx.deadline - ctx.started:.0f} s; "
                        f"it needs about {estimate:.0f} s (--budget)"))
        return
    section(rows, name, measure)


def measure_all(ctx: Context, counts: list[int], launch_only: bool = False, delay_mode: str = "sleep") -> list[Row]:
    """Every measurement (launch_only: those of launch_only.yml), in order; each group's failure is reported in the table.

    The required ones first; then the optional ones, each skipped when it would overrun the time budget. The rows
    with a delay spend it as delay_mode says (Context.delay_mode); with ``both``, those of the one-container launch
    and the fleet are measured again with the delay burnt as CPU, before the optional ones. Rows at delay 0 are the
    same in both modes, and measured once.
    """
    rows: list[Row] = []
    modes = list(DELAY_MODES) if delay_mode == "both" else [delay_mode]
    ctx.delay_mode = modes[0]
    log("warm-up run (not reported)" + ("" if launch_only else ": launch.yml prepares CT 400, so that its later runs are re-launches"))
    ctx.playbook("warm-up", LAUNCH_ONLY if launch_only else LAUNCH, MAIN, SHIPPED, job_vars(ctx, "warm", JOB_COMMAND))
    stop_sessions(ctx, "warm", MAIN)
    if launch_only:
        section(rows, "launch, delay 0", lambda: launch_rows(ctx, 0.0, whole=False))
        section(rows, "detection", lambda: detection_rows(ctx))
        section(rows, "parallel launcher, delay 0", lambda: parallel_rows(ctx, counts, 0.0))
        for mode in modes:
            ctx.delay_mode = mode
            section(rows, f"fleet, delay {ctx.delay_text(FLEET_DELAY)}", lambda: fleet_rows(ctx, counts, launch_only=True))
        return rows
    section(rows, "launch, delay 0", lambda: launch_rows(ctx, 0.0))
    section(rows, f"launch, delay {ctx.delay_text(0.5)}", lambda: launch_rows(ctx, 0.5))
    section(rows, "where the time goes", lambda: breakdown_rows(ctx))
    section(rows, "detection", lambda: detection_rows(ctx))
    section(rows, "first launch into a fresh container", lambda: first_launch_rows(ctx))
    section(rows, "parallel launcher, delay 0", lambda: parallel_rows(ctx, counts, 0.0))
    section(rows, f"fleet, delay {ctx.delay_text(FLEET_DELAY)}", lambda: fleet_rows(ctx, counts))
    for mode in modes[1:]:  # --delay-mode both: the rows with a delay again, the delay burnt as CPU
        ctx.delay_mode = mode
        section(rows, f"launch, delay {ctx.delay_text(0.5)}", lambda: launch_rows(ctx, 0.5))
        section(rows, f"fleet, delay {ctx.delay_text(FLEET_DELAY)}", lambda: fleet_rows(ctx, counts))
    ctx.delay_mode = modes[0]
    optional(ctx, rows, "what a run is made of", 40, lambda: overhead_rows(ctx))
    optional(ctx, rows, "detection, 4 ranks", 15, lambda: fleet_death_rows(ctx))
    optional(ctx, rows, "launch.yml with pipelining off", 30, lambda: pipelining_off_rows(ctx))
    return rows


def main(argv: list[str]) -> int:
    """Set up, measure, tear down, print and write the table."""
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("benchmarks/run.sh: needs root (LXC containers and the simulated nodes' sshd)", file=sys.stderr)
        return 1
    load_before, started = os.getloadavg(), time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="trainops-bench-"))
    ctx = Context(workdir, str(workdir / "ssh_config"), args.repeat)
    ctx.started, ctx.deadline = started, started + args.budget
    log(f"work folder {workdir}")
    setup: dict[str, float] = {}
    try:
        setup = set_up(ctx)
        rows = measure_all(ctx, args.counts, args.launch_only, args.delay_mode)
    finally:
        tear_down(ctx)
    header = conditions(args.repeat, setup, load_before, time.monotonic() - started, args.launch_only)
    header.append(f"Stand-in `pct` delay mode: {DELAY_MODE_TEXT[args.delay_mode]} (`--delay-mode {args.delay_mode}`).")
    text = render(summary_rows(ctx) + rows, header)
    print(text)
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")
        log(f"table written to {args.output}")
    if args.keep_workdir:
        log(f"every run's output is in {workdir}/logs")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(row.measure == "FAILED" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
