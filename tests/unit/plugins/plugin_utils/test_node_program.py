# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The node program's source and answer (plugins/plugin_utils/_node_program.py)."""

from __future__ import annotations

from ansible_collections.trainops.pct_launch.plugins.module_utils import _gpu_smi
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._node_program import answer, source_of


def test_the_source_is_the_module_file_byte_for_byte() -> None:
    with open(str(_gpu_smi.__file__), "rb") as handle:
        assert source_of(_gpu_smi) == handle.read()


def test_the_report_is_the_last_line_when_it_is_a_json_object() -> None:
    assert answer(0, b'a warning first\n{"gpus": []}\n', b"") == ({"gpus": []}, "")
    assert answer(0, b"[1, 2]\n", b"") == (None, "[1, 2]")
    assert answer(0, b"", b"") == (None, "exit status 0")


def test_a_failure_is_one_line_from_stderr_cut_with_a_hint_without_python3() -> None:
    assert answer(1, b"", b"Traceback\n  boom\n") == (None, "Traceback boom")
    assert answer(127, b"", b"sh: python3: not found") == (None, "sh: python3: not found: the node needs python3")
    report, cause = answer(2, b"", b"x" * 1000)
    assert report is None and cause == "x" * 300
