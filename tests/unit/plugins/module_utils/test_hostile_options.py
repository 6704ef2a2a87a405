# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Invalid options are rejected with a message naming the option, before anything runs (property-based).

The three modules run their ``main()`` in this process with what they would run on the host (the launch,
the report, one chunk of waiting) replaced by a recorder; the wait_for_log action plugin runs with a
module executor that records calls. Invalid session names, relative (or otherwise unusable) paths for
chdir, venv and log_path, regular expressions Python cannot compile for pattern and fail_pattern, and
the removed options vmid and pct_path (any value) must all fail with no call recorded.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import typing as t
from collections.abc import Iterator
from unittest.mock import MagicMock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.module_utils.testing import patch_module_args
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.action.wait_for_log import ActionModule
from ansible_collections.trainops.pct_launch.plugins.module_utils import _log_chunk, _session_info, _tmux_run
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
ANY_VMID = st.one_of(st.integers(), st.integers(min_value=100, max_value=999_999_999), st.from_regex(r"[0-9]{3,9}", fullmatch=True))
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


class Recorder:
    """What the modules would run on the host (launch, report, poll), each call recorded; there must be none."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def stand_in(self, name: str) -> t.Callable[..., t.Any]:
        """A replacement for the function ``name`` that records its call and fails the test."""
        def record(*args: t.Any, **kwargs: t.Any) -> t.Any:
            """Record the call, then fail: nothing may run on the host for invalid options."""
            self.calls.append(f"{name}{args!r}{kwargs!r}")
            raise AssertionError(f"{name} was called")
        return record


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    """The modules' work on the host replaced by a recorder (for the whole module: hypothesis runs many examples per test)."""
    calls = Recorder()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_tmux_run, "launch", calls.stand_in("launch"))
        patch.setattr(_session_info, "report", calls.stand_in("report"))
        patch.setattr(_log_chunk, "poll", calls.stand_in("poll"))
        yield calls
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


def rejected(recorder: Recorder, module: t.Any, args: dict[str, t.Any], option: str) -> str:
    """Run the module; assert it failed naming ``option`` and ran nothing on the host. Returns msg."""
    result = invoke(module, args)
    assert result.get("failed") is True, result
    assert re.search(rf"\b{option}\b", result["msg"]), result["msg"]
    assert recorder.calls == [], recorder.calls
    return result["msg"]


LAUNCH = {"session_name": "train", "command": "python3 train.py", "log_path": "/w/train.log"}


def test_invalid_session_names(recorder: Recorder) -> None:
    @EXAMPLES
    @given(name=BAD_NAMES)
    def prop(name: str) -> None:
        count("session_name")
        rejected(recorder, tmux_session, dict(LAUNCH, session_name=name), "session_name")
        rejected(recorder, tmux_session_info, {"session_name": name}, "session_name")
        rejected(recorder, wait_for_log, {"session_name": name}, "session_name")

    prop()


def test_the_removed_options_are_refused_whatever_their_value(recorder: Recorder) -> None:
    """vmid and pct_path (removed with the node path) are unsupported parameters: nothing runs, even with a valid VMID."""

    @EXAMPLES
    @given(vmid=ANY_VMID, pct_path=st.one_of(st.none(), st.sampled_from(["pct", "/usr/sbin/pct"]), TEXT))
    def prop(vmid: int | str, pct_path: str | None) -> None:
        count("removed_options")
        extra: dict[str, t.Any] = {"vmid": vmid} if pct_path is None else {"vmid": vmid, "pct_path": pct_path}
        for module, args in ((tmux_session, LAUNCH), (tmux_session, {"session_name": "train", "state": "stopped"}),
                             (tmux_session_info, {}), (wait_for_log, {"session_name": "train"})):
            msg = rejected(recorder, module, dict(args, **extra), "vmid")
            assert msg.startswith("Unsupported parameters for (basic.py) module: "), msg
            assert ("pct_path" in msg) is (pct_path is not None), msg
        calls = NoCalls()
        with pytest.raises(AnsibleActionFail, match=r"^Invalid options for trainops\.pct_launch\.wait_for_log: .*\bvmid\b") as caught:
            run_action({"session_name": "train", **extra}, calls)
        assert ("pct_path" in str(caught.value)) is (pct_path is not None) and calls.calls == []

    prop()


