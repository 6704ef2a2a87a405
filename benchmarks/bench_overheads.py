# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What the remaining time is made of: Ansible's start-up, ssh, pct, a module task, fact gathering; and the CPU that
a command and a module run cost inside the container (its cgroup counter, read on the controller)."""
from __future__ import annotations

import shlex
from collections.abc import Sequence

from bench_cases import MAIN, Row, raw_list, seconds, status
from bench_env import MAIN_NODE, MAIN_VMID, PIPELINING_OFF, SHIPPED, Config, Context, Run, median
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


def adhoc(ctx: Context, label: str, config: Config, module_args: Sequence[str], repeat: int = 2) -> list[Run]:
    """`ansible ct400 -m ...` through the pct connection, cold (no ssh connection left open); at most REPEAT runs.

    Each run also records CT 400's CPU (its cgroup counter before and after the run).
    """
    runs = []
    for index in range(min(ctx.repeat, repeat)):
        ctx.close_masters()
        argv = ["ansible", "-i", str(ctx.inventory(MAIN, config)), f"ct{MAIN_VMID}", *module_args]
        runs.append(ctx.run(f"{label} #{index + 1}", argv, ctx.ansible_env(config), vmids=[MAIN_VMID]))
    log(f"{label}: {raw_list([run.seconds for run in runs])}" + "".join(status(run) for run in runs))
    return runs


def exec_runs(ctx: Context, command: str) -> list[Run]:
    """`pct exec 400 -- COMMAND` on the node over a new ssh connection, ctx.repeat times, with CT 400's CPU."""
    argv = ["ssh", "-T", "-F", ctx.ssh_config, "-o", "ControlMaster=no", "-o", "ControlPath=none", MAIN_NODE,
            f"pct exec {MAIN_VMID} -- {command}"]
    runs = [ctx.run(f"pct exec {command} #{index + 1}", argv, vmids=[MAIN_VMID]) for index in range(ctx.repeat)]
    log(f"pct exec {MAIN_VMID} -- {command}: container CPU {cpu_ms(runs)[1]}" + "".join(status(run) for run in runs))
    return runs


def cpu_ms(runs: Sequence[Run]) -> tuple[float | None, str]:
    """Median container CPU of the runs in ms, and the raw figures; None and why when a counter was unreadable."""
    values = [run.container_cpu for run in runs]
    if not values or any(value is None for value in values):
        return None, next((run.cpu_note for run in runs if run.cpu_note), "not measured")
    return 1000 * median([value for value in values if value is not None]), ", ".join(f"{1000 * (value or 0):.0f}" for value in values) + " ms"


def container_cpu_rows(ctx: Context, section: str, runs: dict[str, list[Run]]) -> list[Row]:
    """CT 400's CPU for each of the runs (the what → runs), as rows; the counter file is named once."""
    rows, figures = [], {}
    try:
        counter = str(ctx.container_cpu.counter_file(MAIN_VMID))
    except OSError as exc:
        counter = str(exc)
    for what, measured in runs.items():
        value, raw = cpu_ms(measured)
        figures[what] = value
        result = (f"{value:.0f} ms" if value is not None else "not measured") + "".join(status(run) for run in measured)
        detail = f"{raw}; controller CPU {median([run.cpu for run in measured]):.2f} s, wall {median([run.seconds for run in measured]):.2f} s"
        rows.append(Row(section, f"CPU inside CT {MAIN_VMID} (its cgroup counter before/after): {what}", result,
                        detail if value is not None else f"counter not readable: {raw}"))
    rows[0].raw += f"; counter {counter}"
    ctx.facts["container cpu"] = figures
    return rows


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
    inside: dict[str, list[Run]] = {}
    for config in (PIPELINING_OFF, SHIPPED):
        # As shipped: ctx.repeat runs, whose container CPU is a row of its own below.
        runs = adhoc(ctx, f"ping {config.name}", config, ["-m", "ansible.builtin.ping"], ctx.repeat if config is SHIPPED else 2)
        rows.append(timed_row(section, f"ansible ct400 -m ping via the pct connection, {config.name}", runs))
        facts[f"ping {config.name}"] = median([run.seconds for run in runs])
        if config is SHIPPED:
            inside["ansible ct400 -m ansible.builtin.ping, as shipped"] = runs
    for what, args in (("all facts", []), ("gather_subset=!all", ["-a", "gather_subset=!all"])):
        runs = adhoc(ctx, f"setup, {what}", SHIPPED, ["-m", "ansible.builtin.setup", *args])
        rows.append(timed_row(section, f"ansible ct400 -m setup ({what}), {SHIPPED.name}", runs))
    inside["ansible ct400 -m trainops.pct_launch.tmux_session_info, as shipped"] = adhoc(
        ctx, "tmux_session_info", SHIPPED, ["-m", "trainops.pct_launch.tmux_session_info"], ctx.repeat)
    # prepare_info with the interpreter known (as shipped) and left to discovery.
    check = ["-m", "trainops.pct_launch.prepare_info", "-a", "workdir=/bench"]
    inside["ansible ct400 -m trainops.pct_launch.prepare_info, as shipped"] = adhoc(ctx, "prepare_info", SHIPPED, check, ctx.repeat)
    inside["the same, ansible_python_interpreter=auto_silent (after the interpreter's discovery)"] = adhoc(
        ctx, "prepare_info module", SHIPPED, [*check, "-e", "ansible_python_interpreter=auto_silent"], ctx.repeat)
    inside = {f"pct exec {MAIN_VMID} -- sh -c true (on the node)": exec_runs(ctx, "sh -c true"),
              f"pct exec {MAIN_VMID} -- python3 -c pass (on the node)": exec_runs(ctx, "python3 -c pass"), **inside}
    rows.extend(container_cpu_rows(ctx, section, inside))
    ctx.facts["overheads"] = facts
    return rows
