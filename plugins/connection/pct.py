# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: pct
short_description: Run tasks in Proxmox VE LXC containers with pct exec
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Runs commands and transfers files in a Proxmox VE LXC container through C(pct exec VMID --keep-env 1 -- CMD) on the Proxmox node
    (C(pct exec VMID -- CMD) on a node whose C(pct) has no C(--keep-env), see O(keep_env)).
  - When O(node) is not set, the controller is the Proxmox node and the local C(pct) is run.
    When O(node) is set, the node is reached with the OpenSSH client (C(ssh -T -o BatchMode=yes)) and C(pct) runs there.
  - Commands never get a terminal. C(pct exec) would make C(lxc-attach) allocate a pty for the command when any of its
    standard streams is a terminal, and background jobs would then be killed by SIGHUP when the command ends.
    Standard input is always a pipe or C(/dev/null).
  - C(pct) runs with a small login-like environment instead of the controller's environment, namely
    C(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin), C(LANG=C.UTF-8), C(HOME), C(LOGNAME) and C(USER)
    of the user running C(pct) (on a remote node as root, C(HOME=/root)).
    The connection passes C(--keep-env 1) to C(pct exec) explicitly, because pve-container marks its default
    (keep the environment) to change to V(0) in a later major version, and the collection relies on the environment it gives
    C(pct) reaching the container; C(pct) before pve-container 5.0.9 has no such option and keeps the environment anyway
    (O(keep_env)). So this is also the environment inside the container, except for C(PATH), which C(pct)
    sets to C(/sbin:/bin:/usr/sbin:/usr/bin) (programs in C(/usr/local/bin) are not found by bare name).
    Use the C(environment) keyword for anything else, but never for secrets (they show in the process list of the node).
  - 'With O(node_become), sudo resets the environment first (its C(env_reset), the default of Debian and Proxmox VE), so the
    command in the container sees what sudo gives C(pct) instead, measured with Debian 12''s sudo 1.9.13 and its default
    sudoers: C(PATH=/sbin:/bin:/usr/sbin:/usr/bin) (set by C(pct)), C(LANG=C.UTF-8) (kept by sudo), C(HOME=/root),
    C(LOGNAME=root), C(USER=root), C(SHELL=/bin/bash), C(MAIL=/var/mail/root), C(TERM=unknown), C(SUDO_USER),
    C(SUDO_UID) and C(SUDO_GID) of the node login, and C(SUDO_COMMAND), the whole C(pct exec) command line including the
    command run in the container (so a tmux server started by the first launch keeps it in its global environment).
    Variables of the C(environment) keyword are unaffected: they are set by the shell inside the container.'
  - Commands run as root inside the container, in the directory C(/).
  - Files are streamed through standard input and output of C(pct exec) (C(sh -c 'cat > "$1"') and C(cat)),
    never held in memory, and checked by exit status.
