# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Recognise failures of ``pct`` / ``lxc-attach`` / ``ssh`` (as opposed to failures of the command).

Controller-only helpers of the ``trainops.pct_launch.pct`` connection plugin. ``diagnose`` looks at
the exit status and stderr of one ``pct exec`` run and returns a cause when the command never ran in
the container; messages read ``<what failed> <object>: <cause>`` (see ``failure_message``).
Also recognised: ``sudo`` refusing to run pct (``node_become``), and pct run without root.

pct's own failures are recognised by pct's words, whatever the exit status: Perl's ``die`` exits with
``$!`` (or 255), so the number is not fixed, and over ssh pct's 255 is not ssh's. Read from the sources:
a container's lock (pve-guest-common AbstractConfig::check_lock, ``CT is locked (backup)``), pve-cluster
(pmxcfs) not answering (pve-cluster PVE::Cluster::cfs_update warns ``ipcc_send_rec[N] failed: ...``,
pve-access-control PVE::RPCEnvironment::init_request dies ``Unable to load access control list: ...``),
an option pct does not know (Getopt::Long's ``Unknown option: keep-env``, then pve-common
JSONSchema::get_options' ``400 unable to parse option`` and the usage of the verb: pve-container before
5.0.9 has no ``pct exec --keep-env``).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleConnectionFailure

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import (
    CLEAN_PATH,
    PctTarget,
    printable,
)

