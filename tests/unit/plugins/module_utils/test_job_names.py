# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for module_utils/_job_names.py: the one session name and log path rule, the same as a launch's."""

from __future__ import annotations

import typing as t

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_names as N
from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_launch as L

BASE = {"session_name": "train", "command": "python train.py", "log_path": "/srv/log/train.log"}


# ---- name_and_log_errors: the one name/path rule of wait_for_log and tmux_session_info ----


def _spec_error(**params: t.Any) -> str | None:
    """The message spec_from_params gives for these options (None when they are valid)."""
    try:
        L.spec_from_params({**BASE, **params})
    except N.SpecError as exc:
        return str(exc)
    return None


def test_name_and_log_errors_accepts_valid_and_missing_values() -> None:
    assert N.name_and_log_errors(None, None) == []
    assert N.name_and_log_errors("train-1_X", "/w/a b/it's.log") == []
    assert N.name_and_log_errors("t", None) == [] and N.name_and_log_errors(None, "/w/t.log") == []


@pytest.mark.parametrize("name, log_path, expected", [
    ("a.b", None, ["Invalid session_name 'a.b': use 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-' (tmux rejects or rewrites '.' and ':')"]),
    ("", None, ["Invalid session_name '': use 1 to 64 characters"]),
    (None, "train.log", ["Invalid log_path 'train.log': use an absolute path on the target (starting with '/')"]),
    (None, "/var/log/", ["Invalid log_path '/var/log/': use the absolute path of a file, not of a directory"]),
    (None, "/w/..", ["Invalid log_path '/w/..': use the absolute path of a file"]),
    (None, "/w/a\nb.log", ["Invalid log_path '/w/a\\nb.log': it contains a newline; use a path without newlines"]),
    (None, "/w/a\0b.log", ["Invalid log_path: it contains a NUL character"]),
    ("a:b", "rel", ["Invalid session_name 'a:b'", "Invalid log_path 'rel'"]),
])
def test_name_and_log_errors_names_each_option(name: str | None, log_path: str | None, expected: list[str]) -> None:
    errors = N.name_and_log_errors(name, log_path)
    assert len(errors) == len(expected) and all(error.startswith(prefix) for error, prefix in zip(errors, expected)), errors


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80)


@given(name=TEXT)
def test_a_name_is_refused_exactly_as_a_launch_refuses_it(name: str) -> None:
    errors = N.name_and_log_errors(name, None)
    launch_error = _spec_error(session_name=name)
    assert (errors == []) is (N.SESSION_NAME.fullmatch(name) is not None) is (launch_error is None)
    assert errors == ([launch_error] if launch_error else [])


@given(path=st.one_of(TEXT, TEXT.map(lambda text: "/" + text)).filter(lambda text: text != ""))
def test_a_log_path_is_refused_exactly_as_a_launch_refuses_it(path: str) -> None:
    launch_error = _spec_error(log_path=path)
    assert N.name_and_log_errors(None, path) == ([launch_error] if launch_error else [])
