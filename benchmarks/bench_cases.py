# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The measurements on one container: pct calls, launch-to-verified wall time, where the time goes, detection latency.

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

from bench_env import FRESH_VMID, MAIN_NODE, MAIN_VMID, NODE_VMIDS, NO_SHARE, PERSIST, PIPELINING_OFF, SHIPPED, Context, Run, median
from bench_setup import JOB_FILE, log, run_on_nodes

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
    return {"session": name, "log": f"/bench/{name}.log", "pattern": PATTERN_ERE, "command": JOB_COMMAND,
            "pattern_py": PATTERN_PY, "chdir": "/bench"}


def stop_sessions(ctx: Context, name: str, hosts: Sequence[tuple[int, str]]) -> None:
    """End session NAME in these containers, so that the next launch starts it again (not counted; all at once)."""
    scripts = {}
    for node_name in ctx.nodes:
        vmids = " ".join(str(vmid) for vmid, where in hosts if where == node_name)
        if vmids:
            scripts[node_name] = f"for v in {vmids}; do pct exec $v -- tmux kill-session -t ={shlex.quote(name)} 2>/dev/null & done; wait; true"
    run_on_nodes(ctx, scripts, f"ending the sessions {name}")


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
    words = (("before the launch", "preflight"), ("GPU", "preflight"), ("Record", "record"), ("Prepare", "prepare"), ("lack", "prepare"),
             ("Launch", "launch"))
    for word, label in words:
        if word in name:
            return label
    return name


def per_host(count: float, hosts: int) -> str:
    """COUNT per host: ``2``, or ``1.4`` when the hosts differ."""
    value = count / max(hosts, 1)
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def play_starts(run: Run) -> list[tuple[float, str]]:
    """The plays of a run: start time and short label."""
    return [(float(str(e["time"])), play_label(str(e["play"]))) for e in run.events if e["event"] == "play_start"]


def play_of(plays: Sequence[tuple[float, str]], when: float) -> int:
    """Index of the play that was running at WHEN (0 before the first)."""
    return max(sum(1 for start, dummy in plays if start <= when) - 1, 0)


def play_calls(run: Run) -> dict[str, int]:
    """pct calls of a launch.yml run by the play that was running (plays with none included)."""
    plays = play_starts(run)
    counts = [0] * max(len(plays), 1)
    for call in run.calls:
        counts[play_of(plays, float(str(call["time"])))] += 1
    result: dict[str, int] = {}
    for (dummy, label), count in zip(plays or [(0.0, "(no play)")], counts):
        result[label] = result.get(label, 0) + count
    return result


def calls_by_play(run: Run) -> str:
    """pct calls of a launch.yml run by play, per container: ``1 preflight + 1 prepare + 2 launch``."""
    return " + ".join(f"{per_host(count, run.hosts)} {label}" for label, count in play_calls(run).items() if count) or "none"


def changed_by_play(run: Run) -> dict[str, int]:
    """Task results that changed something, by play (every play of the run listed)."""
    plays = play_starts(run)
    result = {label: 0 for dummy, label in plays}
    for event in run.events:
        if event["event"] == "host_end" and event.get("changed"):
            label = plays[play_of(plays, float(str(event["time"])))][1] if plays else "(no play)"
            result[label] = result.get(label, 0) + 1
    return result


