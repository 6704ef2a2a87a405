# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the pure helpers of the pct_containers inventory plugin."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import CONFIG_BATCH_SCRIPT, PctTarget, config_batch_argv, list_argv
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_inventory import (
    NodeSpec,
    check_host_name_format,
    connection_vars,
    container_vars,
    help_keep_env,
    host_name,
    node_command,
    node_group,
    parse_nodes,
    sanitize_group,
    status_group,
)
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_output import (
    ListedContainer,
    PctConfig,
    PctInventoryError,
    first_addresses,
    networks,
    parse_pct_config,
    parse_pct_list,
    parse_property_string,
    parse_tags,
    split_config_batch,
    static_address,
)

ROW = "%-10s %-10s %-12s %-20s\n"  # pve-container's `pct list` format
DEFAULTS = {"node_user": None, "node_become": False, "node_become_exe": "sudo", "ssh_args": "", "ssh_executable": "ssh", "pct_path": "pct",
            "timeout": 10}
REMOTE = NodeSpec(name="pve-a", remote=True, ssh_args=("-F", "/etc/ssh/pve config"))


def pct_list(*rows: tuple[object, str, str, str]) -> str:
    """Output of pct list as pve-container prints it: nothing at all without containers."""
    if not rows:
        return ""
    return "".join(ROW % row for row in [("VMID", "Status", "Lock", "Name"), *rows])


# --- pct list ---------------------------------------------------------------------------------------


def test_list_without_containers_prints_nothing() -> None:
    assert not parse_pct_list("")
    assert not parse_pct_list("\n")


def test_list_rows_with_and_without_lock() -> None:
    text = pct_list((341, "stopped", "", "CT341"), (200, "running", "", "train200"), (342, "running", "backup", "gpu-1"))
    assert parse_pct_list(text) == [
        ListedContainer(200, "running", "", "train200"),
        ListedContainer(341, "stopped", "", "CT341"),
        ListedContainer(342, "running", "backup", "gpu-1"),
    ]


def test_list_single_token_is_lock_or_name_by_column() -> None:
    """A locked container whose name is empty vs. an unlocked one: the column decides."""
    assert parse_pct_list(pct_list((340, "stopped", "create", ""))) == [ListedContainer(340, "stopped", "create", "")]
    assert parse_pct_list(pct_list((340, "stopped", "", "create"))) == [ListedContainer(340, "stopped", "", "create")]


def test_list_long_lock_and_vmid_overflow_columns() -> None:
    """`snapshot-delete` is wider than the 12-character lock column; VMIDs up to 9 digits."""
    text = pct_list((999999999, "running", "snapshot-delete", "big"))
    assert parse_pct_list(text) == [ListedContainer(999999999, "running", "snapshot-delete", "big")]


@pytest.mark.parametrize("line", ["garbage here", "abc running  x", "1 2 3 4 5", "400 Parameter verification failed."])
def test_list_unexpected_line(line: str) -> None:
    with pytest.raises(PctInventoryError, match="unexpected line in the output of pct list"):
        parse_pct_list(ROW % ("VMID", "Status", "Lock", "Name") + line + "\n")


names = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,30}", fullmatch=True)
locks = st.sampled_from(["", "backup", "create", "migrate", "mounted", "rollback", "snapshot", "snapshot-delete"])


@given(st.lists(st.tuples(st.integers(100, 999_999_999), st.sampled_from(["running", "stopped"]), locks, names),
                unique_by=lambda row: row[0], max_size=20))
def test_list_round_trip(rows: list[tuple[int, str, str, str]]) -> None:
    parsed = parse_pct_list(pct_list(*rows))
    assert parsed == sorted((ListedContainer(*row) for row in rows), key=lambda row: row.vmid)


# --- pct config -------------------------------------------------------------------------------------

