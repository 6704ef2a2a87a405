# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the action plugin of trainops.pct_launch.wait_for_log: option checks and the chunk loop.

``_execute_module`` is replaced by a script of module results, so these tests count module calls (one
``pct exec`` each on a container) and check what is passed from chunk to chunk and what is printed. A
container is a host with the host variable ``pct_vmid`` (``CT250``); the module has no option naming one.
"""

from __future__ import annotations

import tempfile
import threading
import typing as t
from pathlib import Path
from unittest.mock import MagicMock

import pytest
from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure

from ansible_collections.trainops.pct_launch.plugins.action import wait_for_log as action_mod
from ansible_collections.trainops.pct_launch.plugins.action.wait_for_log import ActionModule, progress_line
from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _fleet_board as fleet_board
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import ContainerNotRunning


def chunk_result(verdict: str, offset: int = 0, **extra: t.Any) -> dict[str, t.Any]:
    """A module result of one chunk."""
    result = {"verdict": verdict, "offset": offset, "log_tail": ["x"], "log_path": "/w/t.log", "log_exists": True,
              "log_size": offset, "session_state": "running", "session_alive": True, "tmux_missing": False,
              "pane_pid": 5, "exit_status": None, "ended_at": None, "stopped_by": None, "process_tree": [],
              "matched_line": None, "elapsed": 0.1, "pct_calls": 1, "msg": "chunk msg"}
    if verdict not in ("started", "finished"):
        result.update(failed=True, exception="module summary")
    result.update(extra)
    return result


class FakeClock:
    """``time`` for the action plugin: monotonic() only moves when a chunk waits."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        """The fake monotonic clock."""
        return self.now

    def sleep(self, seconds: float) -> None:
        """Sleeping moves the fake clock."""
        self.now += seconds


class Script:
    """Stands in for ``_execute_module``: returns the scripted results, records the module args.

    A ``timeout`` result advances the fake clock by the chunk's duration, as the real module waits that long.
    """

    def __init__(self, results: list[dict[str, t.Any]]) -> None:
        self.results = results
        self.args: list[dict[str, t.Any]] = []
        self.names: list[str] = []
        self.clock: FakeClock | None = None
        self.probes: list[str] = []
        self.stopped = False  # whether the container answers a probe with "not running"

    def probe(self, cmd: str, **_kwargs: t.Any) -> dict[str, t.Any]:
        """Stands in for ``_low_level_execute_command``: the container answers, or pct says it is not running."""
        self.probes.append(cmd)
        if self.stopped:
            raise ContainerNotRunning("Cannot run a command in container 250: the container is not running; start it with 'pct start 250' "
                                      "(pct: container '250' not running!)")
        return {"rc": 0, "stdout": "", "stderr": ""}

    def __call__(self, module_name: str | None = None, module_args: dict[str, t.Any] | None = None, task_vars: t.Any = None,
                 **_kwargs: t.Any) -> dict[str, t.Any]:
        self.names.append(module_name or "")
        self.args.append(dict(module_args or {}))
        result = dict(self.results[min(len(self.args), len(self.results)) - 1])
        if self.clock is not None:
            self.clock.now += self.args[-1]["timeout"] if result.get("verdict") == "timeout" else 0.05
        return result


def make_action(args: dict[str, t.Any], script: Script) -> ActionModule:
    """An ActionModule with a mocked task and connection."""
    task = MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.action = "trainops.pct_launch.wait_for_log"
    connection = MagicMock()
    connection._shell.tmpdir = "/tmp/x"  # pylint: disable=protected-access
    action = ActionModule(task, connection, MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    action._execute_module = script  # type: ignore[method-assign]  # pylint: disable=protected-access
    action._low_level_execute_command = script.probe  # type: ignore[method-assign]  # pylint: disable=protected-access
    script.clock = action_mod.time  # the FakeClock installed by the clock fixture
    return action


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """Replace the action plugin's clock."""
    fake = FakeClock()
    monkeypatch.setattr(action_mod, "time", fake)
    return fake


