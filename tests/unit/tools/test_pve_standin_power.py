# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""How the pct stand-in stops a container (standin_power.py): pve-container's vm_stop with lxc-stop, and the options of
``pct shutdown`` and ``pct reboot``. lxc-stop and the container are faked here; tests/integration/test_shutdown.py
stops real containers."""
from __future__ import annotations

import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[3] / "tools" / "pve_standin"
sys.path.insert(0, str(STANDIN))

# pylint: disable=wrong-import-position
import standin_power  # noqa: E402
from standin_core import PctError, parse_args  # noqa: E402
from standin_faults import TaskFailed  # noqa: E402


class FakeNode:
    """A container that runs until lxc-stop stops it (``stops``: whether it does; ``code``: lxc-stop's exit status)."""

    def __init__(self, stops: bool = True, code: int = 0) -> None:
        self.running = True
        self.stops, self.code = stops, code
        self.calls: list[list[str]] = []

    def lxc(self, tool: str, vmid: str, *args: str) -> list[str]:
        return [f"lxc-{tool}", "-P", "/x", "-n", vmid, *args]

    def is_running(self, _vmid: str) -> bool:
        return self.running

    def run(self, argv: list[str], **_kwargs: t.Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if argv[0] == "lxc-stop":
            self.running = self.running and not self.stops
            return subprocess.CompletedProcess(argv, self.code, "", "")
        return subprocess.CompletedProcess(argv, 0, "", "")


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> t.Callable[..., FakeNode]:
    def make(**kwargs: t.Any) -> FakeNode:
        node = FakeNode(**kwargs)
        monkeypatch.setattr(standin_power.subprocess, "run", node.run)
        monkeypatch.setattr(standin_power, "command_socket", lambda *args: None)  # the container's state, lxc-wait's
        return node
    return make


@pytest.mark.parametrize(("kill", "timeout", "kill_after", "expected"), [
    (True, None, False, ["--kill"]),  # pct stop
    (False, 60, False, ["--nokill", "--timeout", "60"]),  # pct shutdown (the default timeout)
    (False, 60, True, ["--timeout", "60"]),  # pct shutdown --forceStop 1
    (False, None, True, []),  # pct reboot without --timeout: lxc-stop's own 60 s, then a kill
    (False, 600, False, ["--nokill", "--timeout", "600"]),  # vzdump --mode stop (stopwait 10 minutes)
])
def test_lxc_stop_arguments_as_pve_container_builds_them(fake: t.Callable[..., FakeNode], kill: bool, timeout: int | None,
                                                         kill_after: bool, expected: list[str]) -> None:
    node = fake()
    standin_power.vm_stop(node, "940", kill, timeout, kill_after)  # type: ignore[arg-type]
    assert node.calls[0] == ["lxc-stop", "-P", "/x", "-n", "940", *expected]
    assert node.calls[1][:1] == ["lxc-wait"] and not node.running


def test_a_container_that_did_not_stop_is_a_task_error_after_the_warning(fake: t.Callable[..., FakeNode], monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    node = fake(stops=False, code=1)
    monkeypatch.setattr(standin_power, "EXTRA_WAIT", 0.2)  # pve-container polls the socket 5 s more
    with pytest.raises(TaskFailed) as err:
        standin_power.vm_stop(node, "940", False, 0, False)  # type: ignore[arg-type]
    assert err.value.message == "container did not stop"
    assert capsys.readouterr().err == "command 'lxc-stop -n 940 --nokill --timeout 0' failed: exit code 1\n"


def test_a_container_that_is_not_running_needs_no_stop(fake: t.Callable[..., FakeNode]) -> None:
    node = fake()
    node.running = False
    standin_power.vm_stop(node, "940", False, 60, False)  # type: ignore[arg-type]
    assert node.calls == []


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("0", 0), ("90", 90), ("+5", 5)])
def test_timeout_option(value: str | None, expected: int | None) -> None:
    assert standin_power.timeout_option(value) == expected


@pytest.mark.parametrize(("value", "message"), [("-1", "timeout: value must have a minimum value of 0"),
                                                ("soon", "timeout: type check ('integer') failed - got 'soon'")])
def test_timeout_option_refused(value: str, message: str) -> None:
    with pytest.raises(PctError) as err:
        standin_power.timeout_option(value)
    assert err.value.message == f"400 Parameter verification failed.\n{message}"


@pytest.mark.parametrize(("argv", "opts"), [
    (["shutdown", "940"], {}),
    (["shutdown", "940", "--timeout", "5", "--forceStop", "1"], {"timeout": "5", "forceStop": "1"}),
    (["shutdown", "940", "--forceStop"], {"forceStop": "1"}),
    (["reboot", "940", "--timeout=10"], {"timeout": "10"}),
])
def test_shutdown_and_reboot_take_pve_containers_options(argv: list[str], opts: dict[str, str]) -> None:
    call = parse_args(argv)
    assert (call.verb, call.args, call.opts) == (argv[0], ["940"], opts)


@pytest.mark.parametrize(("argv", "message"), [
    (["shutdown", "940", "--skiplock", "1"], "skiplock: property is not defined"),  # vm_shutdown has no skiplock
    (["reboot", "940", "--forceStop", "1"], "forceStop: property is not defined"),
    (["shutdown", "940", "--forceStop=maybe"], "forceStop: type check ('boolean') failed"),
])
def test_shutdown_and_reboot_refuse_what_pve_container_refuses(argv: list[str], message: str) -> None:
    with pytest.raises(PctError) as err:
        parse_args(argv)
    assert message in err.value.message