PCT_CONFIG = """\
arch: amd64
cores: 4
description: Trainer for team A%0Asecond line with %3A colon
features: nesting=1
hostname: gpu-trainer
memory: 16384
net0: name=eth0,bridge=vmbr0,firewall=1,gw=10.0.0.1,hwaddr=BC:24:11:AA:BB:CC,ip=10.0.0.5/24,ip6=fd00::5/64,type=veth
net1: name=eth1,bridge=vmbr1,ip=dhcp,type=veth
onboot: 1
ostype: ubuntu
rootfs: local-lvm:vm-340-disk-0,size=32G
swap: 0
tags: gpu;train
unprivileged: 1
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
"""

CONFIG_FILE = """\
#Trainer for team A
#second line with %3A colon
arch: amd64
hostname: gpu-trainer
lxc.apparmor.profile: unconfined
net0: name=eth0,bridge=vmbr0,ip=192.168.1.20/24

[before-upgrade]
#old snapshot
hostname: old-name
snaptime: 1700000000
"""


def test_config_of_pct_config() -> None:
    config = parse_pct_config(PCT_CONFIG)
    assert config.options["hostname"] == "gpu-trainer"
    assert config.options["description"] == "Trainer for team A\nsecond line with : colon"
    assert config.options["rootfs"] == "local-lvm:vm-340-disk-0,size=32G"
    assert not any(key.startswith("lxc.") for key in config.options)
    assert config.lxc == (
        ("lxc.cgroup2.devices.allow", "c 195:* rwm"),
        ("lxc.cgroup2.devices.allow", "c 509:* rwm"),
        ("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"),
    )


def test_config_file_form_description_lines_and_snapshots() -> None:
    """`#` lines are the description; a [snapshot] section ends the current configuration."""
    config = parse_pct_config(CONFIG_FILE)
    assert config.options == {
        "description": "Trainer for team A\nsecond line with : colon",
        "arch": "amd64",
        "hostname": "gpu-trainer",
        "net0": "name=eth0,bridge=vmbr0,ip=192.168.1.20/24",
    }
    assert config.lxc == (("lxc.apparmor.profile", "unconfined"),)


def test_config_empty_and_odd_lines() -> None:
    assert parse_pct_config("") == PctConfig(options={})
    assert parse_pct_config("no separator here\n\nkey:value\nempty:\n").options == {"key": "value", "empty": ""}


def test_networks_and_addresses() -> None:
    nets = networks(parse_pct_config(PCT_CONFIG + "net10: name=eth10,ip=10.9.9.9/8\nnet2: name=eth2,ip=manual\n").options)
    assert list(nets) == ["net0", "net1", "net2", "net10"]
    assert nets["net0"]["hwaddr"] == "BC:24:11:AA:BB:CC"
    assert first_addresses(nets) == ("10.0.0.5", "fd00::5")
    assert first_addresses({"net0": {"ip": "dhcp", "ip6": "auto"}, "net1": {"ip": "172.16.0.2/16"}}) == ("172.16.0.2", None)
    assert first_addresses({}) == (None, None)


@pytest.mark.parametrize(("value", "expected"), [("10.0.0.5/24", "10.0.0.5"), ("10.0.0.5", "10.0.0.5"), ("dhcp", None),
                                                 ("auto", None), ("manual", None), ("", None), (None, None), ("/24", None)])
def test_static_address(value: str | None, expected: str | None) -> None:
    assert static_address(value) == expected


def test_property_string_ignores_items_without_value() -> None:
    assert parse_property_string("name=eth0,,junk,ip=1.2.3.4/32, type = veth") == {"name": "eth0", "ip": "1.2.3.4/32", "type": "veth"}


@pytest.mark.parametrize(("value", "expected"), [("gpu;train", ["gpu", "train"]), ("a,b c;;a", ["a", "b", "c"]),
                                                 ("", []), (None, [])])
def test_tags(value: str | None, expected: list[str]) -> None:
    assert parse_tags(value) == expected


