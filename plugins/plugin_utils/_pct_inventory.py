# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers of the ``trainops.pct_launch.pct_containers`` inventory plugin.

Controller-only. Reads the ``nodes`` option, turns a container (parsed by ``_pct_output``) into host
variables and groups, and wraps the argv lists run for a node. The argv lists, and how pct is
invoked (``pct`` or ``sudo -n -- pct`` with ``node_become``), come from ``_pct_command``, which also
wraps them for a remote node (``ssh -T -o BatchMode=yes ... node -- 'env -i ...'``): the one place
where commands for a node are assembled; nothing here is put together as a shell string.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import string
import typing as t

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import (
    DEFAULT_BECOME_EXE,
    PctOptionError,
    PctTarget,
    node_command_argv,
    parse_become_exe,
    parse_node,
    parse_ssh_args,
    remote_environment,
)
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_output import (
    ListedContainer,
    PctConfig,
    PctInventoryError,
    first_addresses,
    networks,
    parse_tags,
)

LOCAL_NODE = "local"
HOST_NAME_FIELDS = ("vmid", "hostname", "node")
DEFAULT_HOST_NAME_FORMAT = "ct{vmid}"
GROUP_PREFIX = "pct_"
NODE_KEYS = ("name", "node_user", "node_become", "node_become_exe", "ssh_args", "ssh_executable", "pct_path", "timeout")
_GROUP_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]*")
_INT = re.compile(r"[0-9]+")
# The connection's variable for pct exec's --keep-env (pve-container 5.0.9 and newer have it).
KEEP_ENV_VAR = "pct_keep_env"


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """A Proxmox node to list, and how to reach it (``remote`` False: the controller is the node)."""

    name: str = LOCAL_NODE
    remote: bool = False
    node_user: str | None = None
    ssh_executable: str = "ssh"
    ssh_args: tuple[str, ...] = ()
    pct_path: str = "pct"
    timeout: int = 10
    node_become: bool = False
    node_become_exe: str = DEFAULT_BECOME_EXE

    def describe(self) -> str:
        """Human readable name, for messages."""
        return f"node {self.name}" if self.remote else "the local node"

    def target(self) -> PctTarget:
        """The node as a ``PctTarget`` for ``_pct_command`` and ``_pct_errors`` (no container: vmid 0)."""
        return PctTarget(
            vmid=0,
            pct_path=self.pct_path,
            node=self.name if self.remote else None,
            node_user=self.node_user,
            node_become=self.node_become,
            node_become_exe=self.node_become_exe,
            ssh_executable=self.ssh_executable,
            ssh_args=self.ssh_args,
            timeout=self.timeout,
        )


# --- commands -------------------------------------------------------------------------------------


def node_command(spec: NodeSpec, argv: t.Sequence[str]) -> list[str]:
    """argv to run on the controller: ``argv`` itself for the local node, else wrapped in ``ssh -T``.

    ``argv`` already says how pct is invoked (``_pct_command.list_argv`` / ``config_batch_argv``, with sudo for
    ``node_become``); this only carries it to the node.
    """
    target = spec.target()
    return node_command_argv(target, argv, remote_environment(target))


# --- options --------------------------------------------------------------------------------------


def _node_entry(entry: object) -> dict[str, t.Any]:
    """A ``nodes`` entry as a dict with at least ``name``."""
    if isinstance(entry, str):
        return {"name": entry}
    if not isinstance(entry, t.Mapping):
        raise PctInventoryError(f"invalid entry {entry!r} in nodes: expected a node name or a dictionary with 'name'")
    unknown = sorted(set(entry) - set(NODE_KEYS))
    if unknown:
        raise PctInventoryError(f"unknown key(s) {', '.join(map(str, unknown))} in nodes entry {dict(entry)!r}; known: {', '.join(NODE_KEYS)}")
    if not entry.get("name"):
        raise PctInventoryError(f"nodes entry {dict(entry)!r} has no name")
    return dict(entry)


