# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The Xid errors behind a GPU job's end: which ends ask the node, what one node call asks, and what is named."""

from __future__ import annotations

import json
import typing as t

import pytest

from ansible.errors import AnsibleError

from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _job_xid as J
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._gpu_node import node_program

BUS = "00000000:07:00.0"
LINE_79 = "2026-12-06T14:22:07.123456+0000 pve kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
LINE_OTHER_GPU = "2026-12-06T14:22:08.000000+0000 pve kernel: NVRM: Xid (PCI:0000:08:00): 48, pid=1, name=x, DBE."
LINE_BEFORE = "2026-12-06T13:00:00.000000+0000 pve kernel: NVRM: Xid (PCI:0000:07:00): 13, pid=9, name=y, Graphics Exception."


class Node:
    """A pct connection's ``node_command``: the calls it got, and a report as the node program prints it."""

    def __init__(self, lines: t.Sequence[str] = (), error: str | None = None, fail: bool = False) -> None:
        self.calls: list[tuple[list[str], bytes]] = []
        self.report = {"gpus": [], "error": None, "kernel_log": {"command": ["journalctl"], "lines": list(lines), "error": error}}
        self.fail = fail

    def node_command(self, argv: list[str], in_data: bytes) -> tuple[int, bytes, bytes]:
        self.calls.append((argv, in_data))
        if self.fail:
            raise AnsibleError("ssh: connect to host pve-a port 22: Connection refused")
        return 0, json.dumps(self.report).encode(), b""


def end(**values: t.Any) -> dict[str, t.Any]:
    return dict({"end_state": "failed", "cause": "exit_status", "gpu_bus_ids": [BUS], "attempt_started_at": "2026-12-06T14:20:00Z",
                 "ended_at": "2026-12-06T14:22:09Z"}, **values)


def test_an_xid_of_the_job_s_gpu_in_its_attempt_names_the_end() -> None:
    node, result = Node([LINE_BEFORE, LINE_79, LINE_OTHER_GPU]), end()
    assert J.name_ends(node, [result], ["/s/node-kernel-log", "-k"]) is None
    assert result["cause"] == "gpu_xid" and result["job_cause"] == "exit_status"
    assert [(x["xid"], x["pci_bus_id"], x["time"], x["name"]) for x in result["xid"]] == [
        (79, BUS, "2026-12-06T14:22:07Z", "GPU has fallen off the bus")]
    assert result["xid_reason"].startswith(f"the job's GPU {BUS} logged at 2026-12-06T14:22:07Z: Xid 79 (GPU has fallen off the bus): ")
    assert "action: reboot the node" in result["xid_reason"]
    (argv, program), = node.calls
    assert program == node_program()
    assert argv[argv.index("--kernel-log-command") + 1] == json.dumps(["/s/node-kernel-log", "-k"])
    assert int(argv[argv.index("--xid-hours") + 1]) >= 1


@pytest.mark.parametrize("values", [
    {"end_state": "finished", "cause": None}, {"end_state": "stopped", "cause": "stop"}, {"end_state": None},
    {"gpu_bus_ids": []}, {"attempt_started_at": None},
])
def test_ends_the_gpu_did_not_cause_ask_nothing(values: dict[str, t.Any]) -> None:
    node, result = Node([LINE_79]), end(**values)
    before = dict(result)
    assert J.name_ends(node, [result], None) is None
    assert not node.calls and result == before


def test_without_a_way_to_the_node_nothing_is_asked() -> None:
    result = end()
    assert J.name_ends(object(), [result], None) is None and result["cause"] == "exit_status"


def test_xids_outside_the_attempt_or_of_other_gpus_are_not_named() -> None:
    late = "2026-12-06T14:30:00.000000+0000 pve kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, fell."
    result = end()
    J.name_ends(Node([LINE_BEFORE, LINE_OTHER_GPU, late]), [result], None)
    assert result["cause"] == "exit_status" and "xid" not in result


def test_one_node_call_for_many_ends_covers_the_earliest() -> None:
    node = Node([LINE_79])
    first = end(attempt_started_at="2026-12-06T14:20:00Z")
    second = end(gpu_bus_ids=["0000:08:00"], attempt_started_at="2026-12-05T10:00:00Z", ended_at="2026-12-06T14:23:00Z")
    J.name_ends(node, [first, second, end(end_state="finished")], None)
    assert len(node.calls) == 1 and first["cause"] == "gpu_xid" and second["cause"] == "exit_status"
    hours = int(node.calls[0][0][node.calls[0][0].index("--xid-hours") + 1])
    assert hours >= J.hours_for([J.window(second)], J.seconds("2026-12-06T14:23:00Z"))  # back to the earliest start


@pytest.mark.parametrize("node, cause", [
    (Node(error="journalctl -k exited 1: Failed to get journal access: Permission denied"), "Permission denied"),
    (Node(fail=True), "Connection refused"),
])
def test_a_kernel_log_that_cannot_be_read_is_a_warning(node: Node, cause: str) -> None:
    if node.fail:
        node.report = {}
    result = end()
    warning = J.name_ends(node, [result], None)
    assert warning is not None and warning.startswith("Cannot read the node's kernel log for Xid errors of the job's GPUs: ") and cause in warning
    assert result["cause"] == "exit_status"


def test_a_lost_job_s_end_without_an_end_time_counts_to_now() -> None:
    item = J.window(end(end_state="lost", ended_at=None))
    assert item is not None and item.until > J.seconds("2026-12-06T14:22:09Z")  # type: ignore[operator]


def test_times_of_the_protocol() -> None:
    assert J.seconds("2026-12-06T14:20:00Z") == 1796566800.0
    assert J.seconds("yesterday") is None and J.seconds(None) is None