# --- batched pct config -----------------------------------------------------------------------------


def test_batch_split() -> None:
    marker = "### pct-inventory-0123"
    text = f"\n{marker} 340\narch: amd64\nhostname: a\n\n{marker} 341\n\n{marker} 341 failed 2\n\n{marker} 342\nhostname: c\n"
    configs, failures = split_config_batch(text, marker, [340, 341, 342, 343])
    assert parse_pct_config(configs[340]).options == {"arch": "amd64", "hostname": "a"}
    assert parse_pct_config(configs[342]).options == {"hostname": "c"}
    assert failures == {341: "pct config 341 exited with status 2", 343: "no output of pct config 343"}


def test_batch_script_runs_with_sh(tmp_path: object) -> None:
    """The real script under /bin/sh with a fake pct: sections, failures, hostile-looking output."""
    fake = f"{tmp_path}/pct"
    with open(fake, "w", encoding="utf-8") as out:
        out.write('#!/bin/sh\n[ "$2" = 341 ] && { echo "Configuration file \'nodes/n/lxc/341.conf\' does not exist" >&2; exit 2; }\n'
                  'printf "hostname: ct-%s\\ndescription: it%%27s \\$(x) ### pct\\n" "$2"\n')
    subprocess.run(["chmod", "+x", fake], check=True)
    argv = config_batch_argv(PctTarget(vmid=0, pct_path=fake), [340, 341, 342], "### m")
    assert argv[:3] == ["/bin/sh", "-c", CONFIG_BATCH_SCRIPT]
    result = subprocess.run(argv, capture_output=True, text=True, check=True)
    configs, failures = split_config_batch(result.stdout, "### m", [340, 341, 342])
    assert parse_pct_config(configs[342]).options == {"hostname": "ct-342", "description": "it's $(x) ### pct"}
    assert set(configs) == {340, 342}
    assert failures == {341: "pct config 341 exited with status 2"}
    assert "341.conf' does not exist" in result.stderr


def test_batch_script_runs_only_pct_under_sudo(tmp_path: object) -> None:
    """With node_become the script gets ``sudo -n -- pct`` as arguments and runs it per VMID; the shell itself is not under sudo."""
    fake_pct, fake_sudo, log = f"{tmp_path}/my pct", f"{tmp_path}/sudo", f"{tmp_path}/sudo.log"
    with open(fake_pct, "w", encoding="utf-8") as out:
        out.write('#!/bin/sh\nprintf "hostname: ct-%s\\n" "$2"\n')
    with open(fake_sudo, "w", encoding="utf-8") as out:
        out.write(f'#!/bin/sh\nprintf "%s|" "$@" >> {shlex.quote(log)}; echo >> {shlex.quote(log)}\n'
                  '[ "$1" = -n ] && [ "$2" = -- ] || exit 9\nshift 2\nexec "$@"\n')
    subprocess.run(["chmod", "+x", fake_pct, fake_sudo], check=True)
    target = PctTarget(vmid=0, pct_path=fake_pct, node_become=True, node_become_exe=fake_sudo)
    argv = config_batch_argv(target, [340, 341], "### m")
    assert argv[3:] == ["sh", "### m", "340", "341", "--", fake_sudo, "-n", "--", fake_pct]
    result = subprocess.run(argv, capture_output=True, text=True, check=True)
    configs, failures = split_config_batch(result.stdout, "### m", [340, 341])
    assert not failures and parse_pct_config(configs[341]).options == {"hostname": "ct-341"}
    with open(log, encoding="utf-8") as calls:
        assert calls.read().splitlines() == [f"-n|--|{fake_pct}|help|exec|", f"-n|--|{fake_pct}|config|340|", f"-n|--|{fake_pct}|config|341|"]


