# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What the remaining time is made of: Ansible's start-up, ssh, pct, a module task, fact gathering."""
from __future__ import annotations

import shlex
from collections.abc import Sequence

from bench_cases import MAIN, Row, raw_list, seconds, status
from bench_env import MAIN_VMID, PIPELINING_OFF, SHIPPED, Config, Context, Run, median
from bench_setup import log

# Run on the node: time `pct exec 400 -- true` (the stand-in's delay is 0 here) N times.
PCT_TIMER = """
import subprocess, sys, time
walls = []
for index in range(int(sys.argv[1])):
    started = time.monotonic()
    subprocess.run(["pct", "exec", sys.argv[2], "--", "true"], check=True)
    walls.append(time.monotonic() - started)
print(" ".join(f"{wall:.4f}" for wall in walls))
"""


def timed(ctx: Context, label: str, argv: Sequence[str], env: dict[str, str] | None = None, repeat: int = 0) -> list[Run]:
    """ctx.repeat (or repeat) runs of a command."""
    runs = [ctx.run(f"{label} #{index + 1}", argv, env) for index in range(repeat or ctx.repeat)]
    log(f"{label}: {raw_list([run.seconds for run in runs])}" + "".join(status(run) for run in runs))
    return runs


def timed_row(section: str, measure: str, runs: Sequence[Run]) -> Row:
    """A row with the median wall time; failed runs are marked."""
    walls = [run.seconds for run in runs]
    return Row(section, measure, seconds(median(walls)) + "".join(status(run) for run in runs), raw_list(walls))


def ssh_runs(ctx: Context) -> tuple[list[Run], list[Run]]:
    """`ssh pve-g true`: a new connection each time, then through one persistent connection."""
    base = ["ssh", "-T", "-F", ctx.ssh_config]
    fresh = timed(ctx, "ssh new connection", [*base, "-o", "ControlMaster=no", "-o", "ControlPath=none", "pve-g", "true"])
    ctx.close_masters()
    ctx.open_masters()
    reused = timed(ctx, "ssh through the master", [*base, *shlex.split(ctx.persist_args()), "pve-g", "true"])
    ctx.close_masters()
    return fresh, reused


def pct_walls(ctx: Context) -> list[float]:
    """`pct exec 400 -- true` on the node itself (no ssh), stand-in delay 0."""
    out = ctx.main.ssh(f"python3 -c {shlex.quote(PCT_TIMER)} {max(ctx.repeat, 5)} {MAIN_VMID}").stdout.decode()
    return [float(value) for value in out.split()]


def adhoc(ctx: Context, label: str, config: Config, module_args: Sequence[str]) -> list[Run]:
    """`ansible ct400 -m ...` through the pct connection, cold (no ssh connection left open); at most 2 runs."""
    runs = []
    for index in range(min(ctx.repeat, 2)):
        ctx.close_masters()
        argv = ["ansible", "-i", str(ctx.inventory(MAIN, config)), "ct400", *module_args]
        runs.append(ctx.run(f"{label} #{index + 1}", argv, ctx.ansible_env(config)))
    log(f"{label}: {raw_list([run.seconds for run in runs])}" + "".join(status(run) for run in runs))
    return runs


def overhead_rows(ctx: Context) -> list[Row]:
    """Ansible start-up, ssh, pct exec, a module task and fact gathering, each on its own."""
    section = "what a run is made of (delay 0, CT 400 on pve-g)"
    ctx.set_delay(0)
    empty = timed(ctx, "empty play", ["ansible-playbook", "-i", "localhost,", "benchmarks/empty.yml"], ctx.ansible_env(SHIPPED))
    fresh, reused = ssh_runs(ctx)
    pct = pct_walls(ctx)
    rows = [
        timed_row(section, "ansible-playbook of an empty play (Ansible start-up)", empty),
        timed_row(section, "ssh pve-g true, new connection (handshake)", fresh),
        timed_row(section, "ssh pve-g true through a ControlPersist connection", reused),
        Row(section, "pct exec 400 -- true on the node (no ssh)", seconds(median(pct)), raw_list(pct)),
    ]
    facts = {"empty play": median([run.seconds for run in empty]), "ssh new": median([run.seconds for run in fresh]),
             "ssh master": median([run.seconds for run in reused]), "pct exec": median(pct)}
    for config in (PIPELINING_OFF, SHIPPED):
        runs = adhoc(ctx, f"ping {config.name}", config, ["-m", "ansible.builtin.ping"])
        rows.append(timed_row(section, f"ansible ct400 -m ping via the pct connection, {config.name}", runs))
        facts[f"ping {config.name}"] = median([run.seconds for run in runs])
    for what, args in (("all facts", []), ("gather_subset=!all", ["-a", "gather_subset=!all"])):
        runs = adhoc(ctx, f"setup, {what}", SHIPPED, ["-m", "ansible.builtin.setup", *args])
        rows.append(timed_row(section, f"ansible ct400 -m setup ({what}), {SHIPPED.name}", runs))
    ctx.facts["overheads"] = facts
    return rows
