# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: pct_containers
short_description: Proxmox VE LXC containers from pct list, ready for the pct connection
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Adds the LXC containers of Proxmox VE nodes as inventory hosts, so that container inventories need not be written by hand.
    The containers are listed with C(pct list) and each one's configuration is read with C(pct config VMID).
  - The inventory source is a YAML file named C(pct_containers.yml) or C(pct_containers.yaml), or whose name ends in
    C(.pct_containers.yml) or C(.pct_containers.yaml), with O(plugin=trainops.pct_launch.pct_containers).
  - Every node in O(nodes) costs two commands, whatever the number of its containers, one C(pct list) and one
    C(/bin/sh) on the node that runs C(pct help exec) (whether C(pct exec) has C(--keep-env)) and then C(pct config) for each
    container that passes O(status).
    With O(node_become) C(pct) runs as C(sudo -n -- pct list) and C(sudo -n -- pct config VMID); the shell itself does not
    run under sudo (it gets the sudo command as arguments), so a sudoers rule that allows only C(pct) is enough.
    On a remote node they are two C(ssh -T -o BatchMode=yes) calls, never with a terminal; on the controller
    (node V(local)) they run directly. Nodes are listed in parallel (at most 8 at a time).
  - 'Host variables of each container: C(pct_vmid) (integer); C(pct_node), the node as written in O(nodes), only for
    a remote node; C(pct_status) (V(running), V(stopped)); C(pct_lock) (empty when not locked); C(pct_hostname)
    (the C(hostname) option, else the name C(pct list) shows); C(pct_tags) (a list, empty when there are none);
    C(pct_ostype), C(pct_arch) and, as integers, C(pct_cores), C(pct_memory) (MiB) and C(pct_swap) (MiB) when the
    configuration sets them; C(pct_ip) and C(pct_ip6), the first static address (without prefix length) over
    C(net0), C(net1), ... when there is one (not for V(dhcp), V(auto) or V(manual)); C(pct_net), the C(netN) options
    parsed into dictionaries (C({net0: {name: eth0, bridge: vmbr0, ip: 10.0.0.5/24}})); and C(pct_config), all
    options of C(pct config) except the raw C(lxc.*) lines, with C(description) decoded.'
  - The variables are named C(pct_*), not C(proxmox_*) as those of community.proxmox's C(proxmox) inventory; use these
    names in O(compose), O(groups) and O(keyed_groups) (for example C(pct_node), not C(proxmox_node)).
    The C(trainops.pct_launch.pct) connection reads C(proxmox_vmid) and C(proxmox_node) too, so hosts from that
    inventory can use the connection without this plugin; on a host with both, C(pct_vmid) and C(pct_node) win.
  - With O(connection_vars) (the default) each host also gets what the C(trainops.pct_launch.pct) connection needs, namely
    C(ansible_connection=trainops.pct_launch.pct), and C(pct_node_user), C(pct_node_become), C(pct_node_become_exe),
    C(pct_ssh_args), C(pct_ssh_executable), C(pct_path) and C(pct_timeout) when they differ from the connection's defaults
    (so C(group_vars) can still set them), and C(pct_keep_env=false) when the node's C(pct help exec) does not name
    C(--keep-env) (pve-container before 5.0.9, Proxmox VE 7.4 to 8.1), so that the connection does not try that option first
    in every task.
  - Groups, in addition to those of O(groups) and O(keyed_groups), C(pct_node_NODE) for each node (V(pct_node_local)
    for the controller) and C(pct_STATUS) for each status (V(pct_running), V(pct_stopped)); characters other than
    letters, digits and C(_) become C(_), so node V(pve-a) gives V(pct_node_pve_a).
  - Values read from the nodes are marked unsafe, so a container's description or tags are never templated.