# pct (Perl die): unknown CT on this node / CT not running; the exit status is not fixed.
_NOT_EXIST = re.compile(r"Configuration file 'nodes/[^'/]*/lxc/(\d+)\.conf' does not exist")
_NOT_RUNNING = re.compile(r"container '(\d+)' not running!?")
# lxc-attach: exec of the command failed (exit 126: cannot execute, 127: not found).
_EXEC_FAILED = re.compile(r'Failed to exec "([^"]*)"')
# lxc-attach on a stopped container (exit 1).
_NO_INIT_PID = "Failed to get init pid"
# GNU env on a remote node could not run pct (exit 127 not found, 126 not executable).
_ENV_FAILED = re.compile(r"^env: .*(No such file or directory|Permission denied)", re.MULTILINE)
_MAX_DETAIL = 400
# pct (PVE::RESTEnvironment::setup_default_cli_env) run by a user other than root.
_NOT_ROOT = "please run as root"
# sudo (``sudo -n -- pct``): the user may not run pct without a password, or not at all.
_SUDO_PASSWORD = re.compile(r"sudo: (?:a password is required|a terminal is required to read the password)")
_SUDO_NOT_ALLOWED = re.compile(r"is not in the sudoers file|is not allowed to (?:execute|run sudo)|may not run sudo")
_SUDO_TTY = re.compile(r"sudo: sorry, you must have a tty to run sudo")
# ssh's own failures (exit status 255), by kind: each gets its own cause and advice.
_SSH_HOST_KEY = re.compile(r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|host key is known for")
_SSH_HOST_KEY_CHANGED = re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for \S+ has changed")
_SSH_AUTH = re.compile(r"Permission denied \(|Too many authentication failures|No more authentication methods")
_SSH_CONNECT = re.compile(
    r"Connection refused|Connection timed out|timed out during banner exchange|No route to host|Network is unreachable"
    r"|Could not resolve hostname|Name or service not known|kex_exchange_identification|Connection closed by|closed by remote host|Connection reset"
    r"|Broken pipe"  # ssh_dispatch_run_fatal: Connection to ADDRESS port 22: Broken pipe (the node's sshd went away mid-session)
)


# pve-guest-common AbstractConfig::check_lock (start, stop, shutdown; exec and status never check it).
_LOCKED = re.compile(r"\bCT is locked \(([a-z-]+)\)")
# What holds each lock of pve-container's schema (src/PVE/LXC/Config.pm, ``lock`` enum).
LOCK_HOLDERS = {
    "backup": "a vzdump backup of it is running", "create": "it is being created or restored",
    "destroyed": "it is being destroyed", "disk": "one of its disks is being moved or resized",
    "fstrim": "pct fstrim is running on it", "migrate": "it is being migrated to another node",
    "mounted": "its file systems are mounted on the node (pct mount)", "rollback": "it is being rolled back to a snapshot",
    "snapshot": "a snapshot of it is being taken", "snapshot-delete": "a snapshot of it is being removed",
}
# pve-cluster (pmxcfs, /etc/pve) not answering pct: cfs_update's warnings, init_request's die.
_CLUSTER = re.compile(r"^(?:Unable to load access control list|ipcc_send_rec\[\d+\] failed): (.*)$", re.MULTILINE)
_CLUSTER_DOWN = ("Connection refused", "No such file or directory")
# pmxcfs answers only root and the www-data group: another user gets these.
_CLUSTER_NOT_ROOT = ("Unknown error -1", "Permission denied")
# pct refusing its command line: Getopt::Long's warnings, the 400 die of get_options / parameter checks, the verb's usage.
_UNKNOWN_OPTION = re.compile(r"^Unknown option: (\S+)$", re.MULTILINE)
_BAD_ARGUMENTS = re.compile(r"^400 (?:unable to parse option|Parameter verification failed\.|wrong number of arguments"
                            r"|too many arguments|not enough arguments)$", re.MULTILINE)
_PCT_USAGE = re.compile(r"^pct [a-z-]+ <vmid>", re.MULTILINE)
_KEEP_ENV_FIX = ("pve-container before 5.0.9 (Proxmox VE before 8.2) has no pct exec --keep-env; set the host variable "
                 "pct_keep_env to false (or auto, the default, which goes on without it) for the containers of that node, or upgrade it")


class ContainerNotRunning(AnsibleConnectionFailure):
    """pct or lxc-attach said the container is not running: it is stopped (or stopping), not unreachable."""


# ssh's note when two calls race to open the shared connection: the call goes on unshared, nothing failed.
_SSH_MUX_NOTE = re.compile(r"^ControlSocket .* already exists, disabling multiplexing$")


def _detail(text: str) -> str:
    """The last non-empty stderr lines (without ssh's notes about sharing), shortened for a message."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not _SSH_MUX_NOTE.match(line.strip())]
    detail = " | ".join(lines[-3:])
    if len(detail) > _MAX_DETAIL:
        detail = "..." + detail[-_MAX_DETAIL:]
    return detail.rstrip(".")  # messages go on after it with their own punctuation


def _matches_vmid(pattern: re.Pattern[str], text: str, vmid: int) -> str | None:
    """The matching line when ``pattern`` names this ``vmid``."""
    for match in pattern.finditer(text):
        if int(match.group(1)) == vmid:
            return match.group(0)
    return None


def _not_running_cause(target: PctTarget, rc: int, text: str) -> str | None:
    """The cause when pct or lxc-attach says the container is not running."""
    if line := _matches_vmid(_NOT_RUNNING, text, target.vmid):
        return f"the container is not running; start it with 'pct start {target.vmid}' (pct: {line})"
    if rc == 1 and _NO_INIT_PID in text:
        return f"the container is not running; start it with 'pct start {target.vmid}' (lxc-attach: {_NO_INIT_PID})"
    return None


def _pct_cause(target: PctTarget, rc: int, text: str) -> str | None:
    """Causes reported by pct itself or by lxc-attach."""
    if line := _matches_vmid(_NOT_EXIST, text, target.vmid):
        return f"the container does not exist on {target.describe_node()} (pct: {line})"
    if cause := _not_running_cause(target, rc, text) or _proxmox_cause(target, text):
        return cause
    if rc in (126, 127) and (match := _EXEC_FAILED.search(text)):
        program = match.group(1)
        verb = "is not executable" if rc == 126 else "was not found"
        return f"{program} {verb} inside the container (exit status {rc}); the container needs a POSIX sh and cat"
    return None


def keep_env_refused(rc: int, stderr: bytes) -> bool:
    """Whether pct refused ``pct exec --keep-env`` (pve-container before 5.0.9): nothing ran in the container.

    All three of pct's lines must be there (Getopt::Long's warning, get_options' die, exec's usage): a command in the
    container that says ``Unknown option: keep-env`` alone is not taken for pct.
    """
    text = stderr.decode("utf-8", "replace")
    return (rc != 0 and "keep-env" in _UNKNOWN_OPTION.findall(text) and "400 unable to parse option" in text
            and re.search(r"^pct exec <vmid>", text, re.MULTILINE) is not None)


def _proxmox_cause(target: PctTarget, text: str) -> str | None:
    """pct's own dies of a Proxmox VE node: a locked container, pve-cluster not answering, a refused command line."""
    node = target.describe_node()
    if match := _LOCKED.search(text):
        return locked_cause(target, match.group(1), f"pct: {match.group(0)}")
    if lines := [m.group(0) for m in _CLUSTER.finditer(text)]:
        detail = " | ".join(lines[-2:])
        if any(reason in lines[-1] for reason in _CLUSTER_DOWN):
            return (f"pve-cluster (pmxcfs, the file system of /etc/pve) is not running on {node}, so pct cannot read "
                    f"the configuration (pct: {detail}); start it there (systemctl start pve-cluster; journalctl -u pve-cluster "
                    "says why it stopped), then try again")
        if any(reason in lines[-1] for reason in _CLUSTER_NOT_ROOT):
            return f"pve-cluster on {node} does not answer the user pct ran as (pct: {detail}); {_root_fix(target)}"
        return f"pct on {node} cannot read the configuration from pve-cluster (pmxcfs) (pct: {detail}); check systemctl status pve-cluster there"
    if _BAD_ARGUMENTS.search(text) and _PCT_USAGE.search(text):
        detail = _detail(text)
        if "keep-env" in _UNKNOWN_OPTION.findall(text):
            return f"pct on {node} does not know the option --keep-env (pct: {detail}); {_KEEP_ENV_FIX}"
        return (f"pct on {node} refused the command line (pct: {detail}); this collection supports the pct of Proxmox VE 7.4 to 9: "
                "report the message with the node's pveversion")
    return None


