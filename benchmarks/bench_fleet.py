# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The fleet: the hand-written parallel launcher (the floor) and the playbooks fanned out to 1, 8 and 32 containers.

The parallel launcher is benchmarks/parallel_launch.sh: baseline_launch.sh for every container at once
(``xargs -P``), through one persistent ssh connection per node opened before the run. The playbooks run
with forks 32 as shipped (the pct connection shares one ssh connection per node; each run starts with none
open) and with the masters opened before the run: each step is one ordinary per-host task, a worker per
container. The stand-in's delay is slept, or burnt as CPU time (Context.delay_mode). Each run
records the controller's CPU (user + system of the command, its descendants and the ssh masters), its peak
memory (summed Pss of its process tree) and the CPU used inside its containers (the sum of their cgroup
counters' increase during the run: Python modules, sh, tmux, the job's start).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from bench_cases import (LAUNCH, LAUNCH_ONLY, JOB_COMMAND, Row, baseline_job, calls_by_play, calls_by_task, changed_by_play,
                         checked, fanout_hosts, job_vars, per_host, ratio, seconds, short_action, status, stop_sessions, task_kind)
from bench_env import PERSIST, SHIPPED, Config, Context, Run

FLEET_DELAY = 0.5
IDLE_SECONDS = 2.0


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of launching the fleet."""

    key: str
    label: str
    playbook: str  # empty: the parallel launcher
    config: Config | None
    warm: bool  # masters opened before the run
    every_count: bool = True  # else only at the largest count


PARALLEL = Variant("parallel", "hand-written parallel launcher (xargs -P, masters open)", "", None, True)
FLEET = (
    PARALLEL,
    Variant("launch_only", f"launch_only.yml, {SHIPPED.name}", LAUNCH_ONLY, SHIPPED, False),
    Variant("launch_only persist", "launch_only.yml, as shipped, ssh masters open", LAUNCH_ONLY, PERSIST, True, every_count=False),
    Variant("launch.yml", f"whole launch.yml, re-launch, {SHIPPED.name}", LAUNCH, SHIPPED, False),
    Variant("launch.yml persist", "whole launch.yml, re-launch, as shipped, ssh masters open", LAUNCH, PERSIST, True, every_count=False),
)


def launch(ctx: Context, variant: Variant, count: int, tag: str) -> Run:
    """One launch of the fleet of COUNT containers (their sessions ended first), sampled."""
    hosts = fanout_hosts(count)
    label = f"{variant.key} {count} {tag}"
    if not variant.playbook:
        stop_sessions(ctx, "fleetp", hosts)
        return checked(ctx.parallel(label, hosts, baseline_job("fleetp"), sample=True))
    stop_sessions(ctx, "fleet", hosts)
    assert variant.config is not None
    return checked(ctx.playbook(label, variant.playbook, hosts, variant.config, job_vars(ctx, "fleet", JOB_COMMAND), forks=32,
                                warm=variant.warm, sample=True))


def per_added(runs: Sequence[Run], counts: Sequence[int], field: str) -> tuple[float, str]:
    """Cost of FIELD per added container from the first to the last count, with the formula."""
    first, last = getattr(runs[0], field), getattr(runs[-1], field)
    added = counts[-1] - counts[0]
    return ((last - first) / added if added else 0.0), f"({last:.2f} - {first:.2f}) / {added}"


def variant_rows(section: str, variant: Variant, runs: Sequence[Run], counts: Sequence[int]) -> list[Row]:
    """Wall, calls, CPU, memory at each count, and the costs per added container."""
    walls = " / ".join(seconds(run.seconds) + status(run) for run in runs)
    calls = " / ".join(per_host(len(run.calls), run.hosts) for run in runs)
    cpu = " / ".join(f"{run.cpu:.1f}" for run in runs)
    pss = " / ".join(f"{run.peak_pss:.0f}" for run in runs)
    procs = " / ".join(str(run.peak_procs) for run in runs)
    rows = [Row(section, f"{variant.label}: {' / '.join(map(str, counts))} containers, wall", walls,
                f"pct calls per container {calls}; controller CPU {cpu} s; {inside_cpu(runs)}; peak memory {pss} MiB (Pss of {procs} processes)"
                + (f"; main process Rss {runs[-1].peak_rss:.0f} MiB" if variant.playbook else ""))]
    if len(runs) > 1:
        wall, wall_raw = per_added(runs, counts, "seconds")
        cpu_cost, cpu_raw = per_added(runs, counts, "cpu")
        mem, mem_raw = per_added(runs, counts, "peak_pss")
        inside = ""
        if all(run.container_cpu is not None for run in runs):
            inside_cost, inside_raw = per_added(runs, counts, "container_cpu")
            inside = f"; inside the containers {inside_cost:.3f} s {inside_raw}"
        rows.append(Row(section, f"{variant.label}: per added container {counts[0]}→{counts[-1]}",
                        f"wall {wall:.2f} s, CPU {cpu_cost:.3f} s, memory {mem:.1f} MiB", f"wall {wall_raw}; CPU {cpu_raw}; MiB {mem_raw}{inside}"))
    return rows


def inside_cpu(runs: Sequence[Run]) -> str:
    """The CPU used inside the containers at each count: summed, and per container."""
    if any(run.container_cpu is None for run in runs):
        return "CPU inside the containers " + " / ".join(run.inside() for run in runs)
    summed = " / ".join(f"{run.container_cpu or 0:.2f}" for run in runs)
    each = " / ".join(f"{1000 * (run.container_cpu or 0) / max(run.hosts, 1):.0f}" for run in runs)
    return f"CPU inside the containers {summed} s, {each} ms per container"


def idle_row(ctx: Context, section: str, hosts: Sequence[tuple[int, str]]) -> Row:
    """The CPU the containers use while nothing is launched into them (their own init and services): the
    background the fleet's figures of CPU inside the containers include."""
    vmids = [vmid for vmid, dummy in hosts]
    before, clock = ctx.container_cpu.read(vmids), time.monotonic()
    time.sleep(IDLE_SECONDS)
    used, note = ctx.container_cpu.used(before, ctx.container_cpu.read(vmids))
    spent = time.monotonic() - clock
    measure = f"CPU inside the {len(vmids)} containers while idle (background of the figures above; {spent:.1f} s before the runs)"
    if used is None:
        return Row(section, measure, "not measured", note)
    return Row(section, measure, f"{1000 * used / len(vmids) / spent:.2f} ms per container per second",
               f"{1000 * used:.0f} ms in all over {spent:.2f} s")


