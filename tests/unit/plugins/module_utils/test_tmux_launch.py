# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for module_utils/_tmux_launch.py: validation, spec hash and summary, script checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_launch as L

BASE = {"session_name": "train", "command": "python train.py", "log_path": "/srv/log/train.log"}


def spec(**kwargs: t.Any) -> L.LaunchSpec:
    """A spec from the base options, changed by ``kwargs`` (None removes an option)."""
    params = dict(BASE)
    params.update(kwargs)
    return L.spec_from_params({k: v for k, v in params.items() if v is not None})


@pytest.mark.parametrize("params, option", [
    ({"session_name": "a.b"}, "session_name"),
    ({"session_name": "a:b"}, "session_name"),
    ({"session_name": ""}, "session_name"),
    ({"session_name": "x" * 65}, "session_name"),
    ({"session_name": "new\nline"}, "session_name"),
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
    ({"public_env": {"BAD-KEY": "1"}}, "env key"),
    ({"env": {"NODE_RANK": "0"}, "public_env": {"NODE_RANK": "1"}}, "public_env"),
])
def test_bad_input_is_rejected_naming_the_option(params: dict[str, t.Any], option: str) -> None:
    with pytest.raises(L.SpecError) as info:
        spec(**params)
    assert option in str(info.value)


def test_stop_needs_neither_command_nor_log() -> None:
    stop = L.spec_from_params({"session_name": "train", "state": "stopped"})
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
def test_script_to_check(params: dict[str, t.Any], expected: tuple[str | None, bool]) -> None:
    assert L.script_to_check(spec(**params)) == expected


def test_display_command_is_one_line_without_env() -> None:
    s = spec(command="echo a\nb\tc\\d\x01", env={"SECRET": "hidden"})
    assert L.display_command(s) == "echo a\\nb\\tc\\\\d\\x01"
    assert L.display_command(spec(command=None, argv=["a b", "c"])) == "'a b' c"


def test_job_argv_is_sh_c_or_argv_as_given() -> None:
    assert L.job_argv(spec(command="echo $HOME; exit 3")) == ["sh", "-c", "echo $HOME; exit 3"]
    assert L.job_argv(spec(command=None, argv=["python3", "-c", "x y"])) == ["python3", "-c", "x y"]


def test_a_spec_is_for_the_host_the_module_runs_on() -> None:
    """The vmid path is gone: a spec has no container, and no option names one."""
    fields = set(L.LaunchSpec._fields)
    assert fields == {"session_name", "state", "command", "argv", "chdir", "env", "venv", "user", "log_path", "log_mode", "log_keep",
                      "stop_signal", "stop_timeout", "run_root", "supervise", "gpus", "gpu_exclude", "nvidia_smi", "min_free_mb"}
    assert not {"vmid", "pct_path", "timeout"} & fields
    assert "vmid" not in json.dumps(L.spec_summary(spec()))


def test_gpus_are_part_of_the_spec_as_asked_not_as_chosen() -> None:
    plain, two, again, other = spec(), spec(gpus=2), spec(gpus="2"), spec(gpus=[0, 1])
    assert plain.gpus is None and two.gpus == ("count", 2) and other.gpus == ("ids", ("0", "1"))
    assert L.spec_hash(two) == L.spec_hash(again) != L.spec_hash(plain) != L.spec_hash(other) != L.spec_hash(two)
    assert "gpus" not in L.spec_summary(plain) and L.spec_summary(other)["gpus"] == "0,1" and L.spec_summary(spec(gpus="all"))["gpus"] == "all"
    assert spec(gpus=1, gpu_exclude=[" GPU-a ", "3"]).gpu_exclude == ("GPU-a", "3")
    assert spec(state="stopped", command=None, log_path=None, gpus="bogus").gpus is None  # a stop asks for nothing


@pytest.mark.parametrize(("params", "words"), [
    ({"gpus": 2, "env": {"CUDA_VISIBLE_DEVICES": "0"}}, "Invalid env key CUDA_VISIBLE_DEVICES together with gpus"),
    ({"gpus": "many"}, "Invalid gpus item 'many'"),
    ({"gpus": 0}, "Invalid gpus 0"),
    ({"gpus": 1, "gpu_exclude": [""]}, "Invalid gpu_exclude item ''"),
])
def test_bad_gpu_options_name_the_option(params: dict[str, t.Any], words: str) -> None:
    with pytest.raises(L.SpecError) as info:
        spec(**params)
    assert str(info.value).startswith(words), info.value


def test_what_a_module_run_imports_on_the_target_leaves_out_dataclasses() -> None:
    """dataclasses (with inspect) costs every tmux_session and wait_for_log run on the target about 9 ms."""
    root = os.environ["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep)[0]  # tests/conftest.py sets it to this checkout
    code = ("import sys; from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_run, _log_chunk, _session_info; "
            "print(sorted(m for m in ('dataclasses', 'inspect') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": root}, capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_public_env_joins_env_with_the_spec_of_the_joined_environment() -> None:
    """A multi-node job's variables moved from env to public_env: the same job, so a re-run finds it unchanged."""
    joined = spec(env={"WANDB_API_KEY": "s3cret", "NODE_RANK": "0", "NNODES": "4"})
    split = spec(env={"WANDB_API_KEY": "s3cret"}, public_env={"NODE_RANK": "0", "NNODES": "4"})
    assert split.env == joined.env == (("NNODES", "4"), ("NODE_RANK", "0"), ("WANDB_API_KEY", "s3cret"))
    assert L.spec_hash(split) == L.spec_hash(joined)
    assert spec(public_env={"OMP_NUM_THREADS": 8}).env == (("OMP_NUM_THREADS", "8"),)