HELP_NEW = """USAGE: pct exec <vmid> [<extra-args>] [OPTIONS]

  Launch a command inside the specified container.

  <vmid>     <integer> (100 - 999999999)
             The (unique) ID of the VM.

  --keep-env <boolean>   (default=1)
             Keep the current environment.
"""
HELP_OLD = HELP_NEW.split("  --keep-env", maxsplit=1)[0].replace(" [OPTIONS]", "")


@pytest.mark.parametrize(("help_text", "status", "expected"), [
    (HELP_NEW, 0, True),  # pve-container 5.0.9 and newer
    (HELP_OLD, 0, False),  # 5.0.8 and older: the connection gets pct_keep_env false
    ("", 111, None),  # pct failed (pve-cluster down): unknown, the connection's auto mode finds out
    ("something else\n", 0, None),  # not pct's help of exec
])
def test_batch_learns_whether_pct_exec_has_keep_env(tmp_path: object, help_text: str, status: int, expected: bool | None) -> None:
    """``pct help exec`` runs first in the same batch (no call more), its answer in a section before the configs."""
    fake, text = f"{tmp_path}/pct", f"{tmp_path}/help.txt"
    with open(text, "w", encoding="utf-8") as out:
        out.write(help_text)
    with open(fake, "w", encoding="utf-8") as out:
        out.write(f'#!/bin/sh\nif [ "$1" = help ]; then cat {shlex.quote(text)}; exit {status}; fi\nprintf "hostname: ct-%s\\n" "$2"\n')
    subprocess.run(["chmod", "+x", fake], check=True)
    result = subprocess.run(config_batch_argv(PctTarget(vmid=0, pct_path=fake), [340], "### m"), capture_output=True, text=True, check=True)
    configs, failures = split_config_batch(result.stdout, "### m", [340])
    assert not failures and parse_pct_config(configs[340]).options == {"hostname": "ct-340"}, result.stdout
    assert help_keep_env(result.stdout, "### m") is expected


def test_keep_env_var_only_for_a_pct_without_it() -> None:
    spec = NodeSpec(name="pve-a", remote=True)
    assert connection_vars(spec, "c", False)["pct_keep_env"] is False
    assert "pct_keep_env" not in connection_vars(spec, "c", True) and "pct_keep_env" not in connection_vars(spec, "c")
    assert help_keep_env("no batch output\n", "m") is None


def test_batch_script_without_vmids_or_invocation(tmp_path: object) -> None:
    assert subprocess.run(config_batch_argv(PctTarget(vmid=0, pct_path="/bin/false"), [], "m"), capture_output=True, check=False).stdout == b""
    broken = subprocess.run(["/bin/sh", "-c", CONFIG_BATCH_SCRIPT, "sh", "m", "340"], capture_output=True, text=True, check=False)
    assert broken.returncode == 2 and "no pct invocation" in broken.stderr


# --- commands ---------------------------------------------------------------------------------------


def test_local_commands_are_plain_argv() -> None:
    local = NodeSpec()
    assert node_command(local, list_argv(PctTarget(vmid=0, pct_path="/usr/sbin/pct"))) == ["/usr/sbin/pct", "list"]


def test_remote_commands_go_through_ssh_without_tty() -> None:
    spec = NodeSpec(name="pve-a", remote=True, node_user="root", ssh_args=("-F", "/x y/cfg"), timeout=7)
    argv = node_command(spec, config_batch_argv(spec.target(), [340, 341], "### m"))
    assert argv[:7] == ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=7", "-l"]
    assert argv[7:12] == ["root", "-F", "/x y/cfg", "pve-a", "--"]
    assert len(argv) == 13
    remote = shlex.split(argv[12])
    assert remote[:3] == ["env", "-i", "-C"]
    assert remote[-9:] == ["/bin/sh", "-c", CONFIG_BATCH_SCRIPT, "sh", "### m", "340", "341", "--", "pct"]
    assert "-t" not in argv and "-tt" not in argv


