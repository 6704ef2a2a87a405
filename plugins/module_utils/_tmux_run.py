# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""``tmux_session`` on its host: its options and rules, and what one run of it returns.

The module (``plugins/modules/tmux_session.py``) validates the options with ``ARGUMENT_SPEC`` and ``RULES`` and
returns ``run``'s result.

With the option ``wait``, a run that started the job goes on with the first chunk of its proof (``_log_chunk``, at most
``CHUNK_SECONDS``) in the same process: a job that proves its start at once costs one run, one ``pct exec``, for the
launch and the proof. The chunk's result is the run's ``wait``; the action plugin goes on from it when it has no verdict.
"""

from __future__ import annotations

import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_policy import ARGUMENT_SPEC as SUPERVISE_SPEC
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_target import JobError
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import RUN_ROOT, run_root
from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import CHUNK_SECONDS, WAIT_SPEC, wait_option_errors
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import reportable
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_job import launch
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import SpecError, spec_from_params
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_outcome import failure, result, where

ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = dict(
    session_name=dict(type="str", required=True),
    command=dict(type="str"),
    argv=dict(type="list", elements="str"),
    chdir=dict(type="str"),
    env=dict(type="dict", no_log=True),
    public_env=dict(type="dict"),
    venv=dict(type="str"),
    user=dict(type="str"),
    log_path=dict(type="str"),
    log_mode=dict(type="str", choices=["rotate", "append", "fail_if_exists"], default="rotate"),
    log_keep=dict(type="int", default=5),
    state=dict(type="str", choices=["started", "stopped", "restarted"], default="started"),
    stop_signal=dict(type="str", choices=["TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "KILL"], default="TERM"),
    stop_timeout=dict(type="int", default=30),
    gpus=dict(type="raw"),
    gpu_exclude=dict(type="list", elements="str", default=[]),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    min_free_mb=dict(type="int", default=0),
    wait=dict(type="dict", options=WAIT_SPEC),
    **SUPERVISE_SPEC,
)
# The result's error for options the checks after the spec refuse (nothing ran)
INVALID_OPTION = "invalid_option"
# AnsibleModule's keyword arguments besides the spec
RULES: dict[str, t.Any] = dict(
    mutually_exclusive=[("command", "argv")],
    required_if=[("state", "started", ("command", "argv"), True), ("state", "restarted", ("command", "argv"), True),
                 ("state", "started", ("log_path",)), ("state", "restarted", ("log_path",)), ("notify_url_keep", True, ("notify_url",))],
)
# The options only a launch by root keeps for the container's next boot (_boot_stage)
BOOT_OPTIONS = ("restart_on_boot", "notify_url_keep")


def run(params: t.Mapping[str, t.Any], check_mode: bool, diff: bool) -> dict[str, t.Any]:
    """Launch, stop or restart on this host (the validated options); the result, ``failed`` when it failed."""
    errors = wait_option_errors(params["wait"]) if params.get("wait") else []
    if errors:  # before anything starts
        return {"failed": True, "msg": "; ".join(errors + ["nothing was started"]), "error": INVALID_OPTION}
    try:
        spec = spec_from_params(params)
    except SpecError as exc:
        return {"failed": True, "msg": str(exc), "error": INVALID_OPTION}
    spec = spec._replace(run_root=run_root())
    asked = [option for option in BOOT_OPTIONS if params.get(option) and params["state"] != "stopped"]
    if asked and spec.run_root != RUN_ROOT:
        return {"failed": True, "error": INVALID_OPTION,
                "msg": f"Invalid {' and '.join(asked)}: the container's boot knows only the jobs of launches as root (the pct "
                       "connection's), and this one runs as another user; launch as root (the job may run as another user: user), "
                       "or drop it; nothing was started"}
    try:
        facts = launch(spec, check_mode=check_mode)
    except JobError as exc:
        error = failure(spec, exc.code, dict(exc.facts, error=exc.code), str(exc))
        # target: the words naming this host in msg, which the action plugin replaces with the container's VMID
        return {"failed": True, "msg": reportable(str(error)), "error": error.code, "session_name": spec.session_name,
                "target": reportable(where())}
    outcome = result(spec, facts, check_mode)
    if not diff:
        outcome.pop("diff")
    proof = first_proof_chunk(params, outcome, check_mode)
    if proof is not None:
        outcome["wait"] = proof
    return dict(reportable(outcome))


def first_proof_chunk(params: t.Mapping[str, t.Any], outcome: t.Mapping[str, t.Any], check_mode: bool) -> dict[str, t.Any] | None:
    """Option ``wait``, after a start: the first chunk of the proof (wait_for_log's module result); None without one."""
    wait = params.get("wait")
    if not wait or check_mode or not outcome.get("changed") or params["state"] == "stopped":  # a job that ended at once too
        return None
    from ansible_collections.trainops.pct_launch.plugins.module_utils._log_chunk import chunk  # only a run with wait needs it
    chunk_params = dict(wait, session_name=outcome["session_name"], log_path=outcome["log_path"], offset=0,
                        timeout=min(CHUNK_SECONDS, float(wait["timeout"])))
    try:
        return chunk(chunk_params, check_mode=False)
    except Exception as exc:  # pylint: disable=broad-exception-caught  # the start's result must reach the controller
        return {"first_chunk_error": f"{type(exc).__name__}: {exc}"}  # which waits without this chunk
