# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build every command line of the ``trainops.pct_launch.pct`` connection plugin.

Controller-only. This module is the single place where argv lists for ``pct`` (``exec`` for the
connection, ``list`` and ``config`` for the inventory) and, when the Proxmox node is remote, for
``ssh`` are assembled.

Rules kept here:

* Commands are lists of arguments, never a shell string put together with ``%`` or f-strings.
* The only text that passes through a shell is the command line ssh hands to the node's login
  shell. It is produced by ``shlex.join`` over the full argv, so every argument arrives byte-exact.
* ``pct`` runs with a small login-like environment (``clean_environment``). ``pct exec`` keeps its
  environment for the command in the container (its default ``--keep-env 1``), so this is also the
  environment inside the container, except for PATH, which pct sets to ``/sbin:/bin:/usr/sbin:/usr/bin``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import typing as t


# Proxmox VE VMIDs (pve-container: 100 to 999999999), defined here only.
VMID_MIN = 100
VMID_MAX = 999_999_999
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONTAINER_SHELL = "/bin/sh"
NODE_SHELL = "/bin/sh"
# Script for put_file: $1 is the destination; a redirect is safe for names with leading dashes.
PUT_SCRIPT = 'cat > "$1"'
LANG = "C.UTF-8"
# One ssh call for every config of a node: $1 is a marker no config line can equal, $2 the pct program.
# A failed `pct config` is reported with its exit status; its message goes to stderr.
CONFIG_BATCH_SCRIPT = """m=$1 pct=$2
shift 2
for id do
  printf '\\n%s %s\\n' "$m" "$id"
  "$pct" config "$id" || printf '\\n%s %s failed %s\\n' "$m" "$id" "$?"
done"""


_DIGITS = re.compile(r"[0-9]+")


class PctOptionError(ValueError):
    """An option of the connection plugin has an unusable value."""


@dataclasses.dataclass(frozen=True)
class PctTarget:
    """Where a container lives and how to reach the node that runs it."""

    vmid: int
    pct_path: str = "pct"
    node: str | None = None
    node_address: str | None = None
    node_user: str | None = None
    ssh_executable: str = "ssh"
    ssh_args: tuple[str, ...] = ()
    timeout: int = 10

    @property
    def is_remote(self) -> bool:
        """True when the node is reached with ssh."""
        return self.node is not None

    def describe(self) -> str:
        """Human readable name of the container, for messages."""
        if self.node is None:
            return f"container {self.vmid}"
        return f"container {self.vmid} on node {self.node}"

    def describe_node(self) -> str:
        """Human readable name of the node, for messages."""
        return "the local node" if self.node is None else f"node {self.node}"


def parse_vmid(value: object) -> int:
    """Return the VMID from the ``pct_vmid`` host variable or raise PctOptionError naming it."""
    if value is None or value == "":
        raise PctOptionError(
            f"Missing container id: set the host variable pct_vmid to the VMID of the container (an integer from {VMID_MIN} to {VMID_MAX})"
        )
    vmid: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        vmid = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        vmid = int(value.strip())
    if vmid is None or not VMID_MIN <= vmid <= VMID_MAX:
        raise PctOptionError(f"Invalid container id {value!r}: pct_vmid must be an integer from {VMID_MIN} to {VMID_MAX}")
    return vmid


def parse_node(value: object, variable: str = "pct_node") -> str | None:
    """Return the node name (None: the controller is the node) or raise PctOptionError naming ``variable``."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value.startswith("-") or any(c.isspace() for c in value):
        raise PctOptionError(f"Invalid node {value!r}: {variable} must be a host name or address for ssh (no spaces, no leading '-')")
    return value


def parse_ssh_args(value: object) -> tuple[str, ...]:
    """Split the ``pct_ssh_args`` string (shell-like quoting) or accept a list."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            raise PctOptionError(f"Invalid pct_ssh_args {value!r}: {exc}") from exc
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise PctOptionError(f"Invalid pct_ssh_args {value!r}: expected a string or a list of strings")


