# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The results table as Markdown: one table per section, with the run's conditions on top."""
from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone

from bench_cases import Row


def ansible_version() -> str:
    """The ansible-core version that ran the benchmarks."""
    proc = subprocess.run(["ansible", "--version"], capture_output=True, text=True, check=False)
    return proc.stdout.splitlines()[0] if proc.returncode == 0 and proc.stdout else "unknown"


def conditions(repeat: int, setup: dict[str, float], load_before: Sequence[float], total: float, launch_only: bool = False) -> list[str]:
    """The lines that say how and where the figures were measured."""
    load_after = os.getloadavg()
    steps = ", ".join(f"{name} {spent:.1f} s" for name, spent in setup.items())
    command = "`benchmarks/run.sh --launch-only` (the cases of launch_only.yml only)" if launch_only else "`benchmarks/run.sh`"
    return [
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by {command} on {os.cpu_count()} CPUs, "
        f"{platform.python_implementation()} {platform.python_version()}, {ansible_version()}; "
        f"load average {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end (other work shares the machine: "
        f"figures are noisy, compare ratios measured in the same run).",
        f"Wall times are medians of {repeat} runs where a raw list shows several; every run starts cold (no ssh connection "
        "left open) unless it says \"masters open\" (the persistent ssh connections to both nodes opened just before it). "
        "Controller CPU: user + system seconds of the command, its descendants and the ssh masters; memory: the peak "
        "of the summed Pss of its process tree, sampled every 0.5 s. Total {:.0f} s; set-up: {}.".format(total, steps),
    ]


def render(rows: Sequence[Row], header: Sequence[str]) -> str:
    """Markdown: the conditions, then a table per section."""
    out = ["# Benchmark results", "", *header, ""]
    sections: list[str] = []
    for row in rows:
        if row.section not in sections:
            sections.append(row.section)
    for section in sections:
        out += [f"### {section}", "", "| measure | result | raw |", "|---|---|---|"]
        out += [f"| {row.measure} | {row.result} | {row.raw} |" for row in rows if row.section == section]
        out.append("")
    return "\n".join(out).replace("|  |", "| |")
