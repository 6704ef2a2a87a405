# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for module_utils/_tmux_launch.py: validation, spec hash, program text, output parsing."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_launch as L

BASE = {"vmid": 201, "session_name": "train", "command": "python train.py", "log_path": "/srv/log/train.log"}


def spec(**kwargs) -> L.LaunchSpec:
    params = dict(BASE)
    params.update(kwargs)
    return L.spec_from_params({k: v for k, v in params.items() if v is not None})


@pytest.mark.parametrize("params, option", [
    ({"session_name": "a.b"}, "session_name"),
    ({"session_name": "a:b"}, "session_name"),
    ({"session_name": ""}, "session_name"),
    ({"session_name": "x" * 65}, "session_name"),
    ({"session_name": "new\nline"}, "session_name"),
    ({"vmid": 99}, "vmid"),
    ({"vmid": 1_000_000_000}, "vmid"),
    ({"vmid": True}, "vmid"),
    ({"log_path": "relative.log"}, "log_path"),
    ({"log_path": "/var/log/"}, "log_path"),
    ({"log_path": None}, "log_path"),
    ({"chdir": "srv"}, "chdir"),
    ({"venv": "venv"}, "venv"),
    ({"env": {"BAD-KEY": "x"}}, "env key"),
    ({"env": {"TRAINOPS_X": "x"}}, "env key"),
    ({"env": {"A": "nul\0"}}, "env value"),
    ({"env": {"A": None}}, "env value"),
    ({"user": "-rf"}, "user"),
    ({"user": "a b"}, "user"),
    ({"log_keep": 0}, "log_keep"),
    ({"stop_signal": "STOP"}, "stop_signal"),
    ({"stop_timeout": -1}, "stop_timeout"),
    ({"command": None}, "command or argv"),
    ({"argv": ["x"]}, "command or argv"),
    ({"command": None, "argv": []}, "argv"),
    ({"command": "  "}, "command"),
    ({"command": "a\0b"}, "command"),
])
def test_bad_input_is_rejected_naming_the_option(params: dict, option: str) -> None:
    with pytest.raises(L.SpecError) as info:
        spec(**params)
    assert option in str(info.value)


def test_stop_needs_neither_command_nor_log() -> None:
    stop = L.spec_from_params({"vmid": 201, "session_name": "train", "state": "stopped"})
    assert stop.action == "stop" and stop.log_path is None


def test_root_user_means_no_user_and_env_values_become_strings() -> None:
    s = spec(user="root", env={"N": 3, "B": True, "S": "x"})
    assert s.user is None
    assert dict(s.env) == {"N": "3", "B": "true", "S": "x"}


def test_spec_hash_covers_the_job_and_nothing_else() -> None:
    base = L.spec_hash(spec(env={"K": "v"}))
    assert base == L.spec_hash(spec(env={"K": "v"}, log_mode="append", log_keep=9, stop_timeout=1))
    for change in ({"env": {"K": "w"}}, {"env": {"K": "v", "L": ""}}, {"chdir": "/x"}, {"venv": "/v"}, {"user": "u"},
                   {"log_path": "/other.log"}, {"command": "python train.py "}):
        merged = {"env": {"K": "v"}, **change}
        assert L.spec_hash(spec(**merged)) != base, change
    assert L.spec_hash(spec(command=None, argv=["python", "train.py"])) != base


def test_summary_has_no_env_values() -> None:
    summary = json.dumps(L.spec_summary(spec(env={"TOKEN": "very-secret-value"})))
    assert "very-secret-value" not in summary and "TOKEN" in summary


