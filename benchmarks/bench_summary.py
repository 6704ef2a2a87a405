# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The summary at the top of the table: the headline figures, picked from the sections' runs (ctx.facts).

A figure whose section failed or was skipped is left out; the section's own rows say why. The figures at a delay
burnt as CPU (``benchmarks/run.sh --delay-mode cpu`` or ``both``: facts ``single 0.5 cpu``, ``fleet cpu``) have
rows of their own, labelled so.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from bench_cases import Row, calls_by_play, calls_by_task, per_host, ratio
from bench_env import Context, Run, median

SECTION = "summary (the figures of the sections below)"
CPU_DELAY = "0.5 s of CPU (delay_mode cpu)"


def walls(runs: Sequence[Run]) -> float:
    """Median wall time."""
    return median([run.seconds for run in runs])


def per_container(run: Run) -> str:
    """pct calls per container, as ``4``."""
    return per_host(len(run.calls), run.hosts)


def single_rows(facts: dict[str, object], cpu: bool = False) -> list[Row]:
    """One container: pct calls, re-launch and launch-only against the hand-written script (cpu: at the delay burnt
    as CPU, the wall times only)."""
    rows = []
    zero, half = facts.get("single 0"), facts.get("single 0.5 cpu" if cpu else "single 0.5")
    delay = CPU_DELAY if cpu else "0.5 s"
    if isinstance(zero, dict) and "launch-only" in zero and not cpu:
        rows.append(Row(SECTION, "`pct` calls: launch + verify (`tmux_session` + `wait_for_log`) / idempotent re-run",
                        f"{len(zero['launch-only'][-1].calls)} / {len(zero['launch-only re-run'][-1].calls)}",
                        f"hand-written script: {len(zero['baseline'][-1].calls)}"))
    if isinstance(half, dict) and "launch.yml re-launch" in half:
        relaunch = half["launch.yml re-launch"][-1]
        others = []
        if isinstance(zero, dict) and "launch.yml re-run" in zero:
            others.append(f"idempotent re-run {len(zero['launch.yml re-run'][-1].calls)}")
        off = facts.get("pipelining off")
        if isinstance(off, Run):
            others.append(f"pipelining off {len(off.calls)}")
        if not cpu:
            rows.append(Row(SECTION, "`pct` calls per container: whole `launch.yml` re-launched into a prepared container, as shipped",
                            str(len(relaunch.calls)), f"by play: {calls_by_play(relaunch)}; by task: {calls_by_task(relaunch)}"
                            + (f"; {', '.join(others)}" if others else "")))
        reference = walls(half["baseline"])
        raw = f"{walls(half['launch.yml re-launch']):.2f} s / {reference:.2f} s"
        persist = half.get("launch.yml re-launch, ControlPersist")
        if persist:
            raw += f"; ssh masters open {ratio(persist[-1].seconds, reference)} ({persist[-1].seconds:.2f} s)"
        unshared = half.get("launch.yml re-launch, no sharing")
        if unshared:
            raw += f"; pct_ssh_control_persist: no {ratio(unshared[-1].seconds, reference)} ({unshared[-1].seconds:.2f} s)"
        if isinstance(zero, dict) and "launch.yml re-launch" in zero:
            raw += f"; delay 0: {ratio(walls(zero['launch.yml re-launch']), walls(zero['baseline']))}"
        rows.append(Row(SECTION, f"re-launch, whole `launch.yml` / hand-written script, one container, `pct` delay {delay}",
                        ratio(walls(half["launch.yml re-launch"]), reference), raw))
    if isinstance(zero, dict) and isinstance(half, dict) and "launch-only" in zero and "launch-only" in half:
        rows.append(Row(SECTION, f"launch-only playbook / hand-written script, delay 0 / {delay}",
                        f"{ratio(walls(zero['launch-only']), walls(zero['baseline']))} / {ratio(walls(half['launch-only']), walls(half['baseline']))}",
                        f"{walls(zero['launch-only']):.2f} s / {walls(zero['baseline']):.2f} s; "
                        f"{walls(half['launch-only']):.2f} s / {walls(half['baseline']):.2f} s"))
    return rows


