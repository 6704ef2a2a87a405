# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests of plugins/module_utils/_tmux_cli.py: what a result may hold (``reportable``) and reading small files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import read_text, reportable


def test_bytes_that_are_not_utf8_become_replacement_characters(tmp_path: Path) -> None:
    """A log path with a byte that is not UTF-8, read back from the run folder, is reported with U+FFFD."""
    record = tmp_path / "log_path"
    record.write_bytes(b"/h/out/a\xffb.log")
    text = read_text(str(record))
    assert text == "/h/out/a\udcffb.log"
    result = reportable({"changed": False, "log_path": text, "log_tail": ["ok", "x\udcfe"], "pane_pid": 7, "proven": None,
                         "nested": {"k\udcff": ("a", 1)}})
    assert result == {"changed": False, "log_path": "/h/out/a\ufffdb.log", "log_tail": ["ok", "x\ufffd"], "pane_pid": 7, "proven": None,
                      "nested": {"k\ufffd": ["a", 1]}}
    json.dumps(result).encode("utf-8")  # what Ansible's strict UTF-8 check of a module's answer needs


@given(st.binary(max_size=64))
def test_every_byte_string_becomes_valid_utf8(data: bytes) -> None:
    text = reportable(os.fsdecode(data) if os.name == "posix" else data.decode("utf-8", "surrogateescape"))
    text.encode("utf-8")  # no surrogate is left
    if data.decode("utf-8", "replace") == data.decode("utf-8", "surrogateescape"):
        assert text == data.decode("utf-8")


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert read_text(str(tmp_path / "absent")) is None