def _boolean(value: object, name: str) -> bool:
    """A boolean as Ansible writes them (true/false, yes/no, on/off, 1/0)."""
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "on", "y", "t"):
        return True
    if lowered in ("0", "false", "no", "off", "n", "f", ""):
        return False
    raise PctInventoryError(f"invalid node_become {value!r} for node {name}: expected true or false")


def _timeout(value: object) -> int:
    """A positive number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not _INT.fullmatch(str(value).strip()) or int(value) < 1:
        raise PctInventoryError(f"invalid timeout {value!r}: expected a positive integer (seconds)")
    return int(value)


def _node_spec(entry: dict[str, t.Any], defaults: t.Mapping[str, t.Any]) -> NodeSpec:
    """One node from its entry, options missing there taken from ``defaults``."""
    merged = {key: entry[key] if entry.get(key) not in (None, "") else defaults.get(key) for key in NODE_KEYS}
    name = str(merged["name"]).strip()
    try:
        node = None if name == LOCAL_NODE else parse_node(name)
    except PctOptionError as exc:
        raise PctInventoryError(f"invalid node name {name!r} in nodes: expected a host name or address for ssh (no spaces, no leading '-')") from exc
    try:
        ssh_args = parse_ssh_args(merged["ssh_args"])
    except PctOptionError as exc:
        raise PctInventoryError(f"invalid ssh_args for node {name}: {exc.__cause__ or exc}") from exc
    try:
        become_exe = parse_become_exe(merged["node_become_exe"], "node_become_exe")
    except PctOptionError as exc:
        raise PctInventoryError(f"{exc} (node {name})") from exc
    return NodeSpec(
        name=name,
        remote=node is not None,
        node_user=str(merged["node_user"]) if merged["node_user"] else None,
        node_become=_boolean(merged["node_become"] if merged["node_become"] is not None else False, name),
        node_become_exe=become_exe,
        ssh_executable=str(merged["ssh_executable"] or "ssh"),
        ssh_args=ssh_args,
        pct_path=str(merged["pct_path"] or "pct"),
        timeout=_timeout(merged["timeout"] if merged["timeout"] is not None else 10),
    )


def parse_nodes(value: object, defaults: t.Mapping[str, t.Any]) -> list[NodeSpec]:
    """The ``nodes`` option: names or dicts; empty means the local node only. Names must be unique."""
    if value in (None, "", []):
        value = [LOCAL_NODE]
    if isinstance(value, (str, t.Mapping)) or not isinstance(value, t.Sequence):
        raise PctInventoryError(f"invalid nodes {value!r}: expected a list of node names or dictionaries")
    specs = [_node_spec(_node_entry(entry), defaults) for entry in value]
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise PctInventoryError(f"node {spec.name} is listed twice in nodes")
        seen.add(spec.name)
    return specs


def check_host_name_format(fmt: str) -> str:
    """Validate ``hostname_format``: only the plain fields ``{vmid}``, ``{hostname}`` and ``{node}``."""
    try:
        fields = [parsed[1] for parsed in string.Formatter().parse(fmt) if parsed[1] is not None]
    except ValueError as exc:
        raise PctInventoryError(f"invalid hostname_format {fmt!r}: {exc}") from exc
    bad = [field for field in fields if field not in HOST_NAME_FIELDS]
    if bad or not fields:
        raise PctInventoryError(f"invalid hostname_format {fmt!r}: use at least one of {{vmid}}, {{hostname}}, {{node}} and no other field")
    return fmt


def host_name(fmt: str, vmid: int, hostname: str, node: str) -> str:
    """The inventory host name of a container; raises PctInventoryError when it is unusable."""
    name = fmt.format(vmid=vmid, hostname=hostname, node=node)
    if not _HOST_NAME.fullmatch(name):
        raise PctInventoryError(f"hostname_format {fmt!r} gives the unusable host name {name!r} for container {vmid} on node {node}")
    return name


# --- host variables and groups --------------------------------------------------------------------


def sanitize_group(name: str) -> str:
    """A group name Ansible accepts without warnings: ``[A-Za-z0-9_]``, not starting with a digit."""
    safe = _GROUP_UNSAFE.sub("_", name)
    return f"_{safe}" if safe[:1].isdigit() else safe


def node_group(spec: NodeSpec) -> str:
    """``pct_node_<name>``."""
    return sanitize_group(f"{GROUP_PREFIX}node_{spec.name}")


def status_group(status: str) -> str:
    """``pct_running``, ``pct_stopped``."""
    return sanitize_group(f"{GROUP_PREFIX}{status}")


def container_vars(spec: NodeSpec, listed: ListedContainer, config: PctConfig) -> dict[str, t.Any]:
    """Host variables describing one container (identity and configuration, no connection settings)."""
    options = config.options
    nets = networks(options)
    ip4, ip6 = first_addresses(nets)
    hostvars: dict[str, t.Any] = {
        "pct_vmid": listed.vmid,
        "pct_status": listed.status,
        "pct_lock": listed.lock,
        "pct_hostname": options.get("hostname") or listed.name,
        "pct_tags": parse_tags(options.get("tags")),
        "pct_net": nets,
        "pct_config": dict(options),
    }
    if spec.remote:
        hostvars["pct_node"] = spec.name
    for key in ("ostype", "arch"):
        if options.get(key):
            hostvars[f"pct_{key}"] = options[key]
    for key in ("cores", "memory", "swap"):
        if _INT.fullmatch(options.get(key, "")):
            hostvars[f"pct_{key}"] = int(options[key])
    if ip4:
        hostvars["pct_ip"] = ip4
    if ip6:
        hostvars["pct_ip6"] = ip6
    return hostvars


def help_keep_env(batch_output: str, marker: str) -> bool | None:
    """Whether the node's pct has ``pct exec --keep-env``, from the ``pct help exec`` section of the config batch.

    None when pct's help did not answer (or is not one of ``pct exec``): the connection's auto mode then finds out.
    """
    lines = batch_output.splitlines()
    if f"{marker} help" not in lines:
        return None
    section: list[str] = []
    for line in lines[lines.index(f"{marker} help") + 1:]:
        if line.startswith(f"{marker} "):
            if line.startswith(f"{marker} help failed"):
                return None
            break
        section.append(line)
    if not any(line.startswith("USAGE: pct exec <vmid>") for line in section):
        return None
    return any(line.strip().startswith("--keep-env") for line in section)


def connection_vars(spec: NodeSpec, connection: str, keep_env: bool | None = None) -> dict[str, t.Any]:
    """Variables for the pct connection; settings left at the connection's defaults are not set.

    ``keep_env`` False (the node's pct has no ``--keep-env``) sets ``pct_keep_env: false``, so that the connection
    does not try the option first in every task.
    """
    hostvars: dict[str, t.Any] = {"ansible_connection": connection}
    if keep_env is False:
        hostvars[KEEP_ENV_VAR] = False
    if spec.pct_path != "pct":
        hostvars["pct_path"] = spec.pct_path
    if spec.node_become:
        hostvars["pct_node_become"] = True
        if spec.node_become_exe != DEFAULT_BECOME_EXE:
            hostvars["pct_node_become_exe"] = spec.node_become_exe
    if not spec.remote:
        return hostvars
    if spec.node_user:
        hostvars["pct_node_user"] = spec.node_user
    if spec.ssh_args:
        hostvars["pct_ssh_args"] = shlex.join(spec.ssh_args)
    if spec.ssh_executable != "ssh":
        hostvars["pct_ssh_executable"] = spec.ssh_executable
    if spec.timeout != 10:
        hostvars["pct_timeout"] = spec.timeout
    return hostvars
