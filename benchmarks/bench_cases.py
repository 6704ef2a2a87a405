# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The measurements: pct calls, launch-to-verified wall time, detection latency, fan-out, overheads.

Each function runs its commands on the stand-in nodes and returns table rows. Figures are ratios
and counts measured in the same run, printed with their raw numbers; nothing here asserts on time.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from bench_env import LAUNCH_SHIPPED, MAIN_NODE, MAIN_VMID, NO_PERSIST, NODE_VMIDS, SHIPPED, TUNED, Context, Run, median
from bench_setup import JOB_FILE, log

PATTERN_PY = r"^step \d+ loss"
PATTERN_ERE = "^step [0-9]+ loss"
JOB_COMMAND = "python3 -u /bench/bench_job.py"
DIE_COMMAND = "python3 -u /bench/bench_job.py --die-after 1"
LAUNCH = "playbooks/launch.yml"
LAUNCH_ONLY = "benchmarks/launch_only.yml"
MAIN = [(MAIN_VMID, MAIN_NODE)]


@dataclasses.dataclass
class Row:
    """One line of the results table."""

    section: str
    measure: str
    result: str
    raw: str = ""


def seconds(value: float) -> str:
    """Seconds with two decimals."""
    return f"{value:.2f} s"


def raw_list(values: Sequence[float]) -> str:
    """Raw wall times, as measured."""
    return ", ".join(f"{value:.2f}" for value in values) + " s"


def raw_runs(runs: Sequence[Run]) -> str:
    """Raw wall times and the controller's CPU time (user + system) of runs."""
    cpu = ", ".join(f"{run.cpu:.1f}" for run in runs)
    return f"wall {raw_list([run.seconds for run in runs])}; CPU {cpu} s"


def ratio(value: float, reference: float) -> str:
    """value / reference, as ``N.N×``."""
    return f"{value / reference:.1f}×" if reference > 0 else "n/a"


def job_vars(ctx: Context, name: str, command: str) -> Path:
    """Write the job description (launch.yml's variables) for session NAME; returns the file."""
    data = {
        "job_hosts": "training", "job_session_name": name, "job_workdir": "/bench", "job_command": command,
        "job_files": [{"src": str(JOB_FILE), "dest": "/bench/bench_job.py", "mode": "0644"}],
        "job_log_path": f"/bench/{name}.log", "job_wait_pattern": PATTERN_PY, "job_fail_pattern": "Traceback",
        "job_wait_timeout": 60,
    }
    path = ctx.workdir / f"job-{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def baseline_job(name: str) -> dict[str, str]:
    """The same job for baseline_launch.sh."""
    return {"session": name, "log": f"/bench/{name}.log", "pattern": PATTERN_ERE, "command": JOB_COMMAND}


def stop_sessions(ctx: Context, name: str, hosts: Sequence[tuple[int, str]]) -> None:
    """End session NAME in these containers, so that the next launch starts it again (not counted)."""
    for node_name, node in ctx.nodes.items():
        vmids = " ".join(str(vmid) for vmid, where in hosts if where == node_name)
        if vmids:
            node.ssh(f"for v in {vmids}; do pct exec $v -- tmux kill-session -t ={shlex.quote(name)} 2>/dev/null; done; true")


def checked(run: Run, expect_rc: int = 0) -> Run:
    """Log a run; a run that did not end as expected is marked in the table, not raised."""
    state = "ok" if run.rc == expect_rc else f"UNEXPECTED exit {run.rc} (see the log in the work folder)"
    log(f"{run.label}: {run.seconds:.2f} s, {len(run.calls)} pct calls, {state}")
    return run


def status(run: Run, expect_rc: int = 0) -> str:
    """Empty when the run ended as expected, else a warning for the table."""
    return "" if run.rc == expect_rc else f" (exit {run.rc}, expected {expect_rc})"


def play_label(name: str) -> str:
    """A short label for a play of launch.yml."""
    for word, label in (("before the launch", "preflight"), ("Record", "record"), ("Prepare", "prepare"), ("Launch", "launch")):
        if word in name:
            return label
    return name


def calls_by_play(run: Run) -> str:
    """pct calls of a launch.yml run, attributed to the play that was running."""
    plays = [(float(str(e["time"])), play_label(str(e["play"]))) for e in run.events if e["event"] == "play_start"]
    counts = [0] * max(len(plays), 1)
    for call in run.calls:
        index = sum(1 for start, dummy in plays if start <= float(str(call["time"]))) - 1
        counts[max(index, 0)] += 1
    names = [label for dummy, label in plays] or ["(no play)"]
    return " + ".join(f"{count} {name}" for name, count in zip(names, counts) if count)


