# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.tmux_session``: keeps ``env`` values off the target's disk.

On a container of the pct connection (a host with ``pct_vmid``) its failure messages name the
container (``container VMID``) instead of the host name the module sees inside it.

Without pipelining Ansible copies each module, its arguments included, into a file in the target's
temporary folder before it runs it. A task with ``env`` is
therefore refused unless it is pipelined, before anything is sent. Otherwise the module runs as Ansible's normal
action runs it (one ``pct exec`` when pipelined).

With the option ``wait``, a run that started the job returns the first chunk of its proof too (``wait``, run in
the same ``pct exec``); when that chunk has no verdict yet, this plugin goes on as wait_for_log's does
(``plugins/action/wait_for_log.py``, ``prove_start``), and a failed proof fails the task with wait_for_log's message.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.trainops.pct_launch.plugins.action.wait_for_log import ActionModule as WaitAction, cause_detail
from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import WAIT_SPEC
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._module_failure import module_answered, module_failure_cause
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import ContainerNotRunning
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_vars import host_vmid


def unpipelined_env_message(args: t.Mapping[str, t.Any], host: str) -> str:
    """The error for ``env`` values that would be written to the target's disk."""
    return (f"Refusing to run session {args.get('session_name')} on {host} with env: pipelining is off for this host "
            "(ansible_pipelining or ANSIBLE_PIPELINING false, or an async task), so Ansible would write the module's "
            "arguments, the env values included, to a file in the target's temporary folder; turn pipelining on "
            "(the trainops.pct_launch.pct connection has it on by default), or run the task without env. Nothing was started")


class ActionModule(NormalAction):
    """Refuse ``env`` without pipelining, then run the module."""

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """Check how the module would travel, then run it."""
        args = self._task.args
        if args.get("env") and not self._is_pipelining_enabled("new", wrap_async=bool(self._task.async_val)):
            host = str((task_vars or {}).get("inventory_hostname", "the target"))
            return {"failed": True, "changed": False, "msg": unpipelined_env_message(args, host)}
        task_vars = task_vars or {}
        try:
            result = super().run(tmp, task_vars)
        except AnsibleConnectionFailure as exc:
            if not args.get("wait") or isinstance(exc, ContainerNotRunning):
                raise
            raise AnsibleConnectionFailure(cut_in_launch_message(args, exc)) from None
        if not module_answered(result):  # no Python on the target, for example
            vmid = host_vmid(task_vars)
            where = f"container {vmid}" if vmid is not None else f"host {task_vars.get('inventory_hostname')}"
            result["msg"] = f"Cannot run session {args.get('session_name')} in {where}: {module_failure_cause(result)}"
            return result
        result = name_the_container(result, host_vmid(task_vars))
        if isinstance(result.get("wait"), dict) and not result.get("failed"):
            result = self._prove_start(result, task_vars)
        return result

    def _prove_start(self, result: dict[str, t.Any], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        """Option wait, after a start: the proof, gone on from the module's first chunk; its failure fails the task."""
        wait = dict(result["wait"])
        first = None if "first_chunk_error" in wait else wait  # the module's chunk failed unforeseen: wait from the start
        options = ArgumentSpecValidator(WAIT_SPEC).validate(dict(self._task.args["wait"])).validated_parameters  # as the module did
        args = dict(options, session_name=result["session_name"], log_path=result["log_path"], offset=0)
        waiter = WaitAction(self._task, self._connection, self._play_context, self._loader, self._templar, self._shared_loader_obj)
        try:
            proof = waiter.prove_start(args, task_vars, first)
        except AnsibleConnectionFailure as exc:  # the job started; its proof was cut off
            return dict(result, unreachable=True, msg=str(exc))
        result["wait"] = proof
        if proof.get("failed"):
            result.update(failed=True, msg=proof.get("msg"), reason=proof.get("reason", proof.get("msg")))
        elif proof.get("verdict") == "started":
            result["proven"] = True
        return result


def cut_in_launch_message(args: t.Mapping[str, t.Any], cause: object) -> str:
    """The message when the target was lost during a launch with ``wait`` (the start and the first chunk of its proof)."""
    return (f"{cause_detail(cause)}. The launch of session {args.get('session_name')} was cut off during its one call, which starts "
            "the job and waits for the first chunk of its proof: the job may have started and may still run, its start "
            "is not proven; once the target can be reached, check it (playbooks/status.yml) or launch again "
            "(a running job is left alone)")


def name_the_container(result: dict[str, t.Any], vmid: t.Any) -> dict[str, t.Any]:
    """``... in host CT241: cause`` becomes ``... in container 241: cause`` for a host with ``pct_vmid``."""
    target = result.pop("target", None)
    if isinstance(target, str) and vmid is not None and isinstance(result.get("msg"), str):
        result["msg"] = result["msg"].replace(f" in {target}: ", f" in container {vmid}: ", 1)
    return result
