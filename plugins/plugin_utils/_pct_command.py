# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build every command line of the ``trainops.pct_launch.pct`` connection plugin.

Controller-only. This module is the single place where argv lists for ``pct`` (``exec`` for the
connection, ``list`` and ``config`` for the inventory), for commands on the node itself
(``node_command_argv``) and, when the Proxmox node is remote, for ``ssh`` are assembled.
``pct_invocation`` is the one place that says how ``pct`` is invoked on the node: ``pct`` itself,
or ``sudo -n -- pct`` for a node login that is not root (``node_become``); only pct runs under sudo.

Rules kept here:

* Commands are lists of arguments, never a shell string put together with ``%`` or f-strings.
* The only text that passes through a shell is the command line ssh hands to the node's login
  shell. It is produced by ``shlex.join`` over the full argv, so every argument arrives byte-exact.
* ``pct`` runs with a small login-like environment (``clean_environment``). ``pct exec`` is given
  ``--keep-env 1`` explicitly (pve-container documents that its default changes to 0 in a later major
  version), so this is also the environment inside the container, except for PATH, which pct sets to
  ``/sbin:/bin:/usr/sbin:/usr/bin``. Under sudo, sudo's ``env_reset`` replaces it first (see the
  connection's documentation for what the container then sees). pve-container before 5.0.9 (Proxmox
  VE 7.4 to 8.1) has no ``--keep-env`` and refuses it; its exec keeps the environment (lxc-attach's
  default), so ``pct_exec_argv`` leaves the option out when asked to (``keep_env`` False).
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
# pct exec keeps its environment for the command (pve-container's default today, to become 0 later).
KEEP_ENV = ("--keep-env", "1")
# The connection's keep_env option (pct_keep_env): auto passes it and goes on without it once pct refuses it.
KEEP_ENV_MODES = ("auto", "true", "false")
_TRUE = ("true", "yes", "on", "1", "y", "t")
_FALSE = ("false", "no", "off", "0", "n", "f")
# sudo never prompts (no terminal to prompt on): -n; the end of sudo's options: --.
BECOME_FLAGS = ("-n", "--")
DEFAULT_BECOME_EXE = "sudo"
# One ssh call for every config of a node: $1 is a marker no config line can equal, then the VMIDs
# (digits only), then "--", then how pct is invoked (``pct_invocation``: "pct", or "sudo -n -- pct"),
# so that only pct runs under sudo, never this shell.
# A failed `pct config` is reported with its exit status; its message goes to stderr.
# First `pct help exec`, whose usage names --keep-env when this pct has it (pve-container 5.0.9 and newer),
# in a section of its own before the configs, so the inventory learns it without another ssh call.
CONFIG_BATCH_SCRIPT = """m=$1
shift
ids=
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do ids="$ids $1"; shift; done
[ "$#" -gt 1 ] || { echo "config batch: no pct invocation after --" >&2; exit 2; }
shift
[ -n "$ids" ] || exit 0
printf '%s help\\n' "$m"
"$@" help exec 2>/dev/null || printf '\\n%s help failed %s\\n' "$m" "$?"
for id in $ids; do
  printf '\\n%s %s\\n' "$m" "$id"
  "$@" config "$id" || printf '\\n%s %s failed %s\\n' "$m" "$id" "$?"
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
    node_become: bool = False
    node_become_exe: str = DEFAULT_BECOME_EXE
    ssh_executable: str = "ssh"
    ssh_args: tuple[str, ...] = ()
    ssh_control: tuple[str, ...] = ()
    timeout: int = 10
    keep_env: str = "auto"

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
    """Return the VMID from the ``pct_vmid`` (or ``proxmox_vmid``) host variable or raise PctOptionError naming it."""
    if value is None or value == "":
        raise PctOptionError(
            "Missing container id: set the host variable pct_vmid (proxmox_vmid, community.proxmox's name, is accepted too) "
            f"to the VMID of the container (an integer from {VMID_MIN} to {VMID_MAX})"
        )
    vmid: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        vmid = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        vmid = int(value.strip())
    if vmid is None or not VMID_MIN <= vmid <= VMID_MAX:
        raise PctOptionError(
            f"Invalid container id {value!r}: pct_vmid (or proxmox_vmid) must be an integer from {VMID_MIN} to {VMID_MAX}; fix the host variable"
        )
    return vmid


def parse_node(value: object, variable: str = "pct_node") -> str | None:
    """Return the node name (None: the controller is the node) or raise PctOptionError naming ``variable``."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value.startswith("-") or any(c.isspace() for c in value):
        raise PctOptionError(f"Invalid node {value!r}: {variable} must be a host name or address for ssh (no spaces, no leading '-')")
    return value


def parse_become_exe(value: object, variable: str = "pct_node_become_exe") -> str:
    """The program that runs pct as root on the node (default ``sudo``) or raise PctOptionError naming ``variable``."""
    if value is None or value == "":
        return DEFAULT_BECOME_EXE
    if not isinstance(value, str) or value.startswith("-") or any(c.isspace() for c in value):
        raise PctOptionError(f"Invalid {variable} {value!r}: expected a program name or absolute path such as sudo (no spaces, no leading '-')")
    return value


def parse_keep_env(value: object) -> str:
    """The ``pct_keep_env`` option as ``auto``, ``true`` or ``false`` (booleans as Ansible writes them), or PctOptionError."""
    text = "auto" if value is None else str(value).strip().lower() or "auto"
    if text in _TRUE:
        return "true"
    if text in _FALSE:
        return "false"
    if text != "auto":
        raise PctOptionError(f"Invalid pct_keep_env {value!r}: expected auto, true or false")
    return text


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


