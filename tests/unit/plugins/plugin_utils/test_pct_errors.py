# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for recognising pct / lxc-attach / ssh failures."""

from __future__ import annotations

import dataclasses

import pytest
from ansible.errors import AnsibleConnectionFailure

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import PctTarget
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_errors import (
    ContainerNotRunning,
    become_exe_not_found_cause,
    not_run_error,
    node_command_error,
    command_failure_cause,
    config_lock,
    diagnose,
    failure_message,
    keep_env_refused,
    not_running_evidence,
    pct_not_found_cause,
    stopped_locked_cause,
)

LOCAL = PctTarget(vmid=201)
REMOTE = PctTarget(vmid=201, node="pve1")
LXC_EXEC = b'lxc-attach: 201: ../src/lxc/attach.c: lxc_attach_run_command: 1841 No such file or directory - Failed to exec "/bin/sh"\n'


@pytest.mark.parametrize("target", [LOCAL, REMOTE])
@pytest.mark.parametrize(
    "rc, stderr, expected",
    [
        (2, b"Configuration file 'nodes/pve1/lxc/201.conf' does not exist\n", "the container does not exist on"),
        (255, b"Configuration file 'nodes/pve1/lxc/201.conf' does not exist\n", "the container does not exist on"),
        (2, b"container '201' not running!\n", "the container is not running; start it with 'pct start 201'"),
        (1, b"lxc-attach: 201: attach.c: get_attach_context: 405 Failed to get init pid\n", "the container is not running"),
        (127, LXC_EXEC, "/bin/sh was not found inside the container (exit status 127)"),
        (126, LXC_EXEC.replace(b"No such file or directory", b"Permission denied"), "/bin/sh is not executable inside the container"),
    ],
)
def test_pct_and_lxc_failures(target: PctTarget, rc: int, stderr: bytes, expected: str) -> None:
    cause = diagnose(target, rc, stderr)
    assert cause is not None and expected in cause


@pytest.mark.parametrize("target, node", [(LOCAL, "the local node"), (REMOTE, "node pve1")])
def test_a_missing_container_names_the_node_and_quotes_pct(target: PctTarget, node: str) -> None:
    line = "Configuration file 'nodes/pve1/lxc/201.conf' does not exist"
    assert diagnose(target, 2, (line + "\n").encode()) == f"the container does not exist on {node} (pct: {line})"


@pytest.mark.parametrize("target", [LOCAL, REMOTE])
@pytest.mark.parametrize(
    "rc, stderr",
    [
        (0, b"container '201' not running!\n"),  # success is never a failure of pct
        (1, b""),  # the command failed: its business
        (127, b"/bin/sh: 1: nosuchcmd: not found\n"),  # not found by the shell inside, not by lxc-attach
        (126, b"/bin/sh: 1: ./x: Permission denied\n"),
        (2, b"Configuration file 'nodes/pve1/lxc/2010.conf' does not exist\n"),  # another container
        (2, b"container '20' not running!\n"),
        (3, "ünïcödé \udcff".encode("utf-8", "surrogateescape")),
    ],
)
def test_command_failures_are_not_pct_failures(target: PctTarget, rc: int, stderr: bytes) -> None:
    assert diagnose(target, rc, stderr) is None


def test_ssh_failure_only_for_remote_nodes() -> None:
    stderr = b"ssh: connect to host pve1 port 22: Connection refused\r\n"
    cause = diagnose(REMOTE, 255, stderr)
    assert cause is not None
    assert cause.startswith("ssh could not run pct on node pve1 (exit status 255): node pve1 cannot be reached: "
                            "ssh: connect to host pve1 port 22: Connection refused; check that it is up")
    assert diagnose(LOCAL, 255, stderr) is None