options:
  vmid:
    description:
      - VMID of the container, an integer from V(100) to V(999999999).
      - Required. Usually set per host in the inventory with the C(pct_vmid) variable.
      - C(proxmox_vmid), the name community.proxmox uses (its C(proxmox_pct_remote) connection and its C(proxmox)
        inventory), is read too, so hosts written for it work unchanged; when a host has both, C(pct_vmid) wins.
    type: integer
    vars:
      - name: proxmox_vmid
      - name: pct_vmid
  node:
    description:
      - Name or address of the Proxmox node that runs the container, reached with C(ssh).
      - When not set, the controller itself is the Proxmox node and C(pct) is run locally.
      - C(proxmox_node), the name community.proxmox uses (its C(proxmox) inventory sets it to the node's name in the
        cluster), is read too; when a host has both, C(pct_node) wins. That name is then the C(ssh) destination; when it
        does not resolve from the controller, set O(node_address) or a C(Host) entry in the ssh configuration.
    type: string
    vars:
      - name: proxmox_node
      - name: pct_node
    env:
      - name: ANSIBLE_PCT_NODE
  node_address:
    description:
      - Host name or address that C(ssh) connects to for O(node), given to C(ssh) as C(-o HostName=...).
        O(node) stays the destination, so the C(Host) entries of the ssh configuration for O(node)
        (user, keys, C(ProxyJump), C(ControlPersist)) still apply.
      - Set it when O(node) is the name of the node's inventory host and that name does not resolve,
        for example to V({{ hostvars[pct_node].ansible_host }}), so that the connection and the tasks delegated
        to the node reach the same machine.
      - When not set, C(ssh) resolves O(node) itself (its configuration, then DNS).
      - Only used when O(node) is set.
    type: string
    vars:
      - name: pct_node_address
    env:
      - name: ANSIBLE_PCT_NODE_ADDRESS
  node_user:
    description:
      - User to log in to O(node) as with C(ssh). C(pct) needs root on the node, so a user other than root needs O(node_become).
      - When not set, C(ssh) decides (its configuration or the controller user).
      - Only used when O(node) is set.
    type: string
    vars:
      - name: pct_node_user
    env:
      - name: ANSIBLE_PCT_NODE_USER
  node_become:
    description:
      - Run C(pct) on the node as root with O(node_become_exe) (C(sudo)), for a node login (O(node_user)) that is not root,
        or a controller user that is not root when the controller is the node.
      - 'The node then runs C(env -i -C / VARS... sudo -n -- pct exec ...). Only C(pct) runs under sudo, so a sudoers rule
        that allows only C(pct) is enough, for example the line C(trainops ALL=NOPASSWD: /usr/sbin/pct)
        (root is the default target user) in a file in C(/etc/sudoers.d/).'
      - 'C(sudo -n) never prompts, because a password prompt cannot work without a terminal, and this connection never
        allocates one. When sudo wants a password (C(sudo: a password is required)), the error says which sudoers rule is missing.'
      - Sudo resets the environment of C(pct), and so of the command in the container; see the description above.
    type: boolean
    default: false
    vars:
      - name: pct_node_become
    env:
      - name: ANSIBLE_PCT_NODE_BECOME
    ini:
      - section: pct_connection
        key: node_become
  node_become_exe:
    description:
      - The program that runs C(pct) as root when O(node_become) is set, called as C(EXE -n -- pct ...), a name looked up in
        C(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin) on the node or an absolute path.
    type: string
    default: sudo
    vars:
      - name: pct_node_become_exe
    env:
      - name: ANSIBLE_PCT_NODE_BECOME_EXE
    ini:
      - section: pct_connection
        key: node_become_exe
  ssh_executable:
    description:
      - The OpenSSH client used to reach O(node).
      - Only used when O(node) is set.
    type: string
    default: ssh
    vars:
      - name: pct_ssh_executable
    env:
      - name: ANSIBLE_PCT_SSH_EXECUTABLE
    ini:
      - section: pct_connection
        key: ssh_executable
  ssh_args:
    description:
      - Extra arguments for C(ssh), split like a shell would split them (for example V(-p 2222 -i ~/.ssh/pve)).
      - They come after the collection's own options C(-T -o BatchMode=yes -o ConnectTimeout=...).
        Options that allocate a terminal (C(-t)) must not be used.
      - Only used when O(node) is set.
    type: string
    default: ''
    vars:
      - name: pct_ssh_args
    env:
      - name: ANSIBLE_PCT_SSH_ARGS
    ini:
      - section: pct_connection
        key: ssh_args
  ssh_control_persist:
    description:
      - How long C(ssh) keeps its connection to O(node) open after the last command, shared by every later C(pct) call to
        the same node as the same user (C(-o ControlMaster=auto -o ControlPersist=...)), as Ansible's own C(ssh)
        connection does by default. A call through an open connection skips the ssh handshake (on the collection's stand-in
        0.12 s instead of 0.38 s).
      - A time as C(ssh_config) takes it (V(60s), V(10m), seconds). V(no) (or an empty value) opens a new connection for
        every call.
      - The first call to a node opens the shared connection (ssh's C(ControlMaster=auto)); calls made while none is
        open yet, for example by the workers of a task that starts on many containers of one node at once, each make a
        handshake of their own, and one of them becomes the shared connection. As with Ansible's own C(ssh) connection,
        ssh alone decides, and the connection keeps no lock, file or process of its own.
      - Options given in O(ssh_args) (for example V(-o ControlMaster=no) or a C(ControlPath) of your own) win over these.
      - While a shared connection is open, later calls (of the same run or of another run within that time) go through it
        without a new handshake, so a changed key, host key or address of the node is seen only once it has closed
        (C(ssh -O exit -o ControlPath=DIR/pct-%C NODE) closes it at once).
      - Only used when O(node) is set.
    type: string
    default: 60s
    vars:
      - name: pct_ssh_control_persist
    env:
      - name: ANSIBLE_PCT_SSH_CONTROL_PERSIST
    ini:
      - section: pct_connection
        key: ssh_control_persist
  ssh_control_path_dir:
    description:
      - Folder of the shared connections' sockets (C(ControlPath) C(DIR/pct-%C), C(%C) being ssh's hash of the controller,
        node, port and user), created with mode C(0700) when missing. No spaces, quotes or C(%).
      - Only used when O(node) is set and O(ssh_control_persist) is not V(no).
    type: string
    default: ~/.ansible/cp
    vars:
      - name: pct_ssh_control_path_dir
    env:
      - name: ANSIBLE_PCT_SSH_CONTROL_PATH_DIR
    ini:
      - section: pct_connection
        key: ssh_control_path_dir
  pct_path:
    description:
      - The C(pct) program on the node, a name looked up in
        C(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin) or an absolute path.
    type: string
    default: pct
    vars:
      - name: pct_path
    env:
      - name: ANSIBLE_PCT_PATH
    ini:
      - section: pct_connection
        key: pct_path
  keep_env:
    description:
      - Whether C(pct exec) is given C(--keep-env 1), one of V(auto), V(true) and V(false).
      - 'C(pct) of pve-container 5.0.9 and newer (Proxmox VE 8.2 and newer) has the option, and the connection passes it, because
        pve-container marks its default to change. Older ones (Proxmox VE 7.4, 8.0 and 8.1) refuse it with
        C(Unknown option: keep-env) and C(400 unable to parse option), before anything runs in the container, and keep the
        environment anyway.'
      - V(auto) passes it, and when C(pct) refuses it runs the same command again at once without it (standard input sent again),
        goes on without it for the rest of the task, and warns once, naming the node. Each task then costs one more C(pct) call
        on such a node (Ansible makes a new connection per task), so set V(false) for the containers of that node.
        The C(trainops.pct_launch.pct_containers) inventory sets V(false) by itself for the containers of a node whose C(pct) has no
        C(--keep-env) (it asks C(pct help exec) in the command it already runs on each node).
      - V(true) always passes it, and a C(pct) that refuses it fails the task with a message that says so.
      - V(false) never passes it.
    type: string
    default: auto
    vars:
      - name: pct_keep_env
    env:
      - name: ANSIBLE_PCT_KEEP_ENV
    ini:
      - section: pct_connection
        key: keep_env
  timeout:
    description:
      - Seconds to wait for the connection to O(node) (C(ssh -o ConnectTimeout)).
      - Commands in the container are not limited in time.
    type: integer
    default: 10
    vars:
      - name: pct_timeout
    env:
      - name: ANSIBLE_PCT_TIMEOUT
    ini:
      - section: pct_connection
        key: timeout
  pipelining:
    description:
      - Send each module to the container on the standard input of one C(pct exec) instead of copying it there first.
      - On by default for this connection, unlike Ansible's default for other connections, and switched off as usual
        with V(false) in C(ansible_pipelining), E(ANSIBLE_PIPELINING) or C(pipelining) in C(ansible.cfg).
        Ansible's default is off because pipelining through C(sudo) breaks with C(requiretty) in sudoers; this
        connection never allocates a terminal and runs as root in the container, so that cannot happen here.
      - Without pipelining a module task costs 4 to 6 C(pct exec) (temporary folder, upload, C(chmod), run, clean-up),
        each a new ssh connection on a remote node; with it one. The collection's benchmarks on the stand-in
        (C(benchmarks/results.md)) measured C(ansible.builtin.ping) at 5 C(pct exec) and 3.0 s without, 1 and 1.1 s
        with, and the whole C(launch.yml) on one container at 48 C(pct) calls without, 14 with.
      - Ansible still does not pipeline where it cannot, whatever this option says, for example async tasks
        and C(become) methods that cannot pipeline.
    type: boolean
    default: true
    env:
      - name: ANSIBLE_PIPELINING
    ini:
      - section: defaults
        key: pipelining
      - section: connection
        key: pipelining
    vars:
      - name: ansible_pipelining
