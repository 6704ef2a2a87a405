# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.wait_for_log``: checks options, then runs the module in chunks.

The module (one module run per call, one ``pct exec`` on a container of the pct connection) waits
at most ``CHUNK_SECONDS`` per call; this plugin calls it again with the log offset it reached until
the verdict or the deadline, printing a progress line after every chunk that ends without a verdict.
A chunk runs the module as Ansible's normal action runs one (``_chunk``).

With ``fleet_id``, the waits of one fleet (each in its own worker process) end together: a member whose
wait fails posts it on the fleet board (``plugin_utils/_fleet_board.py``), and every other member, which
runs its chunk in a thread and looks at the board meanwhile (``plugin_utils/_fleet_wait.py``), ends its
wait at once with the verdict ``fleet_failed``, naming the member that failed first. Its chunk still
running in the container ends by itself within ``CHUNK_SECONDS`` (it only reads).

With ``wait_until: finished`` the chunks go on after the start until the job ends; once a chunk saw the
start (``proven_line``), the next ones look for it no more (a pattern that never matches), and the task's
result keeps the first chunk's ``proven_line`` and ``proof_recorded``. With ``show_lines`` (the default
with ``finished``) each chunk returns the log's new lines (``new_lines``), which this plugin prints as
they come, prefixed with ``[HOST] `` when the play has more than one host, and leaves out of the result;
the module then ends a chunk ``LINES_FLUSH`` (2 s) after it first read a new line, so that lines are
shown soon, and at most one module run per 2 s is made while output flows.
"""

from __future__ import annotations

import signal
import time
import typing as t

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import (
    ARGUMENT_SPEC,
    CHUNK_SECONDS,
    MODULE_NAME,
    REQUIRED_ONE_OF,
    check_options,
    message,
    reason,
    show_lines,
    subject,
    where,
)
from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _job_xid
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._fleet_board import fleet_id_error
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._module_failure import module_answered, module_failure_cause
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import ContainerNotRunning
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_vars import host_node, host_vmid
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._fleet_wait import (
    NEVER,
    FleetMember,
    cut_short_message,
    died_after_proof_message,
    run_until,
)

display = Display()

# Options the action plugin adds or reads for itself; the module never sees them.
CONTROLLER_ONLY = ("fleet_id", "node_kernel_log", "host", "pct_vmid", "pct_node")
# Chunks shorter than this are not started; the deadline is as good as reached.
MIN_CHUNK = 0.2
# A chunk killed by a signal (its container stopping): how many times to ask the container, a second apart.
STOP_PROBES = 3
# A chunk killed by a signal in a container that still runs (shutting down, the chunk's process killed): how many more
# chunks are run, to read what became of the job (a container shutting down is named by the next chunk).
KILLED_CHUNK_RETRIES = 1


def progress_line(host: str, args: t.Mapping[str, t.Any], result: t.Mapping[str, t.Any], elapsed: float) -> str:
    """One progress line: elapsed time, log size, whether the session is alive."""
    who = args.get("session_name") or args.get("log_path")
    if result.get("log_exists"):
        log = f"log {result.get('log_size')} bytes"
    else:
        log = "log missing"
    if args.get("session_name"):
        alive = "session alive" if result.get("session_alive") else "session gone"
    else:
        alive = "session unknown"
    return f"[{host}] wait_for_log {who}{where(args)}: {elapsed:.0f} s of {args['timeout']:g} s, {log}, {alive}"


def line_prefix(host: str, task_vars: t.Mapping[str, t.Any]) -> str:
    """``[HOST] `` before each shown log line when the play has more than one host, else nothing."""
    hosts = task_vars.get("ansible_play_hosts_all") or []
    return f"[{host}] " if len(hosts) > 1 else ""


def show_new_lines(res: dict[str, t.Any], prefix: str) -> None:
    """Print a chunk's new log lines (show_lines) and take them out of its result."""
    lines = res.pop("new_lines", None) or []
    omitted = res.pop("lines_omitted", None) or 0
    if omitted:
        display.display(f"{prefix}... {omitted} lines not shown")
    for line in lines:
        display.display(f"{prefix}{line}")


def _who(args: t.Mapping[str, t.Any]) -> str:
    return f"session {args['session_name']}" if args.get("session_name") else f"log {args['log_path']}"


