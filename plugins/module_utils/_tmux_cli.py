# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""tmux as the collection runs it on the target, and what a session looks like before a launch.

``Tmux`` runs the server of the user's default socket with a clean environment (``PATH`` and ``HOME``
only), whatever the module's environment says, so every task of every module meets the same
server. Sessions are targeted by exact name: ``=NAME`` for session commands, ``=NAME:`` for pane
and window commands (docs/launch-protocol.md, "Names").

``probe`` reads a session and the files of its last launch and decides its state, the one decision
running / finished / vanished / absent of the collection.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import LOG_PATH_FILE, OPT_PROVEN, OPT_SPEC, OPT_STARTED_AT, SPEC_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import CLEAN_PATH, exit_record_path

# A client that reaches a server which is exiting (its last session just ended, tmux's exit-empty) gets this, and
# nothing was created: new-session tries again after these pauses (seconds).
SERVER_EXITING = "server exited unexpectedly"
NEW_SESSION_RETRIES = (0.05, 0.2, 0.5)
_PROBE_FORMAT = f"#{{pane_dead}}:#{{pane_pid}}:#{{{OPT_SPEC}}}:#{{?{OPT_PROVEN},1,0}}:#{{{OPT_STARTED_AT}}}"


def read_text(path: str) -> str | None:
    """A small file's content (surrogate-escaped), or None."""
    try:
        with open(path, "rb") as handle:
            return handle.read(1 << 20).decode("utf-8", "surrogateescape")
    except OSError:
        return None