def parallel_rows(ctx: Context, counts: Sequence[int], delay: float) -> list[Row]:
    """The parallel launcher alone at one delay (at FLEET_DELAY it runs within fleet_rows, interleaved)."""
    ctx.set_delay(delay)
    runs = [launch(ctx, PARALLEL, count, f"delay {ctx.delay_tag(delay)}") for count in counts]
    ctx.facts[f"parallel {ctx.delay_tag(delay)}"] = runs
    section = f"the floor: hand-written parallel launcher (benchmarks/parallel_launch.sh), delay {ctx.delay_text(delay)}"
    return variant_rows(section, PARALLEL, runs, counts)


def task_spans(run: Run) -> list[dict[str, object]]:
    """Every task of a run (strategy linear: a task ends on all hosts before the next starts), with its hosts' events.

    span: task start to its last host's result; gap: from there to the next task's start (results, the next
    task's templating, play starts); dispatch: task start to its last host's start, the main process starting
    one worker per host one after another; durations: each host's start to its result.
    """
    starts = [index for index, event in enumerate(run.events) if event["event"] == "task_start"]
    end = run.event_time("stats") or run.ended
    tasks = []
    for number, index in enumerate(starts):
        event = run.events[index]
        until = starts[number + 1] if number + 1 < len(starts) else len(run.events)
        began = float(str(event["time"]))
        opened: dict[str, float] = {}
        durations, statuses, host_starts, hosts, delegated, last = [], [], [], set(), False, began
        for other in run.events[index + 1:until]:
            host = str(other.get("host"))
            if other["event"] == "host_start":
                opened[host] = float(str(other["time"]))
                host_starts.append(opened[host])
                delegated = delegated or bool(other["delegated"])
                hosts.add(host)
            elif other["event"] == "host_end" and host in opened:
                ended = float(str(other["time"]))
                last = max(last, ended)
                durations.append(ended - opened.pop(host))
                statuses.append(str(other["status"]))
        next_time = float(str(run.events[until]["time"])) if until < len(run.events) and number + 1 < len(starts) else end
        skipped = bool(statuses) and all(state == "skipped" for state in statuses)
        if not host_starts:
            kind = "meta tasks (no worker: flush_handlers, end of play)"
        else:
            kind = task_kind(short_action(event["action"]), "skipped" if skipped else "ok", delegated, "localhost" if hosts == {"localhost"} else "")
        tasks.append({"kind": kind, "span": last - began, "gap": max(next_time - last, 0.0),
                      "dispatch": (max(host_starts) - began) if host_starts else 0.0, "durations": durations, "workers": len(host_starts)})
    return tasks


