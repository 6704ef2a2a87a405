# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: run one of the collection's action plugins for many containers from one task (``fleet_run``).

A per-host task costs Ansible one worker process per host, forked one after another by the controller's main
process: at 32 containers that, not ``pct``, is what a launch waits for. ``run_on_hosts`` instead runs the action
plugin of the module for every host in threads of the one worker of a ``run_once`` task. Each host gets what a worker
would give it: its own ``trainops.pct_launch.pct`` connection, its options set from that host's variables (its
``pct_vmid``, its node and how to reach it), and task variables that name that host. The options of the module are
the task's, the same for every host. Containers of one node share the node's ssh connection (ControlPersist), as
per-host tasks do, and the pct calls they make at the same moment go to the node from one ssh session
(``_node_batch.py``): one per node and step instead of one per container.

Only hosts of the pct connection run here, and only where the module can run as a direct run (pipelining on, the
container's Python known: ``plugin_utils/_direct_run.py``); ``host_problem`` says why another host cannot, and that
host is left to a per-host task.
"""

from __future__ import annotations

import concurrent.futures
import copy
import traceback
import typing as t

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.plugins.loader import action_loader, connection_loader

from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _direct_run
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._node_batch import NodeBatch

CONNECTION = "trainops.pct_launch.pct"
# Variables that are a host's own: taken from that host's variables, never from those of the host the task runs on.
HOST_VARIABLES = ("inventory_hostname", "inventory_hostname_short", "ansible_host", "group_names", "ansible_connection",
                  "ansible_python_interpreter", "ansible_facts", "ansible_pipelining", "ansible_become",
                  "pct_vmid", "proxmox_vmid", "pct_node", "proxmox_node")


def connection_variables(connection: t.Any) -> list[str]:
    """The variables a loaded connection plugin reads its options from (its documentation's ``vars``)."""
    return list(C.config.get_plugin_vars("connection", connection._load_name))  # pylint: disable=protected-access


def host_variables(task_vars: t.Mapping[str, t.Any], own: t.Mapping[str, t.Any], names: t.Iterable[str]) -> dict[str, t.Any]:
    """The task's variables with the host's own (``own``: its hostvars) for each of ``names``: none of another host's left."""
    result = dict(task_vars)
    for name in names:
        result.pop(name, None)
        if name in own:
            result[name] = own[name]
    return result


def host_problem(host_vars: t.Mapping[str, t.Any], templar: t.Any) -> str | None:
    """Why this host cannot be run here (a per-host task must run it), or None."""
    connection = templar.template(host_vars.get("ansible_connection") or "")
    if connection != CONNECTION:
        return f"its ansible_connection is {connection or 'not set'}, not {CONNECTION}"
    if str(templar.template(host_vars.get("ansible_become", False))).lower() in ("true", "yes", "1", "on"):
        return "it asks for become, which fleet_run does not do"
    return None


class HostRun:
    """One host's run of the module's action plugin, with a connection and task variables of its own."""

    def __init__(self, action: t.Any, module: str, args: t.Mapping[str, t.Any], host: str, task_vars: t.Mapping[str, t.Any]) -> None:
        self.action, self.module, self.host = action, module, host
        own = task_vars["hostvars"].raw_get(host)  # as a worker gets them: templated where used, with hostvars at hand
        play_context = copy.copy(action._play_context)  # pylint: disable=protected-access
        address = own.get("ansible_host")  # whom the connection's -vvv lines name, as in a per-host task (not templated here)
        play_context.remote_addr = address if isinstance(address, str) and address and "{" not in address else host
        self.connection = connection_loader.get(CONNECTION, play_context)
        names = [*HOST_VARIABLES, *connection_variables(self.connection)]
        self.task_vars = host_variables(task_vars, own, names)
        self.task = action._task.copy()  # pylint: disable=protected-access  # the module's options, not fleet_run's
        self.task.args = dict(args)
        self.task.action = f"trainops.pct_launch.{module}"
        self.plugin: t.Any = None
        self.batch: NodeBatch | None = None
        self.joined = False

    def problem(self) -> str | None:
        """Why this host must be left to a per-host task, or None when it can run here (its plugin is then made)."""
        templar = self.action._templar.copy_with_new_env(available_variables=self.task_vars)  # pylint: disable=protected-access
        found = host_problem(self.task_vars, templar)
        if found is not None:
            return found
        options = {name: templar.template(self.task_vars[name]) for name in connection_variables(self.connection) if name in self.task_vars}
        self.connection.set_options(var_options=options)
        self.connection._shell.set_options()  # pylint: disable=protected-access  # the shell's defaults (sh)
        action = self.action
        self.plugin = action_loader.get(f"trainops.pct_launch.{self.module}", task=self.task, connection=self.connection,
                                        play_context=self.connection._play_context, loader=action._loader,  # pylint: disable=protected-access
                                        templar=templar, shared_loader_obj=action._shared_loader_obj)  # pylint: disable=protected-access
        if _direct_run.interpreter(self.plugin, self.task_vars) is None:
            return "its Python is not known yet (set ansible_python_interpreter, or run a module there first)"
        if not self.plugin._is_pipelining_enabled("new", False):  # pylint: disable=protected-access
            return "pipelining is off for it"
        return None

    def node_key(self) -> tuple[str, ...] | None:
        """What reaches this host's node for a batch of its containers' pct calls; None when it is the controller's own."""
        try:
            argv = self.connection.node_batch_argv()
        except AnsibleError:  # its options are wrong: its own run says so
            return None
        return None if argv is None else tuple(argv)

    def join(self) -> None:
        """Send this host's pct calls in its node's batch (``batch``); it is waited for from now on."""
        if self.batch is None or self.joined:
            return
        self.joined = True
        self.batch.join()
        self.connection.use_node_batch(self.batch)

    def run(self) -> dict[str, t.Any]:
        """The module's result on this host, as its per-host task would register it (unreachable included)."""
        self.join()
        try:
            result = dict(self.plugin.run(task_vars=self.task_vars))
        except AnsibleConnectionFailure as exc:
            return {"unreachable": True, "failed": True, "changed": False, "msg": str(exc)}
        except AnsibleError as exc:
            return {"failed": True, "changed": False, "msg": str(exc)}
        except Exception as exc:  # pylint: disable=broad-exception-caught  # one host's failure must not end the others' runs
            return {"failed": True, "changed": False, "exception": traceback.format_exc(),
                    "msg": f"Unexpected failure of {self.module} on host {self.host}: {type(exc).__name__}: {exc}"}
        finally:
            self.connection.close()
            if self.batch is not None:
                self.batch.leave()
        result.setdefault("changed", False)
        return result


def share_nodes(runs: t.Sequence[HostRun], starting: int) -> None:
    """One batch per remote node with more than one host; the first ``starting`` runs (they start at once) join it now.

    The others join when their thread starts, so that no call waits for a host whose run has not started.
    """
    groups: dict[tuple[str, ...], list[HostRun]] = {}
    for run in runs:
        key = run.node_key()
        if key is not None:
            groups.setdefault(key, []).append(run)
    for key, members in groups.items():
        if len(members) > 1:
            batch = NodeBatch(key)
            for run in members:
                run.batch = batch
    for run in runs[:starting]:
        run.join()


def run_on_hosts(action: t.Any, module: str, args: t.Mapping[str, t.Any], hosts: t.Sequence[str], task_vars: t.Mapping[str, t.Any],
                 parallel: int) -> tuple[dict[str, dict[str, t.Any]], dict[str, str]]:
    """(each host's result, why each host left out could not run here), the hosts run side by side, ``parallel`` at most."""
    runs, left_out, failures = {}, {}, {}
    hostvars = task_vars.get("hostvars") or {}
    for host in dict.fromkeys(hosts):
        if host not in hostvars:
            left_out[host] = "it is not in the inventory"
            continue
        run = HostRun(action, module, args, host, task_vars)
        try:
            problem = run.problem()
        except AnsibleError as exc:  # its variables (a template that fails): its own failure, as in a per-host task
            failures[host] = {"failed": True, "changed": False, "msg": f"Cannot run {module} on host {host}: {exc}"}
            continue
        if problem is None:
            runs[host] = run
        else:
            left_out[host] = problem
    results: dict[str, dict[str, t.Any]] = {}
    if runs:
        share_nodes(list(runs.values()), max(1, min(parallel, len(runs))))
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(parallel, len(runs)))) as pool:
            futures = {host: pool.submit(run.run) for host, run in runs.items()}
            results = {host: future.result() for host, future in futures.items()}
    return {host: failures.get(host) or results[host] for host in hosts if host in failures or host in results}, left_out