notes:
  - The remote user (C(ansible_user)) is ignored; commands run as root in the container.
    Privilege escalation to another user works only with methods that need no password (for example V(su) as root),
    because no terminal is allocated.
  - The container must be running and must have C(/bin/sh) and C(cat).
  - Errors name the container, for example when it does not exist on the node, is not running,
    or when C(pct) is not found (set O(pct_path) on a node that is not a standard Proxmox VE installation).
  - The connection's method C(node_command), given an argv list and optionally bytes for standard input (C(in_data)),
    runs a program on the Proxmox node itself rather than in the container (locally with the small environment above,
    or through the same C(ssh) as C(pct)), never under sudo even with O(node_become), because it is meant for read-only
    queries of the node such as C(nvidia-smi) or C(/proc); it returns the exit status, standard output and standard
    error, and fails only when the program cannot be started or C(ssh) fails.
seealso:
  - name: pct manual
    description: The Proxmox VE container toolkit.
    link: https://pve.proxmox.com/pve-docs/pct.1.html
"""

EXAMPLES = r"""
# Inventory (YAML): containers on the controller, which is the Proxmox node
# all:
#   hosts:
#     trainer1:
#       ansible_connection: trainops.pct_launch.pct
#       pct_vmid: 200
#
# Containers on a remote Proxmox node, reached with ssh as root
# all:
#   hosts:
#     trainer2:
#       ansible_connection: trainops.pct_launch.pct
#       pct_vmid: 201
#       pct_node: pve1.example.org
#       pct_node_user: root
#
# A host written for community.proxmox (proxmox_vmid, proxmox_node), reached as a
# user that may run only pct through sudo (on the node, in /etc/sudoers.d/trainops:
#   trainops ALL=(root) NOPASSWD: /usr/sbin/pct)
# all:
#   hosts:
#     trainer3:
#       ansible_connection: trainops.pct_launch.pct
#       proxmox_vmid: 202
#       proxmox_node: pve2.example.org
#       pct_node_user: trainops
#       pct_node_become: true