def test_remote_commands_with_become() -> None:
    spec = NodeSpec(name="pve-a", remote=True, node_user="trainops", node_become=True)
    remote = shlex.split(node_command(spec, list_argv(spec.target()))[-1])
    assert remote == ["env", "-i", "-C", "/", "LANG=C.UTF-8", "LOGNAME=trainops", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                      "USER=trainops", "sudo", "-n", "--", "pct", "list"]
    batch = shlex.split(node_command(spec, config_batch_argv(spec.target(), [340], "m"))[-1])
    assert batch[batch.index(CONFIG_BATCH_SCRIPT) + 1:] == ["sh", "m", "340", "--", "sudo", "-n", "--", "pct"]
    assert batch[:batch.index("/bin/sh")].count("sudo") == 0  # the shell is not run by sudo


# --- options ----------------------------------------------------------------------------------------


def test_nodes_default_to_local() -> None:
    for value in (None, "", []):
        assert parse_nodes(value, DEFAULTS) == [NodeSpec()]


def test_nodes_strings_and_dicts_with_overrides() -> None:
    defaults = dict(DEFAULTS, node_user="root", ssh_args="-F cfg", timeout=5)
    nodes = parse_nodes(["local", "pve-a", {"name": "pve-b", "ssh_args": ["-p", "2222"], "pct_path": "/usr/sbin/pct", "timeout": "3"}], defaults)
    assert nodes[0] == NodeSpec(name="local", remote=False, node_user="root", ssh_args=("-F", "cfg"), timeout=5)
    assert nodes[1] == NodeSpec(name="pve-a", remote=True, node_user="root", ssh_args=("-F", "cfg"), timeout=5)
    assert nodes[2] == NodeSpec(name="pve-b", remote=True, node_user="root", ssh_args=("-p", "2222"), pct_path="/usr/sbin/pct", timeout=3)


@pytest.mark.parametrize(("value", "message"), [
    ("pve-a", "expected a list"),
    ({"name": "pve-a"}, "expected a list"),
    ([3.5], "invalid entry"),
    ([{"ssh_args": "-v"}], "has no name"),
    ([{"name": "pve-a", "user": "root"}], r"unknown key\(s\) user"),
    (["pve-a", {"name": "pve-a"}], "node pve-a is listed twice"),
    (["-oProxyCommand=x"], "invalid node name"),
    (["two words"], "invalid node name"),
    ([{"name": "pve-a", "ssh_args": "-o 'unclosed"}], "invalid ssh_args for node pve-a: No closing quotation"),
    ([{"name": "pve-a", "timeout": 0}], "invalid timeout"),
    ([{"name": "pve-a", "timeout": "soon"}], "invalid timeout"),
    ([{"name": "pve-a", "node_become": "maybe"}], "invalid node_become 'maybe' for node pve-a"),
    ([{"name": "pve-a", "node_become_exe": "sudo -E"}], r"Invalid node_become_exe 'sudo -E'.*\(node pve-a\)"),
])
def test_nodes_invalid(value: object, message: str) -> None:
    with pytest.raises(PctInventoryError, match=message):
        parse_nodes(value, DEFAULTS)


def test_host_name_format() -> None:
    assert host_name(check_host_name_format("ct{vmid}"), 340, "gpu", "local") == "ct340"
    assert host_name(check_host_name_format("{node}-{hostname}"), 340, "gpu", "pve-a") == "pve-a-gpu"
    for bad in ("ct", "{vmid.__class__}", "{0}", "{}", "{vmid", "{other}"):
        with pytest.raises(PctInventoryError, match="invalid hostname_format"):
            check_host_name_format(bad)
    with pytest.raises(PctInventoryError, match="unusable host name 'a b'"):
        host_name("{hostname}", 340, "a b", "local")


# --- variables and groups ---------------------------------------------------------------------------


