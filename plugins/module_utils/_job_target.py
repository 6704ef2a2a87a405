# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The host a launch runs on, and the checks before anything starts there (the preflight).

Errors carry the protocol's codes (docs/launch-protocol.md, "Output of the in-container programs");
``_tmux_outcome`` turns them into the module's message with the fix.
"""

from __future__ import annotations

import os
import posixpath
import pwd
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Tmux
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import LaunchSpec, script_to_check


class JobError(Exception):
    """A launch step failed on the target; ``code`` is the protocol's error code, ``facts`` what was found."""

    def __init__(self, code: str, message: str, **facts: str) -> None:
        super().__init__(message)
        self.code = code
        self.facts: dict[str, str] = dict(facts)


class Target:
    """tmux and the job's user on this host."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.tmux = Tmux()
        self.ids: t.Optional[t.Tuple[int, int]] = None
        self.home = pwd.getpwuid(os.geteuid()).pw_dir or "/"
        self.user = spec.user

    def resolve_user(self) -> None:
        """uid, gid and home of the job's user. Raises JobError when there is no such user."""
        if not self.user:
            return
        try:
            entry = pwd.getpwnam(self.user)
        except KeyError:
            raise JobError("user_missing", f"user {self.user} does not exist on the target") from None
        self.ids = (entry.pw_uid, entry.pw_gid)
        self.home = entry.pw_dir or "/"


def _check_script(spec: LaunchSpec, cwd: str) -> None:
    script, must_be_executable = script_to_check(spec)
    if script is None:
        return
    path = posixpath.join(cwd, script)
    if not os.path.isfile(path):
        raise JobError("script_missing", f"script {script} does not exist (relative to {cwd})")
    if must_be_executable and not os.access(path, os.X_OK):
        fix = f"make it executable (chmod +x {script}) or run it through its interpreter (argv: [sh, {script}])"
        raise JobError("script_missing", f"script {script} is not executable: {fix}")


def _check_paths(spec: LaunchSpec, home: str) -> None:
    cwd = spec.chdir or home
    if spec.chdir and not os.path.isdir(spec.chdir):
        raise JobError("chdir_missing", f"directory {spec.chdir} does not exist")
    if spec.venv and not os.path.isfile(posixpath.join(spec.venv, "bin/activate")) \
            and not os.access(posixpath.join(spec.venv, "bin/python"), os.X_OK):
        raise JobError("venv_missing", f"no virtual environment at {spec.venv} (neither bin/activate nor bin/python)")
    _check_script(spec, cwd or "/")
    folder = posixpath.dirname(spec.log_path or "") or "/"
    if not os.path.isdir(folder):
        raise JobError("log_dir_missing", f"log directory {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise JobError("log_dir_not_writable", f"log directory {folder} is not writable")


def check_room(spec: LaunchSpec) -> None:
    """The log's filesystem has ``min_free_mb`` MiB free (checked only before a start)."""
    if not spec.min_free_mb:
        return
    folder = posixpath.dirname(spec.log_path or "") or "/"
    try:
        stats = os.statvfs(folder)
    except OSError as exc:
        raise JobError("log_dir_missing", f"cannot measure the free space of {folder}: {exc.strerror or exc}") from None
    free = stats.f_bavail * stats.f_frsize / 1048576
    if free < spec.min_free_mb:
        raise JobError("log_dir_full", f"{free:.1f} MiB free on the filesystem of {folder}, min_free_mb is {spec.min_free_mb}")


def preflight(spec: LaunchSpec, target: Target) -> dict[str, str]:
    """Check tmux, the user and the paths (a stop needs none of it); the facts found (``tmux_version``)."""
    if not target.tmux.installed:
        if spec.action == "stop":
            return {}
        raise JobError("tmux_missing", "tmux is not installed")
    facts = {"tmux_version": target.tmux.version()}
    if spec.action != "stop":
        target.resolve_user()
        _check_paths(spec, target.home)
    return facts