def cause_detail(cause: object) -> str:
    """A cause on one line, without a trailing colon or period (``no detail`` when empty)."""
    return " ".join(str(cause).split()).rstrip(":.").strip() or "no detail"


def unreachable_message(reach: str, args: t.Mapping[str, t.Any], elapsed: float, cause: object) -> str:
    """The message when the target cannot be reached for a chunk: the wait is over, the job's fate unknown."""
    return (f"Cannot wait for {_who(args)}{where(args)}: the wait was cut off {elapsed:.0f} s into its {args['timeout']:g} s: "
            f"{cause_detail(cause)}. The job's start is not proven and the job may still run: once {reach} can be reached, "
            "check it (playbooks/status.yml) or launch again (a running job is left alone)")


def stopped_message(args: t.Mapping[str, t.Any], cause: object, shut_down: bool = False) -> str:
    """The message when the container stopped during the wait (pct says it is not running); ``shut_down``: a chunk
    was ended by SIGTERM just before, as the init of a container that shuts down cleanly ends every process."""
    vmid = args.get("pct_vmid")
    how = ("it shut down during the wait: the wait's own command got SIGTERM, as every process in a container that shuts "
           "down does, and the job ended with it" if shut_down else "it stopped during the wait, and the job with it")
    return (f"Cannot wait for {_who(args)}{where(args)}: the container is not running any more ({how}); "
            f"start it with 'pct start {vmid}' and launch the job again ({cause_detail(cause)})")