def play_times(run: Run) -> dict[str, float]:
    """Wall seconds of each play (the last one until the recap)."""
    plays = play_starts(run)
    end = run.event_time("stats") or run.ended
    result: dict[str, float] = {}
    for index, (start, label) in enumerate(plays):
        until = plays[index + 1][0] if index + 1 < len(plays) else end
        result[label] = result.get(label, 0.0) + until - start
    return result


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
    its host whose result came at or after the call's start. A call of a host with no result after it belongs to
    the task that was running when it started (a run_once or delegated task works for other hosts from one host's
    worker); calls before any task are ``(no task)``.
    """
    actions: dict[tuple[str, str], str] = {}
    ends: dict[str, list[tuple[float, str]]] = {}
    starts = [(float(str(event["time"])), short_action(event["action"])) for event in run.events if event["event"] == "task_start"]
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
        task = next((action for ended, action in sorted(ends.get(host, [])) if ended >= started), "")
        task = task or next((action for began, action in reversed(starts) if began <= started), "(no task)")
        counts[task] = counts.get(task, 0) + 1
    return counts


def calls_by_task(run: Run) -> str:
    """pct calls by task, per container, as ``1 tmux_session + 1 wait_for_log``."""
    return " + ".join(f"{per_host(count, run.hosts)} {task}" for task, count in calls_per_task(run).items()) or "none"


def launch_runs(ctx: Context, delay: float, whole: bool = True) -> dict[str, list[Run]]:
    """Baseline and launch-only (interleaved), launch-only's re-run, and (whole) launch.yml re-launched into CT 400.

    A re-launch: the container is prepared (the warm-up ran launch.yml there, so the roles find nothing to do),
    the job's session is ended first, and launch.yml runs with job_prepare at its default, as shipped. At delay 0
    also an idempotent re-run (the job runs); at 0.5 s also a re-launch with the ssh masters open, and one without sharing.
    """
    ctx.set_delay(delay)
    job, base, tag = job_vars(ctx, "bench", JOB_COMMAND), baseline_job("base"), f"delay {ctx.delay_tag(delay)}"
    runs: dict[str, list[Run]] = {"baseline": [], "launch-only": []}
    # The comparison at delay 0 gets every repetition; at 0.5 s the difference is larger than the noise.
    repeat = ctx.repeat if delay == 0 else min(ctx.repeat, 2)
    for index in range(repeat):
        stop_sessions(ctx, "base", MAIN)
        runs["baseline"].append(checked(ctx.baseline(f"baseline {tag} #{index + 1}", MAIN_VMID, MAIN_NODE, base)))
        stop_sessions(ctx, "bench", MAIN)
        runs["launch-only"].append(checked(ctx.playbook(f"launch-only {tag} #{index + 1}", LAUNCH_ONLY, MAIN, SHIPPED, job)))
    runs["launch-only re-run"] = [checked(ctx.playbook(f"launch-only re-run {tag}", LAUNCH_ONLY, MAIN, SHIPPED, job))]
    if whole:
        runs["launch.yml re-launch"] = []
        for index in range(1 if delay == 0 else repeat):
            stop_sessions(ctx, "bench", MAIN)
            runs["launch.yml re-launch"].append(checked(ctx.playbook(f"launch.yml re-launch {tag} #{index + 1}", LAUNCH, MAIN, SHIPPED, job)))
        if delay == 0:
            runs["launch.yml re-run"] = [checked(ctx.playbook(f"launch.yml idempotent re-run {tag}", LAUNCH, MAIN, SHIPPED, job))]
        else:
            stop_sessions(ctx, "bench", MAIN)
            runs["launch.yml re-launch, ControlPersist"] = [
                checked(ctx.playbook(f"launch.yml re-launch ControlPersist {tag}", LAUNCH, MAIN, PERSIST, job, warm=True))]
            stop_sessions(ctx, "bench", MAIN)
            runs["launch.yml re-launch, no sharing"] = [
                checked(ctx.playbook(f"launch.yml re-launch no sharing {tag}", LAUNCH, MAIN, NO_SHARE, job))]
    stop_sessions(ctx, "bench", MAIN)
    ctx.facts[f"single {ctx.delay_tag(delay)}"] = runs
    return runs


def prepare_changes(run: Run) -> str:
    """How many task results of the prepare play changed something (0: a re-launch into a prepared container)."""
    changed = changed_by_play(run).get("prepare")
    return "" if changed is None else f"; prepare changed {changed} task result{'s' if changed != 1 else ''}"


def count_rows(runs: dict[str, list[Run]]) -> list[Row]:
    """pct calls per run (delay 0), from the nodes' call logs, by task and (launch.yml) by play."""
    section = "pct calls (call log of the nodes), one container"
    lines = [
        ("launch + verify: tmux_session + wait_for_log (benchmarks/launch_only.yml); expected 2", "launch-only", "task"),
        ("idempotent re-run of launch_only.yml (job running: no launch, no wait); expected 1", "launch-only re-run", "task"),
        ("hand-written benchmarks/baseline_launch.sh", "baseline", ""),
        (f"whole playbooks/launch.yml, re-launch into a prepared container, {SHIPPED.name}", "launch.yml re-launch", "play"),
        (f"whole launch.yml, idempotent re-run (the job runs), {SHIPPED.name}", "launch.yml re-run", "play"),
    ]
    rows = []
    for measure, key, by in lines:
        if key not in runs:
            continue
        run = runs[key][-1]
        raw = call_kinds(run)
        if by:
            raw += f"; by task: {calls_by_task(run)}"
        if by == "play":
            raw += f"; by play: {calls_by_play(run)}{prepare_changes(run)}"
        rows.append(Row(section, measure, f"{len(run.calls)}{status(run)}", raw))
    return rows