@pytest.fixture()
def shown(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Lines the action plugin printed with display.display."""
    lines: list[str] = []
    fake = MagicMock()
    fake.display.side_effect = lambda msg, *a, **k: lines.append(msg)
    monkeypatch.setattr(action_mod, "display", fake)
    return lines


CT250 = {"inventory_hostname": "ct250", "pct_vmid": 250}


def test_healthy_job_is_one_call(shown: list[str]) -> None:
    script = Script([chunk_result("started", 120, matched_line="Epoch 1")])
    result = make_action({"session_name": "train", "pattern": "Epoch"}, script).run(task_vars=dict(CT250))
    assert len(script.args) == 1 and script.names == ["trainops.pct_launch.wait_for_log"]
    assert result["verdict"] == "started" and result["pct_calls"] == 1 and not result.get("failed")
    assert result["msg"].startswith("Job started in session train in container 250: pattern 'Epoch' matched after")
    assert script.args[0]["timeout"] <= 10 and script.args[0]["offset"] == 0 and not shown


def test_chunks_carry_offset_and_print_progress(shown: list[str]) -> None:
    script = Script([chunk_result("timeout", 10), chunk_result("timeout", 25), chunk_result("started", 40, matched_line="go")])
    result = make_action({"session_name": "train", "timeout": 600}, script).run(task_vars=dict(CT250))
    assert [a["offset"] for a in script.args] == [0, 10, 25]
    assert result["verdict"] == "started" and result["pct_calls"] == 3 and "exception" not in result
    assert shown == ["[ct250] wait_for_log train in container 250: 10 s of 600 s, log 10 bytes, session alive",
                     "[ct250] wait_for_log train in container 250: 20 s of 600 s, log 25 bytes, session alive"]
    assert result["elapsed"] == pytest.approx(20.05)


def test_timeout_stops_at_deadline(shown: list[str]) -> None:
    script = Script([chunk_result("timeout", 10)])
    result = make_action({"log_path": "/w/t.log", "timeout": 25}, script).run(task_vars=dict(CT250))
    assert result["failed"] and result["verdict"] == "timeout" and len(script.args) == 3
    assert [a["timeout"] for a in script.args] == [10, 10, 5]
    assert result["msg"].startswith("Timed out after 25 s waiting for the first line of output in log /w/t.log in container 250")
    assert "exception" not in result and result["pct_calls"] == 3 and len(shown) == 2


def test_short_timeout_is_one_chunk(shown: list[str]) -> None:
    script = Script([chunk_result("timeout", 0)])
    result = make_action({"log_path": "/w/t.log", "timeout": 0.3}, script).run(task_vars=dict(CT250))
    assert result["verdict"] == "timeout" and [a["timeout"] for a in script.args] == [0.3] and not shown


def test_died_is_final_at_once(shown: list[str]) -> None:
    script = Script([chunk_result("died", 5, exit_status=7, session_state="finished", session_alive=False)])
    result = make_action({"session_name": "train", "timeout": 3600}, script).run(task_vars=dict(CT250))
    assert result["failed"] and len(script.args) == 1 and "ended with exit status 7" in result["msg"]


def test_module_failure_without_verdict_names_the_wait(shown: list[str]) -> None:
    script = Script([{"failed": True, "msg": "Unsupported parameters for (basic.py) module: x"}])
    result = make_action({"session_name": "train"}, script).run(task_vars=dict(CT250))
    assert result == {"failed": True, "msg": "Cannot wait for session train in container 250: the module could not run there: "
                                             "Unsupported parameters for (basic.py) module: x"}, result
    assert len(script.args) == 1 and not shown


def test_missing_python_on_the_target_says_so(shown: list[str]) -> None:
    script = Script([{"failed": True, "rc": 127, "msg": "The module interpreter '/usr/bin/python3' was not found.",
                      "module_stderr": "/bin/sh: 1: /usr/bin/python3: not found"}])
    result = make_action({"session_name": "train"}, script).run(task_vars=dict(CT250))
    assert result["failed"] and "verdict" not in result and len(script.args) == 1, result
    assert result["msg"].startswith("Cannot wait for session train in container 250: the module could not run there: "
                                    "The module interpreter '/usr/bin/python3' was not found."), result["msg"]
    assert "needs Python 3.7 or later" in result["msg"] and "ansible_python_interpreter" in result["msg"], result["msg"]


@pytest.mark.parametrize("args, fragment", [
    ({"session_name": "t", "pattern": "Epoch ["}, "Cannot use option pattern 'Epoch ['"),
    ({"session_name": "t", "sleep": 2}, "Cannot use option sleep 2"),
    ({"session_name": "t:1"}, "Invalid session_name 't:1'"),
    ({"log_path": "/w/"}, "Invalid log_path '/w/'"),
])
def test_bad_options_fail_before_any_call(args: dict[str, t.Any], fragment: str) -> None:
    script = Script([chunk_result("started")])
    result = make_action(args, script).run(task_vars=dict(CT250))
    assert result["failed"] and result["msg"].startswith(fragment) and not script.args


def test_type_errors_fail_before_any_call() -> None:
    script = Script([chunk_result("started")])
    with pytest.raises(AnsibleActionFail, match="one of the following is required: session_name, log_path"):
        make_action({}, script).run(task_vars=dict(CT250))
    with pytest.raises(AnsibleActionFail, match="bogus"):
        make_action({"session_name": "t", "bogus": 1}, script).run(task_vars=dict(CT250))
    assert not script.args


@pytest.mark.parametrize("removed", [{"vmid": 250}, {"pct_path": "/usr/sbin/pct"}, {"vmid": 250, "pct_path": "pct"}])
def test_the_removed_options_are_refused_before_any_call(removed: dict[str, t.Any]) -> None:
    """vmid and pct_path went with the node path: the action refuses them (unsupported) and runs nothing."""
    script = Script([chunk_result("started")])
    with pytest.raises(AnsibleActionFail) as caught:
        make_action({"session_name": "t", **removed}, script).run(task_vars=dict(CT250))
    assert str(caught.value).startswith("Invalid options for trainops.pct_launch.wait_for_log: ")
    assert set(str(caught.value).split(": ", 1)[1].split(",")) == set(removed)
    assert not script.args and "vmid" not in action_mod.ActionModule._VALID_ARGS  # pylint: disable=protected-access


def test_the_module_gets_only_its_own_options() -> None:
    """host and pct_vmid (for the messages) and fleet_id stay on the controller."""
    script = Script([chunk_result("timeout", 10), chunk_result("started", 40, matched_line="go")])
    make_action({"session_name": "train", "pattern": "go", "timeout": 60}, script).run(task_vars=dict(CT250))
    assert [set(args) for args in script.args] == [{"session_name", "log_path", "pattern", "fail_pattern", "timeout", "sleep",
                                                    "tail_lines", "offset", "wait_until", "show_lines"}] * 2
    assert [(args["wait_until"], args["show_lines"]) for args in script.args] == [("started", False)] * 2


def test_a_host_without_pct_vmid_is_named_by_its_inventory_name(shown: list[str]) -> None:
    script = Script([chunk_result("timeout", 10), chunk_result("died", 5, exit_status=7, session_state="finished", session_alive=False)])
    result = make_action({"session_name": "train", "timeout": 60}, script).run(task_vars={"inventory_hostname": "gpu-box"})
    assert result["msg"].startswith("Job did not start in session train on gpu-box: the job ended with exit status 7")
    assert shown == ["[gpu-box] wait_for_log train on gpu-box: 10 s of 60 s, log 10 bytes, session alive"]


def test_progress_line_without_session() -> None:
    line = progress_line("h", {"pct_vmid": 250, "log_path": "/w/t.log", "timeout": 60.0}, {"log_exists": False}, 15.2)
    assert line == "[h] wait_for_log /w/t.log in container 250: 15 s of 60 s, log missing, session unknown"


class LostNode(Script):
    """``_execute_module`` whose node goes away: the chunks after the first ``good`` ones raise a connection failure."""

    def __init__(self, results: list[dict[str, t.Any]], good: int) -> None:
        super().__init__(results)
        self.good = good

    def __call__(self, module_name: str | None = None, module_args: dict[str, t.Any] | None = None, task_vars: t.Any = None,
                 **_kwargs: t.Any) -> dict[str, t.Any]:
        if len(self.args) >= self.good:
            self.args.append(dict(module_args or {}))
            raise AnsibleConnectionFailure('Data could not be sent to remote host "pve-i". Make sure this host can be reached over ssh: ')
        return super().__call__(module_name, module_args, task_vars)


@pytest.mark.parametrize("delegate_to, host_vars, reach, where", [
    ("pve-i", {"pct_vmid": 630}, "host pve-i", "in container 630"),
    (None, {"pct_vmid": 630, "pct_node": "pve-j"}, "container 630 on node pve-j", "in container 630 on node pve-j"),
    (None, {"pct_vmid": 630}, "container 630 on node localhost", "in container 630"),
    (None, {}, "host ct630", "on ct630"),
])
def test_node_lost_during_the_wait_names_it(shown: list[str], delegate_to: str | None, host_vars: dict[str, t.Any], reach: str,
                                            where: str) -> None:
    """The target cannot be reached for the second chunk: unreachable, naming it, the session and what to do."""
    script = LostNode([chunk_result("timeout", 10)], good=1)
    action = make_action({"session_name": "train", "timeout": 120}, script)
    action._task.delegate_to = delegate_to  # pylint: disable=protected-access
    with pytest.raises(AnsibleConnectionFailure) as caught:
        action.run(task_vars={"inventory_hostname": "ct630", **host_vars})
    text = str(caught.value)
    assert text.startswith(f"Cannot wait for session train {where}: the wait was cut off 10 s into its 120 s: "
                           'Data could not be sent to remote host "pve-i". Make sure this host can be reached over ssh. '), text
    assert f"once {reach} can be reached, check it (playbooks/status.yml)" in text and "not proven" in text
    assert "started" not in text.split(":", maxsplit=1)[0] and caught.value.__cause__ is None and len(script.args) == 2
    assert not isinstance(caught.value, ContainerNotRunning)


class StoppedBetweenChunks(Script):
    """The container stops after the first chunk: the connection says it is not running."""

    def __call__(self, module_name: str | None = None, module_args: dict[str, t.Any] | None = None, task_vars: t.Any = None,
                 **kwargs: t.Any) -> dict[str, t.Any]:
        if self.args:
            self.args.append(dict(module_args or {}))
            raise ContainerNotRunning("Cannot run a command in container 250: the container is not running; start it with 'pct start 250' "
                                      "(pct: container '250' not running!)")
        return super().__call__(module_name, module_args, task_vars, **kwargs)


def test_container_stopped_between_chunks_fails_saying_pct_start(shown: list[str]) -> None:
    script = StoppedBetweenChunks([chunk_result("timeout", 10)])
    result = make_action({"session_name": "train", "timeout": 120}, script).run(task_vars=dict(CT250))
    assert result["failed"] and len(script.args) == 2 and result["pct_calls"] == 2, result
    assert result["msg"].startswith("Cannot wait for session train in container 250: the container is not running any more "
                                    "(it stopped during the wait, and the job with it); start it with 'pct start 250' and launch the job again"), result
    assert "may still run" not in result["msg"] and result["reason"] == result["msg"]


def test_container_stopped_during_a_chunk_is_asked_and_named(shown: list[str]) -> None:
    """A chunk killed with its container (rc 137, no JSON): the action asks the container, which is stopped."""
    script = Script([{"failed": True, "rc": 137, "msg": "Module result deserialization failed: No start of json char found"}])
    script.stopped = True
    result = make_action({"session_name": "train", "timeout": 120}, script).run(task_vars=dict(CT250))
    assert result["failed"] and script.probes == ["true"] and "start it with 'pct start 250'" in result["msg"], result


def test_a_killed_chunk_on_a_running_container_is_asked_three_times_then_run_once_more(shown: list[str]) -> None:
    """Killed twice in a container that still runs: asked three times after each, one more chunk, then the failure."""
    script = Script([{"failed": True, "rc": 137, "msg": "Module result deserialization failed: No start of json char found"}])
    result = make_action({"session_name": "train", "timeout": 120}, script).run(task_vars=dict(CT250))
    assert script.probes == ["true"] * 6 and len(script.args) == 2, result
    assert "the module could not run there" in result["msg"] and "pct start" not in result["msg"], result


def test_a_chunk_killed_by_the_shutdown_is_followed_by_one_that_names_it(shown: list[str]) -> None:
    """The container shuts down: a chunk is killed (SIGKILL, rc 137) while the container still runs; the next chunk
    finds the job ended by the shutdown, and the message says so."""
    ended = chunk_result("died", 10, session_state="finished", session_alive=False, exit_status=143, end_state="stopped",
                         cause="shutdown", shutdown="PID 1 was systemd-shutdown", end_reason="the container shut down")
    script = Script([{"failed": True, "rc": 137, "msg": "Module result deserialization failed"}, ended])
    result = make_action({"session_name": "train", "timeout": 120, "pattern": "Epoch"}, script).run(task_vars=dict(CT250))
    assert result["failed"] and result["verdict"] == "died" and len(script.args) == 2 and result["pct_calls"] == 2, result
    assert result["msg"].startswith("Job did not start in session train in container 250: the container shut down after "), result
    assert "(PID 1 was systemd-shutdown), and the job with it (exit status 143), before a log line matching 'Epoch'" in result["msg"]
    assert result["msg"].endswith("; launch the job again once the container runs"), result


def test_no_probe_for_a_host_that_is_no_container(shown: list[str]) -> None:
    script = Script([{"failed": True, "rc": 137, "msg": "Module result deserialization failed"}])
    result = make_action({"session_name": "train", "timeout": 120}, script).run(task_vars={"inventory_hostname": "gpu1"})
    assert script.probes == [] and result["msg"].startswith("Cannot wait for session train on gpu1: the module could not run there"), result


# The fleet-wide wait (option fleet_id): the board is real, files in the test's own temporary directory;
# a chunk can block (in real time) as one waiting in its container does.

@pytest.fixture()
def boards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fleet boards go to this test's own temporary directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


MEMBER = {"session_name": "rdv", "timeout": 600, "fleet_id": "rdv-1"}
CT361 = {"inventory_hostname": "ct361", "pct_vmid": 361}


class BlockingScript(Script):
    """A chunk that waits (in real time) until released, as a chunk waiting in its container does."""

    def __init__(self, results: list[dict[str, t.Any]]) -> None:
        super().__init__(results)
        self.release = threading.Event()

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> dict[str, t.Any]:
        self.release.wait(20)
        return super().__call__(*args, **kwargs)


def test_a_peer_failure_ends_a_blocked_wait_at_once(boards: Path) -> None:
    script = BlockingScript([chunk_result("timeout", 10)])
    action = make_action(dict(MEMBER), script)
    timer = threading.Timer(0.3, fleet_board.post_failure, ("rdv-1", {"host": "ct362", "vmid": 362, "node": "pve-f",
                                                                      "verdict": "died", "exit_status": 7, "msg": "died"}))
    timer.start()
    result = action.run(task_vars=dict(CT361))
    script.release.set()
    assert result["failed"] and result["verdict"] == "fleet_failed", result
    assert result["fleet_failure"]["host"] == "ct362" and result["fleet_failure"]["exit_status"] == 7
    assert result["msg"].startswith("Stopped waiting for session rdv in container 361 after ")
    assert "ct362 (CT 362 on pve-f) of fleet rdv-1 failed first (died, exit status 7)" in result["msg"]
    assert result["msg"].endswith("this container's job is not at fault")


def test_an_own_failure_is_posted_first_and_the_module_never_sees_fleet_id(boards: Path) -> None:
    script = Script([chunk_result("died", 5, exit_status=3, session_state="finished", session_alive=False)])
    result = make_action(dict(MEMBER), script).run(task_vars=dict(CT361))
    assert result["verdict"] == "died" and result["fleet_first"] is True
    assert all("fleet_id" not in args for args in script.args), script.args
    first = fleet_board.first_failure("rdv-1")
    assert first is not None and (first["host"], first["vmid"], first["exit_status"], first["verdict"]) == ("ct361", 361, 3, "died")


class LateScript(Script):
    """A chunk during which another member fails first, and which then fails on its own."""

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> dict[str, t.Any]:
        fleet_board.post_failure("rdv-1", {"host": "ct362", "verdict": "died"})
        return super().__call__(*args, **kwargs)


def test_an_own_failure_after_a_peer_is_kept_and_not_first(boards: Path) -> None:
    script = LateScript([chunk_result("fail_pattern", 5, matched_line="Traceback")])
    result = make_action(dict(MEMBER), script).run(task_vars={"inventory_hostname": "ct360", "pct_vmid": 360})
    assert result["verdict"] == "fail_pattern" and result["fleet_first"] is False, result
    assert (fleet_board.first_failure("rdv-1") or {})["host"] == "ct362"


def test_a_started_member_posts_nothing_and_a_later_peer_failure_does_not_undo_it(boards: Path) -> None:
    script = Script([chunk_result("started", 40, matched_line="rank 0 of 4: world [0, 1, 2, 3]")])
    result = make_action(dict(MEMBER), script).run(task_vars=dict(CT361))
    assert result["verdict"] == "started" and not result.get("failed") and "fleet_first" not in result
    assert fleet_board.first_failure("rdv-1") is None


def test_a_wait_that_starts_after_the_failure_runs_no_chunk(boards: Path) -> None:
    fleet_board.post_failure("rdv-1", {"host": "ct362", "verdict": "timeout"})
    script = Script([chunk_result("timeout", 10)])
    result = make_action(dict(MEMBER), script).run(task_vars=dict(CT361))
    assert result["verdict"] == "fleet_failed" and not script.args and result["pct_calls"] == 0, result


def test_without_fleet_id_the_board_is_never_read(boards: Path) -> None:
    fleet_board.post_failure("rdv-1", {"host": "ct362", "verdict": "died"})
    script = Script([chunk_result("started", 40, matched_line="go")])
    result = make_action({"session_name": "rdv"}, script).run(task_vars=dict(CT361))
    assert result["verdict"] == "started", result


def test_a_bad_fleet_id_starts_nothing(boards: Path) -> None:
    script = Script([chunk_result("started", 40)])
    result = make_action(dict(MEMBER, fleet_id="../x"), script).run(task_vars=dict(CT361))
    assert result["failed"] and result["msg"].startswith("Cannot use option fleet_id '../x'") and not script.args


# After its own proof, a member watches its job while other members still wait (waiting markers on the board).

def test_a_rank_that_dies_after_its_proof_fails_the_fleet(boards: Path) -> None:
    fleet_board.mark_waiting("rdv-1", "ct362")
    script = Script([chunk_result("started", 40, matched_line="rank 2 ready"),
                     chunk_result("died", 60, exit_status=7, session_state="finished", session_alive=False)])
    result = make_action(dict(MEMBER), script).run(task_vars=dict(CT361))
    assert result["failed"] and result["verdict"] == "died" and result["fleet_first"] is True, result
    assert [args["pattern"] for args in script.args] == [None, "(?!)"] and script.args[1]["offset"] == 40
    assert result["msg"].startswith("Job failed in session rdv in container 361 after its start was proven ('rank 2 ready')")
    assert "the job ended with exit status 7" in result["msg"] and result["pct_calls"] == 2
    assert (fleet_board.first_failure("rdv-1") or {})["host"] == "ct361"
    assert fleet_board.waiting("rdv-1") == ["ct362"], "only the member that still waits is marked"


class ProofThenBlock(Script):
    """The first chunk proves the start at once; the next one (the watch) blocks like a healthy job's chunk."""

    def __init__(self, results: list[dict[str, t.Any]]) -> None:
        super().__init__(results)
        self.patterns: list[t.Any] = []
        self.release = threading.Event()

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> dict[str, t.Any]:
        self.patterns.append((kwargs.get("module_args") or {}).get("pattern"))
        if len(self.patterns) > 1:
            self.release.wait(20)
        return super().__call__(*args, **kwargs)


def test_a_proven_member_returns_as_soon_as_no_member_waits(boards: Path) -> None:
    fleet_board.mark_waiting("rdv-1", "ct362")
    script = ProofThenBlock([chunk_result("started", 40, matched_line="go"), chunk_result("timeout", 40)])
    timer = threading.Timer(0.3, fleet_board.mark_done, ("rdv-1", "ct362"))
    timer.start()
    result = make_action(dict(MEMBER), script).run(task_vars=dict(CT361))
    script.release.set()
    assert result["verdict"] == "started" and not result.get("failed"), result
    assert script.patterns == [None, "(?!)"], "it watched its job while ct362 waited, and returned when it was done"


def test_a_proven_member_whose_peer_fails_stays_started(boards: Path) -> None:
    fleet_board.mark_waiting("rdv-1", "ct362")
    script = ProofThenBlock([chunk_result("started", 40, matched_line="go"), chunk_result("timeout", 40)])
    timer = threading.Timer(0.3, fleet_board.post_failure, ("rdv-1", {"host": "ct362", "verdict": "died", "exit_status": 1}))
    timer.start()
    result = make_action(dict(MEMBER), script).run(task_vars=dict(CT361))
    script.release.set()
    assert result["verdict"] == "started" and not result.get("failed"), "its own job is fine: the launch stops it"
    assert script.patterns == [None, "(?!)"]


def test_a_proven_member_whose_job_finishes_with_status_0_is_started(boards: Path) -> None:
    fleet_board.mark_waiting("rdv-1", "ct362")
    script = Script([chunk_result("started", 40, matched_line="rank 3 of 4: world [0, 1, 2, 3]"),
                     chunk_result("died", 60, exit_status=0, session_state="finished", session_alive=False)])
    result = make_action(dict(MEMBER), script).run(task_vars=dict(CT361))
    assert result["verdict"] == "started" and not result.get("failed"), result
    assert fleet_board.first_failure("rdv-1") is None, "a job that finished well fails nobody"


# wait_until finished: the wait goes on after the start until the job ends; show_lines prints the log's lines.

FINISHED = {"session_name": "train", "wait_until": "finished", "timeout": 3600}
TWO_HOSTS = dict(CT250, ansible_play_hosts_all=["ct250", "ct251"])


def test_show_lines_defaults_to_the_wait_until(shown: list[str]) -> None:
    for args, expected in (({}, False), ({"wait_until": "finished"}, True), ({"wait_until": "finished", "show_lines": False}, False),
                           ({"show_lines": True}, True)):
        script = Script([chunk_result("started", 40, matched_line="go")] if args.get("wait_until") != "finished" else
                        [chunk_result("finished", 40, exit_status=0, session_state="finished", session_alive=False)])
        make_action({"session_name": "train", **args}, script).run(task_vars=dict(CT250))
        assert script.args[0]["show_lines"] is expected, (args, script.args)


def test_waiting_for_the_end_goes_on_after_the_proof(shown: list[str]) -> None:
    script = Script([chunk_result("timeout", 10, proven_line="step 1", proof_recorded=True, new_lines=["step 1"], lines_omitted=0),
                     chunk_result("timeout", 25, proven_line=None, proof_recorded=False, new_lines=["step 2", "step 3"], lines_omitted=0),
                     chunk_result("finished", 40, proven_line=None, proof_recorded=False, exit_status=0, session_state="finished",
                                  session_alive=False, attempts=1, new_lines=["done"], lines_omitted=0)])
    result = make_action(dict(FINISHED, pattern="step"), script).run(task_vars=dict(CT250))
    assert not result.get("failed") and result["verdict"] == "finished" and result["pct_calls"] == 3, result
    assert [args["pattern"] for args in script.args] == ["step", "(?!)", "(?!)"], "once proven, the start is looked for no more"
    assert [args["offset"] for args in script.args] == [0, 10, 25] and all(args["wait_until"] == "finished" for args in script.args)
    assert result["proven_line"] == "step 1" and result["matched_line"] == "step 1" and result["proof_recorded"] is True
    assert result["msg"].startswith("Job finished in session train in container 250: exit status 0 after "), result["msg"]
    assert "exception" not in result and "new_lines" not in result and "lines_omitted" not in result
    assert shown == ["step 1", "[ct250] wait_for_log train in container 250: 10 s of 3600 s, log 10 bytes, session alive",
                     "step 2", "step 3", "[ct250] wait_for_log train in container 250: 20 s of 3600 s, log 25 bytes, session alive",
                     "done"], "bare lines with one host, in log order, each chunk's before its progress line"


def test_waiting_for_the_end_fails_with_the_exit_record(shown: list[str]) -> None:
    record = {"exit_status": 3, "attempts": 1, "end_state": "failed", "cause": "python_exception", "end_reason": "ValueError: NaN",
              "signal": None}
    script = Script([chunk_result("failed", 40, proven_line="go", proof_recorded=True, session_state="finished", session_alive=False,
                                  log_tail=["go", "ValueError: NaN"], **record)])
    result = make_action(dict(FINISHED), script).run(task_vars=dict(CT250))
    assert result["failed"] and result["verdict"] == "failed" and len(script.args) == 1, result
    assert result["msg"].startswith("Job failed in session train in container 250: exit status 3 after 0.1 s (reason: ValueError: NaN); "
                                    "last log lines: go | ValueError: NaN; fix the job and launch it again"), result["msg"]
    assert result["reason"] == ("Job failed in session train in container 250: exit status 3 after 0.1 s (reason: ValueError: NaN); "
                                "fix the job and launch it again")
    assert (result["end_state"], result["cause"], result["attempts"]) == ("failed", "python_exception", 1) and shown == []


def test_waiting_for_the_end_times_out_without_stopping_the_job(shown: list[str]) -> None:
    script = Script([chunk_result("timeout", 10, proven_line=None, proof_recorded=False, new_lines=[], lines_omitted=0)])
    result = make_action(dict(FINISHED, timeout=25, pattern="Epoch"), script).run(task_vars=dict(CT250))
    assert result["failed"] and result["verdict"] == "timeout" and len(script.args) == 3 and len(shown) == 2, result
    assert result["msg"].startswith("Timed out after 25 s waiting for the job in session train in container 250 to end: the job still "
                                    "runs (pane_pid 5), and it was not stopped; a log line matching 'Epoch' was not seen"), result["msg"]
    assert result["proven_line"] is None and result["matched_line"] is None and result["proof_recorded"] is False


def test_fail_pattern_while_waiting_for_the_end_keeps_its_line(shown: list[str]) -> None:
    script = Script([chunk_result("timeout", 10, proven_line="go", proof_recorded=True),
                     chunk_result("fail_pattern", 20, proven_line=None, matched_line="Traceback (most recent call last):")])
    result = make_action(dict(FINISHED, fail_pattern="Traceback"), script).run(task_vars=dict(CT250))
    assert result["failed"] and result["verdict"] == "fail_pattern" and result["matched_line"] == "Traceback (most recent call last):"
    assert result["proven_line"] == "go" and result["proof_recorded"] is True


def test_lines_of_a_play_of_several_hosts_name_their_host(shown: list[str]) -> None:
    script = Script([chunk_result("timeout", 10, new_lines=["step 1", "step 2"], lines_omitted=5),
                     chunk_result("died", 20, exit_status=4, session_state="finished", session_alive=False, new_lines=["bye"], lines_omitted=0)])
    result = make_action({"session_name": "train", "show_lines": True}, script).run(task_vars=dict(TWO_HOSTS))
    assert result["verdict"] == "died" and "new_lines" not in result
    assert shown == ["[ct250] ... 5 lines not shown", "[ct250] step 1", "[ct250] step 2",
                     "[ct250] wait_for_log train in container 250: 10 s of 600 s, log 10 bytes, session alive", "[ct250] bye"]


def test_a_play_of_one_host_shows_bare_lines_and_the_omitted_count(shown: list[str]) -> None:
    script = Script([chunk_result("started", 10, matched_line="go", new_lines=["go"], lines_omitted=1200)])
    make_action({"session_name": "train", "show_lines": True}, script).run(task_vars=dict(CT250, ansible_play_hosts_all=["ct250"]))
    assert shown == ["... 1200 lines not shown", "go"]


def test_without_show_lines_nothing_is_printed_but_progress(shown: list[str]) -> None:
    script = Script([chunk_result("timeout", 10), chunk_result("started", 20, matched_line="go")])
    make_action({"session_name": "train"}, script).run(task_vars=dict(TWO_HOSTS))
    assert shown == ["[ct250] wait_for_log train in container 250: 10 s of 600 s, log 10 bytes, session alive"]


def test_a_proven_member_shows_the_lines_it_watches(boards: Path, shown: list[str]) -> None:
    fleet_board.mark_waiting("rdv-1", "ct362")
    script = Script([chunk_result("started", 40, matched_line="rank 2 ready", new_lines=["rank 2 ready"], lines_omitted=0),
                     chunk_result("died", 60, exit_status=0, session_state="finished", session_alive=False, new_lines=["done"],
                                  lines_omitted=0)])
    result = make_action(dict(MEMBER, show_lines=True), script).run(task_vars=dict(CT361, ansible_play_hosts_all=["ct361", "ct362"]))
    assert result["verdict"] == "started" and shown == ["[ct361] rank 2 ready", "[ct361] done"], (result, shown)


def test_each_chunk_runs_the_module_as_the_normal_action_does(shown: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chunk is one ``_execute_module`` of wait_for_log's module, not wrapped in async_wrapper, its tmp folder removed."""
    script = Script([chunk_result("timeout", 10), chunk_result("started", 40, matched_line="go")])
    calls: list[dict[str, t.Any]] = []
    removed: list[t.Any] = []

    def execute(**kwargs: t.Any) -> dict[str, t.Any]:
        calls.append(kwargs)
        return script(**kwargs)

    action = make_action({"session_name": "train", "pattern": "go", "timeout": 60}, script)
    monkeypatch.setattr(action, "_execute_module", execute)
    monkeypatch.setattr(action, "_remove_tmp_path", lambda tmp_path, force=False: removed.append(tmp_path))
    result = action.run(task_vars=dict(CT250))
    assert result["verdict"] == "started" and len(calls) == 2, result
    assert {(call["module_name"], call["wrap_async"]) for call in calls} == {("trainops.pct_launch.wait_for_log", False)}
    assert [call["module_args"]["offset"] for call in calls] == [0, 10] and removed == [None, None]
    assert len(shown) == 1, "one progress line, after the chunk without a verdict"


def test_the_log_a_chunk_found_is_read_by_the_next_chunks(shown: list[str]) -> None:
    """Only session_name given: the chunks after the first read the log it found (@trainops_log), so a session gone with
    its container's /run (a reboot) still has its exit record read."""
    script = Script([chunk_result("timeout", 10), chunk_result("timeout", 20, log_path="/w/other.log")])
    make_action({"session_name": "train", "timeout": 25}, script).run(task_vars=dict(CT250))
    assert script.args[0].get("log_path") is None and script.args[1]["log_path"] == script.args[2]["log_path"] == "/w/t.log", script.args
    given = Script([chunk_result("timeout", 10, log_path="/w/found.log")])
    make_action({"session_name": "train", "log_path": "/w/given.log", "timeout": 15}, given).run(task_vars=dict(CT250))
    assert [a["log_path"] for a in given.args] == ["/w/given.log", "/w/given.log"]