@pytest.mark.parametrize(
    "stderr, expected",
    [
        (b"root@10.0.0.1: Permission denied (publickey).\r\n",
         "ssh could not log in to node pve1: root@10.0.0.1: Permission denied (publickey); check pct_node_user"),
        (b"@@@\r\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\nOffending ED25519 key in /k:1\r\n"
         b"Host key for pve1 has changed and you have requested strict checking.\r\nHost key verification failed.\r\n",
         "the host key of node pve1 does not match known_hosts, so ssh refused it (host key checking is on): Offending ED25519 key in /k:1 | "
         "Host key for pve1 has changed"),
        (b"No ED25519 host key is known for pve1 and you have requested strict checking.\r\nHost key verification failed.\r\n",
         "the host key of node pve1 is not known, so ssh refused it (host key checking is on): No ED25519 host key is known for pve1"),
        (b"Host key verification failed.\r\n", "the host key of node pve1 is not known, so ssh refused it"),
        (b"ssh: Could not resolve hostname pve1: Name or service not known\r\n", "node pve1 cannot be reached: ssh: Could not resolve"),
        # sshd went away with the connection open (the node shut down, sshd killed)
        (b"Connection to 127.0.0.21 closed by remote host.\r\n",
         "node pve1 cannot be reached: Connection to 127.0.0.21 closed by remote host; check"),
        (b"ssh_dispatch_run_fatal: Connection to 127.0.0.21 port 22: Broken pipe\r\n",
         "node pve1 cannot be reached: ssh_dispatch_run_fatal: Connection to 127.0.0.21 port 22: Broken pipe; check"),
        (b"something else\n", "(exit status 255): something else"),
        # two calls raced to open the shared connection: ssh's note is not the cause
        (b"ControlSocket /root/.ansible/cp/pct-0a1b already exists, disabling multiplexing\r\nPermission denied (publickey).\r\n",
         "ssh could not log in to node pve1: Permission denied (publickey); check"),
        (b"", "(exit status 255): no error message"),
    ],
)
def test_ssh_failure_kinds(stderr: bytes, expected: str) -> None:
    cause = diagnose(REMOTE, 255, stderr)
    assert cause is not None and expected in cause


def test_shared_connection_lost_is_a_node_that_cannot_be_reached() -> None:
    shared = dataclasses.replace(REMOTE, ssh_control=("-o", "ControlMaster=auto"))
    cause = diagnose(shared, 255, b"")
    assert cause is not None and "node pve1 cannot be reached: the shared ssh connection to it ended without a message" in cause
    assert "no error message" in (diagnose(REMOTE, 255, b"") or "")  # without sharing an empty stderr says nothing more


@pytest.mark.parametrize("stderr", [b"env: 'pct': No such file or directory\n", "env: \u2018pct\u2019: No such file or directory\n".encode()])
def test_pct_missing_on_remote_node(stderr: bytes) -> None:
    cause = diagnose(REMOTE, 127, stderr)
    assert cause is not None
    assert cause.startswith("pct was not found in PATH /usr/local/sbin:")
    assert "on node pve1" in cause and cause.endswith("not a Proxmox node? set pct_path")
    assert diagnose(LOCAL, 127, stderr) is None


def test_pct_not_found_cause() -> None:
    assert pct_not_found_cause(PctTarget(vmid=200, pct_path="/opt/pct")) == (
        "/opt/pct was not found at that path on the local node; not a Proxmox node? set pct_path"
    )


def test_failure_message_format() -> None:
    cause = diagnose(LOCAL, 2, b"container '201' not running!\n")
    assert cause is not None
    message = failure_message("Cannot run a command in", LOCAL, cause)
    assert message == (
        "Cannot run a command in container 201: the container is not running; start it with 'pct start 201' (pct: container '201' not running!)"
    )
    assert failure_message("Cannot copy a to b in", REMOTE, "x") == "Cannot copy a to b in container 201 on node pve1: x"


def test_command_failure_cause_keeps_last_lines_short() -> None:
    assert command_failure_cause("cat", 1, b"cat: /nope: No such file or directory\n") == "cat exited with status 1: cat: /nope: No such file or directory"
    assert command_failure_cause("cat", 1, b"") == "cat exited with status 1"
    long = command_failure_cause("cat", 1, b"x" * 5000)
    assert len(long) < 500 and long.endswith("x")
    assert command_failure_cause("cat", 1, b"a\nb\nc\nd\n").endswith(": b | c | d")