def ssh_control_args(persist: object, path_dir: object) -> tuple[str, ...]:
    """ssh's connection sharing: ``-o ControlMaster=auto -o ControlPersist=P -o ControlPath=DIR/pct-%C``.

    ``persist`` is ssh's ControlPersist (``60s``, ``10m``, seconds); empty, ``no`` or ``0`` shares nothing (no
    options). ``%C`` is ssh's hash of the local host, node, port and user: two nodes or users never share.
    """
    text = "" if persist is None else str(persist).strip()
    if text.lower() in ("", "no", "false", "0"):
        return ()
    if not re.fullmatch(r"[0-9]+[smhdwSMHDW]?|yes", text):
        raise PctOptionError(f"Invalid pct_ssh_control_persist {text!r}: expected ssh's ControlPersist time (60s, 10m, 300) or no")
    folder = os.path.expanduser(str(path_dir or "~/.ansible/cp"))
    if not folder or re.search(r"[\s\"'%]", folder):
        raise PctOptionError(f"Invalid pct_ssh_control_path_dir {folder!r}: expected a folder without spaces, quotes or %")
    return ("-o", "ControlMaster=auto", "-o", f"ControlPersist={text}", "-o", f"ControlPath={folder}/pct-%C")


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


def pct_invocation(target: PctTarget) -> list[str]:
    """How pct is invoked on the node: ``pct``, or ``sudo -n -- pct`` with ``node_become`` (the one place that decides)."""
    if target.node_become:
        return [target.node_become_exe, *BECOME_FLAGS, target.pct_path]
    return [target.pct_path]


def pct_exec_argv(target: PctTarget, command: t.Sequence[str], keep_env: bool = True) -> list[str]:
    """``pct exec VMID --keep-env 1 -- CMD...`` (under ``sudo -n --`` with ``node_become``) as run on the node.

    ``keep_env`` False leaves ``--keep-env 1`` out, for pct before pve-container 5.0.9, which refuses it.
    """
    if not command:
        raise ValueError("command must not be empty")
    return [*pct_invocation(target), "exec", str(target.vmid), *(KEEP_ENV if keep_env else ()), "--", *command]


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
    # ssh_args first: for each option ssh takes the first value given, so the user's win over the sharing defaults.
    argv += [*target.ssh_args, *target.ssh_control, target.node, "--", remote_line]
    return argv


def on_node_argv(target: PctTarget, argv: t.Sequence[str], env: t.Mapping[str, str]) -> list[str]:
    """argv to run on the controller so that ``argv`` runs on the node: itself locally, else ``ssh ... 'env -i -C / VARS... argv...'``."""
    if not argv:
        raise ValueError("argv must not be empty")
    if not target.is_remote:
        return list(argv)
    return ssh_argv(target, remote_command_line(argv, env))


def build_command(target: PctTarget, command: t.Sequence[str], env: t.Mapping[str, str], keep_env: bool = True) -> list[str]:
    """Full argv to run on the controller for ``command`` inside the container.

    Local node: ``pct exec ...`` (run it with ``env`` as its environment).
    Remote node: ``ssh ... node -- 'env -i -C / VAR=... pct exec ...'``.
    With ``node_become``, ``pct`` is preceded by ``sudo -n --`` in both; ``keep_env`` as in ``pct_exec_argv``.
    """
    return on_node_argv(target, pct_exec_argv(target, command, keep_env), env)


def node_command_argv(target: PctTarget, argv: t.Sequence[str], env: t.Mapping[str, str]) -> list[str]:
    """Full argv to run on the controller for ``argv`` on the Proxmox node itself, not in the container.

    Never under sudo, whatever ``node_become`` says: it is meant for read-only queries of the node
    (``nvidia-smi``, ``/proc``). Local node: ``argv`` (run it with ``env``); remote node:
    ``ssh ... node -- 'env -i -C / VAR=... argv...'``.
    """
    return on_node_argv(target, argv, env)


def resolve_local_pct(pct_path: str) -> str | None:
    """Absolute path of the local ``pct``, searched in the clean PATH, or None."""
    if os.sep in pct_path:
        return pct_path if os.path.isfile(pct_path) and os.access(pct_path, os.X_OK) else None
    return shutil.which(pct_path, path=CLEAN_PATH)


def printable(argv: t.Sequence[str]) -> str:
    """argv as a shell-quoted line that can be logged even with undecodable bytes."""
    return shlex.join(argv).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def config_argv(target: PctTarget) -> list[str]:
    """``pct config VMID`` of the target's container (under ``sudo -n --`` with ``node_become``) as run on the node."""
    return [*pct_invocation(target), "config", str(target.vmid)]


def list_argv(target: PctTarget) -> list[str]:
    """``pct list`` (under ``sudo -n --`` with ``node_become``) as run on the node."""
    return [*pct_invocation(target), "list"]


def config_batch_argv(target: PctTarget, vmids: t.Sequence[int], marker: str) -> list[str]:
    """One process on the node running ``pct config`` for every VMID (``CONFIG_BATCH_SCRIPT``); only pct runs under sudo."""
    return [NODE_SHELL, "-c", CONFIG_BATCH_SCRIPT, "sh", marker, *(str(int(vmid)) for vmid in vmids), "--", *pct_invocation(target)]