def test_relative_paths(recorder: Recorder) -> None:
    """Paths inside the container are taken literally: '~' or '$HOME' is not expanded on the node, it is refused."""

    @EXAMPLES
    @given(path=RELATIVE)
    def prop(path: str) -> None:
        count("relative_paths")
        for option in ("chdir", "venv", "log_path"):
            msg = rejected(recorder, tmux_session, dict(LAUNCH, **{option: path}), option)
            assert "absolute path" in msg or "NUL character" in msg
        rejected(recorder, tmux_session_info, {"session_name": "t", "log_path": path}, "log_path")
        rejected(recorder, wait_for_log, {"log_path": path}, "log_path")

    prop()


def test_log_path_with_a_newline(recorder: Recorder) -> None:
    """No module accepts a log_path with a newline (the launch could not record it for the others)."""

    @EXAMPLES
    @given(head=TEXT, tail=TEXT)
    def prop(head: str, tail: str) -> None:
        count("log_path_newline")
        path = "/w/" + head.replace("/", "_") + "\n" + tail.replace("/", "_")
        rejected(recorder, tmux_session, dict(LAUNCH, log_path=path), "log_path")
        rejected(recorder, tmux_session_info, {"session_name": "t", "log_path": path}, "log_path")
        rejected(recorder, wait_for_log, {"log_path": path}, "log_path")

    prop()


class NoCalls:
    """The action plugin's module executor: records calls (there must be none)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, t.Any]] = []

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> dict[str, t.Any]:
        self.calls.append(kwargs)
        return {"failed": True, "msg": "called"}


def run_action(args: dict[str, t.Any], calls: NoCalls | None = None) -> tuple[dict[str, t.Any], NoCalls]:
    """Run the wait_for_log action plugin with a mocked task and connection (its module calls go to ``calls``)."""
    task = MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.action = "trainops.pct_launch.wait_for_log"
    connection = MagicMock()
    connection._shell.tmpdir = "/tmp/x"  # pylint: disable=protected-access
    action = ActionModule(task, connection, MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    calls = calls if calls is not None else NoCalls()
    action._execute_module = calls  # type: ignore[method-assign]  # pylint: disable=protected-access
    return action.run(task_vars={}), calls


def test_bad_regexes(recorder: Recorder) -> None:
    """pattern and fail_pattern that Python cannot compile: the action plugin and the module refuse them, naming the option."""

    @EXAMPLES
    @given(regex=BAD_REGEXES, option=st.sampled_from(["pattern", "fail_pattern"]))
    def prop(regex: str, option: str) -> None:
        count("bad_regexes")
        args = {"session_name": "train", option: regex}
        msg = rejected(recorder, wait_for_log, args, option)
        assert msg.startswith(f"Cannot use option {option} ") and "not a valid Python regular expression" in msg
        result, calls = run_action(args)
        assert result.get("failed") is True and result["msg"].startswith(f"Cannot use option {option} "), result
        assert calls.calls == []

    prop()


@pytest.mark.parametrize(("option", "value"), [("session_name", "tr\x00ain"), ("log_path", "/w/a\x00b.log"), ("chdir", "/w/\x00")])
def test_nul_in_an_option_starts_nothing(recorder: Recorder, option: str, value: str) -> None:
    """A NUL fails the task before anything runs; the message names the option where the module gets to check it.

    From Python 3.13 on, syslog.syslog() raises on an embedded NUL and AnsibleModule logs its arguments
    before main() runs its checks: the task then fails with ansible-core's "Failed to log to syslog
    (embedded null character)" instead of the module's message.
    """
    result = invoke(tmux_session, dict(LAUNCH, **{option: value}))
    assert result.get("failed") is True, result
    assert recorder.calls == [], recorder.calls
    if SYSLOG_REFUSES_NUL:
        assert "embedded null character" in result["msg"], result["msg"]
    else:
        assert re.search(rf"\b{option}\b", result["msg"]), result["msg"]