@pytest.mark.parametrize("target, rc, stderr, stopped", [
    (LOCAL, 2, b"container '201' not running!\n", True),
    (LOCAL, 1, b"lxc-attach: 201: attach.c: Failed to get init pid\n", True),
    (REMOTE, 2, b"container '201' not running!\n", True),
    (LOCAL, 2, b"Configuration file 'nodes/pve/lxc/201.conf' does not exist\n", False),
    (REMOTE, 255, b"ssh: connect to host pve1 port 22: Connection refused\n", False),
    (LOCAL, 2, b"container '202' not running!\n", None),  # another container's message: the command ran and failed
    (LOCAL, 0, b"container '201' not running!\n", None),
])
def test_not_run_error_tells_a_stopped_container_apart(target: PctTarget, rc: int, stderr: bytes, stopped: bool | None) -> None:
    error = not_run_error("Cannot run a command in", target, rc, stderr)
    if stopped is None:
        assert error is None
        return
    assert isinstance(error, AnsibleConnectionFailure) and isinstance(error, ContainerNotRunning) is stopped, error
    assert str(error).startswith("Cannot run a command in container 201"), str(error)
    assert ("start it with 'pct start 201'" in str(error)) is stopped, str(error)


# --- node_become: sudo's refusals, measured with Debian 12's sudo 1.9.13 (tests/integration/test_node_become.py) ---

BECOME = PctTarget(vmid=201, node="pve1", node_user="trainops", node_become=True)
LOCAL_BECOME = PctTarget(vmid=201, node_become=True, pct_path="/usr/sbin/pct")
HINT = "allow NOPASSWD for pct in sudoers on node pve1, e.g. `trainops ALL=(root) NOPASSWD: /usr/sbin/pct` in /etc/sudoers.d/"


@pytest.mark.parametrize("stderr", [
    b"sudo: a password is required\n",  # sudo -n, no rule (or none for pct) for the user
    b"sudo: a terminal is required to read the password; either use the -S option to read from standard input or configure an askpass helper\n",
    b"trainops is not in the sudoers file.\n",
    b"Sorry, user trainops is not allowed to execute '/usr/sbin/pct exec 201' as root on pve1.\n",
])
def test_sudo_refusal_gives_the_sudoers_rule(stderr: bytes) -> None:
    cause = diagnose(BECOME, 1, stderr)
    assert cause is not None
    assert cause.startswith("sudo refused to run pct as root for trainops on node pve1 without a password (sudo -n -- pct: "), cause
    assert cause.endswith(HINT), cause
    error = not_run_error("Cannot run a command in", BECOME, 1, stderr)
    assert error is not None and not isinstance(error, ContainerNotRunning)
    assert str(error).startswith("Cannot run a command in container 201 on node pve1: sudo refused")


def test_sudo_hint_uses_pct_path_and_local_node() -> None:
    cause = diagnose(LOCAL_BECOME, 1, b"sudo: a password is required\n")
    assert cause is not None and "on the local node" in cause
    assert cause.endswith("e.g. `USER ALL=(root) NOPASSWD: /usr/sbin/pct` in /etc/sudoers.d/"), cause


def test_sudo_requiretty() -> None:
    cause = diagnose(BECOME, 1, b"sudo: sorry, you must have a tty to run sudo\n")
    assert cause is not None and "requiretty" in cause and "Defaults:trainops !requiretty" in cause and cause.endswith(HINT)


@pytest.mark.parametrize("rc, stderr", [
    (127, b"env: 'sudo': No such file or directory\n"),
    (127, "env: \u2018sudo\u2019: No such file or directory\n".encode()),
    (127, b"/usr/bin/env: 'sudo': No such file or directory\n"),
    (127, b"sh: 1: sudo: not found\n"),
    (127, b"bash: sudo: command not found\n"),
])
def test_sudo_missing(rc: int, stderr: bytes) -> None:
    cause = diagnose(BECOME, rc, stderr)
    assert cause is not None
    assert cause.startswith("sudo was not found in PATH /usr/local/sbin:"), cause
    assert "on node pve1" in cause and "apt-get install sudo" in cause and "pct_node_become_exe" in cause


def test_pct_missing_under_sudo() -> None:
    cause = diagnose(BECOME, 1, b"sudo: pct: command not found\n")
    assert cause is not None
    assert cause.startswith("pct was not found in PATH /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin or in sudo's secure_path on node pve1")
    assert cause.endswith("set pct_path")