options:
  plugin:
    description: The name of this plugin; makes the file an inventory source of it.
    type: string
    required: true
    choices:
      - trainops.pct_launch.pct_containers
  nodes:
    description:
      - The Proxmox VE nodes whose containers are listed, in this order.
      - Each entry is a node name for C(ssh) (a host name, an address or a C(Host) of the ssh configuration), or a
        dictionary with the key C(name) and, for that node only, any of the keys C(node_user), C(node_become),
        C(node_become_exe), C(ssh_args), C(ssh_executable), C(pct_path) and C(timeout), which override the options
        of the same name.
      - The name V(local) stands for the controller itself as the node, where C(pct) is run without C(ssh);
        its containers get no C(pct_node).
      - An empty list means V([local]). Names must be unique.
    type: list
    elements: raw
    default: [local]
  node_user:
    description:
      - User to log in to the remote nodes as with C(ssh); C(pct) needs root there, so a user other than root needs O(node_become).
      - When not set, C(ssh) decides (its configuration or the controller user).
    type: string
  node_become:
    description:
      - Run C(pct) on the nodes with C(sudo -n --) (O(node_become_exe)), for a node login that is not root, as the
        C(node_become) option of the C(trainops.pct_launch.pct) connection does; with O(connection_vars) the containers
        get C(pct_node_become=true).
      - 'Sudo must allow C(pct) without a password, for example the line C(trainops ALL=NOPASSWD: /usr/sbin/pct) in
        C(/etc/sudoers.d/); otherwise the node fails with an error that says so (C(sudo -n) never prompts).'
    type: boolean
    default: false
  node_become_exe:
    description:
      - The program that runs C(pct) as root with O(node_become), called as C(EXE -n -- pct ...).
    type: string
    default: sudo
  ssh_args:
    description:
      - Extra arguments for C(ssh) to the remote nodes, a string split like a shell would split it
        (for example V(-F /etc/trainops/pve_ssh_config)), or a list of strings.
      - They come after the collection's own C(-T -o BatchMode=yes -o ConnectTimeout=...); C(-t) must not be used.
      - With O(connection_vars) they are also given to the containers' connection as C(pct_ssh_args).
    type: raw
    default: ''
  ssh_executable:
    description: The OpenSSH client used to reach the remote nodes.
    type: string
    default: ssh
  pct_path:
    description:
      - The C(pct) program on the nodes, a name looked up in C(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
        or an absolute path.
    type: string
    default: pct
  timeout:
    description: Seconds to wait for the connection to a remote node (C(ssh -o ConnectTimeout)).
    type: integer
    default: 10
  command_timeout:
    description:
      - Seconds one command on a node (C(pct list), or the batch of C(pct config)) may take before that node counts as failed.
    type: integer
    default: 300
  status:
    description:
      - Only containers with one of these statuses are added, for example V([running]). Empty, all containers.
      - Containers left out cost no C(pct config).
    type: list
    elements: string
    choices:
      - running
      - stopped
    default: []
  hostname_format:
    description:
      - The inventory host name of a container, a Python format string with the fields C({vmid}), C({hostname})
        (the container's C(hostname), as in C(pct_hostname)) and C({node}) (the name in O(nodes), V(local) for the controller).
      - The default V(ct{vmid}) is unique in a Proxmox VE cluster and stable when a container is renamed or migrated.
        Container host names need not be unique; V({node}-{hostname}) or V({hostname}-{vmid}) are safer choices than V({hostname}).
      - Two containers with the same host name are an error. Host names may contain letters, digits and C(_.@-).
    type: string
    default: ct{vmid}
  connection_vars:
    description:
      - Set C(ansible_connection=trainops.pct_launch.pct) and the connection's node options on each host,
        so that the inventory can be used at once.
      - When V(false), only the host variables describing the containers are set (including C(pct_vmid) and C(pct_node)).
    type: boolean
    default: true
  node_errors:
    description:
      - What to do when the containers of a node cannot be listed (an unreachable node, C(pct) missing, a command that fails or times out).
      - V(error) fails the inventory source with an error naming each such node.
      - V(warn) prints a warning naming the node and goes on with the other nodes; the cache is then not updated.
      - A container whose configuration cannot be read (for example destroyed in between) is always left out with a warning.
    type: string
    choices:
      - error
      - warn
    default: error
extends_documentation_fragment:
  - ansible.builtin.constructed
  - ansible.builtin.inventory_cache
notes:
  - The controller needs OpenSSH for remote nodes; the nodes need C(pct) (Proxmox VE 7.4, 8 or 9) and C(/bin/sh).
  - With O(cache), the cache holds the containers of the last refresh; O(status) is applied again when it is read.
seealso:
  - plugin: trainops.pct_launch.pct
    plugin_type: connection
  - name: pct manual
    description: The Proxmox VE container toolkit.
    link: https://pve.proxmox.com/pve-docs/pct.1.html
"""

EXAMPLES = r"""
# The containers of the controller, which is the Proxmox VE node, need a file
# inventory/pct_containers.yml with one line:
#   plugin: trainops.pct_launch.pct_containers
#
# File inventory/cluster.pct_containers.yml: the running containers of two remote nodes
# reached as root with an ssh configuration, named after their host names, a group per tag.
plugin: trainops.pct_launch.pct_containers
nodes:
  - pve1.example.org
  - name: pve2.example.org
    ssh_args: -p 2222
node_user: root
ssh_args: -F /etc/trainops/pve_ssh_config
status: [running]
hostname_format: "{hostname}-{vmid}"
compose:
  ansible_python_interpreter: "'/usr/bin/python3'"
keyed_groups:
  - key: pct_tags
    prefix: tag
groups:
  gpu: "'gpu' in pct_tags"

# Use: ansible-inventory -i inventory/cluster.pct_containers.yml --graph
#      ansible -i inventory/cluster.pct_containers.yml pct_running -m ansible.builtin.ping
"""

import concurrent.futures
import dataclasses
import getpass
import os
import pwd
import secrets
import subprocess
import time
import typing as t

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.display import Display
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import (
    clean_environment,
    PctTarget,
    config_batch_argv,
    list_argv,
    printable,
    resolve_local_pct,
)
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import (
    diagnose,
    pct_not_found_cause,
)
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_inventory import (
    NodeSpec,
    check_host_name_format,
    KEEP_ENV_VAR,
    connection_vars,
    container_vars,
    help_keep_env,
    host_name,
    node_command,
    node_group,
    parse_nodes,
    status_group,
)
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_output import (
    PctInventoryError,
    parse_pct_config,
    parse_pct_list,
    split_config_batch,
)

display = Display()

CONNECTION = "trainops.pct_launch.pct"
SOURCE_NAMES = ("pct_containers.yml", "pct_containers.yaml")
MAX_PARALLEL_NODES = 8
_MAX_DETAIL = 400

Records = t.Dict[str, t.List[t.Dict[str, t.Any]]]


class NodeError(Exception):
    """The containers of a node could not be listed."""


def _execute(argv: list[str], env: dict[str, str] | None, timeout: int) -> subprocess.CompletedProcess[bytes]:
    """Run one command on the controller: stdin is /dev/null (never a terminal), output captured."""
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, cwd="/", timeout=timeout, check=False)


def _local_environment() -> dict[str, str]:
    """Login-like environment for the local pct, as the connection plugin gives it."""
    try:
        entry = pwd.getpwuid(os.getuid())
        return clean_environment(entry.pw_name, entry.pw_dir)
    except KeyError:
        return clean_environment(getpass.getuser(), os.environ.get("HOME"))


def _detail(text: str, needle: str = "") -> str:
    """The last non-empty lines of stderr (those naming ``needle`` when given), shortened."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and needle in line]
    detail = " | ".join(lines[-3:])
    return detail if len(detail) <= _MAX_DETAIL else "..." + detail[-_MAX_DETAIL:]


class NodeLister:
    """Lists the containers of one node: ``pct list``, then every ``pct config`` in one more command."""

    def __init__(self, spec: NodeSpec, statuses: t.Collection[str], command_timeout: int) -> None:
        self.spec = spec
        self.statuses = set(statuses)
        self.command_timeout = command_timeout
        self.calls = 0
        self.warnings: list[str] = []

    def _call(self, argv: list[str], what: str) -> tuple[str, str]:
        """Run ``argv`` on the node; returns (stdout, stderr) or raises NodeError."""
        full = node_command(self.spec, argv)
        display.vvv(f"pct_containers: {self.spec.describe()}: {printable(full)}")
        env = None if self.spec.remote else _local_environment()
        self.calls += 1
        try:
            result = _execute(full, env, self.command_timeout)
        except subprocess.TimeoutExpired as exc:
            raise NodeError(f"{what} did not finish within {self.command_timeout} s (command_timeout)") from exc
        except OSError as exc:
            raise NodeError(f"cannot run {full[0]}: {exc}") from exc
        stdout = result.stdout.decode("utf-8", "replace")
        stderr = result.stderr.decode("utf-8", "replace")
        if result.returncode != 0:
            cause = diagnose(self.spec.target(), result.returncode, result.stderr)
            raise NodeError(cause or f"{what} exited with status {result.returncode}: {_detail(stderr) or 'no error message'}")
        return stdout, stderr

    def _pct(self) -> PctTarget:
        """The node as a target for the argv builders; pct resolved on the controller for the local node."""
        target = self.spec.target()
        if self.spec.remote:
            return target
        resolved = resolve_local_pct(self.spec.pct_path)
        if resolved is None:
            raise NodeError(pct_not_found_cause(target))
        return dataclasses.replace(target, pct_path=resolved)

    def run(self) -> list[dict[str, t.Any]]:
        """Host variables of the node's containers that pass the status filter; raises NodeError."""
        pct = self._pct()
        try:
            listed = parse_pct_list(self._call(list_argv(pct), "pct list")[0])
        except PctInventoryError as exc:
            raise NodeError(str(exc)) from exc
        wanted = [row for row in listed if not self.statuses or row.status in self.statuses]
        if not wanted:
            return []
        marker = f"### pct-inventory-{secrets.token_hex(8)}"
        vmids = [row.vmid for row in wanted]
        stdout, stderr = self._call(config_batch_argv(pct, vmids, marker), "pct config")
        configs, failures = split_config_batch(stdout, marker, vmids)
        for vmid, cause in failures.items():
            detail = _detail(stderr, str(vmid))
            self.warnings.append(f"Left out container {vmid} on {self.spec.describe()}: {cause}" + (f" ({detail})" if detail else ""))
        records = [container_vars(self.spec, row, parse_pct_config(configs[row.vmid])) for row in wanted if row.vmid in configs]
        if help_keep_env(stdout, marker) is False:  # kept with the records (and the cache) until the hosts are added
            for record in records:
                record[KEEP_ENV_VAR] = False
        return records


def _list_node(lister: NodeLister) -> list[dict[str, t.Any]]:
    """Run a lister and log what it cost."""
    started = time.monotonic()
    records = lister.run()
    display.vvv(f"pct_containers: {lister.spec.describe()}: {len(records)} containers, {lister.calls} commands, {time.monotonic() - started:.2f} s")
    return records


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """Proxmox VE LXC containers as inventory hosts."""

    NAME = "trainops.pct_launch.pct_containers"

    def verify_file(self, path: str) -> bool:
        """Accept ``pct_containers.y(a)ml`` and ``*.pct_containers.y(a)ml``."""
        if not super().verify_file(path):
            return False
        base = os.path.basename(path)
        return base in SOURCE_NAMES or base.endswith(tuple(f".{name}" for name in SOURCE_NAMES))

    def parse(self, inventory: t.Any, loader: t.Any, path: str, cache: bool = True) -> None:
        """Read the source file, list the nodes (or read the cache) and add the containers."""
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        try:
            nodes = parse_nodes(self.get_option("nodes"), self._node_defaults())
            host_name_format = check_host_name_format(self.get_option("hostname_format"))
        except PctInventoryError as exc:
            raise AnsibleParserError(f"Invalid pct_containers source {path}: {exc}") from exc
        records = self._records(path, nodes, cache)
        self._populate(nodes, records, host_name_format)

    def _node_defaults(self) -> dict[str, t.Any]:
        """The options that apply to every node unless its entry overrides them."""
        keys = ("node_user", "node_become", "node_become_exe", "ssh_args", "ssh_executable", "pct_path", "timeout")
        return {key: self.get_option(key) for key in keys}

    def _records(self, path: str, nodes: list[NodeSpec], cache: bool) -> Records:
        """Containers per node, from the cache when allowed and complete, else from the nodes."""
        cache_key = self.get_cache_key(path)
        use_cache = bool(self.get_option("cache")) and cache
        update_cache = bool(self.get_option("cache")) and not cache
        if use_cache:
            try:
                cached = self._cache[cache_key]
            except KeyError:
                cached = None
            if isinstance(cached, dict) and all(isinstance(cached.get(spec.name), list) for spec in nodes):
                return {spec.name: cached[spec.name] for spec in nodes}
            update_cache = True
        records, complete = self._fetch(nodes)
        if update_cache and complete:
            self._cache[cache_key] = records
        return records

    def _fetch(self, nodes: list[NodeSpec]) -> tuple[Records, bool]:
        """List every node, in parallel; returns (containers per node, whether every node answered)."""
        listers = [NodeLister(spec, self.get_option("status"), int(self.get_option("command_timeout"))) for spec in nodes]
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_NODES, len(listers))) as pool:
            futures = [pool.submit(_list_node, lister) for lister in listers]
        records: Records = {}
        errors: list[str] = []
        for lister, future in zip(listers, futures):
            try:
                records[lister.spec.name] = future.result()
            except NodeError as exc:
                errors.append(f"Cannot list the containers of {lister.spec.describe()}: {exc}")
            for warning in lister.warnings:
                self.display.warning(f"pct_containers: {warning}")
        if errors and self.get_option("node_errors") == "error":
            raise AnsibleParserError("; ".join(errors))
        for error in errors:
            self.display.warning(f"pct_containers: {error}")
        return records, not errors

    def _populate(self, nodes: list[NodeSpec], records: Records, host_name_format: str) -> None:
        """Add the hosts in node order, then VMID order; host names must be unique."""
        statuses = set(self.get_option("status"))
        owners: dict[str, str] = {}
        for spec in nodes:
            for facts in records.get(spec.name, []):
                if statuses and facts["pct_status"] not in statuses:
                    continue
                try:
                    name = host_name(host_name_format, facts["pct_vmid"], facts["pct_hostname"], spec.name)
                except PctInventoryError as exc:
                    raise AnsibleParserError(str(exc)) from exc
                owner = f"container {facts['pct_vmid']} on {spec.describe()}"
                if name in owners:
                    raise AnsibleParserError(
                        f"hostname_format {host_name_format!r} gives the host name {name} to both {owners[name]} and {owner}; "
                        "use {vmid} or {node} in hostname_format"
                    )
                owners[name] = owner
                self._add_container(spec, name, facts)

    def _add_container(self, spec: NodeSpec, name: str, facts: dict[str, t.Any]) -> None:
        """One host: its groups, its variables (unsafe), then compose, groups and keyed_groups."""
        hostvars = dict(facts)
        keep_env = hostvars.pop(KEEP_ENV_VAR, None)
        if self.get_option("connection_vars"):
            hostvars.update(connection_vars(spec, CONNECTION, keep_env))
        hostvars = wrap_var(hostvars)
        self.inventory.add_host(name)
        for group in (node_group(spec), status_group(facts["pct_status"])):
            self.inventory.add_group(group)
            self.inventory.add_host(name, group=group)
        for key, value in hostvars.items():
            self.inventory.set_variable(name, key, value)
        strict = self.get_option("strict")
        self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
        self._add_host_to_composed_groups(self.get_option("groups"), hostvars, name, strict=strict)
        self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, name, strict=strict)