def clean_environment(user: str, home: str | None) -> dict[str, str]:
    """Login-like environment for ``pct``; it is what the container's command sees (pct keeps it)."""
    env = {"PATH": CLEAN_PATH, "LANG": LANG, "LOGNAME": user, "USER": user}
    if home:
        env["HOME"] = home
    return env


def remote_environment(target: PctTarget) -> dict[str, str]:
    """Environment for ``pct`` on a remote node; root's HOME is only known for root."""
    user = target.node_user or "root"
    return clean_environment(user, "/root" if user == "root" else None)


def shell_command(cmd: str) -> list[str]:
    """argv inside the container running Ansible's command string with the POSIX shell."""
    return [CONTAINER_SHELL, "-c", cmd]


def put_command(dest: str) -> list[str]:
    """argv inside the container writing stdin to ``dest``."""
    return [CONTAINER_SHELL, "-c", PUT_SCRIPT, "sh", dest]


def fetch_command(src: str) -> list[str]:
    """argv inside the container writing ``src`` to stdout."""
    return ["cat", "--", src]


def pct_exec_argv(target: PctTarget, command: t.Sequence[str]) -> list[str]:
    """``pct exec VMID -- CMD...`` as run on the node."""
    if not command:
        raise ValueError("command must not be empty")
    return [target.pct_path, "exec", str(target.vmid), "--", *command]


def remote_command_line(argv: t.Sequence[str], env: t.Mapping[str, str]) -> str:
    """The one string ssh passes to the node's shell: ``env -i -C / VAR=... argv...``, all quoted."""
    assignments = [f"{name}={value}" for name, value in sorted(env.items())]
    return shlex.join(["env", "-i", "-C", "/", *assignments, *argv])


def ssh_argv(target: PctTarget, remote_line: str) -> list[str]:
    """``ssh`` argv reaching the node: never a tty (-T), never a prompt (BatchMode)."""
    if target.node is None:
        raise ValueError("ssh_argv needs a remote node")
    argv = [target.ssh_executable, "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={target.timeout}"]
    if target.node_address:
        # The node's name stays the destination, so its Host entries in the ssh configuration still apply.
        argv += ["-o", "HostName=" + target.node_address.replace("%", "%%")]
    if target.node_user:
        argv += ["-l", target.node_user]
    argv += [*target.ssh_args, target.node, "--", remote_line]
    return argv


def build_command(target: PctTarget, command: t.Sequence[str], env: t.Mapping[str, str]) -> list[str]:
    """Full argv to run on the controller for ``command`` inside the container.

    Local node: ``pct exec ...`` (run it with ``env`` as its environment).
    Remote node: ``ssh ... node -- 'env -i -C / VAR=... pct exec ...'``.
    """
    argv = pct_exec_argv(target, command)
    if not target.is_remote:
        return argv
    return ssh_argv(target, remote_command_line(argv, env))


def resolve_local_pct(pct_path: str) -> str | None:
    """Absolute path of the local ``pct``, searched in the clean PATH, or None."""
    if os.sep in pct_path:
        return pct_path if os.path.isfile(pct_path) and os.access(pct_path, os.X_OK) else None
    return shutil.which(pct_path, path=CLEAN_PATH)


def printable(argv: t.Sequence[str]) -> str:
    """argv as a shell-quoted line that can be logged even with undecodable bytes."""
    return shlex.join(argv).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def list_argv(pct_path: str) -> list[str]:
    """``pct list`` as run on the node."""
    return [pct_path, "list"]


def config_batch_argv(pct_path: str, vmids: t.Sequence[int], marker: str) -> list[str]:
    """One process on the node running ``pct config`` for every VMID (``CONFIG_BATCH_SCRIPT``)."""
    return [NODE_SHELL, "-c", CONFIG_BATCH_SCRIPT, "sh", marker, pct_path, *(str(vmid) for vmid in vmids)]