def test_sudo_messages_need_become() -> None:
    """Without node_become the same text is the command's own output in the container: not a failure of pct."""
    assert diagnose(REMOTE, 1, b"sudo: a password is required\n") is None
    assert diagnose(BECOME, 0, b"sudo: a password is required\n") is None
    # pct missing on the node without become is still pct's
    assert diagnose(REMOTE, 127, b"env: 'pct': No such file or directory\n") is not None
    assert diagnose(BECOME, 127, b"env: 'pct': No such file or directory\n") is not None


@pytest.mark.parametrize("target, fix", [
    (PctTarget(vmid=201, node="pve1", node_user="trainops"), "set pct_node_user to root, or set pct_node_become to true"),
    (PctTarget(vmid=201), "run Ansible as root, or set pct_node_become to true"),
])
def test_pct_without_root(target: PctTarget, fix: str) -> None:
    """Real pct (PVE::RESTEnvironment::setup_default_cli_env) says ``please run as root`` and exits non-zero."""
    cause = diagnose(target, 255, b"please run as root\n")
    assert cause is not None
    assert cause.startswith(f"pct needs root on {target.describe_node()} and ran as "), cause
    assert fix in cause and "NOPASSWD" in cause


def test_node_command_error_only_for_ssh_failures() -> None:
    error = node_command_error("nvidia-smi", REMOTE, 255, b"ssh: connect to host pve1 port 22: Connection refused\r\n")
    assert isinstance(error, AnsibleConnectionFailure)
    assert str(error).startswith("Cannot run nvidia-smi on node pve1: ssh could not run it (exit status 255): node pve1 cannot be reached: ")
    assert node_command_error("nvidia-smi", REMOTE, 9, b"") is None
    assert node_command_error("nvidia-smi", LOCAL, 255, b"") is None  # a local program's own status


def test_become_exe_not_found_cause() -> None:
    cause = become_exe_not_found_cause(PctTarget(vmid=201, node_become=True, node_become_exe="/opt/sudo"), "boom")
    assert cause == ("/opt/sudo was not found at that path on the local node (boom); install it on the node (apt-get install sudo), "
                     "set pct_node_become_exe, or log in as root and set pct_node_become to false")


# --- pct's own dies of a Proxmox VE node, read from the sources (tools/pve_standin/standin_faults.py imitates them) ---

OLD_PCT = b"Unknown option: keep-env\n400 unable to parse option\npct exec <vmid> [<extra-args>]\n"
CLUSTER_DOWN = (b"ipcc_send_rec[1] failed: Connection refused\nipcc_send_rec[2] failed: Connection refused\n"
                b"ipcc_send_rec[3] failed: Connection refused\nUnable to load access control list: Connection refused\n")
SSH_NOTE = b"ControlSocket /root/.ansible/cp/pct-0a1b already exists, disabling multiplexing\r\n"


