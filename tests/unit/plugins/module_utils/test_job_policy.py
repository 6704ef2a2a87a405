# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The supervision options of tmux_session (``_job_policy``): defaults, checks naming the option, the spec hash."""

from __future__ import annotations

import json
import re
import typing as t

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _tmux_launch as L
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_policy import ARGUMENT_SPEC, changed_settings, supervise_from_params
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_supervise import DEFAULTS

BASE = {"session_name": "train", "command": "python train.py", "log_path": "/workspace/train.log"}


def _defaults() -> dict[str, t.Any]:
    """The module's parameters as AnsibleModule gives them when no supervision option is set."""
    return {key: option.get("default") for key, option in ARGUMENT_SPEC.items()}


def test_the_argument_spec_has_every_setting_and_the_same_defaults() -> None:
    assert set(ARGUMENT_SPEC) == set(DEFAULTS)
    for key, option in ARGUMENT_SPEC.items():
        assert option.get("default") == DEFAULTS[key], key


def test_defaults_change_nothing_and_keep_the_hash_of_before() -> None:
    plain = L.spec_from_params(BASE)
    with_defaults = L.spec_from_params(dict(BASE, **_defaults()))
    assert changed_settings(with_defaults.supervise) == {}
    assert L.spec_hash(plain) == L.spec_hash(with_defaults)
    assert dict(with_defaults.supervise) == {key: tuple(v) if isinstance(v, list) else v for key, v in DEFAULTS.items()}


def test_a_setting_changes_the_hash_and_the_summary_hides_the_url() -> None:
    url = "https://hooks.example.invalid/services/T000/B000/secret-token"
    spec = L.spec_from_params(dict(BASE, restart="on_failure", notify_url=url))
    assert L.spec_hash(spec) != L.spec_hash(L.spec_from_params(BASE))
    summary = json.dumps(L.spec_summary(spec))
    assert "secret-token" not in summary and '"notify_url": "(set)"' in summary and '"restart": "on_failure"' in summary


@pytest.mark.parametrize(("params", "words"), [
    ({"restart_limit": -1}, "Invalid restart_limit -1: use 0 to 1000 restarts"),
    ({"restart_backoff": 0.5}, "Invalid restart_backoff 0.5"),
    ({"restart_delay": -2}, "Invalid restart_delay -2"),
    ({"no_restart_exit_codes": [3, 300]}, "Invalid no_restart_exit_codes 300"),
    ({"time_limit": 10, "time_limit_grace": 30}, "Invalid time_limit_grace 30"),
    ({"stall_timeout": -1}, "Invalid stall_timeout -1"),
    ({"stall_pattern": "step ("}, "Invalid stall_pattern 'step ('"),
    ({"notify_lines": 500}, "Invalid notify_lines 500"),
    ({"restart_on_boot": True, "restart_limit": 0}, "Invalid restart_limit 0 with restart_on_boot: a start at the container's boot is a restart"),
    ({"notify_url_keep": True}, "Invalid notify_url_keep without notify_url"),
    ({"restart_limit_window": -1}, "Invalid restart_limit_window -1: use 0 to 31622400 seconds (0: every restart counts)"),
    ({"restart": "on_failure", "restart_on": ["nccl", "segfault"]},
     "Invalid restart_on segfault: use any (the default) or some of exit_status, signal, oom_kill, cuda_oom, nccl, python_exception, "
     "torchelastic, stall"),
    ({"restart": "on_failure", "restart_on": []}, "Invalid restart_on []: give the causes to restart, or any (the default)"),
    ({"restart": "on_failure", "restart_on": ["any", "nccl"]}, "Invalid restart_on any, nccl: any already restarts every cause"),
    ({"restart_on": ["nccl"]}, "Invalid restart_on nccl with restart never: restart_on chooses which failures are restarted; set restart"),
    ({"restart": "on_failure", "restart_on": ["stall"]}, "Invalid restart_on stall without stall_action restart"),
    ({"restart": "on_failure", "restart_on": ["nccl", "signal"], "stall_action": "restart", "stall_timeout": 60},
     "Invalid stall_action restart with restart_on nccl, signal: a stall would never be restarted; add stall to restart_on"),
    ({"restart_on_boot": True, "env": {"TOKEN": "x", "KEY": "y"}}, "Invalid env (KEY, TOKEN) together with restart_on_boot: the values of env"),
    ({"gpu_idle_timeout": 600}, "Invalid gpu_idle_timeout 600 without gpus: the GPU idle watchdog watches the GPUs gpus gives the job"),
    ({"gpu_idle_timeout": -1, "gpus": 1}, "Invalid gpu_idle_timeout -1: use 0 to 31622400 seconds (0: no GPU idle watchdog)"),
    ({"gpu_idle_timeout": 600, "gpus": "all", "gpu_idle_utilization": 101}, "Invalid gpu_idle_utilization 101: use 0 to 100 percent"),
    ({"gpu_idle_timeout": 600, "gpus": [0], "gpu_idle_utilization": 0}, "Invalid gpu_idle_utilization 0 with gpu_idle_timeout: no utilisation"),
])
def test_bad_settings_are_refused_naming_the_option(params: dict[str, t.Any], words: str) -> None:
    with pytest.raises(L.SpecError, match="^" + re.escape(words)):
        L.spec_from_params(dict(BASE, **params))


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(ValueError) as error:
        supervise_from_params(dict(_defaults(), restart_limit=-1, stall_timeout=-1))
    assert "restart_limit" in str(error.value) and "stall_timeout" in str(error.value)