def fleet_breakdown(run: Run) -> tuple[dict[str, tuple[int, float, float, float, int]], float]:
    """By kind of task: tasks, summed span, summed dispatch, mean host duration, workers started; and the summed gaps."""
    parts: dict[str, tuple[int, float, float, float, int]] = {}
    durations: dict[str, list[float]] = {}
    gaps = 0.0
    for task in task_spans(run):
        kind = str(task["kind"])
        count, span, dispatch, dummy, workers = parts.get(kind, (0, 0.0, 0.0, 0.0, 0))
        values = task["durations"]
        assert isinstance(values, list)
        durations.setdefault(kind, []).extend(values)
        gaps += float(str(task["gap"]))
        parts[kind] = (count + 1, span + float(str(task["span"])), dispatch + float(str(task["dispatch"])), 0.0,
                       workers + int(str(task["workers"])))
    for kind, values in durations.items():
        count, span, dispatch, dummy, workers = parts[kind]
        parts[kind] = (count, span, dispatch, sum(values) / len(values) if values else 0.0, workers)
    return parts, gaps


def share(part: float, run: Run) -> str:
    """PART as a percentage of the run's wall time."""
    return f"{100 * part / run.seconds:.0f} %" if run.seconds > 0 else "n/a"


def breakdown_rows(section: str, run: Run, persist: Run | None) -> list[Row]:
    """Where a fleet run's wall time goes, and what the ssh connections cost (as shipped against masters open)."""
    parts, gaps = fleet_breakdown(run)
    startup = (run.event_time("playbook_start") or run.started) - run.started
    spans = sum(part[1] for part in parts.values())
    rows = [Row(section, "wall time", seconds(run.seconds), f"{per_host(len(run.calls), run.hosts)} pct calls per container; "
                f"controller CPU {run.cpu:.1f} s; CPU inside the containers {run.inside()}; peak memory {run.peak_pss:.0f} MiB"),
            Row(section, "Ansible start-up (process start to playbook loaded)", seconds(startup), share(startup, run))]
    for kind, (count, span, dispatch, mean, workers) in sorted(parts.items(), key=lambda item: -item[1][1]):
        rows.append(Row(section, f"{kind} ({count} tasks, {workers} workers)", seconds(span),
                        f"{share(span, run)}; of which dispatch (first → last worker start) {dispatch:.2f} s; "
                        f"a host's result {mean:.2f} s after its worker's start, on average"))
    rows.append(Row(section, "between tasks (results, templating the next task, play starts)", seconds(gaps), share(gaps, run)))
    rest = run.seconds - startup - spans - gaps
    rows.append(Row(section, "before the first task, recap and exit", seconds(rest), share(rest, run)))
    dispatch = sum(part[2] for part in parts.values())
    workers = sum(part[4] for part in parts.values())
    rows.append(Row(section, "forks: starting the workers, one after another in the main process (within the tasks above)",
                    seconds(dispatch), f"{share(dispatch, run)}; {workers} workers, {1000 * dispatch / max(workers, 1):.0f} ms each"))
    if persist is not None:
        rows.append(Row(section, "ssh connects (as shipped a cold run's workers that reach a node before its master "
                        "is up each connect), against masters open", f"{run.seconds - persist.seconds:.2f} s wall, {run.cpu - persist.cpu:.1f} s CPU",
                        f"{len(run.calls)} pct calls; as shipped {run.seconds:.2f} s, CPU {run.cpu:.1f} s; "
                        f"masters open {persist.seconds:.2f} s, CPU {persist.cpu:.1f} s"))
    return rows


