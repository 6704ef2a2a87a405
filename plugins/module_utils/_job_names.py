# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The rules for a session name and a log path, shared by ``tmux_session``'s spec and the modules that look at a session.

``wait_for_log`` and ``tmux_session_info`` check their options with ``name_and_log_errors`` and need nothing else of
``_tmux_launch`` (whose imports cost a module run some 25 ms of the target's CPU).
"""

from __future__ import annotations

import posixpath
import re

SESSION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class SpecError(ValueError):
    """An option has an unusable value; the message names the option."""


def no_nul(option: str, value: str) -> str:
    """``value``, unless it holds a NUL (no process can get it)."""
    if "\0" in value:
        raise SpecError(f"Invalid {option}: it contains a NUL character, which cannot be passed to a process")
    return value


def absolute(option: str, value: str | None, required: bool = False) -> str | None:
    """``value`` as an absolute path on the target, None when empty (unless ``required``)."""
    if value is None or value == "":
        if required:
            raise SpecError(f"Missing {option}: an absolute path on the target is required to start a job")
        return None
    no_nul(option, value)
    if not value.startswith("/"):
        raise SpecError(f"Invalid {option} {value!r}: use an absolute path on the target (starting with '/')")
    return value


def log_path(value: str | None, required: bool) -> str | None:
    """The option log_path: the absolute path of a file, without a newline."""
    path = absolute("log_path", value, required)
    if path is not None and (path.endswith("/") or posixpath.basename(path) in (".", "..")):
        raise SpecError(f"Invalid log_path {value!r}: use the absolute path of a file, not of a directory")
    if path is not None and "\n" in path:
        # wait_for_log and tmux_session_info refuse such a log_path, and /run/trainops/NAME/log_path could not keep it
        raise SpecError(f"Invalid log_path {value!r}: it contains a newline; use a path without newlines")
    return path


def session_name(value: str) -> str:
    """The option session_name: what tmux keeps as it is, on every supported version."""
    if not isinstance(value, str) or not SESSION_NAME.fullmatch(value):
        raise SpecError(f"Invalid session_name {value!r}: use 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-' "
                        "(tmux rejects or rewrites '.' and ':')")
    return value


def name_and_log_errors(name: str | None, path_value: str | None) -> list[str]:
    """The problems with a session name and a log path to look at (wait_for_log, tmux_session_info), each naming its option."""
    errors: list[str] = []
    for check, value in ((session_name, name), (lambda path: log_path(path, False), path_value)):
        try:
            if value is not None:
                check(value)
        except SpecError as exc:
            errors.append(str(exc))
    return errors
