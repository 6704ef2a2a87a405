# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The job's notifier (``_job_notify.py``) against a real HTTP server on 127.0.0.1 and real commands.

The server records each request and answers as the test tells it (a status, or nothing at all); the command
notifier runs small sh scripts that write what they got (standard input, environment, directory, process group)
to files. Nothing talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import http.server
import json
import os
import pwd
import re
import socket
import threading
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_notify
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_notify import STATES, Notifier, validate
from tests.integration.notify_receivers import receiver

TOKEN = "XOXBSECRETTOKEN123"
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (?P<kind>notify_command|notify_url) (?P<event>\S+) failed: (?P<cause>.*)$")
EVENT = {"event": "failed", "session_name": "train", "host": "ct200", "attempt": 3, "attempts": 3, "time": "2026-12-01T10:00:00Z",
         "started_at": "2026-12-01T09:00:00Z", "exit_status": 3, "end_state": "failed", "cause": "python_exception",
         "reason": "ValueError: bad", "log_path": "/workspace/train.log", "log_tail": ["step 1", "ünïcödé ✓"]}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, t.Any]] = []
        self.statuses: list[int] = []  # the answers, in order; 200 once they are used up
        self.hang = False  # accept, read the request, never answer (until the test ends)
        self.release = threading.Event()

    def url(self, path: str = f"/services/T000/B000/{TOKEN}") -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # pylint: disable=invalid-name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append({"method": "POST", "path": self.path, "headers": dict(self.headers), "body": body})
        if self.server.hang:
            self.server.release.wait(60)
            return
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        self.send_response(status)
        if 300 <= status < 400:
            self.send_header("Location", "/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # pylint: disable=invalid-name
        self.server.requests.append({"method": "GET", "path": self.path, "headers": dict(self.headers), "body": b""})
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: t.Any) -> None:  # pylint: disable=redefined-builtin
        pass


@pytest.fixture()
def server() -> t.Iterator[_Server]:
    """A real HTTP server on 127.0.0.1 (a free port) that records the requests."""
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()