class ActionModule(ActionBase):
    """Wait for a job's log in chunks of one ``pct exec`` each."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _line_prefix = ""

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """Validate the options (regexes included) before any pct call, then wait."""
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, required_one_of=REQUIRED_ONE_OF)
        errors = check_options(args)
        if args.get("fleet_id") is not None:
            errors += [error for error in [fleet_id_error(args["fleet_id"])] if error]
        if errors:
            result.update(failed=True, msg="; ".join(errors))
            return result
        task_vars = task_vars or {}
        args, host = self._targeted(args, task_vars)
        if args.get("fleet_id") is None:
            result.update(self._wait(args, task_vars, host, None))
            return result
        with FleetMember(args["fleet_id"], host, args["pct_vmid"], self._node(host, task_vars)) as member:
            result.update(self._wait(args, task_vars, host, member))
        return result

    def prove_start(self, args: t.Mapping[str, t.Any], task_vars: dict[str, t.Any], first: dict[str, t.Any] | None) -> dict[str, t.Any]:
        """tmux_session's option wait: go on from the first chunk its module ran (``first``; None: wait from the start)
        with the validated ``args``."""
        args, host = self._targeted(args, task_vars)
        return self._wait(args, task_vars, host, None, first)

    def _targeted(self, args: t.Mapping[str, t.Any], task_vars: dict[str, t.Any]) -> tuple[dict[str, t.Any], str]:
        """The options with what the messages name (a container if the host has pct_vmid, on its node), and the host."""
        host = str(task_vars.get("inventory_hostname", "localhost"))
        self._line_prefix = line_prefix(host, task_vars)
        vmid = host_vmid(task_vars)
        args = dict(args, host=host, pct_vmid=vmid, pct_node=host_node(task_vars) if vmid is not None else None)
        args["show_lines"] = show_lines(args)
        return args, host

    def _chunk(self, args: dict[str, t.Any], task_vars: dict[str, t.Any], seconds: float, offset: int) -> dict[str, t.Any]:
        module_args = {key: value for key, value in args.items() if key not in CONTROLLER_ONLY}
        module_args.update(timeout=round(seconds, 3), offset=offset)
        # as ansible.builtin's normal action runs a module: an async task through async_wrapper, whose files stay for it
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        result = self._execute_module(module_name=MODULE_NAME, module_args=module_args, task_vars=task_vars, wrap_async=wrap_async)
        if not wrap_async:
            self._remove_tmp_path(None)  # the temporary folder of the connection's shell, as the normal action removes it
        return dict(result)

    def _node(self, host: str, task_vars: t.Mapping[str, t.Any]) -> str:
        """Where the chunks go: the delegate, a container's node (pct_node, else the controller), or the host."""
        delegate = self._task.delegate_to
        if isinstance(delegate, str) and delegate:
            return delegate
        if host_vmid(task_vars) is not None:
            return str(host_node(task_vars) or "localhost")
        return host

    def _reach(self, host: str, task_vars: t.Mapping[str, t.Any]) -> str:
        """What must become reachable again: the container, or the node or host the chunks go to."""
        if host_vmid(task_vars) is not None and not self._task.delegate_to:
            return f"container {host_vmid(task_vars)} on node {host_node(task_vars) or 'localhost'}"
        return f"host {self._node(host, task_vars)}"

    def _raise_if_stopped(self, args: dict[str, t.Any], res: dict[str, t.Any]) -> bool:
        """After a chunk that gave no answer on a container, ask it once more (up to 3 s when killed): stopped?
        True when the chunk was killed by a signal in a container that still runs."""
        if args.get("pct_vmid") is None:
            return False
        killed = (res.get("rc") or 0) > 128
        for attempt in range(STOP_PROBES if killed else 1):
            if attempt:
                time.sleep(1)
            self._low_level_execute_command("true", sudoable=False)  # raises ContainerNotRunning when it stopped
        return killed

    def _stopped(self, args: dict[str, t.Any], member: FleetMember | None, cause: object, elapsed: float, calls: int,
                 killed_by: int = 0) -> dict[str, t.Any]:
        msg = stopped_message(args, cause, shut_down=killed_by == 128 + signal.SIGTERM)
        result = {"failed": True, "msg": msg, "reason": msg, "elapsed": round(elapsed, 3), "pct_calls": calls}
        if member is not None:
            result["fleet_first"] = member.post(dict(result, verdict="container_stopped"))
        return result

    def _one_chunk(self, args: dict[str, t.Any], task_vars: dict[str, t.Any], seconds: float, offset: int,
                   member: FleetMember | None) -> tuple[dict[str, t.Any] | None, dict[str, t.Any] | None, int]:
        """(chunk result, None, 1), or (None, the failure of another member, chunks run) as soon as the board shows one."""
        if member is None:
            return self._chunk(args, task_vars, seconds, offset), None, 1
        peer = member.peer_failure()  # one failed while this member was between chunks (or before its first)
        if peer is not None:
            return None, peer, 0
        res = run_until(lambda: self._chunk(args, task_vars, seconds, offset), lambda: member.peer_failure() is not None)
        peer = member.peer_failure()
        if res is not None and (peer is None or res.get("verdict") != "timeout"):
            return res, None, 1
        return None, peer, 1

    def _wait(self, args: dict[str, t.Any], task_vars: dict[str, t.Any], host: str, member: FleetMember | None,
              first: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """The verdict; ``first``: a first chunk run already (by tmux_session's module, in its own pct call)."""
        started = time.monotonic() - float(first.get("elapsed") or 0) if first else time.monotonic()
        deadline = started + args["timeout"]
        offset, calls = args["offset"], 0
        chunk_args, proof = args, {}  # wait_until finished: once the start is seen, the chunks look for it no more
        retries, killed_by = KILLED_CHUNK_RETRIES, 0
        while True:
            remaining = deadline - time.monotonic()
            try:
                if first is not None:
                    res, peer, ran, first = first, None, 0, None
                else:
                    res, peer, ran = self._one_chunk(chunk_args, task_vars, min(CHUNK_SECONDS, max(remaining, MIN_CHUNK)), offset, member)
                unanswered = res is not None and not module_answered(res)  # killed with its container, or no Python there
                killed_by = (res.get("rc") or 0) if unanswered else 0
                if unanswered and self._raise_if_stopped(args, res) and retries:
                    retries -= 1  # killed, the container still runs: the next chunk tells what became of the job
                    calls += ran
                    continue
            except ContainerNotRunning as exc:  # it stopped between two chunks, or during one
                return self._stopped(args, member, exc, time.monotonic() - started, calls + 1, killed_by)
            except AnsibleConnectionFailure as exc:  # the node went away: say which, and what it means for the job
                msg = unreachable_message(self._reach(host, task_vars), args, time.monotonic() - started, exc)
                if member is not None:
                    member.post({"verdict": "unreachable", "msg": msg})
                raise AnsibleConnectionFailure(msg) from None
            calls += ran
            elapsed = time.monotonic() - started
            if res is not None:
                show_new_lines(res, self._line_prefix)
                if not proof and res.get("proven_line") is not None:
                    proof = {"proven_line": res["proven_line"], "proof_recorded": bool(res.get("proof_recorded"))}
                    chunk_args = dict(chunk_args, pattern=NEVER)
                if not chunk_args.get("log_path") and res.get("log_path"):
                    # the log the session named: read after the session is gone too (a container that rebooted)
                    chunk_args = dict(chunk_args, log_path=res["log_path"])
            if peer is not None:
                return {"failed": True, "verdict": "fleet_failed", "fleet_failure": peer, "elapsed": round(elapsed, 3),
                        "pct_calls": calls, "msg": cut_short_message(args, peer, elapsed)}
            res = t.cast("dict[str, t.Any]", res)  # no failure of another member: this member's chunk ran
            if res.get("verdict") != "timeout" or deadline - time.monotonic() < MIN_CHUNK:
                break
            offset = res.get("offset", offset)
            display.display(progress_line(host, args, res, elapsed))
        if "verdict" in res:
            res.update(elapsed=round(elapsed, 3), pct_calls=calls)
            if args["wait_until"] == "finished":
                self._keep_proof(res, proof)
            if res.get("failed"):  # a GPU fault in the node's kernel log during the attempt: named in the message
                self._name_xids(res, args)
            res["msg"] = message(res, args)
            res["reason"] = reason(res, args)
            # ansible-core 2.19+ keeps the module's own failure summary (with the chunk's msg) here
            res.pop("exception", None)
        elif not module_answered(res):  # no Python on the target, for example
            res["msg"] = f"Cannot wait for {subject(args)}: {module_failure_cause(res)}"
        if member is not None and res.get("failed"):
            res["fleet_first"] = member.post(res)
        elif member is not None and res.get("verdict") == "started":
            member.proven()
            res = self._watch_after_proof(args, task_vars, member, res, deadline)
        return res

    def _name_xids(self, res: dict[str, t.Any], args: t.Mapping[str, t.Any]) -> None:
        """``cause: gpu_xid``, ``xid`` and ``xid_reason`` when the node logged Xid errors of the job's GPUs in its attempt."""
        warning = _job_xid.name_ends(self._connection, [res], args.get("node_kernel_log"))
        if warning:
            res.setdefault("warnings", []).append(warning)

    @staticmethod
    def _keep_proof(res: dict[str, t.Any], proof: t.Mapping[str, t.Any]) -> None:
        """wait_until finished: the result tells the start seen in any chunk; matched_line is that line unless fail_pattern's."""
        if proof:
            res["proven_line"] = proof["proven_line"]
            res["proof_recorded"] = bool(proof["proof_recorded"] or res.get("proof_recorded"))
        res.setdefault("proven_line", None)
        if res.get("verdict") != "fail_pattern":
            res["matched_line"] = res["proven_line"]

    def _watch_after_proof(self, args: dict[str, t.Any], task_vars: dict[str, t.Any], member: FleetMember,
                           proof: dict[str, t.Any], deadline: float) -> dict[str, t.Any]:
        """While other members still wait, watch this proven job: its death (or fail_pattern) fails the fleet too."""
        watch_args = dict(args, pattern=NEVER)
        offset = proof.get("offset", args["offset"])
        while member.others_waiting() and member.peer_failure() is None and deadline - time.monotonic() >= MIN_CHUNK:
            seconds = min(CHUNK_SECONDS, deadline - time.monotonic())
            watch = run_until(lambda: self._chunk(watch_args, task_vars, seconds, offset),
                              lambda: not member.others_waiting() or member.peer_failure() is not None)
            if watch is None:
                break
            show_new_lines(watch, self._line_prefix)
            proof["pct_calls"] = proof.get("pct_calls", 0) + 1
            if watch.get("verdict") == "died" and watch.get("exit_status") == 0:
                return proof  # it finished, successfully (a short job, or a rank done early): nothing to fail
            if watch.get("verdict") != "timeout":
                watch.pop("exception", None)
                watch.update(failed=True, pct_calls=proof["pct_calls"], proven_line=proof.get("matched_line"),
                             msg=died_after_proof_message(args, proof, watch),
                             reason=died_after_proof_message(args, proof, watch, with_lines=False))
                watch["fleet_first"] = member.post(watch)
                return watch
            offset = watch.get("offset", offset)
        return proof
