# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The job's notifications: its events to ``notify_command`` and ``notify_url`` (docs/job-life.md, "Notifications").

The supervisor (``_job_supervise``, in the job's pane in the target) makes a ``Notifier`` from the ``supervise`` settings of
``job.json``, calls ``send(event)`` on each state change and ``close()`` at the job's end. Each event goes out in a
daemon thread of its own, so a notifier that fails or hangs never delays or harms the job; each failure is one line
in ``RUN_DIR/notify.log``, which never names the URL (webhook URLs hold tokens). ``validate`` checks the settings
before the launch. Like the supervisor, this file imports nothing of the collection but ``_job_layout`` and
``_notify_format`` and works with Python 3.7 or later.

The caller builds the event (docs/job-life.md: ``log_tail`` holds the log's last ``notify_lines`` lines).
``notify_command`` reads it as JSON, with the values JSON cannot hold as their str(); ``notify_url`` gets the body
and headers of ``notify_format`` (``_notify_format.request``: the same JSON for ``json``, the default).

``http.client``, ``ssl``, ``socket`` and ``urllib`` (about 24 ms of import, with the ``email`` package) are imported only
for a ``notify_url``: by a ``Notifier`` that has one, and ``urllib.parse`` by the check of one; not by the supervisor or
the modules of a job without one.
"""

from __future__ import annotations

import functools
import os
import pwd
import queue
import re
import signal
import subprocess
import threading
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _notify_format
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import NOTIFY_LOG

# lost: sent by the boot recorder (_job_boot) for a job its container's stop cut off
STATES = ("started", "proven", "restarted", "stalled", "timeout", "finished", "failed", "lost")
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
USER_AGENT = "trainops.pct_launch-notify"
COMMAND_TIMEOUT = 30.0  # s, then the command's process group is killed
URL_TIMEOUT = 10.0  # s, each try (a socket timeout: connect, send, each read)
RETRY_DELAY = 2.0  # s before the one retry (connection error or HTTP status >= 500)
LOG_LIMIT = 1024 * 1024  # notify.log takes no more lines (and no command output) once it is past this size
REAP_WAIT = 5.0  # s to reap a command after its group got KILL
CAUSE_LENGTH = 300
CLOSE_WAIT = 10.0  # s, at the job's end, for the notifications still going

_URL_HINT = "use an http:// or https:// URL"
_COMMAND_PROBLEM = "Invalid notify_command: give a non-empty list of strings (the program and its arguments)"


@functools.lru_cache(maxsize=None)
def _opener() -> t.Any:
    """The opener of every POST, made once, at the first need (urllib.request is imported for a notify_url only)."""
    import urllib.request  # pylint: disable=import-outside-toplevel  # only a webhook needs it

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        """A redirect is a failure (HTTP status 3xx): urllib would turn the POST into a GET without the event."""

        def redirect_request(self, req: t.Any, fp: t.Any, code: int, msg: str, headers: t.Any, newurl: str) -> None:
            return None

    # No ProxyHandler from the environment: http_proxy, https_proxy and no_proxy of the supervisor (the job's launcher's
    # environment) must not send the event, and the token in its URL, anywhere else than to notify_url.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def now() -> str:
    """The time as the protocol writes it: ISO 8601 UTC, seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _as_list(value: t.Any) -> list[t.Any]:
    if isinstance(value, str):
        return [value]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _states(settings: t.Mapping[str, t.Any]) -> list[t.Any]:
    value = settings.get("notify_states")
    return list(STATES) if value is None else _as_list(value)


def _is_argv(value: t.Any) -> bool:
    return (isinstance(value, (list, tuple)) and bool(value) and bool(value[0])
            and all(isinstance(arg, str) and "\0" not in arg for arg in value))


def _url_problem(url: t.Any) -> str | None:
    """What is wrong with ``url`` in words that never repeat it (it may hold a token), or None."""
    if not isinstance(url, str):
        return f"not a string but {type(url).__name__}"
    if any(not " " < char < "\x7f" for char in url):
        return "it holds spaces, control or non-ASCII characters"
    import urllib.parse  # pylint: disable=import-outside-toplevel  # only a notify_url needs it

    try:
        parts = urllib.parse.urlsplit(url)
        host, _port = parts.hostname, parts.port
    except ValueError:
        return "its host or port cannot be read"
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        if not scheme:
            return "no scheme"
        return f"scheme {scheme}" if scheme.isalpha() and len(scheme) <= 10 else "an unsupported scheme"
    return None if host else "no host"


def validate(settings: t.Mapping[str, t.Any]) -> list[str]:
    """The problems of the notification settings, each a message for the task's failure (never the URL's value)."""
    problems = []
    url = settings.get("notify_url")
    problem = None if url is None else _url_problem(url)
    if problem:
        problems.append(f"Invalid notify_url ({problem}): {_URL_HINT}")
    command = settings.get("notify_command")
    if command is not None and not _is_argv(command):
        problems.append(_COMMAND_PROBLEM)
    fmt = settings.get("notify_format") or "json"
    if fmt not in _notify_format.FORMATS:
        problems.append(f"Invalid notify_format {fmt}: use one of {', '.join(_notify_format.FORMATS)}")
    bad = [str(state) for state in _states(settings) if state not in STATES]
    if bad:
        problems.append(f"Invalid notify_states {', '.join(bad)}: use some of {', '.join(STATES)}")
    return problems


def _one_line(text: str) -> str:
    return "".join(char if char.isprintable() else " " for char in text)[:CAUSE_LENGTH]


def _home() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir or "/"
    except KeyError:
        return "/"


def _status_cause(status: int) -> str:
    if status >= 0:
        return f"exit status {status}"
    try:
        return f"killed by signal {signal.Signals(-status).name[3:]}"
    except ValueError:
        return f"killed by signal {-status}"


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.communicate(timeout=REAP_WAIT)
    except (subprocess.TimeoutExpired, OSError, ValueError):
        pass


def _unwrap(exc: BaseException) -> BaseException:
    """The error below urllib's URLError (a refused connection, a timeout, a TLS error), else ``exc``."""
    import urllib.error  # pylint: disable=import-outside-toplevel  # only a webhook needs it

    reason = getattr(exc, "reason", None) if isinstance(exc, urllib.error.URLError) else None
    return reason if isinstance(reason, BaseException) else exc


def _error_cause(exc: BaseException) -> str:
    """The cause of a failed POST from the error's kind and the system's words, never from its text (it may hold the URL)."""
    import http.client  # pylint: disable=import-outside-toplevel  # only a webhook needs them
    import socket  # pylint: disable=import-outside-toplevel
    import ssl  # pylint: disable=import-outside-toplevel

    exc = _unwrap(exc)
    if isinstance(exc, socket.timeout):
        return f"no answer within {URL_TIMEOUT:g} s"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error {exc.reason or type(exc).__name__}"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    if isinstance(exc, OSError) and isinstance(exc.strerror, str) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def _post_once(url: str, data: bytes, headers: t.Mapping[str, str]) -> tuple[str | None, bool]:
    """One POST: (None, False) for a status 200-299, else the cause and whether a retry may help."""
    import http.client  # pylint: disable=import-outside-toplevel  # only a webhook needs them
    import socket  # pylint: disable=import-outside-toplevel
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel

    request = urllib.request.Request(url, data=data, headers=dict(headers, **{"User-Agent": USER_AGENT}), method="POST")
    try:
        with _opener().open(request, timeout=URL_TIMEOUT):
            return None, False
    except urllib.error.HTTPError as exc:
        if getattr(exc, "fp", None) is not None:
            exc.close()
        return f"HTTP status {exc.code}", exc.code >= 500
    except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
        return _error_cause(exc), not isinstance(_unwrap(exc), socket.timeout)  # a request that timed out may have arrived: not sent twice
    except Exception as exc:  # pylint: disable=broad-exception-caught  # anything else: not sent, never raised
        return _error_cause(exc), False


_FAILURE_RE = re.compile(r"^(\S+) (notify_command|notify_url|notify) (\S+) failed: (.*)$")


def failures(run_dir: str) -> tuple[int, str | None]:
    """The notifier failures ``notify.log`` of ``run_dir`` holds (its own lines, not a command's output): how many,
    and the last one in words (``notify_url, event failed, at T: HTTP status 400``), or None."""
    try:
        with open(os.path.join(run_dir, NOTIFY_LOG), "rb") as handle:
            text = handle.read(LOG_LIMIT + 65536).decode("utf-8", "replace")
    except OSError:
        return 0, None
    found = [match for match in map(_FAILURE_RE.match, text.splitlines()) if match]
    if not found:
        return 0, None
    when, kind, name, cause = found[-1].groups()
    return len(found), f"{kind}, event {name}, at {when}: {cause}"


class Notifier:
    """Sends the job's events in ``notify_states`` to ``notify_command`` and ``notify_url``, in order, from one thread of its own."""

    def __init__(self, settings: t.Mapping[str, t.Any], run_dir: str) -> None:
        self.command = settings.get("notify_command")
        self.url = settings.get("notify_url")
        self.format = settings.get("notify_format") or "json"
        self.states = {state for state in _states(settings) if isinstance(state, str)}
        self.log_path = os.path.join(run_dir, NOTIFY_LOG)
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._procs: dict[subprocess.Popen, str] = {}  # the commands running, with their event
        if self.url is not None:
            try:
                _opener()  # urllib's imports now, in the supervisor's thread, not with the first event
            except Exception:  # pylint: disable=broad-exception-caught  # a notification never harms the job
                pass

    def send(self, event: t.Mapping[str, t.Any]) -> None:
        """Deliver ``event`` (after the events sent before it) when its ``event`` is in ``notify_states``; returns at once, never raises."""
        name = "?"
        try:
            name = _one_line(str(event.get("event")))
            if name not in self.states or (self.command is None and self.url is None):
                return
            status = event.get("exit_status")
            env = {"TRAINOPS_EVENT": name, "TRAINOPS_SESSION_NAME": str(event.get("session_name") or "").replace("\0", ""),
                   "TRAINOPS_EXIT_STATUS": "" if status is None else str(status).replace("\0", "")}
            post = _notify_format.request(self.format, event) if self.url is not None else None
            self._queue.put((name, _notify_format.encode(event), env, post))
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="notify", daemon=True)
                self._worker.start()
        except Exception as exc:  # pylint: disable=broad-exception-caught  # a notification never harms the job
            self._log("notify", name, f"not sent: {type(exc).__name__}")

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """At the job's end: wait at most ``timeout`` s in all for the notifications still going, then kill the commands left."""
        try:
            if self._worker is not None:
                self._queue.put(None)
                self._worker.join(max(0.0, timeout))
                if not self._worker.is_alive():
                    self._worker = None  # a later send starts another
            with self._lock:
                left, self._procs = self._procs, {}
            for proc, name in left.items():
                _kill_group(proc)
                self._log("notify_command", name, "still running at the job's end (its process group was killed)")
        except Exception:  # pylint: disable=broad-exception-caught  # the supervisor's end goes on
            pass

    def _work(self) -> None:
        """The notifier's thread: the events one after the other, until ``close``."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._deliver(*item)

    def _deliver(self, name: str, data: bytes, env: dict[str, str], post: tuple[bytes, dict[str, str]] | None) -> None:
        if self.command is not None:
            try:
                self._run_command(name, data, env)
            except Exception as exc:  # pylint: disable=broad-exception-caught
                self._log("notify_command", name, type(exc).__name__)
        if self.url is not None and post is not None:
            try:
                self._post(name, *post)
            except Exception as exc:  # pylint: disable=broad-exception-caught
                self._log("notify_url", name, type(exc).__name__)

    def _run_command(self, name: str, data: bytes, env: dict[str, str]) -> None:
        """The command with the event on its standard input, its output appended to notify.log, killed after COMMAND_TIMEOUT."""
        if not _is_argv(self.command):
            self._log("notify_command", name, "not a non-empty list of strings")
            return
        argv = list(self.command)
        environ = {"PATH": CLEAN_PATH, "HOME": _home(), "LANG": "C.UTF-8"}
        environ.update(env)
        output = self._output()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=output, stderr=output, cwd="/", env=environ,
                                    start_new_session=True, close_fds=True)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            code = getattr(exc, "errno", None)  # os.strerror: Python 3.7 appends the file name to exc.strerror
            self._log("notify_command", name, f"cannot run {argv[0]}: {os.strerror(code) if code else type(exc).__name__}")
            return
        finally:
            if not isinstance(output, int):
                output.close()
        with self._lock:
            self._procs[proc] = name
        try:
            proc.communicate(data + b"\n", timeout=COMMAND_TIMEOUT)
            cause = None if proc.returncode == 0 else _status_cause(proc.returncode)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            _reap(proc)
            cause = f"no end within {COMMAND_TIMEOUT:g} s (its process group was killed)"
        with self._lock:
            ours = self._procs.pop(proc, None) is not None  # else close() killed it and wrote its line
        if cause and ours:
            self._log("notify_command", name, cause)

    def note(self, kind: str, name: str, cause: str) -> None:
        """One line ``TIME KIND EVENT failed: CAUSE`` in notify.log (for an event that could not be sent at all)."""
        self._log(kind, name, cause)

    def _output(self) -> t.Any:
        """notify.log opened for appending, or DEVNULL once it is past LOG_LIMIT (or cannot be opened)."""
        if self._log_size() > LOG_LIMIT:
            return subprocess.DEVNULL
        try:
            return open(self.log_path, "ab")  # pylint: disable=consider-using-with  # closed once the command started
        except OSError:
            return subprocess.DEVNULL

    def _post(self, name: str, data: bytes, headers: t.Mapping[str, str]) -> None:
        """The event's body of ``notify_format`` POSTed to notify_url, retried once after RETRY_DELAY when that may help."""
        problem = _url_problem(self.url)
        if problem:
            self._log("notify_url", name, f"not sent, the URL is invalid ({problem})")
            return
        cause, retry = _post_once(self.url, data, headers)
        if cause and retry:
            time.sleep(RETRY_DELAY)
            again, _retry = _post_once(self.url, data, headers)
            cause = again and (f"{again} (tried twice)" if again == cause else f"{again} (tried twice; the first try: {cause})")
        if cause:
            self._log("notify_url", name, cause)

    def _log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def _log(self, kind: str, name: str, cause: str) -> None:
        """One line ``TIME KIND EVENT failed: CAUSE`` in notify.log, unless it is past LOG_LIMIT."""
        line = f"{now()} {kind} {name} failed: {_one_line(cause)}\n".encode("utf-8", "backslashreplace")
        with self._lock:
            if self._log_size() > LOG_LIMIT:
                return
            try:
                with open(self.log_path, "ab") as handle:
                    handle.write(line)
            except OSError:
                pass