def changes(run: Run) -> str:
    """Changed task results by play, as ``preflight 0, prepare 0, launch 64``."""
    return ", ".join(f"{play} {count}" for play, count in changed_by_play(run).items())


def fleet_section(ctx: Context) -> str:
    """The title of the fleet's section, with the delay and how it is spent."""
    return f"the fleet: forks 32, containers split over pve-g and pve-h, delay {ctx.delay_text(FLEET_DELAY)}"


def fleet_rows(ctx: Context, counts: Sequence[int], launch_only: bool = False) -> list[Row]:
    """Every variant at each count (interleaved: the load drifts), delay FLEET_DELAY; ratios to the parallel launcher.

    The runs go to ctx.facts as ``fleet`` (``fleet cpu`` when the delay is burnt as CPU) and ``fleet counts``.
    """
    ctx.set_delay(FLEET_DELAY)
    section, tag = fleet_section(ctx), ctx.delay_tag(FLEET_DELAY)
    variants = [variant for variant in FLEET if not (launch_only and variant.playbook == LAUNCH)]
    runs: dict[str, list[Run]] = {variant.key: [] for variant in variants}
    idle = idle_row(ctx, section, fanout_hosts(counts[-1]))
    for count in counts:
        for variant in variants:
            if variant.every_count or count == counts[-1]:
                runs[variant.key].append(launch(ctx, variant, count, f"delay {tag}"))
    ctx.close_masters()
    ctx.facts["fleet cpu" if ctx.burns(FLEET_DELAY) else "fleet"], ctx.facts["fleet counts"] = runs, list(counts)
    rows: list[Row] = []
    for variant in variants:
        rows.extend(variant_rows(section, variant, runs[variant.key], counts if variant.every_count else counts[-1:]))
    rows.append(idle)
    floor = runs[PARALLEL.key][-1]
    for variant in variants[1:]:
        run = runs[variant.key][-1]
        rows.append(Row(section, f"{counts[-1]} containers: {variant.label} / parallel launcher", ratio(run.seconds, floor.seconds),
                        f"{run.seconds:.2f} / {floor.seconds:.2f} s; pct calls per container {calls_by_task(run)}"
                        + (f"; by play {calls_by_play(run)}; changed results: {changes(run)}" if variant.playbook == LAUNCH else "")))
    where = f"where the time goes at {counts[-1]} containers" + (", delay burnt as CPU" if ctx.burns(FLEET_DELAY) else "")
    for key, label in (("launch.yml", "whole launch.yml, as shipped"), ("launch_only", "launch_only.yml, as shipped")):
        if key in runs and runs[key]:
            persist = runs.get(f"{key} persist", [])
            rows.extend(breakdown_rows(f"{where}: {label}", runs[key][-1], persist[-1] if persist else None))
    return rows