def test_groups_are_sanitized() -> None:
    assert node_group(REMOTE) == "pct_node_pve_a"
    assert node_group(NodeSpec(name="pve1.example.org", remote=True)) == "pct_node_pve1_example_org"
    assert node_group(NodeSpec()) == "pct_node_local"
    assert status_group("running") == "pct_running"
    assert sanitize_group("9-lives") == "_9_lives"


def test_container_vars_remote() -> None:
    listed = ListedContainer(340, "running", "", "gpu-trainer")
    hostvars = container_vars(REMOTE, listed, parse_pct_config(PCT_CONFIG))
    assert hostvars["pct_vmid"] == 340
    assert hostvars["pct_node"] == "pve-a"
    assert hostvars["pct_ip"] == "10.0.0.5"
    assert hostvars["pct_ip6"] == "fd00::5"
    assert hostvars["pct_tags"] == ["gpu", "train"]
    assert (hostvars["pct_cores"], hostvars["pct_memory"], hostvars["pct_swap"]) == (4, 16384, 0)
    assert (hostvars["pct_ostype"], hostvars["pct_arch"], hostvars["pct_hostname"]) == ("ubuntu", "amd64", "gpu-trainer")
    assert hostvars["pct_net"]["net1"] == {"name": "eth1", "bridge": "vmbr1", "ip": "dhcp", "type": "veth"}
    assert hostvars["pct_config"]["onboot"] == "1"


def test_container_vars_local_minimal() -> None:
    hostvars = container_vars(NodeSpec(), ListedContainer(341, "stopped", "backup", "CT341"), parse_pct_config(""))
    assert hostvars == {"pct_vmid": 341, "pct_status": "stopped", "pct_lock": "backup", "pct_hostname": "CT341",
                        "pct_tags": [], "pct_net": {}, "pct_config": {}}


def test_nodes_with_become() -> None:
    defaults = dict(DEFAULTS, node_user="trainops", node_become=True)
    nodes = parse_nodes(["pve-a", {"name": "pve-b", "node_user": "root", "node_become": False}, {"name": "pve-c", "node_become_exe": "/usr/bin/sudo"}],
                        defaults)
    assert (nodes[0].node_user, nodes[0].node_become, nodes[0].node_become_exe) == ("trainops", True, "sudo")
    assert (nodes[1].node_user, nodes[1].node_become) == ("root", False)
    assert (nodes[2].node_become, nodes[2].node_become_exe) == (True, "/usr/bin/sudo")
    assert parse_nodes([{"name": "pve-a", "node_become": "yes"}], DEFAULTS)[0].node_become is True
    assert nodes[0].target().node_become and nodes[0].target().node_user == "trainops"


def test_connection_vars_with_become() -> None:
    spec = NodeSpec(name="pve-a", remote=True, node_user="trainops", node_become=True)
    assert connection_vars(spec, "c") == {"ansible_connection": "c", "pct_node_user": "trainops", "pct_node_become": True}
    local = NodeSpec(node_become=True, node_become_exe="/usr/bin/sudo")
    assert connection_vars(local, "c") == {"ansible_connection": "c", "pct_node_become": True, "pct_node_become_exe": "/usr/bin/sudo"}


def test_connection_vars_only_non_defaults() -> None:
    assert connection_vars(NodeSpec(), "c") == {"ansible_connection": "c"}
    assert connection_vars(NodeSpec(pct_path="/opt/pct", node_user="root"), "c") == {"ansible_connection": "c", "pct_path": "/opt/pct"}
    assert connection_vars(REMOTE, "c") == {"ansible_connection": "c", "pct_ssh_args": "-F '/etc/ssh/pve config'"}
    full = NodeSpec(name="n", remote=True, node_user="admin", ssh_executable="/usr/bin/ssh", timeout=3)
    assert connection_vars(full, "c") == {"ansible_connection": "c", "pct_node_user": "admin",
                                          "pct_ssh_executable": "/usr/bin/ssh", "pct_timeout": 3}