@pytest.mark.parametrize("target", [LOCAL, REMOTE], ids=["local", "ssh"])
@pytest.mark.parametrize("rc", [2, 25, 111, 255, 7])  # Perl's die exits with $! (or 255): any number, over ssh 255 too
@pytest.mark.parametrize(("stderr", "expected"), [
    (b"CT is locked (backup)\n", "the container is locked (backup) on {node}: a vzdump backup of it is running; wait for that task to end "
                                 "(pvenode task list on {node}, or the web UI); a lock left by a task that failed is removed with "
                                 "'pct unlock 201' (pct: CT is locked (backup))"),
    (b"CT is locked (mounted)\n", "the container is locked (mounted) on {node}: its file systems are mounted on the node (pct mount); "
                                  "unmount it with 'pct unmount 201'"),
    (b"CT is locked (snapshot-delete)\n", "the container is locked (snapshot-delete) on {node}: a snapshot of it is being removed"),
    (CLUSTER_DOWN, "pve-cluster (pmxcfs, the file system of /etc/pve) is not running on {node}, so pct cannot read the configuration "
                   "(pct: ipcc_send_rec[3] failed: Connection refused | Unable to load access control list: Connection refused); "
                   "start it there (systemctl start pve-cluster; journalctl -u pve-cluster says why it stopped), then try again"),
    (b"ipcc_send_rec[1] failed: Unknown error -1\nUnable to load access control list: Unknown error -1\n",
     "pve-cluster on {node} does not answer the user pct ran as (pct: ipcc_send_rec[1] failed: Unknown error -1 | "
     "Unable to load access control list: Unknown error -1);"),
    (OLD_PCT, "pct on {node} does not know the option --keep-env (pct: Unknown option: keep-env | 400 unable to parse option | "
              "pct exec <vmid> [<extra-args>]); pve-container before 5.0.9 (Proxmox VE before 8.2) has no pct exec --keep-env; "
              "set the host variable pct_keep_env to false"),
    (b"400 Parameter verification failed.\nkeep-env: type check ('boolean') failed - got 'x'\npct exec <vmid> [<extra-args>] [OPTIONS]\n",
     "pct on {node} refused the command line (pct: 400 Parameter verification failed. | keep-env: type check"),
])
def test_pct_dies_are_pct_whatever_the_status(target: PctTarget, rc: int, stderr: bytes, expected: str) -> None:
    """pct's words, not its exit status, say it failed; over ssh its 255 is not ssh's (an ssh note in between changes nothing)."""
    for text in (stderr, SSH_NOTE + stderr):
        cause = diagnose(target, rc, text)
        assert cause is not None and expected.format(node=target.describe_node()) in cause, cause
        assert "ssh" not in cause, cause
        error = not_run_error("Cannot run a command in", target, rc, text)
        assert error is not None and not isinstance(error, ContainerNotRunning)


@pytest.mark.parametrize("stderr", [
    b"Unknown option: keep-env\n",  # a command in the container said it: it ran
    b"Unknown option: verbose\nusage: tool [options]\n",
    b"400 unable to parse option\n",  # no usage of a pct verb
    b"Connection refused\n",
    b"CT is locked\n",
])
def test_words_that_are_not_pct_s(stderr: bytes) -> None:
    assert diagnose(LOCAL, 2, stderr) is None
    assert keep_env_refused(25, stderr) is False


def test_keep_env_refused_needs_all_three_lines_and_a_failure() -> None:
    assert keep_env_refused(25, OLD_PCT) and keep_env_refused(255, SSH_NOTE + OLD_PCT)
    assert not keep_env_refused(0, OLD_PCT)
    assert not keep_env_refused(25, OLD_PCT.replace(b"keep-env", b"verbose"))
    assert not keep_env_refused(25, OLD_PCT.replace(b"pct exec <vmid>", b"pct status <vmid>"))


def test_ssh_failures_stay_ssh_s() -> None:
    """ssh's own "Connection refused" (exit status 255) is the node, not pve-cluster."""
    cause = diagnose(REMOTE, 255, b"ssh: connect to host pve1 port 22: Connection refused\r\n")
    assert cause is not None and cause.startswith("ssh could not run pct on node pve1 (exit status 255): node pve1 cannot be reached")


@pytest.mark.parametrize(("lock", "expected"), [
    ("backup", "the container is not running and is locked (backup) on node pve1: a vzdump backup in stop mode stops it and starts it again "
               "when it ends; wait for the backup (pvenode task list on node pve1, or the web UI), then try again; if no backup runs any more, "
               "a failed one left the lock: 'pct unlock 201', then 'pct start 201' (pct: container '201' not running!)"),
    ("migrate", "the container is not running and is locked (migrate) on node pve1: it is being migrated to another node; wait for that task"),
])
def test_stopped_and_locked(lock: str, expected: str) -> None:
    evidence = not_running_evidence(REMOTE, b"container '201' not running!\n")
    assert evidence == "pct: container '201' not running!"
    assert stopped_locked_cause(REMOTE, lock, evidence).startswith(expected)
    assert not_running_evidence(REMOTE, b"lxc-attach: 201: attach.c: Failed to get init pid\n") == "lxc-attach: Failed to get init pid"


def test_config_lock() -> None:
    assert config_lock("arch: amd64\nlock: backup\nmemory: 512\n") == "backup"
    assert config_lock("arch: amd64\ndescription: lock: backup\n") is None
    assert config_lock("") is None
