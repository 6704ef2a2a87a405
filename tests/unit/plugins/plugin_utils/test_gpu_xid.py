# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The driver's Xid lines as journalctl and dmesg print them, matched to GPUs by PCI bus id, named with NVIDIA's words."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _gpu_xid as X


def _at(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


JOURNAL = """\
2024-03-05T14:22:05.000001+0100 pve1 kernel: NVRM: GPU at PCI:0000:2a:00: GPU-3f0c2a1e-7b4d-4e2a-9c1b-5d6e7f809a1b
2024-03-05T14:22:07.123456+0100 pve1 kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
2024-03-05T14:22:07.123500+0100 pve1 kernel: NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.
2024-03-05T15:00:00.500000+01:00 pve1 kernel: NVRM: Xid (PCI:0000:41:00): 48, pid='<unknown>', name=<unknown>, \
An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 1.
2024-03-05T15:00:01.000000+01:00 pve1 kernel: NVRM: Xid (PCI:0000:41:00): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
"""


def test_journalctl_short_iso_precise_lines() -> None:
    xids = X.parse(JOURNAL)
    assert [(x.xid, x.bus_id) for x in xids] == [(79, "00000000:2A:00.0"), (48, "00000000:41:00.0"), (63, "00000000:41:00.0")]
    fell = xids[0]
    assert fell == X.Xid(_at("2024-03-05T14:22:07.123456+01:00"), "00000000:2A:00.0", 79, 1234, "python3", "GPU has fallen off the bus.")
    assert X.when(fell.time) == "2024-03-05T13:22:07Z"
    assert xids[1].pid is None and xids[1].process_name is None and xids[1].text.startswith("An uncorrectable double bit error")
    assert xids[1].time == _at("2024-03-05T15:00:00.5+01:00")  # systemd 255 prints the offset with a colon
    assert (xids[2].pid, xids[2].process_name, xids[2].text) == (1896, None, "Row Remapper: New row marked for remapping, reset gpu to activate.")


def test_dmesg_iso_plain_and_older_driver_lines() -> None:
    text = ("2024-03-05T14:22:07,123456+00:00 NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.\n"
            "[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 13, pid=77, name=train, Graphics SM Warp Exception on (GPC 0, TPC 1)\n"
            "Jan 18 11:38:05 localhost kernel: [ 269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff\n"
            "[ 12.5] NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No\n"
            "[ 13.0] usb 2-3: reset high-speed USB device\n")
    unknown = X.parse(text)
    assert [(x.time, x.bus_id, x.xid) for x in unknown] == [
        (_at("2024-03-05T14:22:07.123456+00:00"), "00000000:03:00.0", 79), (None, "00000000:03:00.0", 13),
        (None, "00000000:01:00.0", 3), (None, "00000000:01:00.0", 94)]
    assert (unknown[0].pid, unknown[0].process_name, unknown[0].text) == (None, None, "GPU has fallen off the bus.")
    assert (unknown[1].pid, unknown[1].process_name, unknown[1].text) == (77, "train", "Graphics SM Warp Exception on (GPC 0, TPC 1)")
    assert unknown[3].text == "Contained: CE User Channel (0x9). RST: No, D-RST: No"
    booted = X.parse(text, boot_time=1_700_000_000.0)  # seconds since boot count from the node's boot time
    assert [x.time for x in booted] == [unknown[0].time, 1_700_005_107.644336, 1_700_000_269.517039, 1_700_000_012.5]


@pytest.mark.parametrize(("text", "bus"), [
    ("0000:2a:00", "00000000:2A:00.0"), ("PCI:0000:2a:00", "00000000:2A:00.0"), ("00000000:2A:00.0", "00000000:2A:00.0"),
    ("0000:2A:00.0", "00000000:2A:00.0"), ("2a:00.0", "00000000:2A:00.0"), ("0001:c1:1f.3", "00000001:C1:1F.3"),
    ("GPU-abc", None), ("", None),
])
def test_bus_ids_in_nvidia_smis_form(text: str, bus: str | None) -> None:
    assert X.bus_id(text) == bus


def test_of_gpus_matches_bus_ids_and_the_time_window() -> None:
    xids = X.parse(JOURNAL)
    assert [x.xid for x in X.of_gpus(xids, ["00000000:41:00.0"])] == [48, 63]
    assert [x.xid for x in X.of_gpus(xids, ["0000:2a:00.0", "00000000:07:00.0"])] == [79]
    assert [x.xid for x in X.of_gpus(xids, [])] == [] and [x.xid for x in X.of_gpus(xids)] == [79, 48, 63]
    start, end = _at("2024-03-05T14:00:00+01:00"), _at("2024-03-05T15:00:00.5+01:00")
    assert [x.xid for x in X.of_gpus(xids, None, start, end)] == [79, 48]  # both ends inclusive
    assert [x.xid for x in X.of_gpus(xids, None, end + 0.1)] == [63]
    assert [x.xid for x in X.of_gpus(xids, None, None, start)] == []
    undated = X.parse("[ 1.0] NVRM: Xid (PCI:0000:2a:00): 79, GPU has fallen off the bus.\n")
    assert X.of_gpus(undated, None, start) == [] and X.of_gpus(undated) == undated  # no time: out of any window


def test_describe_with_nvidias_meaning_and_action() -> None:
    fell = X.parse(JOURNAL)[0]
    assert X.describe(fell) == X.describe(79)
    assert X.describe(79).startswith("Xid 79 (GPU has fallen off the bus): the driver cannot reach the GPU over PCI Express")
    assert "; action: reboot the node (RESTART_BM)" in X.describe(79)
    assert X.describe(48).startswith("Xid 48 (Double Bit ECC Error): an uncorrectable ECC memory error")
    assert "(WORKFLOW_XID_48)" in X.describe(48)
    for number in (13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120):  # the list
        assert number in X.CATALOG and X.CATALOG[number][2], number


def test_an_xid_not_in_the_catalog_points_to_nvidias() -> None:
    assert X.describe(9999) == (f"Xid 9999 (not in this collection's catalog): see NVIDIA's Xid catalog ({X.CATALOG_URL}); "
                                f"action: see NVIDIA's Xid catalog ({X.CATALOG_URL})")
    odd = X.parse("2024-03-05T14:22:07.0+0000 h kernel: NVRM: Xid (PCI:0000:2a:00): 9999, pid=1, name=a, whatever\n")[0]
    item = X.as_dict(odd)
    assert item["name"] is None and item["meaning"].startswith("see NVIDIA's Xid catalog") and item["message"].startswith("Xid 9999 (")


def test_per_gpu_names_the_nodes_gpus_and_keeps_the_unknown_ones() -> None:
    gpus = [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:2A:00.0"}, {"index": 1, "uuid": "GPU-b", "pci_bus_id": "00000000:3B:00.0"}]
    found = X.per_gpu(X.parse(JOURNAL), gpus)
    assert [(g["pci_bus_id"], g["index"], g["uuid"], [e["xid"] for e in g["errors"]]) for g in found] == [
        ("00000000:2A:00.0", 0, "GPU-a", [79]), ("00000000:41:00.0", None, None, [48, 63])]
    first = found[0]["errors"][0]
    assert first == {"xid": 79, "time": "2024-03-05T13:22:07Z", "pid": 1234, "process_name": "python3", "text": "GPU has fallen off the bus.",
                     "name": "GPU has fallen off the bus", "meaning": X.CATALOG[79][1], "action": X.CATALOG[79][2], "message": X.describe(79)}


def test_of_node_reads_the_last_hours_by_the_nodes_clock_and_warns_per_gpu_and_xid() -> None:
    now = _at("2024-03-05T15:30:00+01:00")
    node = {"gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:2A:00.0"}], "now": now, "boot_time": None,
            "kernel_log": {"lines": JOURNAL.splitlines() + [JOURNAL.splitlines()[1].replace("14:22:07", "15:10:00")]}}
    found = X.of_node(node, 1, now=0.0)  # the node's clock, not the controller's
    assert [(g["index"], [e["xid"] for e in g["errors"]]) for g in found] == [(0, [79]), (None, [48, 63])]
    assert X.of_node(node, 0, now) == [] and X.of_node(dict(node, kernel_log={"lines": []}), 24, now) == []
    assert len(X.of_node(node, 2, now)[0]["errors"]) == 2
    warnings = X.warnings(X.of_node(node, 2, now), "pve1")
    assert warnings[0].startswith("GPU 0 (00000000:2A:00.0) on node pve1 logged Xid 79 (GPU has fallen off the bus) 2 times, "
                                  "last at 2024-03-05T14:10:00Z: the driver cannot reach the GPU")
    assert warnings[1].startswith("the GPU at 00000000:41:00.0 on node pve1 logged Xid 48 (Double Bit ECC Error) at 2024-03-05T14:00:00Z: ")
    assert len(warnings) == 3 and " logged Xid 63 (GPU memory remapping event) at " in warnings[2]
