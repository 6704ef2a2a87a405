# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The boot recorder (``_job_boot.py``): a job its container's stop cut off is known, and said, at the next boot.

A fake target in the test's temp dir: a run root (emptied, as a boot empties ``/run``), ``LIVE_DIR``, the history, and a
fake ``/proc`` whose boot id is not the one the record names. The records are the ones a launch writes
(``_boot_stage.live_record``); the readers (``tmux_session_info``'s report, the history, ``wait_for_log``'s chunk) run
as their modules run them. The starts at boot are in test_job_resume.py.
"""

from __future__ import annotations

import json
import os
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import (
    _boot_stage,
    _job_boot,
    _job_history,
    _job_live,
    _job_notify,
    _job_resume,
    _log_chunk,
    _log_poll,
    _tmux_cli,
    _tmux_sessions,
)
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import read_exit_record
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import spec_from_params, spec_summary

STARTED_AT = "2026-03-01T10:00:00Z"
BOOT_AT = "2026-03-01T12:00:00Z"
LAST_LINE_AT = 1772362700  # 2026-03-01T10:58:20Z
LAST_LINE_ISO = "2026-03-01T10:58:20Z"
OLD_BOOT = "0f5e-old/4242"
WAIT = {"pattern": None, "fail_pattern": None, "timeout": 1.0, "sleep": 0.1, "tail_lines": 5, "offset": 0,
        "wait_until": "started", "show_lines": None}


class Target:
    """A container's files after its restart: the logs, the emptied run root, the live records, the history, /proc."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run_root, self.live, self.logs = root / "run/trainops", root / "var/lib/trainops/jobs", root / "workspace"
        self.history = root / "var/lib/trainops/history.jsonl"
        self.proc = root / "proc"
        for folder in (self.run_root, self.logs, self.proc / "sys/kernel/random", self.proc / "1"):
            folder.mkdir(parents=True, exist_ok=True)
        (self.proc / "sys/kernel/random/boot_id").write_text("new-boot-id\n", encoding="ascii")
        (self.proc / "1/stat").write_text("1 (systemd) S" + " 0" * 18 + " 777 0 0\n", encoding="ascii")

    def launched(self, name: str = "train", lines: t.Sequence[str] = ("step 1", "step 5"), attempt: int = 2, state: str = "running",
                 **params: t.Any) -> dict[str, t.Any]:
        """The live record and the log a launch left, as the container went away during ``attempt``."""
        log = self.logs / f"{name}.log"
        spec = spec_from_params({"session_name": name, "command": "python train.py", "log_path": str(log), **params})
        spec = spec._replace(run_root=str(self.run_root))
        job = {"session_name": name, "log_path": str(log), "argv": ["sh", "-c", "python train.py"], "chdir": None, "venv": None,
               "user": None, "started_at": STARTED_AT, "host": "ct200", "supervise": dict(spec.supervise),
               "history_path": str(self.history), "gpus": []}
        record = _boot_stage.live_record(spec, job, dict(spec.env), json.dumps(spec_summary(spec)))
        record.update(boot=OLD_BOOT, attempt=attempt, state=state)
        text = f"### trainops.pct_launch: session={name} started_at={STARTED_AT} host=ct200 command=python train.py\n"
        text += "".join(f"{line}\n" for line in lines)
        log.write_text(text, encoding="utf-8")
        path = _job_live.record_path(name, str(self.live))
        assert _job_live.write(path, record)
        if params.get("notify_url_keep"):
            assert _job_live.keep_url(path, params["notify_url"])
        for written in (log, Path(path)):
            os.utime(written, (LAST_LINE_AT, LAST_LINE_AT))
        _job_history.append(str(self.history), {"event": "start", "session_name": name, "host": "ct200", "started_at": STARTED_AT,
                                                "log_path": str(log)})
        return record

    def boot(self) -> int:
        """The unit's run at the container's boot."""
        return _job_boot.main(str(self.live), str(self.proc))

    def history_lines(self) -> list[dict[str, t.Any]]:
        return [json.loads(line) for line in self.history.read_text(encoding="utf-8").splitlines()]


@pytest.fixture()
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Target:
    """The fake target; its boot at ``BOOT_AT``, its readers on its run root, a tmux server nobody runs."""
    box = Target(tmp_path)
    monkeypatch.setattr(_job_live, "boot_time", lambda proc_root="/proc", now=None, since_boot=None: BOOT_AT)
    for module in (_tmux_sessions, _log_poll):
        monkeypatch.setattr(module, "run_root", lambda: str(box.run_root))
    monkeypatch.setattr(_tmux_cli.Tmux, "socket_name", f"trainops-ut-none-{os.getpid()}")
    return box