def fleet_rows(facts: dict[str, object], cpu: bool = False) -> list[Row]:
    """The fleet against the parallel launcher, the floor; the controller's cost per added container (cpu: at the
    delay burnt as CPU)."""
    fleet, counts = facts.get("fleet cpu" if cpu else "fleet"), facts.get("fleet counts")
    delay = CPU_DELAY if cpu else "0.5 s"
    if not isinstance(fleet, dict) or not isinstance(counts, list) or not fleet.get("parallel"):
        return []
    floor, last = fleet["parallel"][-1], counts[-1]

    def pair(key: str) -> tuple[str, str]:
        shipped, persist = fleet.get(key), fleet.get(f"{key} persist")
        result = [f"{ratio(shipped[-1].seconds, floor.seconds)} as shipped"] if shipped else []
        raw = [f"{shipped[-1].seconds:.2f} s"] if shipped else []
        if persist:
            result.append(f"{ratio(persist[-1].seconds, floor.seconds)} masters open")
            raw.append(f"{persist[-1].seconds:.2f} s")
        return " / ".join(result), " / ".join(raw) + f" against {floor.seconds:.2f} s"

    rows = []
    for key, what in (("launch.yml", "whole `launch.yml` re-launch"), ("launch_only", "`launch_only.yml` (launch + verify)")):
        if fleet.get(key):
            result, raw = pair(key)
            run = fleet[key][-1]
            rows.append(Row(SECTION, f"{last} containers on 2 nodes, forks {last}, delay {delay}: {what} / parallel launcher", result,
                            f"{raw}; {per_container(run)} `pct` calls per container"))
    floors = [facts.get("parallel 0"), fleet["parallel"]]
    if all(isinstance(runs, list) and runs for runs in floors) and not cpu:
        text = "; ".join(" / ".join(f"{run.seconds:.2f}" for run in runs) + " s" for runs in floors if isinstance(runs, list))
        rows.append(Row(SECTION, f"parallel launcher (`xargs -P`, ssh masters open): {' / '.join(map(str, counts))} containers, delay 0; 0.5 s",
                        text, "2 `pct` calls per container, as the single script"))
    costs, memory = [], []
    for key, what in (("launch.yml", "launch.yml"), ("launch_only", "launch_only.yml"), ("parallel", "launcher")):
        runs = fleet.get(key)
        if runs and len(runs) == len(counts) and len(counts) > 1:
            added = counts[-1] - counts[0]
            costs.append(f"{what} {(runs[-1].cpu - runs[0].cpu) / added:.3f}")
            memory.append(f"{what} {(runs[-1].peak_pss - runs[0].peak_pss) / added:.1f} MiB, wall {(runs[-1].seconds - runs[0].seconds) / added:.2f} s")
    if costs:
        rows.append(Row(SECTION, f"controller per added container ({counts[0]} → {counts[-1]}, as shipped, delay {delay}): CPU seconds",
                        " / ".join(costs), "memory (peak Pss) and wall: " + "; ".join(memory)))
    rows.extend(inside_rows(facts, fleet, last, delay))
    return rows


def inside_rows(facts: dict[str, object], fleet: dict[str, list[Run]], last: int, delay: str) -> list[Row]:
    """The CPU used inside the containers per container at the largest count, against the controller's."""
    variants = (("parallel", "launcher"), ("launch_only", "launch_only.yml"), ("launch.yml", "launch.yml"))
    measured = [(what, fleet[key][-1]) for key, what in variants
                if fleet.get(key) and fleet[key][-1].container_cpu is not None]
    if not measured:
        return []
    raw = "; ".join(f"{what} {run.container_cpu:.1f} s in all, controller {1000 * run.cpu / run.hosts:.0f} ms per container"
                    for what, run in measured)
    single = facts.get("container cpu")
    if isinstance(single, dict):
        known = [f"{what.split(' (')[0].split(', ')[0]} {value:.0f} ms" for what, value in single.items() if isinstance(value, float)]
        raw += ("; one command or module run in CT 400: " + ", ".join(known)) if known else ""
    return [Row(SECTION, f"CPU per container inside the containers ({last} containers, delay {delay}, playbooks as shipped; cgroup counters): "
                + " / ".join(what for what, dummy in measured),
                " / ".join(f"{1000 * (run.container_cpu or 0) / run.hosts:.0f}" for dummy, run in measured) + " ms", raw)]


def other_rows(facts: dict[str, object]) -> list[Row]:
    """Detection, the first launch into a fresh container, what a run is made of."""
    rows = []
    detection = facts.get("detection")
    if isinstance(detection, tuple):
        fleet = facts.get("detection 4 ranks")
        rows.append(Row(SECTION, "a job dies 1 s after its start → the play has failed", f"{detection[0]:.2f} s after its death",
                        f"{detection[1]:.2f} s after `ended_at` in `LOG.exit` (whole seconds)"
                        + (f"; 4-rank job on 2 nodes: {fleet:.2f} s" if isinstance(fleet, float) else "")))
    fresh = facts.get("fresh")
    if isinstance(fresh, Run):
        rows.append(Row(SECTION, "first launch into a fresh container (apt installs tmux), delay 0.5 s", f"{fresh.seconds:.1f} s",
                        f"{len(fresh.calls)} `pct` calls: {calls_by_play(fresh)}"))
    overheads = facts.get("overheads")
    if isinstance(overheads, dict):
        rows.append(Row(SECTION, "Ansible start-up / ssh handshake / ssh through a master / `pct exec` (stand-in)",
                        " / ".join(f"{overheads[key]:.2f}" for key in ("empty play", "ssh new", "ssh master", "pct exec")) + " s",
                        "real `pct` adds about 0.5 s per call"))
    return rows


def summary_rows(ctx: Context) -> list[Row]:
    """The headline rows; a part whose facts are malformed is left out rather than failing the table."""
    rows: list[Row] = []
    builders: list[tuple[str, Callable[[dict[str, object]], list[Row]]]] = [
        ("single_rows", single_rows), ("fleet_rows", fleet_rows),
        ("single_rows, delay burnt as CPU", functools.partial(single_rows, cpu=True)),
        ("fleet_rows, delay burnt as CPU", functools.partial(fleet_rows, cpu=True)), ("other_rows", other_rows)]
    for name, build in builders:
        try:
            rows.extend(build(ctx.facts))
        except (KeyError, IndexError, TypeError, ZeroDivisionError, AttributeError) as exc:
            rows.append(Row(SECTION, f"({name} left out)", "FAILED", f"{type(exc).__name__}: {exc}"[:200]))
    return rows
