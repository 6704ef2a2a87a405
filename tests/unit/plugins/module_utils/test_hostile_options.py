# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Invalid options are rejected with a message naming the option, before any pct call (property-based).

The three modules run their ``main()`` in this process with ``pct_path`` pointing at a script that records
every call it gets; the wait_for_log action plugin runs with a module executor that records calls. Invalid
session names, VMIDs, relative (or otherwise unusable) paths for chdir, venv and log_path, and regular
expressions Python cannot compile for pattern and fail_pattern must all fail with no call recorded.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import stat
import sys
import typing as t
from collections.abc import Iterator
from pathlib import Path
from unittest.mock import MagicMock

import pytest
from ansible.module_utils.testing import patch_module_args
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.action.wait_for_log import ActionModule
from ansible_collections.trainops.pct_launch.plugins.modules import tmux_session, tmux_session_info, wait_for_log

EXAMPLES = settings(max_examples=60, deadline=None)
VALID_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Text Ansible can carry in a module argument (no lone surrogates).
# From Python 3.13 on, AnsibleModule refuses a NUL itself (test_nul_in_an_option_starts_nothing).
SYSLOG_REFUSES_NUL = sys.version_info >= (3, 13)
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00" if SYSLOG_REFUSES_NUL else ""),
               max_size=70)
BAD_NAMES = st.one_of(
    st.sampled_from(["", "a.b", "a:b", "x" * 65, "train\n", "\ntrain", "tr ain", "=train", "train;x", "$(x)", "ü", "a/b", "*"]),
    TEXT.filter(lambda s: VALID_NAME.fullmatch(s) is None),
)
BAD_VMIDS = st.one_of(st.integers(max_value=99), st.integers(min_value=1_000_000_000, max_value=2**62))
RELATIVE = st.one_of(
    st.sampled_from(["train.log", "./train.log", "../x", "~/train.log", "~root/x", "$HOME/x", "${HOME}/x", " /x", "\t/x", "x/"]),
    TEXT.filter(lambda s: s != "" and not s.startswith("/")),
)
BROKEN = ["(", ")", "[", "[z-a]", "\\", "*", "+", "?", "{1}x{", "(?P<", "(?<", "(?", "a{2,1}", "\\8", "(?P<a>x)(?P<a>y)", "(?i"]


def _invalid_regex(value: str) -> bool:
    try:
        re.compile(value)
    except re.error:
        return True
    return False


BAD_REGEXES = st.builds(lambda a, bad, b: a + bad + b, TEXT, st.sampled_from(BROKEN), TEXT).filter(_invalid_regex)
COUNTS: dict[str, int] = {}


@pytest.fixture(scope="module")
def recorder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A fake pct that records each call (one line per call) and fails; yields (its path, the record)."""
    folder = tmp_path_factory.mktemp("pct-recorder")
    record = folder / "calls"
    script = folder / "pct"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{record}'\nexit 1\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    yield str(script), record
    for name, number in sorted(COUNTS.items()):
        print(f"rejection property {name}: {number} examples")


def invoke(module: t.Any, args: dict[str, t.Any]) -> dict[str, t.Any]:
    """Run a module's main() in this process; return its result."""
    buffer = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(buffer):
        with contextlib.suppress(SystemExit):
            module.main()
    return json.loads(buffer.getvalue())


def count(name: str) -> None:
    """Count one example of property ``name``."""
    COUNTS[name] = COUNTS.get(name, 0) + 1


def rejected(recorder: tuple[str, Path], module: t.Any, args: dict[str, t.Any], option: str) -> str:
    """Run the module with a recording pct; assert it failed naming ``option`` and called nothing. Returns msg."""
    pct, record = recorder
    result = invoke(module, dict(args, pct_path=pct))
    assert result.get("failed") is True, result
    assert re.search(rf"\b{option}\b", result["msg"]), result["msg"]
    assert not record.exists(), f"pct was called: {record.read_text(encoding='utf-8')}"
    return result["msg"]


LAUNCH = {"vmid": 501, "session_name": "train", "command": "python3 train.py", "log_path": "/w/train.log"}


def test_invalid_session_names(recorder: tuple[str, Path]) -> None:
    @EXAMPLES
    @given(name=BAD_NAMES)
    def prop(name: str) -> None:
        count("session_name")
        rejected(recorder, tmux_session, dict(LAUNCH, session_name=name), "session_name")
        rejected(recorder, tmux_session_info, {"vmid": 501, "session_name": name}, "session_name")
        rejected(recorder, wait_for_log, {"vmid": 501, "session_name": name}, "session_name")

    prop()