def call_kind(argv: Sequence[str]) -> str:
    """What a pct call was for, from its argv."""
    command = list(argv[argv.index("--") + 1:]) if "--" in argv else []
    if argv[1:2] == ["status"]:
        return "pct status (preflight)"
    if command == ["/bin/sh", "-s"]:
        return "exec /bin/sh -s (a module run on the node with vmid)"
    if command[:2] == ["/bin/sh", "-c"]:
        return "exec /bin/sh -c (pct connection: module tasks)"
    return "exec " + " ".join(command[:2])


def call_kinds(run: Run) -> str:
    """The pct calls of a run by kind: the collection's modules, pct status, the pct connection."""
    kinds: dict[str, int] = {}
    for call in run.calls:
        kind = call_kind([str(arg) for arg in call["argv"]])  # type: ignore[attr-defined]
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in kinds.items())


def short_action(action: object) -> str:
    """A task's module without its collection: ``trainops.pct_launch.tmux_session`` → ``tmux_session``."""
    return str(action).rsplit(".", 1)[-1]


def calls_per_task(run: Run) -> dict[str, int]:
    """The pct calls of a run by the module whose task made them, measured from the call log and the callback.

    A call's VMID (``pct exec VMID``) names its host ``ctVMID``; a host runs one task at a time, and the
    callback records a task's result after the task's last pct call, so a call belongs to the first task of
    its host whose result came at or after the call's start. Calls outside any task are ``(no task)``.
    """
    actions: dict[tuple[str, str], str] = {}
    ends: dict[str, list[tuple[float, str]]] = {}
    for event in run.events:
        key = (str(event.get("host")), str(event.get("task")))
        if event["event"] == "host_start":
            actions[key] = short_action(event["action"])
        elif event["event"] == "host_end":
            ends.setdefault(key[0], []).append((float(str(event["time"])), actions.get(key, key[1])))
    counts: dict[str, int] = {}
    for call in run.calls:
        argv = [str(arg) for arg in call["argv"]]  # type: ignore[attr-defined]
        host = f"ct{argv[2]}" if len(argv) > 2 and argv[1] in ("exec", "status") else ""
        started = float(str(call["time"]))
        task = next((action for ended, action in sorted(ends.get(host, [])) if ended >= started), "(no task)")
        counts[task] = counts.get(task, 0) + 1
    return counts


def calls_by_task(run: Run) -> str:
    """pct calls by task, as ``1 tmux_session + 1 wait_for_log``."""
    return " + ".join(f"{count} {task}" for task, count in calls_per_task(run).items()) or "none"


def launch_runs(ctx: Context, delay: float, whole: bool = True) -> dict[str, list[Run]]:
    """Baseline and launch-only (interleaved, ctx.repeat each), the re-run, and (whole) launch.yml per configuration.

    launch_only.yml runs as shipped: the pct connection's defaults, pipelining on.
    """
    ctx.set_delay(delay)
    job, base, tag = job_vars(ctx, "bench", JOB_COMMAND), baseline_job("base"), f"delay {delay:g}"
    runs: dict[str, list[Run]] = {"baseline": [], "launch-only": []}
    # The comparison at delay 0 gets every repetition; at 0.5 s the difference is larger than the noise.
    for index in range(ctx.repeat if delay == 0 else min(ctx.repeat, 2)):
        stop_sessions(ctx, "base", MAIN)
        runs["baseline"].append(checked(ctx.baseline(f"baseline {tag} #{index + 1}", MAIN_VMID, MAIN_NODE, base)))
        stop_sessions(ctx, "bench", MAIN)
        runs["launch-only"].append(checked(ctx.playbook(f"launch-only {tag} #{index + 1}", LAUNCH_ONLY, MAIN, LAUNCH_SHIPPED, job)))
    runs["launch-only re-run"] = [checked(ctx.playbook(f"launch-only re-run {tag}", LAUNCH_ONLY, MAIN, LAUNCH_SHIPPED, job))]
    if not whole:
        return runs
    for config in [SHIPPED, TUNED]:
        stop_sessions(ctx, "bench", MAIN)
        runs[f"launch.yml {config.name}"] = [checked(ctx.playbook(f"launch.yml {config.name} {tag}", LAUNCH, MAIN, config, job))]
    if delay == 0:
        # After the TUNED run: the job runs. Pipelining makes the count 1 per module task.
        runs["launch.yml re-run"] = [checked(ctx.playbook(f"launch.yml re-run {tag}", LAUNCH, MAIN, TUNED, job))]
    return runs