def locked_cause(target: PctTarget, lock: str, evidence: str) -> str:
    """A container that pct refuses to start or stop because of its config lock (``lock: backup``); ``evidence``: pct's words."""
    holder = LOCK_HOLDERS.get(lock, f"a task holds the lock {lock}")
    if lock == "mounted":
        fix = f"unmount it with 'pct unmount {target.vmid}' when the work on its files is done"
    else:
        fix = (f"wait for that task to end (pvenode task list on {target.describe_node()}, or the web UI); a lock left by a task "
               f"that failed is removed with 'pct unlock {target.vmid}'")
    return f"the container is locked ({lock}) on {target.describe_node()}: {holder}; {fix} ({evidence})"


def stopped_locked_cause(target: PctTarget, lock: str, evidence: str) -> str:
    """A stopped container whose config has a lock: what holds it, when to try again (``evidence``: ``not_running_evidence``)."""
    if lock != "backup":
        return f"the container is not running and {locked_cause(target, lock, evidence).removeprefix('the container ')}"
    return (f"the container is not running and is locked (backup) on {target.describe_node()}: a vzdump backup in stop mode "
            f"stops it and starts it again when it ends; wait for the backup (pvenode task list on {target.describe_node()}, "
            f"or the web UI), then try again; if no backup runs any more, a failed one left the lock: 'pct unlock {target.vmid}', "
            f"then 'pct start {target.vmid}' ({evidence})")


def not_running_evidence(target: PctTarget, stderr: bytes) -> str:
    """Who said the container is not running, and how: ``pct: container '200' not running!`` or lxc-attach's words."""
    text = stderr.decode("utf-8", "replace")
    if line := _matches_vmid(_NOT_RUNNING, text, target.vmid):
        return f"pct: {line}"
    return f"lxc-attach: {_NO_INIT_PID}" if _NO_INIT_PID in text else f"pct: {_detail(text)}"


def config_lock(config_text: str) -> str | None:
    """The ``lock`` of a ``pct config`` output, or None."""
    match = re.search(r"^lock: ([a-z-]+)$", config_text, re.MULTILINE)
    return match.group(1) if match else None