def wall_rows(runs: dict[str, list[Run]], delay: str) -> list[Row]:
    """Launch-to-verified wall time of each variant against the baseline, as ratios with the raw times (delay: as
    Context.delay_text gives it)."""
    section = f"launch-to-verified wall time, stand-in delay {delay} per pct call, CT 400 on pve-g over ssh"
    reference = median([run.seconds for run in runs["baseline"]])
    rows = [Row(section, f"hand-written baseline_launch.sh (median of {len(runs['baseline'])}; cold: no ssh master)", seconds(reference),
                raw_runs(runs["baseline"]))]
    for key, what in [("launch-only", f"benchmarks/launch_only.yml, {SHIPPED.name}"),
                      ("launch-only re-run", "launch_only.yml, idempotent re-run"),
                      ("launch.yml re-launch", f"whole playbooks/launch.yml, re-launch into a prepared container, {SHIPPED.name}"),
                      ("launch.yml re-launch, ControlPersist", f"the same, {PERSIST.name}"),
                      ("launch.yml re-launch, no sharing", f"the same, {NO_SHARE.name}")]:
        if key not in runs:
            continue
        walls = [run.seconds for run in runs[key]]
        warn = "".join(status(run) for run in runs[key])
        calls = f"; {len(runs[key][-1].calls)} pct calls" if key.startswith("launch.yml") else ""
        rows.append(Row(section, f"{what} / baseline", ratio(median(walls), reference) + warn, raw_runs(runs[key]) + calls))
    return rows


CONTROLLER_ACTIONS = {"assert", "debug", "set_fact", "include_vars", "fail", "meta", "include_role", "include_tasks",
                      "import_tasks", "validate_argument_spec", "add_host", "group_by", "set_stats"}

# The kinds of the module tasks that have one of their own.
MODULE_KINDS = {"gather_facts": "fact gathering via the pct connection", "setup": "fact gathering via the pct connection",
                "tmux_session": "launch: tmux_session", "wait_for_log": "proof: wait_for_log"}


def task_kind(action: str, status_: str, delegated: bool, host: str = "") -> str:
    """Where a task's time goes, from its module and where it ran."""
    if status_ == "skipped":
        return "skipped tasks (a worker per host all the same)"
    if action in CONTROLLER_ACTIONS or host == "localhost":
        return "controller-only tasks (set_fact, assert, ...)"
    if action in MODULE_KINDS:
        return MODULE_KINDS[action]
    return "tasks delegated to the node (ssh)" if delegated else "other module tasks via the pct connection"


def task_breakdown(run: Run) -> dict[str, tuple[float, int]]:
    """Seconds and task count of a one-host playbook run by where the time went."""
    parts: dict[str, tuple[float, int]] = {}
    # A host runs one task at a time; host_end names role tasks without the role's prefix.
    open_tasks: dict[str, dict[str, object]] = {}
    for event in run.events:
        key = str(event.get("host"))
        if event["event"] == "host_start":
            open_tasks[key] = event
        elif event["event"] == "host_end" and key in open_tasks:
            start = open_tasks.pop(key)
            kind = task_kind(short_action(start["action"]), str(event["status"]), bool(start["delegated"]), key)
            spent, count = parts.get(kind, (0.0, 0))
            parts[kind] = (spent + float(str(event["time"])) - float(str(start["time"])), count + 1)
    first = run.event_time("playbook_start") or run.started
    parts["Ansible start-up (process start to playbook loaded)"] = (first - run.started, 0)
    parts["between tasks, recap and exit"] = (run.seconds - sum(spent for spent, dummy in parts.values()), 0)
    return parts