def count_rows(runs: dict[str, list[Run]]) -> list[Row]:
    """pct calls per run (delay 0), from the nodes' call logs; launch_only.yml's also by task (rows of runs made only)."""
    section = "pct calls (call log of the nodes)"
    lines = [
        ("launch + verify: tmux_session + wait_for_log (benchmarks/launch_only.yml); expected 2", "launch-only", "task"),
        ("idempotent re-run of launch_only.yml (job running: no launch, no wait); expected 1", "launch-only re-run", "task"),
        ("hand-written benchmarks/baseline_launch.sh", "baseline", ""),
        (f"whole playbooks/launch.yml, {SHIPPED.name}", f"launch.yml {SHIPPED.name}", "play"),
        (f"whole launch.yml, idempotent re-run, with {TUNED.name}", "launch.yml re-run", "play"),
        (f"whole launch.yml with {TUNED.name}", f"launch.yml {TUNED.name}", "play"),
    ]
    rows = []
    for measure, key, by in lines:
        if key not in runs:
            continue
        run = runs[key][-1]
        raw = call_kinds(run) + {"task": f"; by task: {calls_by_task(run)}", "play": f"; by play: {calls_by_play(run)}", "": ""}[by]
        rows.append(Row(section, measure, f"{len(run.calls)}{status(run)}", raw))
    return rows


def wall_rows(runs: dict[str, list[Run]], delay: float) -> list[Row]:
    """Launch-to-verified wall time of each variant against the baseline, as ratios with the raw times."""
    section = f"launch-to-verified wall time, stand-in delay {delay:g} s per pct call, CT 400 on pve-g over ssh"
    reference = median([run.seconds for run in runs["baseline"]])
    rows = [Row(section, f"hand-written baseline_launch.sh (median of {len(runs['baseline'])})", seconds(reference),
                raw_runs(runs["baseline"]))]
    for key, what in [("launch-only", f"benchmarks/launch_only.yml, {LAUNCH_SHIPPED.name}"),
                      ("launch-only re-run", "launch_only.yml, idempotent re-run"),
                      (f"launch.yml {SHIPPED.name}", f"playbooks/launch.yml, {SHIPPED.name}"),
                      (f"launch.yml {TUNED.name}", f"launch.yml with {TUNED.name}")]:
        if key not in runs:
            continue
        walls = [run.seconds for run in runs[key]]
        warn = "".join(status(run) for run in runs[key])
        rows.append(Row(section, f"{what} / baseline", ratio(median(walls), reference) + warn, raw_runs(runs[key])))
    return rows


def task_breakdown(run: Run) -> dict[str, tuple[float, int]]:
    """Seconds and task count of a one-host playbook run by where the time went."""
    controller = {"assert", "debug", "set_fact", "include_vars", "fail", "meta", "include_role", "include_tasks",
                  "import_tasks", "validate_argument_spec"}
    parts: dict[str, tuple[float, int]] = {}
    # A host runs one task at a time; host_end names role tasks without the role's prefix.
    open_tasks: dict[str, dict[str, object]] = {}
    for event in run.events:
        key = str(event.get("host"))
        if event["event"] == "host_start":
            open_tasks[key] = event
        elif event["event"] == "host_end" and key in open_tasks:
            start = open_tasks.pop(key)
            action = str(start["action"]).rsplit(".", 1)[-1]
            if event["status"] == "skipped" or action in controller:
                kind = "controller-only or skipped tasks"
            elif action in ("gather_facts", "setup"):
                kind = "fact gathering via the pct connection"
            else:
                kind = "tasks delegated to the node (ssh)" if start["delegated"] else "module tasks via the pct connection"
            spent, count = parts.get(kind, (0.0, 0))
            parts[kind] = (spent + float(str(event["time"])) - float(str(start["time"])), count + 1)
    first = run.event_time("playbook_start") or run.started
    parts["Ansible start-up (process start to playbook loaded)"] = (first - run.started, 0)
    parts["between tasks, recap and exit"] = (run.seconds - sum(spent for spent, dummy in parts.values()), 0)
    return parts