def reportable(value: t.Any) -> t.Any:
    """``value`` for a module result: text read with surrogateescape (bytes that are not UTF-8, in a path
    or a log line) becomes valid UTF-8 with U+FFFD in their place, in dicts and lists too; Ansible refuses
    results that are not UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {reportable(key): reportable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [reportable(item) for item in value]
    return value


def literal(word: str) -> str:
    """``word`` as one tmux argument: tmux takes an argument ending in ``;`` for the end of a command, ``\\;`` is a ``;``."""
    return word[:-1] + "\\;" if word.endswith(";") else word


class Tmux:
    """The tmux program of the target, run with a clean environment.

    ``socket_name`` (``tmux -L``) is None, the default socket, except in tests that want a server of their own.
    """

    socket_name: t.Optional[str] = None

    def __init__(self) -> None:
        self.path = shutil.which("tmux", path=CLEAN_PATH)
        home = pwd.getpwuid(os.geteuid()).pw_dir or "/"
        self.env = {"PATH": CLEAN_PATH, "HOME": home}

    @property
    def installed(self) -> bool:
        """Whether tmux is there."""
        return self.path is not None

    def run(self, *args: str) -> tuple[int, str, str]:
        """``tmux -u ARGS``: (rc, stdout, stderr); rc 127 when tmux is missing."""
        if self.path is None:
            return 127, "", "tmux is not installed"
        socket = ["-L", self.socket_name] if self.socket_name else []
        proc = subprocess.run([self.path, *socket, "-u", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=self.env, cwd="/", check=False)
        return proc.returncode, proc.stdout.decode("utf-8", "surrogateescape"), proc.stderr.decode("utf-8", "surrogateescape")

    def version(self) -> str:
        """``3.3a`` from ``tmux -V``, or the empty string."""
        rc, out, _err = self.run("-V")
        return out.strip().partition(" ")[2] if rc == 0 else ""

    def has_session(self, name: str) -> bool:
        """Whether a session of exactly this name exists."""
        return self.run("has-session", "-t", f"={name}")[0] == 0

    def display(self, name: str, fmt: str) -> str | None:
        """``display-message -p`` of the active pane of the session named exactly ``name``, or None."""
        return self.display_target(f"={name}:", fmt)

    def display_target(self, target: str, fmt: str) -> str | None:
        """``display-message -p -t TARGET``, or None."""
        rc, out, _err = self.run("display-message", "-p", "-t", target, fmt)
        return out.rstrip("\n") if rc == 0 else None

    def set_option(self, name: str, option: str, value: str) -> bool:
        """``set-option`` of a user option on the session (a value ending in ';' kept as it is)."""
        return self.run("set-option", "-t", f"={name}:", option, literal(value))[0] == 0

    def new_session(self, name: str, command: str, options: t.Sequence[t.Tuple[str, str]]) -> tuple[int, str, str]:
        """``new-session -d`` running ``command``, then ``set-option`` of each user option and the new pane's pane_pid.

        Two tmux calls: (``new-session``'s rc and stderr, the pane_pid or ``""``). A ``new-session`` that met a server
        on its way out (``SERVER_EXITING``: its last session had just ended) created nothing and is tried again. The options and the pane_pid are one
        call (commands separated by ``;``), apart from ``new-session``: the client that starts the server becomes it
        and keeps its argv, which ``ps`` and ``pkill -f`` would then see with the job's command in it. Once the session
        is there, a failure of that second call leaves the pane_pid empty, as one ``set-option`` that failed did.
        """
        rc, _out, err = self.run("new-session", "-d", "-s", name, "-x", "200", "-y", "50", literal(command))
        for pause in NEW_SESSION_RETRIES:
            if rc == 0 or SERVER_EXITING not in err:
                break
            time.sleep(pause)
            rc, _out, err = self.run("new-session", "-d", "-s", name, "-x", "200", "-y", "50", literal(command))
        if rc != 0:
            return rc, "", err
        args: list[str] = []
        for option, value in options:
            args += ["set-option", "-t", f"={name}:", option, literal(value), ";"]
        rc, out, _err = self.run(*args, "display-message", "-p", "-t", f"={name}:", "#{pane_pid}")
        return 0, out.strip() if rc == 0 else "", err

    def kill_session(self, name: str) -> None:
        """``kill-session`` (no error when it is gone)."""
        self.run("kill-session", "-t", f"={name}")


class Before:  # pylint: disable=too-few-public-methods,too-many-instance-attributes
    """A session and its last launch's files, as a launch finds them (a plain class: dataclasses costs the target 9 ms)."""

    def __init__(self) -> None:
        self.state = "absent"
        self.running = False
        self.dead_pane = False
        # the pane lives, but the job's exit record is there: its supervisor ends (history, notifications)
        self.lingering = False
        self.pane_pid = ""
        self.spec = ""
        self.started_at = ""
        self.proven = False
        self.log_path = ""
        self.summary: str | None = None


def session_state(running: bool, log_path: str | None, run_dir: str | None, in_tmux: bool = False,
                  pane_dead_status: str | None = None) -> str:
    """The one decision of every report (docs/launch-protocol.md): running, finished, vanished or absent.

    finished: an exit record (also while the pane still lives: the supervisor writes the record, then the
    history and its last notifications), or the exit status tmux kept for the dead pane of a session this
    collection did not launch (``pane_dead_status``); vanished: only the log, or a dead pane without a record.
    """
    recorded = bool(log_path) and exit_record_path(str(log_path), run_dir) is not None
    if running and not recorded:
        return "running"
    if recorded:  # with a live pane too: the start rotated any earlier record, so the supervisor is ending
        return "finished"
    if pane_dead_status is not None and pane_dead_status.isdigit():
        return "finished"
    if in_tmux or (log_path and os.path.lexists(log_path)):
        return "vanished"
    return "absent"


def probe(tmux: Tmux, name: str, run_dir: str, log_path: str | None) -> Before:
    """What the session ``name`` is now; ``log_path`` (the task's, if any) decides finished/vanished."""
    before = Before()
    recorded = read_text(os.path.join(run_dir, LOG_PATH_FILE))
    if tmux.installed and tmux.has_session(name):
        fields = (tmux.display(name, _PROBE_FORMAT) or "").split(":", 4)
        fields += [""] * (5 - len(fields))
        before.dead_pane = fields[0] == "1"
        before.running = not before.dead_pane
        before.pane_pid, before.spec, before.proven, before.started_at = fields[1], fields[2], fields[3] == "1", fields[4]
        before.log_path = recorded or ""
    if not before.log_path and not log_path and recorded:
        before.log_path = recorded
    before.state = session_state(before.running, log_path or before.log_path, run_dir)
    before.lingering = before.running and before.state != "running"  # the job is over, its supervisor ending
    before.running = before.state == "running"
    if before.running:
        before.summary = read_text(os.path.join(run_dir, SPEC_FILE))
    return before


def facts_of(before: Before) -> dict[str, str]:
    """The launch facts a probe gives (see ``_tmux_outcome``)."""
    facts = {"before_log": before.log_path, "before_state": before.state, "before_pane_pid": before.pane_pid,
             "before_started_at": before.started_at}
    if before.running:
        facts["before_proven"] = "1" if before.proven else "0"
        if before.summary is not None:
            facts["running_summary"] = before.summary
    return facts
