# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The ``trainops:KEY=VALUE`` channel of the in-container programs is byte-exact for any value (property-based).

The sh emitters (``t_emit_enc`` of the launch program, ``kv`` of the report and wait programs) run here with
real shells, the value as an argument; the module-side parsers (``parse_output``, ``parse_records``) must give
the value back: every byte, also newlines (trailing ones too), ``%``, control characters, U+0085, U+2028 and
U+2029 (which ``str.splitlines`` would split at) and bytes that are not UTF-8 (as U+FFFD, as the modules
report them).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_sh
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import parse_output
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_report import SH_HELPERS, parse_records

SHELLS = [s for s in ("dash", "bash") if shutil.which(s)] + (["busybox"] if shutil.which("busybox") else [])
SPECIAL = ["\n", "\r", "\r\n", "%", "%0A", "%25", "\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1e", "\x1f", "\x7f",
           "trainops:k=x", "\n\n", "'", "\\", "ü"]
VALUES = st.one_of(
    st.binary(max_size=120).map(lambda b: b.replace(b"\0", b"")),
    st.lists(st.one_of(st.sampled_from(SPECIAL), st.text(max_size=5)), max_size=8).map(
        lambda parts: "".join(parts).replace("\0", "").encode("utf-8", "surrogatepass")),
)
COUNTS: dict[str, int] = {}


def _argv(shell: str) -> list[str]:
    return ["busybox", "sh"] if shell == "busybox" else [shell]


def _run(shell: str, program: str, value: bytes) -> str:
    result = subprocess.run([*_argv(shell), "-c", program, "sh", value], capture_output=True, check=True, timeout=30)
    return result.stdout.decode("utf-8", "surrogateescape")


@pytest.fixture(scope="module", autouse=True)
def report_counts() -> object:
    """Print how many examples each property tried."""
    yield None
    for name, number in sorted(COUNTS.items()):
        print(f"output-channel property {name}: {number} examples")


@pytest.mark.parametrize("shell", SHELLS)
def test_launch_program_emitter_round_trips(shell: str) -> None:
    program = _tmux_sh.LAUNCH + '\nt_emit_enc k "$1"; t_emit after 1\n'

    @settings(max_examples=60, deadline=None)
    @given(value=VALUES)
    def prop(value: bytes) -> None:
        COUNTS["t_emit_enc_" + shell] = COUNTS.get("t_emit_enc_" + shell, 0) + 1
        facts = parse_output(_run(shell, program, value))
        assert facts["k"] == value.decode("utf-8", "replace") and facts["after"] == "1"

    prop()


@pytest.mark.parametrize("shell", SHELLS)
def test_report_emitter_round_trips(shell: str) -> None:
    program = SH_HELPERS + '\nkv k "$1"; kv after 1\n'

    @settings(max_examples=60, deadline=None)
    @given(value=VALUES)
    def prop(value: bytes) -> None:
        COUNTS["kv_" + shell] = COUNTS.get("kv_" + shell, 0) + 1
        records = parse_records(_run(shell, program, value))
        assert records == [("k", value.decode("utf-8", "replace")), ("after", "1")]

    prop()