@pytest.fixture(autouse=True)
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry after 0.05 s, not 2 s."""
    monkeypatch.setattr(_job_notify, "RETRY_DELAY", 0.05)


def _notifier(run_dir: Path, **settings: t.Any) -> Notifier:
    values: dict[str, t.Any] = {"notify_command": None, "notify_url": None, "notify_states": list(STATES), "notify_lines": 10}
    values.update(settings)
    return Notifier(values, str(run_dir))


def _log(run_dir: Path) -> str:
    path = run_dir / "notify.log"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def _failures(run_dir: Path) -> list[dict[str, str]]:
    return [match.groupdict() for match in map(LINE.match, _log(run_dir).splitlines()) if match]


def _refused_port() -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def _wait_for(predicate: t.Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    """The process has ended (a zombie waiting for its reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "notify.sh"
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return str(path)


# --- notify_url ---------------------------------------------------------------------------------------------------

def test_url_gets_the_event_as_json(tmp_path: Path, server: _Server) -> None:
    notifier = _notifier(tmp_path, notify_url=server.url())
    notifier.send(dict(EVENT, chdir=Path("/workspace")))  # a value JSON cannot hold goes as its str()
    notifier.close()
    assert len(server.requests) == 1
    request = server.requests[0]
    assert request["method"] == "POST" and request["path"] == f"/services/T000/B000/{TOKEN}"
    headers = {key.lower(): value for key, value in request["headers"].items()}
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == "trainops.pct_launch-notify"
    assert json.loads(request["body"].decode("utf-8")) == dict(EVENT, chdir="/workspace")
    assert _log(tmp_path) == ""


def test_url_event_that_json_cannot_hold_still_goes(tmp_path: Path, server: _Server) -> None:
    notifier = _notifier(tmp_path, notify_url=server.url())
    notifier.send({"event": "failed", ("a", "tuple"): 1, "loss": float("nan"), "log_tail": ["bytes \udcff not UTF-8"]})
    notifier.close()
    assert json.loads(server.requests[0]["body"].decode("utf-8")) == {
        "event": "failed", "('a', 'tuple')": "1", "loss": "nan", "log_tail": "['bytes \\udcff not UTF-8']"}
    notifier.send({"event": "failed", "log_tail": ["bytes \udcff not UTF-8"]})
    notifier.close()
    assert json.loads(server.requests[1]["body"].decode("utf-8")) == {"event": "failed", "log_tail": ["bytes \udcff not UTF-8"]}


def test_only_the_states_in_notify_states_are_sent(tmp_path: Path, server: _Server) -> None:
    notifier = _notifier(tmp_path, notify_url=server.url(), notify_states=["failed", "timeout"])
    for state in ("started", "proven", "restarted", "stalled", "finished", "timeout", "failed", "bogus"):
        notifier.send(dict(EVENT, event=state))
    notifier.close()
    assert sorted(json.loads(request["body"])["event"] for request in server.requests) == ["failed", "timeout"]


def test_no_states_nothing_sent(tmp_path: Path, server: _Server) -> None:
    notifier = _notifier(tmp_path, notify_url=server.url(), notify_states=[])
    notifier.send(EVENT)
    notifier.close()
    assert not server.requests


def test_a_500_is_retried_once(tmp_path: Path, server: _Server) -> None:
    server.statuses = [500]
    notifier = _notifier(tmp_path, notify_url=server.url())
    notifier.send(EVENT)
    notifier.close()
    assert [json.loads(request["body"]) for request in server.requests] == [EVENT, EVENT]
    assert _log(tmp_path) == ""


def test_a_5xx_twice_is_one_line_without_the_url(tmp_path: Path, server: _Server) -> None:
    server.statuses = [500, 503]
    notifier = _notifier(tmp_path, notify_url=server.url())
    notifier.send(EVENT)
    notifier.close()
    assert len(server.requests) == 2
    assert _failures(tmp_path) == [{"kind": "notify_url", "event": "failed",
                                    "cause": "HTTP status 503 (tried twice; the first try: HTTP status 500)"}]
    assert TOKEN not in _log(tmp_path) and "127.0.0.1" not in _log(tmp_path)


@pytest.mark.parametrize("status", [201, 204, 299])
def test_any_2xx_is_success(tmp_path: Path, server: _Server, status: int) -> None:
    server.statuses = [status]
    notifier = _notifier(tmp_path, notify_url=server.url())
    notifier.send(EVENT)
    notifier.close()
    assert len(server.requests) == 1 and _log(tmp_path) == ""


@pytest.mark.parametrize("status", [400, 404, 302, 307])
def test_a_4xx_or_a_redirect_is_not_retried_nor_followed(tmp_path: Path, server: _Server, status: int) -> None:
    server.statuses = [status]
    notifier = _notifier(tmp_path, notify_url=server.url())
    notifier.send(EVENT)
    notifier.close()
    assert [request["method"] for request in server.requests] == ["POST"]
    assert _failures(tmp_path) == [{"kind": "notify_url", "event": "failed", "cause": f"HTTP status {status}"}]


def test_a_server_that_never_answers_blocks_nothing(tmp_path: Path, server: _Server) -> None:
    server.hang = True
    notifier = _notifier(tmp_path, notify_url=server.url())
    begin = time.monotonic()
    notifier.send(EVENT)
    sent = time.monotonic()
    _wait_for(lambda: len(server.requests) == 1)
    closing = time.monotonic()
    notifier.close(timeout=1)
    closed = time.monotonic()
    # Bounds on our code (generous for a loaded machine), not speed claims.
    assert sent - begin < 0.5
    assert 0.9 <= closed - closing < 1.5 + 0.5


def test_a_refused_port_is_one_line_without_the_url(tmp_path: Path) -> None:
    port = _refused_port()
    notifier = _notifier(tmp_path, notify_url=f"http://127.0.0.1:{port}/services/T000/B000/{TOKEN}?token={TOKEN}")
    notifier.send(EVENT)
    notifier.close()
    assert _failures(tmp_path) == [{"kind": "notify_url", "event": "failed", "cause": "Connection refused (tried twice)"}]
    text = _log(tmp_path)
    assert TOKEN not in text and str(port) not in text and "127.0.0.1" not in text and "services" not in text


def test_the_proxy_environment_is_ignored(tmp_path: Path, server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = f"http://127.0.0.1:{_refused_port()}"
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    notifier = _notifier(tmp_path, notify_url=server.url())
    notifier.send(EVENT)
    notifier.close()
    assert len(server.requests) == 1 and _log(tmp_path) == ""


@pytest.mark.parametrize(("url", "problem"), [
    (f"ftp://127.0.0.1/{TOKEN}", "scheme ftp"),
    (f"file:///{TOKEN}", "scheme file"),
    (f"127.0.0.1/{TOKEN}", "no scheme"),
    (f"http:///{TOKEN}", "no host"),
])
def test_an_invalid_url_sends_nothing(tmp_path: Path, url: str, problem: str) -> None:
    notifier = _notifier(tmp_path, notify_url=url)
    notifier.send(EVENT)
    notifier.close()
    assert _failures(tmp_path) == [{"kind": "notify_url", "event": "failed", "cause": f"not sent, the URL is invalid ({problem})"}]
    assert TOKEN not in _log(tmp_path)


# --- notify_command -----------------------------------------------------------------------------------------------

def test_command_gets_the_event_on_stdin_and_a_clean_env(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    script = _script(tmp_path, f"cat > {out}/stdin\ntr '\\0' '\\n' < /proc/$$/environ > {out}/env\npwd > {out}/cwd\n"
                               f"echo $$ > {out}/pid\ncut -d' ' -f5,6 /proc/$$/stat > {out}/pgid_sid\n")
    notifier = _notifier(tmp_path, notify_command=[script, "an argument"])
    event = dict(EVENT, exit_status=None, session_name="train-1")
    notifier.send(event)
    notifier.close()
    data = (out / "stdin").read_bytes()
    assert data.endswith(b"\n") and json.loads(data) == event
    env = dict(line.split("=", 1) for line in (out / "env").read_text(encoding="utf-8").splitlines())
    assert env == {"PATH": _job_notify.CLEAN_PATH, "HOME": pwd.getpwuid(os.getuid()).pw_dir, "LANG": "C.UTF-8",
                   "TRAINOPS_EVENT": "failed", "TRAINOPS_SESSION_NAME": "train-1", "TRAINOPS_EXIT_STATUS": ""}
    assert (out / "cwd").read_text(encoding="utf-8") == "/\n"
    pid = (out / "pid").read_text(encoding="utf-8").strip()
    assert (out / "pgid_sid").read_text(encoding="utf-8").split() == [pid, pid]  # a session and process group of its own
    assert _log(tmp_path) == ""


def test_command_gets_the_exit_status(tmp_path: Path) -> None:
    out = tmp_path / "status"
    notifier = _notifier(tmp_path, notify_command=["sh", "-c", f'printf %s "$TRAINOPS_EXIT_STATUS" > {out}'])
    notifier.send(dict(EVENT, exit_status=137))
    notifier.close()
    assert out.read_text(encoding="utf-8") == "137"


@pytest.mark.parametrize(("command", "cause"), [
    (["sh", "-c", "echo complaint >&2; exit 3"], "exit status 3"),
    (["sh", "-c", "kill -TERM $$"], "killed by signal TERM"),
    (["/nonexistent/notify-me", TOKEN], "cannot run /nonexistent/notify-me: No such file or directory"),
])
def test_a_failing_or_missing_command_is_one_line(tmp_path: Path, command: list[str], cause: str) -> None:
    notifier = _notifier(tmp_path, notify_command=command)
    notifier.send(EVENT)
    notifier.close()
    assert _failures(tmp_path) == [{"kind": "notify_command", "event": "failed", "cause": cause}]
    assert TOKEN not in _log(tmp_path)
    if "complaint" in " ".join(command):
        assert "complaint\n" in _log(tmp_path)  # the command's output goes to notify.log


def test_a_command_that_cannot_be_run_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "not-executable"
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    notifier = _notifier(tmp_path, notify_command=[str(path)])
    notifier.send(EVENT)
    notifier.close()
    assert _failures(tmp_path) == [{"kind": "notify_command", "event": "failed", "cause": f"cannot run {path}: Permission denied"}]


def test_a_hanging_command_is_killed_with_its_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_job_notify, "COMMAND_TIMEOUT", 0.5)
    pidfile = tmp_path / "pid"
    notifier = _notifier(tmp_path, notify_command=["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"])
    begin = time.monotonic()
    notifier.send(EVENT)
    assert time.monotonic() - begin < 0.5
    notifier.close()
    assert _failures(tmp_path) == [{"kind": "notify_command", "event": "failed",
                                    "cause": "no end within 0.5 s (its process group was killed)"}]
    _wait_for(lambda: _gone(int(pidfile.read_text(encoding="ascii"))), timeout=5)


def test_close_kills_the_commands_still_running(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    notifier = _notifier(tmp_path, notify_command=["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"])
    notifier.send(EVENT)
    _wait_for(lambda: pidfile.exists() and pidfile.read_text(encoding="ascii").endswith("\n"))
    begin = time.monotonic()
    notifier.close(timeout=0.5)
    assert time.monotonic() - begin < 1.5
    _wait_for(lambda: _gone(int(pidfile.read_text(encoding="ascii"))), timeout=5)
    time.sleep(0.2)  # the notifier's thread sees the end: it writes no second line
    assert _failures(tmp_path) == [{"kind": "notify_command", "event": "failed",
                                    "cause": "still running at the job's end (its process group was killed)"}]


def test_command_then_url_in_one_thread(tmp_path: Path, server: _Server) -> None:
    out = tmp_path / "out"
    notifier = _notifier(tmp_path, notify_command=["sh", "-c", f"cat > {out}"], notify_url=server.url())
    notifier.send(EVENT)
    notifier.close()
    assert json.loads(out.read_bytes()) == EVENT and json.loads(server.requests[0]["body"]) == EVENT


# --- never raises, bounded log ------------------------------------------------------------------------------------

@pytest.mark.parametrize("event", [None, "failed", {"no": "event"}, {"event": None}, {"event": ["failed"]}])
def test_send_never_raises(tmp_path: Path, event: t.Any) -> None:
    notifier = _notifier(tmp_path, notify_command=["true"], notify_url="http://127.0.0.1:9/")
    notifier.send(event)
    notifier.close()


def test_invalid_settings_at_run_time_never_raise(tmp_path: Path) -> None:
    notifier = Notifier({"notify_command": "echo hi", "notify_url": 42, "notify_states": "failed"}, str(tmp_path))
    notifier.send(EVENT)
    notifier.close()
    assert [line["cause"] for line in _failures(tmp_path)] == [
        "not a non-empty list of strings", "not sent, the URL is invalid (not a string but int)"]


def test_run_dir_gone_never_raises(tmp_path: Path) -> None:
    notifier = _notifier(tmp_path / "gone", notify_command=["false"], notify_url=f"http://127.0.0.1:{_refused_port()}/")
    notifier.send(EVENT)
    notifier.close()
    assert not (tmp_path / "gone").exists()


def test_notify_log_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _job_notify.LOG_LIMIT == 1024 * 1024
    monkeypatch.setattr(_job_notify, "LOG_LIMIT", 1000)
    notifier = _notifier(tmp_path, notify_command=["sh", "-c", "echo noise; exit 1"], notify_url=f"http://127.0.0.1:{_refused_port()}/")
    notifier.send(EVENT)
    notifier.close()
    assert len(_failures(tmp_path)) == 2 and "noise\n" in _log(tmp_path)
    (tmp_path / "notify.log").write_bytes(b"x" * 1001)
    notifier.send(EVENT)
    notifier.close()
    assert (tmp_path / "notify.log").read_bytes() == b"x" * 1001  # neither lines nor the command's output


# --- validate -----------------------------------------------------------------------------------------------------

def test_states() -> None:
    assert STATES == ("started", "proven", "restarted", "stalled", "timeout", "finished", "failed", "lost")


@pytest.mark.parametrize("settings", [
    {},
    {"notify_command": None, "notify_url": None, "notify_states": list(STATES), "notify_lines": 10},
    {"notify_command": ["notify", "--to", "ops"], "notify_url": f"https://hooks.example.com/services/{TOKEN}", "notify_states": []},
    {"notify_url": "http://127.0.0.1:8080/hook", "notify_states": ["failed"]},
])
def test_validate_accepts(settings: dict[str, t.Any]) -> None:
    assert not validate(settings)


@pytest.mark.parametrize(("url", "problem"), [
    (f"ftp://hooks.example.com/{TOKEN}", "scheme ftp"),
    (f"hooks.slack.com/services/{TOKEN}", "no scheme"),
    (f"xoxb-1-{TOKEN}:x", "an unsupported scheme"),
    (f"http:///{TOKEN}", "no host"),
    (f"https://hooks.example.com/{TOKEN} ", "it holds spaces, control or non-ASCII characters"),
    (f"https://hooks.example.com/{TOKEN}\n", "it holds spaces, control or non-ASCII characters"),
    (f"https://hooks.exämple.com/{TOKEN}", "it holds spaces, control or non-ASCII characters"),
    (f"https://hooks.example.com:99999/{TOKEN}", "its host or port cannot be read"),
    (f"https://[{TOKEN}/", "its host or port cannot be read"),
    (42, "not a string but int"),
])
def test_validate_url_never_repeats_it(url: t.Any, problem: str) -> None:
    assert validate({"notify_url": url}) == [f"Invalid notify_url ({problem}): use an http:// or https:// URL"]


@pytest.mark.parametrize("command", [[], "notify --to ops", [1], ["", "x"], ["a\0b"], [None]])
def test_validate_command(command: t.Any) -> None:
    assert validate({"notify_command": command}) == [
        "Invalid notify_command: give a non-empty list of strings (the program and its arguments)"]


def test_validate_states() -> None:
    assert validate({"notify_states": ["failed", "bogus", "ended"]}) == [
        "Invalid notify_states bogus, ended: use some of started, proven, restarted, stalled, timeout, finished, failed, lost"]


def test_validate_reports_each_problem() -> None:
    assert len(validate({"notify_url": "ftp://x/", "notify_command": [], "notify_states": ["x"]})) == 3


def test_events_arrive_in_the_order_they_were_sent(tmp_path: Path, server: _Server) -> None:
    """One thread delivers them one after the other: a receiver sees started before restarted before failed."""
    notifier = _notifier(tmp_path, notify_url=server.url())
    sent = ["started", "proven", "restarted", "stalled", "restarted", "timeout", "failed"]
    for number, name in enumerate(sent):
        notifier.send({"event": name, "attempt": number})
    notifier.close()
    assert [json.loads(request["body"].decode("utf-8"))["attempt"] for request in server.requests] == list(range(len(sent)))


def test_failures_counts_the_notifiers_own_lines_and_words_the_last(tmp_path: Path) -> None:
    assert _job_notify.failures(str(tmp_path)) == (0, None)
    (tmp_path / "notify.log").write_text(
        "2026-12-01T10:00:00Z notify_url started failed: HTTP status 400\n"
        "output of a command: it failed: somehow\n"
        "2026-12-01T10:00:05Z notify_command failed failed: exit status 3\n", encoding="utf-8")
    assert _job_notify.failures(str(tmp_path)) == (2, "notify_command, event failed, at 2026-12-01T10:00:05Z: exit status 3")


def test_failures_of_a_real_refusal_name_the_status_never_the_url(tmp_path: Path) -> None:
    with receiver("discord") as (url, _received):
        notifier = _job_notify.Notifier({"notify_url": url, "notify_states": ["failed"]}, str(tmp_path))  # json: Discord refuses it
        notifier.send({"event": "failed", "session_name": "train"})
        notifier.close(30)
    count, last = _job_notify.failures(str(tmp_path))
    assert count == 1 and last is not None and last.startswith("notify_url, event failed, at ") and last.endswith(": HTTP status 400")
    assert url not in (tmp_path / "notify.log").read_text(encoding="utf-8")