def _ssh_cause(target: PctTarget, text: str) -> str:
    """What went wrong in ssh itself, with the advice for that kind of failure."""
    detail = _detail(text)
    node = target.describe_node()
    if _SSH_HOST_KEY_CHANGED.search(text):
        return (f"the host key of {node} does not match known_hosts, so ssh refused it (host key checking is on): {detail}; "
                "if the node's key really changed (reinstalled), check the new key's fingerprint and replace the old entry (ssh-keygen -R)")
    if _SSH_HOST_KEY.search(text):
        return (f"the host key of {node} is not known, so ssh refused it (host key checking is on): {detail}; "
                "check the node's key fingerprint and add it to known_hosts")
    if _SSH_AUTH.search(text):
        return (f"ssh could not log in to {node}: {detail}; check pct_node_user and that the key ssh offers "
                "(IdentityFile, -i in pct_ssh_args, or the agent) is authorized there; ssh runs with BatchMode=yes, so no password prompt")
    if _SSH_CONNECT.search(text):
        return (f"{node} cannot be reached: {detail}; check that it is up "
                "and that pct_node, pct_node_address or the ssh configuration (HostName, Port, ProxyJump) point to it")
    if not detail and target.ssh_control:
        # a call through a shared connection (ControlMaster) whose master lost the node: the client says nothing
        return (f"{node} cannot be reached: the shared ssh connection to it ended without a message; check that it is up "
                "and that pct_node, pct_node_address or the ssh configuration (HostName, Port, ProxyJump) point to it")
    return detail or "no error message"


def sudoers_hint(target: PctTarget) -> str:
    """The sudoers rule that lets the node user run pct, and nothing else, as root without a password."""
    user = target.node_user or "USER"
    pct = target.pct_path if target.pct_path.startswith("/") else "/usr/sbin/pct"
    return f"allow NOPASSWD for pct in sudoers on {target.describe_node()}, e.g. `{user} ALL=(root) NOPASSWD: {pct}` in /etc/sudoers.d/"


def _missing_program(text: str, program: str) -> bool:
    """Whether env (``env: 'X': No such file or directory``) or a shell (``X: command not found``) could not find ``program``."""
    name = re.escape(program)
    return bool(re.search(rf"^(?:\S*/)?env: \W?{name}\W?: No such file or directory|(?:^|: ){name}: (?:command )?not found", text, re.MULTILINE))


def become_cause(target: PctTarget, rc: int, text: str) -> str | None:
    """Why ``sudo -n -- pct`` did not run pct (``node_become``), or None."""
    if not target.node_become or rc == 0:
        return None
    exe = target.node_become_exe
    where = target.describe_node()
    invocation = printable([exe, "-n", "--", target.pct_path])
    if _SUDO_PASSWORD.search(text) or _SUDO_NOT_ALLOWED.search(text):
        return (f"{exe} refused to run pct as root for {target.node_user or 'the login user'} on {where} without a password "
                f"({invocation}: {_detail(text)}); {sudoers_hint(target)}")
    if _SUDO_TTY.search(text):
        return (f"{exe} on {where} wants a terminal (requiretty in sudoers), which this connection never allocates ({_detail(text)}); "
                f"add `Defaults:{target.node_user or 'USER'} !requiretty` to sudoers, and {sudoers_hint(target)}")
    if rc in (126, 127) and _missing_program(text, exe):
        return become_exe_not_found_cause(target, _detail(text))
    return None


def become_exe_not_found_cause(target: PctTarget, detail: str = "") -> str:
    """Cause text for a missing ``sudo`` (``node_become_exe``) on the node."""
    exe = target.node_become_exe
    where = f"in PATH {CLEAN_PATH}" if "/" not in exe else "at that path"
    extra = f" ({detail})" if detail else ""
    return (f"{exe} was not found {where} on {target.describe_node()}{extra}; install it on the node "
            "(apt-get install sudo), set pct_node_become_exe, or log in as root and set pct_node_become to false")


def not_root_cause(target: PctTarget, text: str) -> str | None:
    """pct said it needs root: the node login is not root and pct did not run through sudo."""
    if _NOT_ROOT not in text:
        return None
    user = target.node_user or "the login user"
    return f"pct needs root on {target.describe_node()} and ran as {user} (pct: {_NOT_ROOT}); {_root_fix(target)}"