def test_invalid_vmids(recorder: tuple[str, Path]) -> None:
    @EXAMPLES
    @given(vmid=BAD_VMIDS)
    def prop(vmid: int) -> None:
        count("vmid")
        rejected(recorder, tmux_session, dict(LAUNCH, vmid=vmid), "vmid")
        rejected(recorder, tmux_session, {"vmid": vmid, "session_name": "train", "state": "stopped"}, "vmid")
        rejected(recorder, tmux_session_info, {"vmid": vmid}, "vmid")
        rejected(recorder, wait_for_log, {"vmid": vmid, "session_name": "train"}, "vmid")

    prop()


def test_relative_paths(recorder: tuple[str, Path]) -> None:
    """Paths inside the container are taken literally: '~' or '$HOME' is not expanded on the node, it is refused."""

    @EXAMPLES
    @given(path=RELATIVE)
    def prop(path: str) -> None:
        count("relative_paths")
        for option in ("chdir", "venv", "log_path"):
            msg = rejected(recorder, tmux_session, dict(LAUNCH, **{option: path}), option)
            assert "absolute path" in msg or "NUL character" in msg
        rejected(recorder, tmux_session_info, {"vmid": 501, "session_name": "t", "log_path": path}, "log_path")
        rejected(recorder, wait_for_log, {"vmid": 501, "log_path": path}, "log_path")

    prop()


def test_log_path_with_a_newline(recorder: tuple[str, Path]) -> None:
    """No module accepts a log_path with a newline (the launch could not record it for the others)."""

    @EXAMPLES
    @given(head=TEXT, tail=TEXT)
    def prop(head: str, tail: str) -> None:
        count("log_path_newline")
        path = "/w/" + head.replace("/", "_") + "\n" + tail.replace("/", "_")
        rejected(recorder, tmux_session, dict(LAUNCH, log_path=path), "log_path")
        rejected(recorder, tmux_session_info, {"vmid": 501, "session_name": "t", "log_path": path}, "log_path")
        rejected(recorder, wait_for_log, {"vmid": 501, "log_path": path}, "log_path")

    prop()


class NoCalls:
    """The action plugin's module executor: records calls (there must be none)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, t.Any]] = []

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> dict[str, t.Any]:
        self.calls.append(kwargs)
        return {"failed": True, "msg": "called"}


def run_action(args: dict[str, t.Any]) -> tuple[dict[str, t.Any], NoCalls]:
    """Run the wait_for_log action plugin with a mocked task and connection."""
    task = MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.action = "trainops.pct_launch.wait_for_log"
    connection = MagicMock()
    connection._shell.tmpdir = "/tmp/x"  # pylint: disable=protected-access
    action = ActionModule(task, connection, MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    calls = NoCalls()
    action._execute_module = calls  # type: ignore[method-assign]  # pylint: disable=protected-access
    return action.run(task_vars={}), calls


def test_bad_regexes(recorder: tuple[str, Path]) -> None:
    """pattern and fail_pattern that Python cannot compile: the action plugin and the module refuse them, naming the option."""

    @EXAMPLES
    @given(regex=BAD_REGEXES, option=st.sampled_from(["pattern", "fail_pattern"]))
    def prop(regex: str, option: str) -> None:
        count("bad_regexes")
        args = {"vmid": 501, "session_name": "train", option: regex}
        msg = rejected(recorder, wait_for_log, args, option)
        assert msg.startswith(f"Cannot use option {option} ") and "not a valid Python regular expression" in msg
        result, calls = run_action(args)
        assert result.get("failed") is True and result["msg"].startswith(f"Cannot use option {option} "), result
        assert calls.calls == []

    prop()


@pytest.mark.parametrize(("option", "value"), [("session_name", "tr\x00ain"), ("log_path", "/w/a\x00b.log"), ("chdir", "/w/\x00")])
def test_nul_in_an_option_starts_nothing(recorder: tuple[str, Path], option: str, value: str) -> None:
    """A NUL fails the task before any pct call; the message names the option where the module gets to check it.

    From Python 3.13 on, syslog.syslog() raises on an embedded NUL and AnsibleModule logs its arguments
    before main() runs its checks: the task then fails with ansible-core's "Failed to log to syslog
    (embedded null character)" instead of the module's message.
    """
    pct, record = recorder
    result = invoke(tmux_session, dict(LAUNCH, pct_path=pct, **{option: value}))
    assert result.get("failed") is True, result
    assert not record.exists(), f"pct was called: {record.read_text(encoding='utf-8')}"
    if SYSLOG_REFUSES_NUL:
        assert "embedded null character" in result["msg"], result["msg"]
    else:
        assert re.search(rf"\b{option}\b", result["msg"]), result["msg"]