def breakdown_rows(runs: dict[str, list[Run]]) -> list[Row]:
    """Where launch.yml's wall time goes, as shipped and tuned (delay 0; when launch.yml ran), and launch_only.yml's."""
    section = "where launch.yml's time goes (delay 0, one container)"
    rows = []
    if f"launch.yml {SHIPPED.name}" in runs and f"launch.yml {TUNED.name}" in runs:
        shipped, tuned = runs[f"launch.yml {SHIPPED.name}"][-1], runs[f"launch.yml {TUNED.name}"][-1]
        left, right = task_breakdown(shipped), task_breakdown(tuned)
        rows.append(Row(section, "wall time: as shipped / with pipelining + ControlPersist", f"{seconds(shipped.seconds)} / {seconds(tuned.seconds)}",
                        f"{len(shipped.calls)} / {len(tuned.calls)} pct calls; controller CPU {shipped.cpu:.1f} / {tuned.cpu:.1f} s"))
        for kind, (spent_left, count) in left.items():
            spent_right = right.get(kind, (0.0, 0))[0]
            share = f"{100 * spent_left / shipped.seconds:.0f} % / {100 * spent_right / tuned.seconds:.0f} %"
            rows.append(Row(section, kind + (f" ({count} tasks)" if count else ""), f"{seconds(spent_left)} / {seconds(spent_right)}", share))
    launch_only = sorted(runs["launch-only"], key=lambda run: run.seconds)[len(runs["launch-only"]) // 2]
    parts = "; ".join(f"{kind} {spent:.2f} s" for kind, (spent, dummy) in task_breakdown(launch_only).items())
    rows.append(Row(section, f"launch_only.yml, median run, {LAUNCH_SHIPPED.name}", seconds(launch_only.seconds), parts))
    return rows


def death_times(ctx: Context, name: str) -> tuple[float, float]:
    """The job's own time of death and ended_at of LOG.exit (whole seconds), as epoch seconds."""
    text = ctx.main.ssh(f"pct exec {MAIN_VMID} -- sh -c 'cat /bench/{name}.log /bench/{name}.log.exit'").stdout.decode()
    died = re.search(r"died_at=([0-9.]+)", text)
    ended = re.search(r"^ended_at=(\S+)$", text, re.MULTILINE)
    if died is None or ended is None:
        raise RuntimeError(f"no died_at or ended_at in the die job's log:\n{text}")
    return float(died.group(1)), datetime.fromisoformat(ended.group(1).replace("Z", "+00:00")).timestamp()


def detection_rows(ctx: Context) -> list[Row]:
    """A job that dies 1 s after its start: seconds from its death to the failed play's end."""
    section = "detection: the job dies 1 s after its start (launch_only.yml, delay 0)"
    ctx.set_delay(0)
    job = job_vars(ctx, "die", DIE_COMMAND)
    own, exit_file, verdict, waited, whole = [], [], [], [], []
    for index in range(ctx.repeat):
        run = checked(ctx.playbook(f"dies after 1 s #{index + 1}", LAUNCH_ONLY, MAIN, LAUNCH_SHIPPED, job), expect_rc=2)
        died, ended = death_times(ctx, "die")
        play_end = run.event_time("stats") or run.ended
        failed = [float(str(e["time"])) for e in run.events if e["event"] == "host_end" and e["status"] == "failed"] or [play_end]
        began = [float(str(e["time"])) for e in run.events if e["event"] == "host_start" and "Wait" in str(e["task"])] or [play_end]
        own.append(play_end - died)
        exit_file.append(play_end - ended)
        verdict.append(failed[-1] - died)
        waited.append(failed[-1] - began[-1])
        whole.append(run.seconds)
    return [
        Row(section, "one container: job's own time of death → end of the failed play (median)", seconds(median(own)), raw_list(own)),
        Row(section, "ended_at in LOG.exit (whole seconds) → end of the failed play", seconds(median(exit_file)), raw_list(exit_file)),
        Row(section, "job's death → wait_for_log's failed result", seconds(median(verdict)), raw_list(verdict)),
        Row(section, "wait_for_log's start → its failed result (\"died\", exit status 3)", seconds(median(waited)), raw_list(waited)),
        Row(section, "whole ansible-playbook run (launch, 1 s of life, detection), exit status 2", seconds(median(whole)), raw_list(whole)),
    ]


# A 4-rank multi-node job on both nodes (launch.yml, job_prepare: false): rank 2 dies 1 s after its start,
# the others wait for a rendezvous that never comes, until the fleet-wide wait ends them.
FLEET_DIE_COMMAND = ('if [ "$NODE_RANK" = 2 ]; then exec python3 -u /bench/bench_job.py --die-after 1; '
                     'else exec python3 -u /bench/bench_job.py --rendezvous; fi')


def fleet_death_rows(ctx: Context) -> list[Row]:
    """The multi-node job with one rank dying: seconds from its death to the failed play's end."""
    section = "detection: the job dies 1 s after its start (launch_only.yml, delay 0)"
    hosts = fanout_hosts(4)
    path = job_vars(ctx, "fleetdie", FLEET_DIE_COMMAND)
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(job_multinode=True, job_prepare=False, job_master_addr="127.0.0.1", job_stop_timeout=5)
    path.write_text(json.dumps(data), encoding="utf-8")
    own, whole = [], []
    for index in range(ctx.repeat):
        run = checked(ctx.playbook(f"4 ranks, one dies after 1 s #{index + 1}", LAUNCH, hosts, TUNED, path, forks=8), expect_rc=2)
        died = None
        for vmid, node in hosts:
            text = ctx.nodes[node].ssh(f"pct exec {vmid} -- cat /bench/fleetdie.log").stdout.decode()
            found = re.search(r"died_at=([0-9.]+)", text)
            died = float(found.group(1)) if found else died
        if died is None:
            raise RuntimeError("no rank of the 4-rank job logged died_at")
        own.append((run.event_time("stats") or run.ended) - died)
        whole.append(run.seconds)
    stop_sessions(ctx, "fleetdie", hosts)
    return [
        Row(section, "4-rank job on 2 nodes (launch.yml), one rank dies 1 s after its start: its death → end of the failed play",
            seconds(median(own)), raw_list(own)),
        Row(section, "the same: whole ansible-playbook run, exit status 2", seconds(median(whole)), raw_list(whole)),
    ]


def fanout_hosts(count: int) -> list[tuple[int, str]]:
    """COUNT containers: CT 400 alone, else half on each node."""
    if count == 1:
        return list(MAIN)
    return [(vmid, node) for node, vmids in NODE_VMIDS.items() for vmid in vmids[:count // 2]]


# With ControlPersist, the masters are open before the run, as launch.yml's preflight leaves them
# for its launch play, or an earlier run within ControlPersist's 60 s.
FANOUT_VARIANTS = (("without ControlPersist", NO_PERSIST, False), ("with ControlPersist (masters open)", TUNED, True))


def fanout_runs(ctx: Context, counts: Sequence[int]) -> dict[str, list[Run]]:
    """launch_only.yml on each count of containers, forks 32, the variants interleaved (the load drifts)."""
    ctx.set_delay(0)
    job = job_vars(ctx, "fan", JOB_COMMAND)
    runs: dict[str, list[Run]] = {label: [] for label, dummy, dummy_warm in FANOUT_VARIANTS}
    for count in counts:
        hosts = fanout_hosts(count)
        for label, config, warm in FANOUT_VARIANTS:
            stop_sessions(ctx, "fan", hosts)
            run = ctx.playbook(f"fan-out {count} {label}", LAUNCH_ONLY, hosts, config, job, forks=32, warm=warm)
            runs[label].append(checked(run))
    ctx.close_masters()
    stop_sessions(ctx, "fan", fanout_hosts(max(counts)))
    return runs


def fanout_rows(ctx: Context, counts: Sequence[int]) -> list[Row]:
    """Wall time on 1, 8 and 32 containers across both nodes, cost per added container, with and without ControlPersist."""
    section = "fan-out: launch_only.yml, forks 32, containers split over pve-g and pve-h (delay 0)"
    runs = fanout_runs(ctx, counts)
    rows = []
    for label, variant_runs in runs.items():
        walls = [run.seconds for run in variant_runs]
        calls = " / ".join(f"{len(run.calls)}{status(run)}" for run in variant_runs)
        cpu = " / ".join(f"{run.cpu:.1f}" for run in variant_runs)
        rows.append(Row(section, f"{' / '.join(map(str, counts))} containers, {label}: wall", " / ".join(seconds(wall) for wall in walls),
                        f"pct calls {calls} (at {counts[-1]}: {calls_by_task(variant_runs[-1])}); controller CPU {cpu} s"))
        for index in range(1, len(counts)):
            added = counts[index] - counts[0]
            rows.append(Row(section, f"cost per added container {counts[0]}→{counts[index]}, {label}", seconds((walls[index] - walls[0]) / added),
                            f"({walls[index]:.2f} - {walls[0]:.2f}) / {added}"))
        added = counts[-1] - counts[0]
        if added > 0:
            cpu_cost = (variant_runs[-1].cpu - variant_runs[0].cpu) / added
            rows.append(Row(section, f"controller CPU per added container {counts[0]}→{counts[-1]}, {label}", seconds(cpu_cost),
                            f"({variant_runs[-1].cpu:.1f} - {variant_runs[0].cpu:.1f}) / {added}"))
    reference = runs[FANOUT_VARIANTS[0][0]][-1].seconds
    for label, dummy, dummy_warm in FANOUT_VARIANTS[1:]:
        wall = runs[label][-1].seconds
        rows.append(Row(section, f"{counts[-1]} containers: {label} / without", ratio(wall, reference), f"{wall:.2f} / {reference:.2f} s"))
    return rows