- name: Check the containers
  hosts: all
  gather_facts: false
  tasks:
    - name: Ping inside the container
      ansible.builtin.ping:
"""

import dataclasses
import getpass
import os
import pwd
import subprocess
import tempfile
import threading
import typing as t

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

if t.TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import PctTarget

# Ansible loads this plugin in every worker of a container host, for every task, the controller-only ones (set_fact,
# debug, ...) too, and its collection loader compiles each imported module from source there: the modules a command
# needs are imported when a command runs (loading the plugin: 7 ms instead of 27 ms per task and host).
# pylint: disable=import-outside-toplevel

display = Display()

_Stream = t.Union[int, t.IO[bytes], "_PipedFile", None]
# The nodes whose pct refused --keep-env in this worker process: warned about once each.
_WARNED_KEEP_ENV: set[str] = set()


def _local_user() -> tuple[str, str | None]:
    """Name and home directory of the controller user."""
    try:
        entry = pwd.getpwuid(os.getuid())
        return entry.pw_name, entry.pw_dir
    except KeyError:
        return getpass.getuser(), os.environ.get("HOME")


class Connection(ConnectionBase):
    """Run commands in a Proxmox VE LXC container with ``pct exec``."""

    transport = "trainops.pct_launch.pct"
    has_pipelining = True
    has_tty = False
    default_user = "root"

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self._target: PctTarget | None = None
        self._env: dict[str, str] = {}
        self._keep_env = True  # pass --keep-env 1 (until pct refuses it, with keep_env auto)

    def _make_target(self) -> PctTarget:
        """Read and check the options; raises AnsibleError naming the host variable."""
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import (
            PctOptionError, PctTarget, parse_become_exe, parse_keep_env, parse_node, parse_ssh_args, parse_vmid, resolve_local_pct)
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import failure_message, pct_not_found_cause
        try:
            target = PctTarget(
                vmid=parse_vmid(self.get_option("vmid")),
                pct_path=self.get_option("pct_path") or "pct",
                node=parse_node(self.get_option("node")),
                node_address=parse_node(self.get_option("node_address"), "pct_node_address"),
                node_user=self.get_option("node_user") or None,
                node_become=bool(self.get_option("node_become")),
                node_become_exe=parse_become_exe(self.get_option("node_become_exe")),
                ssh_executable=self.get_option("ssh_executable") or "ssh",
                ssh_args=parse_ssh_args(self.get_option("ssh_args")),
                timeout=int(self.get_option("timeout")),
                keep_env=parse_keep_env(self.get_option("keep_env")),
            )
            if target.is_remote:
                return dataclasses.replace(target, ssh_control=self._ssh_control())
        except PctOptionError as exc:
            raise AnsibleError(f"Cannot use the pct connection for host {self._play_context.remote_addr}: {exc}") from exc
        resolved = resolve_local_pct(target.pct_path)
        if resolved is None:
            raise AnsibleConnectionFailure(failure_message("Cannot reach", target, pct_not_found_cause(target)))
        return dataclasses.replace(target, pct_path=resolved)

    def _ssh_control(self) -> tuple[str, ...]:
        """ssh's connection sharing options, with the sockets' folder made (0700); none when it cannot be made."""
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import ssh_control_args
        args = ssh_control_args(self.get_option("ssh_control_persist"), self.get_option("ssh_control_path_dir"))
        if args:
            folder = args[-1].split("=", 1)[1].rsplit("/", 1)[0]
            try:
                os.makedirs(folder, mode=0o700, exist_ok=True)
            except OSError as exc:
                display.warning(f"Cannot share ssh connections to the node in {folder}: {exc}; every pct call opens its own")
                return ()
        return args

    def _connect(self) -> Connection:
        """Check the options; no process is started until a command runs."""
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import clean_environment, remote_environment
        if not self._connected:
            self._target = self._make_target()
            self._keep_env = self._target.keep_env != "false"
            if self._target.is_remote:
                self._env = remote_environment(self._target)
            else:
                self._env = clean_environment(*_local_user())
            self._play_context.remote_user = self.default_user
            display.vvv(f"ESTABLISH PCT CONNECTION TO {self._target.describe()}", host=self._play_context.remote_addr)
            self._connected = True
        return self

    @property
    def target(self) -> PctTarget:
        """The container (connects first when needed)."""
        if self._target is None:
            self._connect()
        if self._target is None:  # pragma: no cover - _connect sets it or raises
            raise AnsibleError("the pct connection is not set up")
        return self._target

    def _run(self, command: list[str], stdin: _Stream, stdout: _Stream, in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        """Run ``command`` in the container; returns (rc, stdout, stderr); stdout is b'' unless piped.

        With ``keep_env`` auto, a pct that refuses ``--keep-env`` (pve-container before 5.0.9) ran nothing in the container:
        the same command runs again at once without it (stdin, a file or ``in_data``, sent again), and so do the
        connection's later commands.
        """
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import keep_env_refused
        rc, out, err = self._run_once(command, stdin, stdout, in_data)
        if self._keep_env and self.target.keep_env == "auto" and not out and keep_env_refused(rc, err):
            self._keep_env = False
            self._warn_no_keep_env()
            if _rewind(stdin, stdout):  # else (a local file that cannot be read again) the refusal is reported
                rc, out, err = self._run_once(command, stdin, stdout, in_data)
        return rc, out, err

    def _warn_no_keep_env(self) -> None:
        """Warn once per worker and node that its pct has no --keep-env, and how to save the refused call."""
        node = self.target.describe_node()
        if node not in _WARNED_KEEP_ENV:
            _WARNED_KEEP_ENV.add(node)
            display.warning(f"pct on {node} does not know the option --keep-env of pct exec (pve-container before 5.0.9, Proxmox VE "
                            f"before 8.2), so the connection ran the command again without it, which costs one pct call more in every "
                            f"task; set the host variable pct_keep_env to false for the containers of {node} "
                            "(the trainops.pct_launch.pct_containers inventory does it by itself)")

    def _run_once(self, command: list[str], stdin: _Stream, stdout: _Stream, in_data: bytes | None) -> tuple[int, bytes, bytes]:
        """One pct exec of ``command``, with or without --keep-env as the connection stands."""
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import build_command, printable
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import failure_message
        argv = build_command(self.target, command, self._env, self._keep_env)
        display.vvv(f"EXEC {printable(argv)}", host=self._play_context.remote_addr)
        # Local pct: clean environment, cwd / (lxc-attach keeps the cwd when it exists in the container).
        # ssh: needs the controller's environment (agent socket, HOME); the node side gets `env -i`.
        env = None if self.target.is_remote else self._env
        b_argv = [to_bytes(arg, errors="surrogate_or_strict") for arg in argv]
        piped = stdin if isinstance(stdin, _PipedFile) else None
        try:
            with subprocess.Popen(b_argv, stdin=subprocess.PIPE if piped else stdin, stdout=stdout, stderr=subprocess.PIPE,
                                  env=env, cwd="/") as proc:
                if piped:
                    out, err = piped.feed(proc)
                else:
                    out, err = proc.communicate(in_data)
        except OSError as exc:
            raise AnsibleConnectionFailure(failure_message("Cannot reach", self.target, self._start_failure_cause(exc))) from exc
        return proc.returncode, out or b"", err or b""

    def _start_failure_cause(self, exc: OSError) -> str:
        """Why the first program of a pct argv could not be started on the controller (ssh, pct, or sudo)."""
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import become_exe_not_found_cause, pct_not_found_cause
        target = self.target
        if target.is_remote:
            return f"cannot run {target.ssh_executable}: {exc}"
        if target.node_become:
            return become_exe_not_found_cause(target, str(exc))
        return pct_not_found_cause(target, str(exc))

    def _raise_if_not_run(self, what: str, rc: int, stderr: bytes) -> None:
        """Raise AnsibleConnectionFailure (ContainerNotRunning for a stopped container) when pct/ssh, not the command, failed."""
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import ContainerNotRunning, not_run_error
        error = not_run_error(what, self.target, rc, stderr)
        if isinstance(error, ContainerNotRunning):
            error = self._with_lock(what, error, stderr)
        if error is not None:
            raise error

    def _with_lock(self, what: str, error: AnsibleConnectionFailure, stderr: bytes) -> AnsibleConnectionFailure:
        """A stopped container's error, told what holds it when its config has a lock (a vzdump backup in stop mode).

        Costs one ``pct config`` call, on this failure only; any failure of that call leaves the error as it was.
        """
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import config_argv, on_node_argv
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import (
            ContainerNotRunning, config_lock, failure_message, not_running_evidence, stopped_locked_cause)
        argv = on_node_argv(self.target, config_argv(self.target), self._env)
        try:
            result = subprocess.run([to_bytes(arg, errors="surrogate_or_strict") for arg in argv], stdin=subprocess.DEVNULL,
                                    capture_output=True, env=None if self.target.is_remote else self._env, cwd="/", timeout=60, check=False)
        except (OSError, subprocess.SubprocessError):
            return error
        lock = config_lock(result.stdout.decode("utf-8", "replace")) if result.returncode == 0 else None
        if lock is None:
            return error
        cause = stopped_locked_cause(self.target, lock, not_running_evidence(self.target, stderr))
        return ContainerNotRunning(failure_message(what, self.target, cause))

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = True) -> tuple[int, bytes, bytes]:
        """Run ``cmd`` with /bin/sh in the container; ``in_data`` (pipelining) goes to stdin."""
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import shell_command
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import failure_message
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        if sudoable and self.become and self.become.expect_prompt():
            raise AnsibleError(
                failure_message("Cannot escalate privileges in", self.target, "become with a password needs a terminal, which this connection never allocates")
            )
        command = shell_command(to_text(cmd, errors="surrogate_or_strict"))
        stdin: _Stream = subprocess.DEVNULL if in_data is None else subprocess.PIPE
        rc, out, err = self._run(command, stdin, subprocess.PIPE, in_data)
        self._raise_if_not_run("Cannot run a command in", rc, err)
        return rc, out, err

    def put_file(self, in_path: str, out_path: str) -> None:
        """Stream ``in_path`` on the controller to ``out_path`` in the container."""
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import put_command
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import command_failure_cause, failure_message
        super().put_file(in_path, out_path)
        display.vvv(f"PUT {in_path} TO {out_path}", host=self._play_context.remote_addr)
        what = f"Cannot copy {in_path} to {out_path} in"
        try:
            src = open(to_bytes(in_path, errors="surrogate_or_strict"), "rb")  # pylint: disable=consider-using-with
        except FileNotFoundError as exc:
            raise AnsibleFileNotFound(f"{what} {self.target.describe()}: the local file does not exist") from exc
        except OSError as exc:
            raise AnsibleError(f"{what} {self.target.describe()}: cannot read the local file: {exc}") from exc
        piped = _PipedFile(src)
        with src:
            rc, dummy, err = self._run(put_command(out_path), piped, subprocess.DEVNULL)
        if piped.error is not None:
            raise AnsibleError(f"{what} {self.target.describe()}: cannot read the local file: {piped.error}")
        self._raise_if_not_run(what, rc, err)
        if rc != 0:
            raise AnsibleError(failure_message(what, self.target, command_failure_cause("sh -c 'cat > \"$1\"'", rc, err)))

    def fetch_file(self, in_path: str, out_path: str) -> None:
        """Stream ``in_path`` in the container to ``out_path`` on the controller (replaced only on success)."""
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import fetch_command
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import command_failure_cause, failure_message
        super().fetch_file(in_path, out_path)
        display.vvv(f"FETCH {in_path} TO {out_path}", host=self._play_context.remote_addr)
        what = f"Cannot fetch {in_path} to {out_path} from"
        b_out = to_bytes(out_path, errors="surrogate_or_strict")
        try:
            fd, b_tmp = tempfile.mkstemp(dir=os.path.dirname(b_out) or b".", prefix=b".pct-fetch-")
        except OSError as exc:
            raise AnsibleError(f"{what} {self.target.describe()}: cannot create a file next to {out_path}: {exc}") from exc
        try:
            with os.fdopen(fd, "wb") as dest:
                rc, dummy, err = self._run(fetch_command(in_path), subprocess.DEVNULL, dest)
            self._raise_if_not_run(what, rc, err)
            if rc != 0:
                raise AnsibleError(failure_message(what, self.target, command_failure_cause("cat", rc, err)))
            _set_default_mode(b_tmp)
            os.replace(b_tmp, b_out)
        except BaseException:
            _unlink_quietly(b_tmp)
            raise

    def node_command(self, argv: list[str], in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        """Run ``argv`` on the Proxmox node itself (not in the container); returns (rc, stdout, stderr).

        Locally, with the connection's small environment, in ``/``, when the controller is the node; else through the
        same ssh as pct (``ssh ... node -- 'env -i -C / VARS... argv...'``). Never under sudo, whatever ``node_become``
        says: it is for read-only queries (``nvidia-smi``, ``/proc``). ``in_data`` goes to stdin (else /dev/null).
        Raises AnsibleConnectionFailure when the program cannot be started locally or ssh itself fails (exit status 255);
        any other exit status is the program's and is returned.
        """
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import node_command_argv, printable
        from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import node_command_error, node_failure_message
        target = self.target
        if not argv:
            raise AnsibleError(node_failure_message("Cannot run a command on", target, "the argv is empty"))
        full = node_command_argv(target, argv, self._env)
        display.vvv(f"NODE EXEC {printable(full)}", host=self._play_context.remote_addr)
        program = printable(argv[:1])
        b_argv = [to_bytes(arg, errors="surrogate_or_strict") for arg in full]
        try:
            with subprocess.Popen(b_argv, stdin=subprocess.DEVNULL if in_data is None else subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=None if target.is_remote else self._env, cwd="/") as proc:
                out, err = proc.communicate(in_data)
        except OSError as exc:
            starter = target.ssh_executable if target.is_remote else program
            raise AnsibleConnectionFailure(node_failure_message(f"Cannot run {program} on", target, f"cannot start {starter}: {exc}")) from exc
        error = node_command_error(program, target, proc.returncode, err or b"")
        if error is not None:
            raise error
        return proc.returncode, out or b"", err or b""

    def reset(self) -> None:
        """Nothing persistent to reset."""

    def close(self) -> None:
        """Nothing to close: every command is its own process."""
        self._connected = False


class _PipedFile:
    """A local file sent to pct through a pipe, never as pct's own standard input.

    lxc-attach (under ``pct exec``) changes the owner and mode of the files it gets as standard input,
    output and error so that the attached process can use them (LXC's fix_stdio_permissions): given
    the user's file itself, ``pct exec`` on the controller's own node left it mode 0700. A pipe has
    nothing to lose.
    """

    def __init__(self, source: t.IO[bytes]) -> None:
        self.source = source
        self.error: OSError | None = None

    def _copy(self, sink: t.IO[bytes]) -> None:
        try:
            with sink:
                for chunk in iter(lambda: self.source.read(1 << 16), b""):
                    sink.write(chunk)
        except BrokenPipeError:
            pass  # pct ended early: its exit status and stderr say why
        except OSError as exc:
            self.error = exc

    def rewind(self) -> bool:
        """Read the file from its start again (pct refused the call before reading it); False when it cannot be."""
        try:
            self.source.seek(0)
        except OSError:
            return False
        self.error = None
        return True

    def feed(self, proc: subprocess.Popen) -> tuple[bytes, bytes]:
        """Copy the file to ``proc``'s stdin while reading its stderr; returns (b'', stderr); a read error is kept in ``error``."""
        writer = threading.Thread(target=self._copy, args=(proc.stdin,), daemon=True)
        writer.start()
        err = proc.stderr.read() if proc.stderr else b""
        proc.wait()
        writer.join()
        return b"", err


def _rewind(stdin: _Stream, stdout: _Stream) -> bool:
    """Make a refused call's streams ready for the same call again (a file read from its start, an output file emptied)."""
    if isinstance(stdin, _PipedFile) and not stdin.rewind():
        return False
    if hasattr(stdout, "truncate"):
        stdout.seek(0)  # type: ignore[union-attr]
        stdout.truncate()  # type: ignore[union-attr]
    return True


def _set_default_mode(b_path: bytes) -> None:
    """Give a fetched file the mode a plain open() would (0666 minus the umask), not mkstemp's 0600."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(b_path, 0o666 & ~umask)


def _unlink_quietly(b_path: bytes) -> None:
    """Remove a partial file, ignoring a missing one."""
    try:
        os.unlink(b_path)
    except OSError:
        pass