def _root_fix(target: PctTarget) -> str:
    """How to run pct as root on the node."""
    fix = "set pct_node_user to root" if target.is_remote else "run Ansible as root"
    return f"{fix}, or set pct_node_become to true to run pct with sudo -n and {sudoers_hint(target)}"


def _transport_cause(target: PctTarget, rc: int, text: str) -> str | None:
    """Causes reported by ssh or by env on a remote node."""
    if not target.is_remote:
        return None
    if rc == 255:
        return f"ssh could not run pct on {target.describe_node()} (exit status 255): {_ssh_cause(target, text)}"
    if rc in (126, 127) and _ENV_FAILED.search(text):
        return pct_not_found_cause(target, _detail(text))
    return None


def _sudo_pct_not_found(target: PctTarget, rc: int, text: str) -> str | None:
    """sudo ran but did not find pct (``sudo: pct: command not found``)."""
    pattern = rf"^{re.escape(target.node_become_exe)}: {re.escape(target.pct_path)}: command not found"
    if target.node_become and rc != 0 and re.search(pattern, text, re.MULTILINE):
        return pct_not_found_cause(target, _detail(text))
    return None


def diagnose(target: PctTarget, rc: int, stderr: bytes) -> str | None:
    """Return why the command did not run in the container, or None when it ran (whatever its exit status)."""
    if rc == 0:
        return None
    text = stderr.decode("utf-8", "replace")
    return (become_cause(target, rc, text) or _sudo_pct_not_found(target, rc, text) or not_root_cause(target, text)
            or _pct_cause(target, rc, text) or _transport_cause(target, rc, text))


def not_run_error(what: str, target: PctTarget, rc: int, stderr: bytes) -> AnsibleConnectionFailure | None:
    """The connection failure for a command pct or ssh did not run (``ContainerNotRunning`` for a stopped container), or None."""
    cause = diagnose(target, rc, stderr)
    if cause is None:
        return None
    stopped = rc != 0 and _not_running_cause(target, rc, stderr.decode("utf-8", "replace")) is not None
    return (ContainerNotRunning if stopped else AnsibleConnectionFailure)(failure_message(what, target, cause))


def pct_not_found_cause(target: PctTarget, detail: str = "") -> str:
    """Cause text for a missing ``pct`` on the node."""
    where = f"in PATH {CLEAN_PATH}" if "/" not in target.pct_path else "at that path"
    if target.node_become and "/" not in target.pct_path:
        where = f"in PATH {CLEAN_PATH} or in sudo's secure_path"
    extra = f" ({detail})" if detail else ""
    return f"{target.pct_path} was not found {where} on {target.describe_node()}{extra}; not a Proxmox node? set pct_path"


def failure_message(what: str, target: PctTarget, cause: str) -> str:
    """``<what failed> <object>: <cause>``, e.g. ``Cannot run a command in container 201: ...``."""
    return f"{what} {target.describe()}: {cause}"


def command_failure_cause(program: str, rc: int, stderr: bytes) -> str:
    """Cause text for a command that ran in the container and failed (put_file / fetch_file)."""
    detail = _detail(stderr.decode("utf-8", "replace"))
    return f"{program} exited with status {rc}" + (f": {detail}" if detail else "")


def node_failure_message(what: str, target: PctTarget, cause: str) -> str:
    """``<what failed> <node>: <cause>`` for a command on the node itself, e.g. ``Cannot run nvidia-smi on node pve1: ...``."""
    return f"{what} {target.describe_node()}: {cause}"


def node_command_error(program: str, target: PctTarget, rc: int, stderr: bytes) -> AnsibleConnectionFailure | None:
    """The connection failure when ssh could not run ``program`` on a remote node (exit status 255), else None (the program's own status)."""
    if rc != 255 or not target.is_remote:
        return None
    cause = f"ssh could not run it (exit status 255): {_ssh_cause(target, stderr.decode('utf-8', 'replace'))}"
    return AnsibleConnectionFailure(node_failure_message(f"Cannot run {program} on", target, cause))
