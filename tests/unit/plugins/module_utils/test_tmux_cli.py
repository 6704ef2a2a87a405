# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests of plugins/module_utils/_tmux_cli.py: what a result may hold (``reportable``), reading small files, and
``Tmux.new_session`` on a private tmux server."""

from __future__ import annotations

import json
import os
import typing as t
import uuid
from pathlib import Path

import pytest

from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_cli
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import literal, read_text, reportable


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


@pytest.fixture()
def tmux(monkeypatch: pytest.MonkeyPatch) -> t.Iterator[_tmux_cli.Tmux]:
    """A ``Tmux`` of a private server, killed at teardown."""
    socket = f"trainops-ut-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", socket)
    box = _tmux_cli.Tmux()
    if not box.installed:
        pytest.skip("tmux is not installed")
    try:
        yield box
    finally:
        box.run("kill-server")
        # tmux 3.3 leaves the socket of a killed server behind (Tmux runs tmux without TMUX_TMPDIR: /tmp)
        Path("/tmp", f"tmux-{os.geteuid()}", socket).unlink(missing_ok=True)


HOSTILE_VALUES = ["plain", "ends;", ";", "two;;", "a ; kill-server", "$(touch /tmp/x) `id`", "#{pane_pid}", "\\;", ""]


def test_new_session_sets_every_option_and_names_its_pane_in_two_calls(tmux: _tmux_cli.Tmux, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tmux calls; the values come back as given, whatever ``;`` they end in; the pane_pid is the pane's; the
    server's argv (it is the client that started it) holds none of the values."""
    calls: list[tuple[str, ...]] = []
    real = _tmux_cli.Tmux.run

    def counted(self: _tmux_cli.Tmux, *args: str) -> tuple[int, str, str]:
        calls.append(args)
        return real(self, *args)

    monkeypatch.setattr(_tmux_cli.Tmux, "run", counted)
    options = [(f"@ut_{index}", value) for index, value in enumerate(HOSTILE_VALUES)]
    rc, pane_pid, err = tmux.new_session("ut-new", "sleep 30", options)
    assert (rc, err) == (0, "") and len(calls) == 2
    assert pane_pid.isdigit() and pane_pid == tmux.display("ut-new", "#{pane_pid}")
    monkeypatch.setattr(_tmux_cli.Tmux, "run", real)
    for option, value in options:
        shown = tmux.run("show-options", "-v", "-t", "=ut-new:", option)
        assert shown[0] == 0 and shown[1].rstrip("\n") == value, (option, value, shown)
    assert tmux.run("has-session", "-t", "=ut-new")[0] == 0, "the server lives: no value ran as a command"
    server = tmux.run("display-message", "-p", "-t", "=ut-new:", "#{pid}")[1].strip()
    argv = Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
    assert b"sleep 30" in argv and not any(b"kill-server" in word for word in argv), argv


def test_new_session_that_fails_sets_nothing_on_the_session_of_that_name(tmux: _tmux_cli.Tmux) -> None:
    """A duplicate name: rc not 0 with tmux's error, and the later commands did not touch the session there."""
    assert tmux.run("new-session", "-d", "-s", "ut-dup", "sleep 30")[0] == 0
    rc, pane_pid, err = tmux.new_session("ut-dup", "sleep 31", [("@ut_mark", "set")])
    assert rc != 0 and "duplicate session" in err and pane_pid == ""
    assert tmux.run("show-options", "-v", "-t", "=ut-dup:", "@ut_mark")[1].strip() == ""


def test_new_session_that_met_an_exiting_server_is_tried_again(tmux: _tmux_cli.Tmux, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server on its way out (its last session just ended) answers ``server exited unexpectedly`` and creates nothing:
    the next new-session starts a server of its own. Here the first answer is that one; the second call is real tmux."""
    calls: list[tuple[str, ...]] = []
    real = _tmux_cli.Tmux.run

    def exiting_once(self: _tmux_cli.Tmux, *args: str) -> tuple[int, str, str]:
        calls.append(args)
        if len(calls) == 1:
            return 1, "", "server exited unexpectedly\n"
        return real(self, *args)

    monkeypatch.setattr(_tmux_cli, "NEW_SESSION_RETRIES", (0.0, 0.0))
    monkeypatch.setattr(_tmux_cli.Tmux, "run", exiting_once)
    rc, pane_pid, err = tmux.new_session("ut-again", "sleep 30", [("@ut_mark", "set")])
    assert (rc, err) == (0, "") and pane_pid.isdigit(), (rc, err)
    assert [call[0] for call in calls] == ["new-session", "new-session", "set-option"], calls
    monkeypatch.setattr(_tmux_cli.Tmux, "run", real)
    assert tmux.run("show-options", "-v", "-t", "=ut-again:", "@ut_mark")[1].strip() == "set"


def test_new_session_gives_up_on_an_exiting_server_after_its_retries(tmux: _tmux_cli.Tmux, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def always_exiting(self: _tmux_cli.Tmux, *args: str) -> tuple[int, str, str]:
        calls.append(args)
        return 1, "", "server exited unexpectedly\n"

    monkeypatch.setattr(_tmux_cli, "NEW_SESSION_RETRIES", (0.0, 0.0))
    monkeypatch.setattr(_tmux_cli.Tmux, "run", always_exiting)
    assert tmux.new_session("ut-never", "sleep 30", []) == (1, "", "server exited unexpectedly\n")
    assert len(calls) == 3, "the first try and one per pause"


@pytest.mark.parametrize(("word", "escaped"), [("plain", "plain"), ("ends;", "ends\\;"), (";", "\\;"), ("two;;", "two;\\;"),
                                               ("a ; kill-server", "a ; kill-server"), ("\\;", "\\\\;"), ("", "")])
def test_literal_escapes_only_a_trailing_semicolon(word: str, escaped: str) -> None:
    assert literal(word) == escaped
