# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests of plugins/module_utils/_job_memory.py: the memory counters of a job's cgroup, on files laid out as
Proxmox VE's pure cgroup v2 (the container seen from inside and from the node), a hybrid host's v1 memory controller
with PSI in the unified tree, and what the growth of the counters reads like.

Proxmox VE's layout (pve-container src/PVE/LXC.pm): the limits on ``/lxc/VMID`` (memory.max, memory.high at
1016/1024 of it), the container's cgroup namespace rooted at ``/lxc/VMID/ns``, ``pct exec``'s processes in
``/lxc/VMID/ns/.lxc`` (LXC's attach cgroup), which inside the container is ``/.lxc``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_memory import growth, note, snapshot

MAX = str(512 * 1024 * 1024)
HIGH = str(512 * 1024 * 1016)


def events(high: int = 0, max_: int = 0, oom_kill: int = 0) -> str:
    """memory.events as the kernel writes it."""
    return f"low 0\nhigh {high}\nmax {max_}\noom {oom_kill}\noom_kill {oom_kill}\noom_group_kill 0\n"


def pressure(total_us: int) -> str:
    return (f"some avg10=1.00 avg60=0.50 avg300=0.10 total={total_us}\n"
            f"full avg10=0.50 avg60=0.20 avg300=0.05 total={total_us // 2}\n")


def tree(tmp_path: Path, proc: str, files: dict[str, str]) -> dict[str, str]:
    """A fake /proc/self/cgroup and /sys/fs/cgroup holding ``files`` (paths relative to it)."""
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text(proc, encoding="utf-8")
    for rel, text in files.items():
        (tmp_path / "cg" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "cg" / rel).write_text(text, encoding="utf-8")
    return {"proc_root": str(tmp_path / "proc"), "cgroup_root": str(tmp_path / "cg")}


def pve_node(tmp_path: Path, high: int, oom_kill: int = 0, stall_us: int = 0) -> dict[str, str]:
    """Proxmox VE 8 seen from the node: a process of pct exec in /lxc/285/ns/.lxc, the limits on /lxc/285."""
    return tree(tmp_path, "0::/lxc/285/ns/.lxc\n", {
        "cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
        "lxc/memory.events": events(high=high + 1000, oom_kill=99),  # every container's: never read
        "lxc/285/memory.max": MAX, "lxc/285/memory.high": HIGH, "lxc/285/memory.events": events(high=high, oom_kill=oom_kill),
        "lxc/285/ns/memory.max": "max", "lxc/285/ns/memory.high": "max", "lxc/285/ns/memory.events": events(oom_kill=oom_kill),
        "lxc/285/ns/.lxc/memory.max": "max", "lxc/285/ns/.lxc/memory.high": "max",
        "lxc/285/ns/.lxc/memory.events": events(oom_kill=oom_kill), "lxc/285/ns/.lxc/memory.pressure": pressure(stall_us)})


def pve_inside(tmp_path: Path, oom_kill: int = 0, stall_us: int = 0) -> dict[str, str]:
    """The same container seen from inside: /sys/fs/cgroup is /lxc/285/ns; its memory.events never counts high."""
    return tree(tmp_path, "0::/.lxc\n", {
        "cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
        "memory.max": "max", "memory.high": "max", "memory.events": events(oom_kill=oom_kill),
        ".lxc/memory.max": "max", ".lxc/memory.high": "max", ".lxc/memory.events": events(oom_kill=oom_kill),
        ".lxc/memory.pressure": pressure(stall_us)})


def test_on_the_node_high_is_read_where_the_container_limit_is(tmp_path: Path) -> None:
    assert snapshot(**pve_node(tmp_path, high=152, oom_kill=1, stall_us=7_000_000)) == {
        "oom_kill": 1, "high": 152, "max": 0, "stall_us": 7_000_000}


def test_inside_the_container_high_is_out_of_sight_and_the_stalls_show(tmp_path: Path) -> None:
    """What the supervisor reads in a Proxmox VE container: oom_kill and PSI; high and max stay 0 (counted one level up)."""
    assert snapshot(**pve_inside(tmp_path, oom_kill=2, stall_us=3_500_000)) == {
        "oom_kill": 2, "high": 0, "max": 0, "stall_us": 3_500_000}


def test_a_limit_the_job_can_see_counts_its_high(tmp_path: Path) -> None:
    """LXC without an inner cgroup (the limits on the namespace's root), or a systemd unit's MemoryHigh=."""
    roots = tree(tmp_path, "0::/.lxc\n", {"cgroup.controllers": "memory\n", "memory.high": HIGH, "memory.max": MAX,
                                          "memory.events": events(high=40, max_=3), ".lxc/memory.events": events()})
    assert snapshot(**roots) == {"oom_kill": 0, "high": 40, "max": 3}


def test_hybrid_host_reads_v1_counters_and_psi_of_the_unified_tree(tmp_path: Path) -> None:
    """This kind of host: memory in v1 (oom_control, failcnt), PSI in the unified hierarchy's /.lxc."""
    roots = tree(tmp_path, "4:memory:/\n1:name=systemd:/\n0::/.lxc\n", {
        "memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "memory/memory.failcnt": "17\n",
        "memory/memory.limit_in_bytes": "9223372036854771712\n",
        "unified/cgroup.controllers": "\n", "unified/.lxc/memory.pressure": pressure(2_000_000)})
    assert snapshot(**roots) == {"oom_kill": 1, "failcnt": 17, "stall_us": 2_000_000}


def test_nothing_readable_is_an_empty_snapshot(tmp_path: Path) -> None:
    assert snapshot(**tree(tmp_path, "garbage\n", {})) == {}
    assert snapshot(proc_root=str(tmp_path / "nowhere"), cgroup_root=str(tmp_path / "nowhere")) == {}


def test_growth_keeps_what_grew_and_was_known_before() -> None:
    assert growth({"high": 3, "max": 0, "stall_us": 10}, {"high": 8, "max": 0, "stall_us": 9, "oom_kill": 1}) == {"high": 5}


@pytest.mark.parametrize(("grown", "seconds", "expected"), [
    ({"high": 152}, 60, "its container was at its memory limit (memory.high reached 152 times)"),
    ({"high": 1, "stall_us": 12_400_000}, 60, "its container was at its memory limit (memory.high reached 1 time; 12 s waiting for memory)"),
    ({"max": 3}, 60, "its container was at its memory limit (memory.max reached 3 times)"),
    ({"failcnt": 2}, 60, "its container was at its memory limit (the limit reached 2 times (memory.failcnt))"),
    ({"stall_us": 12_400_000}, 60, "its processes waited 12 s for memory (memory.pressure)"),
    ({"stall_us": 900_000}, 60, None),  # under a second: not worth a word
    ({"stall_us": 20_000_000}, 3600, None),  # under 1 % of a long attempt
    ({"oom_kill": 1}, 60, None),  # the OOM kill has words of its own (_job_end)
    ({}, 60, None),
])
def test_note_words(grown: dict[str, int], seconds: float, expected: str | None) -> None:
    assert note(grown, seconds) == expected