def test_a_stop_needs_no_settings() -> None:
    spec = L.spec_from_params({"session_name": "train", "state": "stopped", "restart_limit": -1})
    assert spec.supervise == ()


def test_restart_on_boot_takes_public_values_and_is_part_of_the_spec() -> None:
    spec = L.spec_from_params(dict(BASE, restart_on_boot=True, public_env={"EPOCHS": "3"}, env={}))
    assert changed_settings(spec.supervise) == {"restart_on_boot": True} and dict(spec.env) == {"EPOCHS": "3"}
    assert L.spec_hash(spec) != L.spec_hash(L.spec_from_params(dict(BASE, public_env={"EPOCHS": "3"})))
    kept = L.spec_from_params(dict(BASE, notify_url="https://hooks.example/T", notify_url_keep=True))
    assert changed_settings(kept.supervise)["notify_url_keep"] is True


def test_restart_on_and_its_window_reach_job_json_and_change_the_hash() -> None:
    spec = L.spec_from_params(dict(BASE, restart="on_failure", restart_on=["nccl", "oom_kill", "nccl"], restart_limit_window=3600))
    assert changed_settings(spec.supervise) == {"restart": "on_failure", "restart_on": ["nccl", "oom_kill"], "restart_limit_window": 3600}
    assert L.spec_hash(spec) != L.spec_hash(L.spec_from_params(dict(BASE, restart="on_failure")))
    stalls = L.spec_from_params(dict(BASE, restart_on=["stall"], stall_action="restart", stall_timeout=60))
    assert dict(stalls.supervise)["restart_on"] == ("stall",), "restart never: only the watchdog's restarts, by their cause"


def test_the_gpu_idle_watchdog_is_taken_with_gpus_and_changes_the_hash() -> None:
    spec = L.spec_from_params(dict(BASE, gpus=2, gpu_idle_timeout=600, gpu_idle_utilization=10))
    assert changed_settings(spec.supervise) == {"gpu_idle_timeout": 600, "gpu_idle_utilization": 10}
    assert L.spec_hash(spec) != L.spec_hash(L.spec_from_params(dict(BASE, gpus=2)))
    assert changed_settings(L.spec_from_params(dict(BASE, gpu_idle_utilization=0)).supervise) == {"gpu_idle_utilization": 0}, "off: any value"
