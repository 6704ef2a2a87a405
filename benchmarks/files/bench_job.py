# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The benchmark's training job, copied into the containers as /bench/bench_job.py.

Default: prints ``step 1 loss 0.5`` at once (the line launch.yml waits for), then sleeps.
``--die-after S``: prints a line that proves nothing, sleeps S seconds, prints its own time of
death (``bench_job: died_at=EPOCH``) and exits 3, the way a job that crashes early does.
``--rendezvous``: prints a line that proves nothing and sleeps, as a rank of a multi-node job waiting
for peers that never come.
"""
from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    """Run the job; the exit status is the job's."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--die-after", type=float, default=None)
    parser.add_argument("--sleep", type=float, default=3600.0)
    parser.add_argument("--rendezvous", action="store_true")
    args = parser.parse_args()
    if args.rendezvous:
        print("bench_job: waiting for the other ranks", flush=True)
        time.sleep(args.sleep)
        return 0
    if args.die_after is not None:
        print(f"bench_job: loading data, started_at={time.time():.3f}", flush=True)
        time.sleep(args.die_after)
        print(f"bench_job: died_at={time.time():.6f}", flush=True)
        return 3
    print("step 1 loss 0.5", flush=True)
    time.sleep(args.sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