REASON = f"lost: the container restarted at {BOOT_AT}; the job was running (attempt 2), its last log line at {LAST_LINE_ISO}: step 5"


def test_a_job_its_container_lost_is_recorded_lost_at_the_next_boot(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    target.launched()
    assert target.boot() == 0
    log = target.logs / "train.log"
    record = read_exit_record(str(log), None)
    assert record == {"session_name": "train", "exit_status": "", "started_at": STARTED_AT, "ended_at": LAST_LINE_ISO,
                      "attempts": "2", "end_state": "lost", "cause": "container_restart", "reason": REASON}
    run_dir = target.run_root / "train"
    assert (run_dir / "log_path").read_text(encoding="utf-8") == str(log), "the session is found by its name again"
    assert (run_dir / "exit").read_text(encoding="utf-8") == Path(f"{log}.exit").read_text(encoding="utf-8")
    assert log.read_text(encoding="utf-8").splitlines()[-1] == (
        f"### trainops.pct_launch: session=train attempt=2 lost=container_restart boot_at={BOOT_AT}")
    assert target.history_lines()[-1] == {"event": "end", "session_name": "train", "host": "ct200", "started_at": STARTED_AT,
                                          "log_path": str(log), "ended_at": LAST_LINE_ISO, "end_state": "lost", "exit_status": None,
                                          "cause": "container_restart", "reason": REASON, "attempts": 2, "boot_restarts": 0}
    assert not (target.live / "train.json").exists(), "recorded once: the next boot has nothing to do"
    assert capsys.readouterr().out == f"session train: {REASON}\n"
    assert target.boot() == 0 and len(target.history_lines()) == 2


def test_every_reader_says_lost_and_names_the_restart(target: Target) -> None:
    target.launched()
    target.boot()
    _status, (facts,) = _tmux_sessions.report("train", None, 5)
    entry = _tmux_sessions.session_entry(facts)
    assert (entry["state"], entry["end_state"], entry["cause"], entry["reason"], entry["exit_status"], entry["attempts"]) == (
        "finished", "lost", "container_restart", REASON, None, 2)
    _status, everyone = _tmux_sessions.report(None, None, 0)
    assert [(facts["session"], facts["state"]) for facts in everyone] == [("train", "finished")], "listed by its run dir"
    (launch,) = _job_history.read(str(target.history))
    assert (launch["end_state"], launch["reason"], launch["ended_at"]) == ("lost", REASON, LAST_LINE_ISO)
    waited = _log_chunk.chunk(dict(WAIT, session_name="train", log_path=None, pattern="epoch"), check_mode=False)
    assert (waited["verdict"], waited["end_state"], waited["cause"], waited["exit_status"]) == ("died", "lost", "container_restart", None)
    assert waited["msg"].startswith(f"Job did not start in session train: {REASON}; last log lines: ")
    assert waited["msg"].endswith("; launch the job again (with restart_on_boot, the container's boot starts such a job again)")
    finished = _log_chunk.chunk(dict(WAIT, session_name=None, log_path=str(target.logs / "train.log"), wait_until="finished"), False)
    assert finished["verdict"] == "failed" and finished["msg"].startswith(f"Job failed in log {target.logs / 'train.log'}: {REASON}")


def test_a_record_of_this_boot_is_left_alone(target: Target) -> None:
    record = target.launched()
    record["boot"] = _job_live.boot_key(str(target.proc))
    _job_live.write(_job_live.record_path("train", str(target.live)), record)
    assert target.boot() == 0
    assert (target.live / "train.json").exists() and not Path(f"{target.logs / 'train.log'}.exit").exists()


def test_a_job_its_supervisor_ended_at_a_clean_shutdown_is_not_lost(target: Target) -> None:
    target.launched()
    ended = f"session_name=train\nexit_status=143\nstarted_at={STARTED_AT}\nended_at=X\nend_state=stopped\ncause=shutdown\n"
    Path(f"{target.logs / 'train.log'}.exit").write_text(ended, encoding="utf-8")
    assert target.boot() == 0
    assert Path(f"{target.logs / 'train.log'}.exit").read_text(encoding="utf-8") == ended
    assert not (target.live / "train.json").exists() and len(target.history_lines()) == 1, "only its record is gone"


def test_an_earlier_launchs_exit_record_does_not_count(target: Target) -> None:
    target.launched()
    Path(f"{target.logs / 'train.log'}.exit").write_text("session_name=train\nexit_status=0\nstarted_at=2026-02-01T00:00:00Z\n",
                                                         encoding="utf-8")
    target.boot()
    assert (read_exit_record(str(target.logs / "train.log"), None) or {}).get("end_state") == "lost"


@pytest.mark.parametrize("changes, words", [
    ({"attempt": 0, "state": "starting"}, "the job had not started yet, its last log line at"),
    ({"state": "restarting"}, "its supervisor was waiting to start attempt 3, its last log line at"),
    ({"state": "stalled"}, "the job was running (attempt 2, stalled), its last log line at"),
    ({"lines": ()}, "the job was running (attempt 2), its log had no output of that attempt"),
    ({"lines": ("step 1", "### trainops.pct_launch: session=train attempt=2 started_at=X")},
     "the job was running (attempt 2), its log had no output of that attempt"),
])
def test_the_reason_says_what_the_job_was_doing(target: Target, changes: dict[str, t.Any], words: str) -> None:
    target.launched(**changes)
    target.boot()
    reason = (read_exit_record(str(target.logs / "train.log"), None) or {})["reason"]
    assert reason.startswith(f"lost: the container restarted at {BOOT_AT}; {words}"), reason


def test_a_long_last_line_keeps_the_reason_to_one_short_line(target: Target) -> None:
    target.launched(lines=("x" * 5000 + "\x1b[31m",))
    target.boot()
    reason = (read_exit_record(str(target.logs / "train.log"), None) or {})["reason"]
    assert len(reason) <= 300 and reason.endswith("x" * 120)


def test_a_job_whose_log_is_gone_is_recorded_in_its_run_dir(target: Target) -> None:
    target.launched()
    (target.logs / "train.log").unlink()
    target.boot()
    record = read_exit_record(str(target.logs / "train.log"), str(target.run_root / "train")) or {}
    assert record["end_state"] == "lost" and "its log is gone" in record["reason"]
    assert record["ended_at"] == LAST_LINE_ISO, "the live record's last write"


class Events:
    """A notify_command that appends each event it gets to a file."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / "events.jsonl"
        self.argv = [sys.executable, "-c", f"import sys; open({str(self.file)!r}, 'ab').write(sys.stdin.buffer.read())"]

    def events(self) -> list[dict[str, t.Any]]:
        text = self.file.read_text(encoding="utf-8") if self.file.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_the_lost_event_goes_to_the_notify_command(target: Target) -> None:
    events = Events(target.root)
    target.launched(notify_command=events.argv, notify_lines=1)
    target.boot()
    (event,) = events.events()
    assert {key: event[key] for key in ("event", "session_name", "host", "attempt", "attempts", "started_at", "exit_status",
                                        "end_state", "cause", "reason", "log_path", "log_tail")} == {
        "event": "lost", "session_name": "train", "host": "ct200", "attempt": 2, "attempts": 2, "started_at": STARTED_AT,
        "exit_status": None, "end_state": "lost", "cause": "container_restart", "reason": REASON,
        "log_path": str(target.logs / "train.log"), "log_tail": ["step 5"]}


def test_no_lost_event_when_its_state_is_not_asked_for(target: Target) -> None:
    events = Events(target.root)
    target.launched(notify_command=events.argv, notify_states=["failed"])
    target.boot()
    assert events.events() == []


def test_a_notify_url_not_kept_calls_nobody_and_notify_log_says_why(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    posted: list[tuple[str, bytes]] = []
    monkeypatch.setattr(_job_notify, "_post_once", lambda url, data, headers: posted.append((url, data)) or (None, False))
    target.launched(notify_url="https://hooks.example/T0KEN")
    target.boot()
    assert posted == []
    notes = (target.run_root / "train/notify.log").read_text(encoding="utf-8")
    assert notes.endswith(" notify_url lost failed: not sent: the launch did not keep the URL (notify_url_keep)\n")
    assert "T0KEN" not in notes


def test_a_kept_notify_url_gets_the_lost_event(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    posted: list[tuple[str, bytes]] = []
    monkeypatch.setattr(_job_notify, "_post_once", lambda url, data, headers: posted.append((url, data)) or (None, False))
    target.launched(notify_url="https://hooks.example/T0KEN", notify_url_keep=True)
    target.boot()
    ((url, data),) = posted
    assert url == "https://hooks.example/T0KEN" and json.loads(data)["event"] == "lost" and json.loads(data)["reason"] == REASON
    assert not (target.live / "train.notify").exists(), "the URL is not kept past the job's recorded end"


def test_one_record_that_cannot_be_settled_keeps_none_of_the_others(target: Target, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    target.launched("a")
    target.launched("b")
    settle = _job_boot.settle

    def broken(path: str, record: dict[str, t.Any], boot: str, boot_at: str) -> t.Any:
        if record["session_name"] == "a":
            raise OSError(28, "No space left on device")
        return settle(path, record, boot, boot_at)

    monkeypatch.setattr(_job_boot, "settle", broken)
    assert target.boot() == 1
    assert (read_exit_record(str(target.logs / "b.log"), None) or {}).get("end_state") == "lost"
    assert capsys.readouterr().err == "session a: not recorded: OSError: [Errno 28] No space left on device\n"


@pytest.mark.parametrize("params, attempt, why", [
    ({"restart_limit": 1}, 2, "restart_limit 1 reached"),
    ({"time_limit": 600, "time_limit_grace": 30}, 2, "its time_limit of 600 s was used up (3500 s)"),
])
def test_restart_on_boot_within_its_limits_only(target: Target, params: dict[str, t.Any], attempt: int, why: str) -> None:
    target.launched(restart_on_boot=True, attempt=attempt, **params)
    target.boot()
    record = read_exit_record(str(target.logs / "train.log"), None) or {}
    assert (record["end_state"], record["reason"]) == ("lost", f"{REASON}; not started again: {why}")
    assert [line["event"] for line in target.history_lines()] == ["start", "end"]


def test_a_start_at_boot_that_fails_is_recorded_lost(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    class NoTmux(_tmux_cli.Tmux):
        path = None

        def __init__(self) -> None:
            super().__init__()
            self.path = None

    monkeypatch.setattr(_job_resume, "Tmux", NoTmux)
    events = Events(target.root)
    target.launched(restart_on_boot=True, public_env={"EPOCHS": "3"}, notify_command=events.argv)
    target.boot()
    record = read_exit_record(str(target.logs / "train.log"), None) or {}
    assert record["reason"] == f"{REASON}; could not start it again: tmux is not installed"
    assert [(event["end_state"], event["reason"]) for event in events.events()] == [
        (None, f"{REASON}; started again as attempt 3 (restart_on_boot)"), ("lost", record["reason"])], "told, then corrected"
    assert [line["event"] for line in target.history_lines()] == ["start", "boot_restart", "end"]
    (launch,) = _job_history.read(str(target.history))
    assert (launch["end_state"], launch["boot_restarts"], launch["attempts"]) == ("lost", 0, 2), "no start at boot happened"
    assert not (target.run_root / "train/env").exists(), "the kept values are not left in RUN_DIR"
    assert not (target.live / "train.json").exists()


SHUT_DOWN = (f"session_name=train\nexit_status=143\nstarted_at={STARTED_AT}\nended_at=2026-03-01T11:00:00Z\nattempts=2\nend_state=stopped\n"
             "cause=shutdown\nsignal=TERM\nreason=the container shut down (its init stopped every process; PID 1 was systemd-shutdown): signal TERM\n")


def test_restart_on_boot_after_a_clean_shutdown_that_cannot_start_ends_the_launch_again(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    class NoTmux(_tmux_cli.Tmux):
        def __init__(self) -> None:
            super().__init__()
            self.path = None

    monkeypatch.setattr(_job_resume, "Tmux", NoTmux)
    target.launched(restart_on_boot=True, state="ended")
    Path(f"{target.logs / 'train.log'}.exit").write_text(SHUT_DOWN, encoding="utf-8")
    _job_history.append(str(target.history), {"event": "end", "session_name": "train", "host": "ct200", "started_at": STARTED_AT,
                                              "ended_at": "2026-03-01T11:00:00Z", "end_state": "stopped", "exit_status": 143,
                                              "cause": "shutdown", "reason": "the container shut down", "attempts": 2})
    target.boot()
    record = read_exit_record(str(target.logs / "train.log"), None) or {}
    assert (record["end_state"], record["cause"], record["exit_status"]) == ("stopped", "shutdown", "143")
    assert record["reason"].endswith("signal TERM; could not start it again: tmux is not installed")
    assert [line["event"] for line in target.history_lines()] == ["start", "end", "boot_restart", "end"]
    (launch,) = _job_history.read(str(target.history))
    assert (launch["end_state"], launch["exit_status"], launch["attempts"]) == ("stopped", 143, 2)
    assert not (target.live / "train.json").exists()


def test_without_restart_on_boot_a_clean_shutdown_is_left_as_its_supervisor_recorded_it(target: Target) -> None:
    target.launched(state="ended")
    Path(f"{target.logs / 'train.log'}.exit").write_text(SHUT_DOWN, encoding="utf-8")
    target.boot()
    assert Path(f"{target.logs / 'train.log'}.exit").read_text(encoding="utf-8") == SHUT_DOWN
    assert "boot_at" not in (target.logs / "train.log").read_text(encoding="utf-8"), "nothing to mark"