def breakdown_rows(ctx: Context) -> list[Row]:
    """Where launch.yml's wall time goes on one container, re-launch as shipped, at delay 0 and 0.5 s; and launch_only.yml's."""
    section = f"where launch.yml's time goes (re-launch as shipped, one container): delay 0 / delay {ctx.delay_text(0.5)}"
    singles = [ctx.facts.get(f"single {ctx.delay_tag(delay)}") for delay in (0.0, 0.5)]
    relaunches = [runs["launch.yml re-launch"][-1] for runs in singles if isinstance(runs, dict) and "launch.yml re-launch" in runs]
    rows = []
    if relaunches:
        parts = [task_breakdown(run) for run in relaunches]
        rows.append(Row(section, "wall time", " / ".join(seconds(run.seconds) for run in relaunches),
                        "pct calls " + " / ".join(str(len(run.calls)) for run in relaunches) + "; controller CPU "
                        + " / ".join(f"{run.cpu:.1f}" for run in relaunches) + " s; by play: " + calls_by_play(relaunches[-1])))
        kinds = list(dict.fromkeys(kind for part in parts for kind in part))
        for kind in kinds:
            counts = {part.get(kind, (0.0, 0))[1] for part in parts}
            label = kind + (f" ({'/'.join(map(str, sorted(counts)))} tasks)" if max(counts) else "")
            rows.append(Row(section, label, " / ".join(seconds(part.get(kind, (0.0, 0))[0]) for part in parts),
                            " / ".join(f"{100 * part.get(kind, (0.0, 0))[0] / run.seconds:.0f} %" for part, run in zip(parts, relaunches))))
    single = ctx.facts.get("single 0")
    if isinstance(single, dict) and single.get("launch-only"):
        launch_only = sorted(single["launch-only"], key=lambda run: run.seconds)[len(single["launch-only"]) // 2]
        parts_text = "; ".join(f"{kind} {spent:.2f} s" for kind, (spent, dummy) in task_breakdown(launch_only).items())
        rows.append(Row(section, f"launch_only.yml, median run at delay 0, {SHIPPED.name}", seconds(launch_only.seconds), parts_text))
    return rows


def first_launch_rows(ctx: Context) -> list[Row]:
    """A first launch into a container created just before (no tmux: apt installs it), delay 0.5 s, as shipped."""
    section = f"first launch into a fresh container (created just before: prepare.yml installs tmux with apt), delay {ctx.delay_text(0.5)}"
    ctx.set_delay(0.5)
    hosts = [(FRESH_VMID, MAIN_NODE)]
    ctx.main.ssh(f"pct destroy {FRESH_VMID} --force >/dev/null 2>&1; pct create {FRESH_VMID} --hostname bench{FRESH_VMID} --unprivileged 1 --start 1")
    try:
        run = checked(ctx.playbook("first launch into a fresh container", LAUNCH, hosts, SHIPPED, job_vars(ctx, "fresh", JOB_COMMAND)))
    finally:
        ctx.main.ssh(f"pct destroy {FRESH_VMID} --force", check=False)
    ctx.facts["fresh"] = run
    single = ctx.facts.get(f"single {ctx.delay_tag(0.5)}")
    baseline = median([r.seconds for r in single["baseline"]]) if isinstance(single, dict) and single.get("baseline") else 0.0
    times = "; ".join(f"{name} {spent:.1f} s" for name, spent in play_times(run).items())
    return [
        Row(section, f"whole playbooks/launch.yml, {SHIPPED.name}: wall", seconds(run.seconds) + status(run),
            f"by play: {times}; controller CPU {run.cpu:.1f} s" + (f"; {ratio(run.seconds, baseline)} the baseline at delay 0.5" if baseline else "")),
        Row(section, "pct calls", str(len(run.calls)), f"{call_kinds(run)}; by play: {calls_by_play(run)}; by task: {calls_by_task(run)}"),
    ]


def pipelining_off_rows(ctx: Context) -> list[Row]:
    """launch.yml re-launched with pipelining off (ansible_pipelining: false), delay 0: the configuration before its default."""
    section = "pct calls (call log of the nodes), one container"
    ctx.set_delay(0)
    job = job_vars(ctx, "bench", JOB_COMMAND)
    stop_sessions(ctx, "bench", MAIN)
    run = checked(ctx.playbook("launch.yml re-launch pipelining off", LAUNCH, MAIN, PIPELINING_OFF, job))
    stop_sessions(ctx, "bench", MAIN)
    ctx.facts["pipelining off"] = run
    single = ctx.facts.get("single 0")
    shipped = single["launch.yml re-launch"][-1] if isinstance(single, dict) and "launch.yml re-launch" in single else None
    wall = f"wall {run.seconds:.2f} s" + (f" ({ratio(run.seconds, shipped.seconds)} as shipped's {shipped.seconds:.2f} s)" if shipped else "")
    return [Row(section, f"whole launch.yml, re-launch, {PIPELINING_OFF.name}, delay 0", f"{len(run.calls)}{status(run)}",
                f"{call_kinds(run)}; by play: {calls_by_play(run)}; {wall}")]


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
        run = checked(ctx.playbook(f"dies after 1 s #{index + 1}", LAUNCH_ONLY, MAIN, SHIPPED, job), expect_rc=2)
        died, ended = death_times(ctx, "die")
        play_end = run.event_time("stats") or run.ended
        failed = [float(str(e["time"])) for e in run.events if e["event"] == "host_end" and e["status"] == "failed"] or [play_end]
        began = [float(str(e["time"])) for e in run.events if e["event"] == "host_start" and "Wait" in str(e["task"])] or [play_end]
        own.append(play_end - died)
        exit_file.append(play_end - ended)
        verdict.append(failed[-1] - died)
        waited.append(failed[-1] - began[-1])
        whole.append(run.seconds)
    ctx.facts["detection"] = (median(own), median(exit_file))
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
    # One run: the single-container figures above have the repetitions.
    for index in range(1):
        run = checked(ctx.playbook(f"4 ranks, one dies after 1 s #{index + 1}", LAUNCH, hosts, PERSIST, path, forks=8), expect_rc=2)
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
    ctx.facts["detection 4 ranks"] = median(own)
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