@pytest.mark.parametrize("params, expected", [
    ({"command": "python train.py --epochs 3"}, ("train.py", False)),
    ({"command": "python3 -u train.py"}, ("train.py", False)),
    ({"command": "python -m torch.distributed.run x.py"}, (None, False)),
    ({"command": "python -c 'print(1)'"}, (None, False)),
    ({"command": "./run.sh --fast"}, ("./run.sh", True)),
    ({"command": "/opt/train/run.sh && echo done"}, ("/opt/train/run.sh", True)),
    ({"command": "CUDA_VISIBLE_DEVICES=0 ./run.sh"}, ("./run.sh", True)),
    ({"command": "bash scripts/go.sh"}, ("scripts/go.sh", False)),
    ({"command": "torchrun --nproc_per_node 4 train.py"}, (None, False)),
    ({"command": "echo hi; sleep 1"}, (None, False)),
    ({"command": "$HOME/run.sh"}, (None, False)),
    ({"command": "./run*.sh"}, (None, False)),
    ({"command": "python 'unbalanced"}, (None, False)),
    ({"command": None, "argv": ["python3", "-W", "ignore", "train.py"]}, ("train.py", False)),
    ({"command": None, "argv": ["/usr/bin/env", "python3"]}, ("/usr/bin/env", True)),
    ({"command": None, "argv": ["sleep", "10"]}, (None, False)),
])
def test_script_to_check(params: dict, expected: tuple) -> None:
    assert L.script_to_check(spec(**params)) == expected


def test_display_command_is_one_line_without_env() -> None:
    s = spec(command="echo a\nb\tc\\d\x01", env={"SECRET": "hidden"})
    assert L.display_command(s) == "echo a\\nb\\tc\\\\d\\x01"
    assert L.display_command(spec(command=None, argv=["a b", "c"])) == "'a b' c"


@pytest.mark.parametrize("value", ["plain", "ends;", "ends\\;", ";", "a;b", ""])
def test_tmux_option_value_survives_tmux_argument_splitting(value: str) -> None:
    escaped = L.tmux_option_value(value)
    # tmux: an argument ending in ';' ends a command; a preceding backslash makes it a literal ';'.
    if escaped.endswith(";"):
        assert escaped.endswith("\\;")
        restored = escaped[:-2] + ";"
    else:
        restored = escaped
    assert restored == value


def test_heredoc_function_avoids_a_delimiter_in_the_content(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(L.secrets, "token_hex", lambda n: next(tokens))
    text = L.heredoc_function("f", "x\nTRAINOPS_EOF_aaaa\ny")
    assert "<<'TRAINOPS_EOF_bbbb'" in text
    out = subprocess.run(["sh", "-c", text + "f"], capture_output=True, check=True).stdout
    assert out == b"x\nTRAINOPS_EOF_aaaa\ny\n"


@given(st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True).filter(lambda k: not k.startswith("TRAINOPS")),
                       st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=50),
                       max_size=5))
def test_env_file_round_trips_through_sh(env: dict) -> None:
    s = spec(env=env)
    script = L.env_file_text(s) + "".join(f"printf '%s\\0' \"${key}\"\n" for key, _v in s.env)
    out = subprocess.run(["sh", "-c", script], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [value.encode() for _k, value in s.env]


def test_program_quotes_every_value_and_ends_with_main() -> None:
    hostile = "/srv/it's $(x) `y`/train.log"
    program = L.build_program(spec(log_path=hostile, chdir="/a b", env={"K": "$(rm -rf /)"}))
    assert "t_log=" + shlex.quote(hostile) in program
    assert program.endswith("t_main\n")
    assert "$(rm -rf /)" in program  # only inside the quoted env here-document
    assert re.search(r"^export K='\$\(rm -rf /\)'$", program, re.MULTILINE)


def test_check_mode_program_has_no_env_values() -> None:
    program = L.build_program(spec(env={"K": "secret-in-check-mode"}), check_mode=True)
    assert "secret-in-check-mode" not in program and "t_check=1" in program


def test_parse_output_decodes_and_ignores_noise() -> None:
    out = ("echo trainops-ready-$((40+2))\r\ntrainops-ready-42\r\n$ noise\r\n"
           "trainops:message=a%0Ab%25c\r\ntrainops:pane_pid=12\r\r\nprintf 'trainops:x=1'\n")
    facts = L.parse_output(out)
    assert facts == {"message": "a\nb%c", "pane_pid": "12"}
