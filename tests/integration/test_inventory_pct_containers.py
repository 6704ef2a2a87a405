# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The trainops.pct_launch.pct_containers inventory plugin on the stand-in: the local node and two remote nodes.

Containers of this module, VMIDs unique across the nodes: 340 (running) and 341 (stopped) on the local
node, 342 (running) and 343 (stopped) on pve-c (127.0.0.13), 344 and 345 (running) on pve-d (127.0.0.14).
The session fixture brings pve-c and pve-d up with ``tools/pve_standin/node.sh`` and takes them down at the
end; the local containers are destroyed at the end. Other containers of the local node (other test
sessions') are listed by the plugin but never asserted on nor contacted.

ssh reaches the nodes with a client configuration of this module's own (its own ``known_hosts``, host key
checking on), written from the nodes' state, so other sessions' ``node.sh up``/``down`` cannot disturb it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import REPO, StandinNode, require_standin

NODE_SH = REPO / "tools" / "pve_standin" / "node.sh"
NODES_BASE = Path(os.environ.get("PVE_STANDIN_NODES", "/var/lib/pve-standin-nodes"))
LOCAL_ROOT = Path(os.environ.get("PVE_STANDIN_ROOT", "/var/lib/pve-standin"))
EXAMPLE = REPO / "examples" / "remote" / "pct_containers.yml"
REMOTE = {"pve-c": "127.0.0.13", "pve-d": "127.0.0.14"}
# vmid: (node, hostname, running)
CONTAINERS = {
    340: ("local", "trainer-local", True),
    341: ("local", "spare-local", False),
    342: ("pve-c", "trainer-c", True),
    343: ("pve-c", "spare-c", False),
    344: ("pve-d", "trainer-d", True),
    345: ("pve-d", "eval-d", True),
}
MINE = [f"ct{vmid}" for vmid in CONTAINERS]
RUNNING = [f"ct{vmid}" for vmid, (node, name, running) in CONTAINERS.items() if running]
# Extra configuration lines (the stand-in has no `pct set`): tags, addresses, raw lxc lines, a description.
EXTRA = {
    340: "tags: gpu;train\nnet0: name=eth0,bridge=vmbr0,ip=10.40.0.40/24,type=veth\n",
    342: ("tags: train\nnet0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:03:42,ip=10.42.0.42/24,ip6=fd42::42/64,type=veth\n"
          "net1: name=eth1,bridge=vmbr1,ip=dhcp,type=veth\nlxc.cgroup2.devices.allow: c 195:* rwm\n"),
    345: "description: {{ lookup('pipe', 'touch /tmp/pct-inventory-pwned') }}%0Asecond line\n",
}

pytestmark = pytest.mark.integration


class Nodes:
    """pve-c and pve-d with this module's ssh configuration, and the local node."""

    def __init__(self, client_dir: Path) -> None:
        self.client_dir = client_dir
        self.ssh_config = client_dir / "ssh_config"
        self.local = StandinNode(None)

    def write_client(self) -> None:
        """ssh_config and known_hosts for pve-c and pve-d only, from the nodes' own files."""
        config, known = [], []
        for name in REMOTE:
            address, port = (NODES_BASE / name / "address").read_text(encoding="utf-8").split()
            key = (NODES_BASE / name / "ssh_host_ed25519_key.pub").read_text(encoding="utf-8").split()
            known.append(f"{name} {key[0]} {key[1]}\n")
            config.append(f"Host {name}\n  HostName {address}\n  Port {port}\n  User root\n"
                          f"  IdentityFile {NODES_BASE / 'client' / 'id_ed25519'}\n  IdentitiesOnly yes\n"
                          f"  UserKnownHostsFile {self.client_dir / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
                          f"  HostKeyAlias {name}\n  BatchMode yes\n\n")
        (self.client_dir / "known_hosts").write_text("".join(known), encoding="utf-8")
        self.ssh_config.write_text("".join(config), encoding="utf-8")

    def pct(self, node: str, *args: object, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        """pct on a node: the local one directly, a remote one through its sshd."""
        if node == "local":
            return self.local.pct(*args, check=check, timeout=600)
        argv = ["ssh", "-F", str(self.ssh_config), "-T", node, "--", shlex.join(["pct", *map(str, args)])]
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=600, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"pct {args} on {node} exited {result.returncode}: {result.stderr!r}")
        return result

    def conf_path(self, node: str, vmid: int) -> Path:
        """The Proxmox config file of a container of this module."""
        if node == "local":
            return next(LOCAL_ROOT.glob(f"nodes/*/lxc/{vmid}.conf"))
        return NODES_BASE / node / "root" / "nodes" / node / "lxc" / f"{vmid}.conf"

    def create_all(self) -> None:
        """Create the module's containers, after removing leftovers of an earlier run from every node."""
        for vmid, (node, hostname, running) in CONTAINERS.items():
            for other in ("local", *REMOTE):
                if self.pct(other, "config", vmid, check=False).returncode == 0:
                    self.pct(other, "destroy", vmid, "--force", "1")
            args: list[object] = ["create", vmid, "--release", "bookworm", "--hostname", hostname]
            self.pct(node, *args, *(["--start", "1"] if running else []))
            if vmid in EXTRA:
                with open(self.conf_path(node, vmid), "a", encoding="utf-8") as conf:
                    conf.write(EXTRA[vmid])

    def ensure_running(self) -> None:
        """Start again a container that should run but stopped (seen once on a heavily loaded machine)."""
        for vmid, (node, dummy, running) in CONTAINERS.items():
            if running and b"status: running" not in self.pct(node, "status", vmid).stdout:
                self.pct(node, "start", vmid)

    def destroy_local(self) -> None:
        for vmid, (node, dummy, dummy2) in CONTAINERS.items():
            if node == "local":
                self.pct("local", "destroy", vmid, "--force", "1", check=False)


@pytest.fixture(scope="session")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    require_standin()
    if shutil.which("sshd") is None and not os.access("/usr/sbin/sshd", os.X_OK):
        pytest.skip("needs the OpenSSH server for simulated remote nodes: apt-get install openssh-server")
    for name, address in REMOTE.items():
        subprocess.run([str(NODE_SH), "up", name, address], capture_output=True, timeout=120, check=True)
    fleet = Nodes(tmp_path_factory.mktemp("pct-inventory-ssh"))
    fleet.write_client()
    try:
        fleet.create_all()
        fleet.ensure_running()
        yield fleet
    finally:
        fleet.destroy_local()
        for name in REMOTE:
            subprocess.run([str(NODE_SH), "down", name], capture_output=True, timeout=600, check=False)


def _cli(name: str) -> str:
    program = Path(sys.executable).with_name(name)
    return str(program) if program.exists() else name


def run_cli(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run an Ansible CLI with stdin /dev/null; returns its output as text."""
    full_env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="0", **(env or {}))
    full_env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run([_cli(name), *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=900, env=full_env, check=False, cwd="/")


def unwrap(value: Any) -> Any:
    """ansible-inventory's JSON with the ``{"__ansible_unsafe": ...}`` markers removed."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: unwrap(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unwrap(item) for item in value]
    return value


def write_source(path: Path, **options: Any) -> Path:
    path.write_text(yaml.safe_dump({"plugin": "trainops.pct_launch.pct_containers", **options}), encoding="utf-8")
    return path


def inventory_list(source: Path, env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """``ansible-inventory --list``: (the inventory, stderr); fails when the source did not parse."""
    result = run_cli("ansible-inventory", "-i", str(source), "--list", env=dict(env or {}, ANSIBLE_INVENTORY_UNPARSED_FAILED="1"))
    assert result.returncode == 0, result.stderr
    return unwrap(json.loads(result.stdout)), result.stderr


def hosts_of(inventory: dict[str, Any], group: str) -> set[str]:
    return set(inventory.get(group, {}).get("hosts", []))


def counting_ssh(tmp_path: Path) -> tuple[Path, Path]:
    """An ssh that logs each call (and whether its stdin is a terminal), then runs the real ssh."""
    log = tmp_path / "ssh-calls.log"
    wrapper = tmp_path / "ssh-counting"
    wrapper.write_text('#!/bin/sh\nif [ -t 0 ]; then t=tty; else t=notty; fi\n'
                       f'printf "%s %s\\n" "$t" "$(printf %s "$*" | tr "\\n" " ")" >> {shlex.quote(str(log))}\n'
                       'exec ssh "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return wrapper, log


def test_list_local_and_remote_nodes(nodes: Nodes, tmp_path: Path) -> None:
    source = write_source(tmp_path / "lab.pct_containers.yml", nodes=["local", "pve-c", "pve-d"], ssh_args=f"-F {nodes.ssh_config}")
    inventory, dummy = inventory_list(source)
    hostvars = inventory["_meta"]["hostvars"]
    assert hosts_of(inventory, "pct_node_pve_c") == {"ct342", "ct343"}
    assert hosts_of(inventory, "pct_node_pve_d") == {"ct344", "ct345"}
    assert {"ct340", "ct341"} <= hosts_of(inventory, "pct_node_local")
    assert set(RUNNING) <= hosts_of(inventory, "pct_running")
    assert {"ct341", "ct343"} <= hosts_of(inventory, "pct_stopped")
    assert not set(RUNNING) & hosts_of(inventory, "pct_stopped")
    for vmid, (node, hostname, running) in CONTAINERS.items():
        host = hostvars[f"ct{vmid}"]
        assert host["pct_vmid"] == vmid
        assert host["pct_hostname"] == hostname
        assert host["pct_status"] == ("running" if running else "stopped")
        assert host["ansible_connection"] == "trainops.pct_launch.pct"
        assert (host["pct_ostype"], host["pct_arch"], host["pct_cores"], host["pct_memory"]) == ("debian", "amd64", 1, 512)
        if node == "local":
            assert "pct_node" not in host and "pct_ssh_args" not in host
        else:
            assert host["pct_node"] == node
            assert host["pct_ssh_args"] == f"-F {nodes.ssh_config}"
    ct342 = hostvars["ct342"]
    assert (ct342["pct_ip"], ct342["pct_ip6"], ct342["pct_tags"]) == ("10.42.0.42", "fd42::42", ["train"])
    assert ct342["pct_net"]["net1"] == {"name": "eth1", "bridge": "vmbr1", "ip": "dhcp", "type": "veth"}
    assert not any(key.startswith("lxc.") for key in ct342["pct_config"])
    assert (hostvars["ct340"]["pct_ip"], hostvars["ct340"]["pct_tags"]) == ("10.40.0.40", ["gpu", "train"])
    assert "pct_ip" not in hostvars["ct344"]


def test_ping_running_containers(nodes: Nodes, tmp_path: Path) -> None:
    """The listed running containers answer through the pct connection, each from its own node."""
    source = write_source(tmp_path / "pct_containers.yml", nodes=["local", "pve-c", "pve-d"], ssh_args=f"-F {nodes.ssh_config}",
                          status=["running"], compose={"ansible_python_interpreter": "'/usr/bin/python3'"})
    result = run_cli("ansible", "-i", str(source), ",".join(RUNNING), "-m", "ansible.builtin.ping", "-o")
    assert result.returncode == 0, result.stdout + result.stderr
    answers = dict(line.split(" | SUCCESS => ", 1) for line in result.stdout.splitlines() if " | SUCCESS => " in line)
    assert {host: json.loads(answer)["ping"] for host, answer in answers.items()} == dict.fromkeys(RUNNING, "pong"), result.stdout
    names = run_cli("ansible", "-i", str(source), ",".join(RUNNING), "-m", "ansible.builtin.command", "-a", "cat /etc/hostname", "-o")
    assert names.returncode == 0, names.stdout + names.stderr
    for vmid, (dummy, hostname, running) in CONTAINERS.items():
        if running:
            assert f"ct{vmid} | CHANGED | rc=0 | (stdout) {hostname}" in names.stdout, names.stdout


def test_two_ssh_calls_per_node_status_filter(nodes: Nodes, tmp_path: Path) -> None:
    """pct list + one batched pct config per node, over ssh without a terminal; stopped ones cost no pct config."""
    ssh, log = counting_ssh(tmp_path)
    call_log = tmp_path / "pct-calls.jsonl"
    knobs = {name: NODES_BASE / name / "root" / "knobs.conf" for name in REMOTE}
    for path in knobs.values():
        path.write_text(f"call_log={call_log}\n", encoding="utf-8")
    try:
        source = write_source(tmp_path / "run.pct_containers.yml", nodes=list(REMOTE), ssh_args=f"-F {nodes.ssh_config}",
                              ssh_executable=str(ssh), status=["running"])
        inventory, stderr = inventory_list(source)
    finally:
        for path in knobs.values():
            path.unlink(missing_ok=True)
    assert set(inventory["_meta"]["hostvars"]) == {"ct342", "ct344", "ct345"}
    assert "WARNING" not in stderr, stderr
    calls = log.read_text(encoding="utf-8").splitlines()
    assert len(calls) == 4, calls
    assert all(call.startswith("notty -T -o BatchMode=yes") for call in calls), calls
    assert sorted(call.split(" -- ")[0].split()[-1] for call in calls) == ["pve-c", "pve-c", "pve-d", "pve-d"]
    pct_calls = [json.loads(line) for line in call_log.read_text(encoding="utf-8").splitlines()]
    assert sorted((call["node"], call["argv"][1], *call["argv"][2:3]) for call in pct_calls) == [
        ("pve-c", "config", "342"), ("pve-c", "help", "exec"), ("pve-c", "list"),
        ("pve-d", "config", "344"), ("pve-d", "config", "345"), ("pve-d", "help", "exec"), ("pve-d", "list")]
    assert all("pct_keep_env" not in host for host in inventory["_meta"]["hostvars"].values())  # pct 6.x has --keep-env


def test_a_node_with_pve_container_5_0_8(nodes: Nodes, tmp_path: Path) -> None:
    """pct without --keep-env on pve-c (Proxmox VE 7.4 to 8.1): learnt in the batch, no call more; its hosts get pct_keep_env false,
    and their tasks then cost one pct exec each, none refused."""
    ssh, log = counting_ssh(tmp_path)
    call_log = tmp_path / "pct-calls.jsonl"
    knobs = {name: NODES_BASE / name / "root" / "knobs.conf" for name in REMOTE}
    knobs["pve-c"].write_text(f"call_log={call_log}\npve_container=5.0.8\n", encoding="utf-8")
    knobs["pve-d"].write_text(f"call_log={call_log}\n", encoding="utf-8")
    try:
        source = write_source(tmp_path / "old.pct_containers.yml", nodes=list(REMOTE), ssh_args=f"-F {nodes.ssh_config}",
                              ssh_executable=str(ssh), status=["running"], compose={"ansible_python_interpreter": "'/usr/bin/python3'"})
        inventory, stderr = inventory_list(source)
        assert len(log.read_text(encoding="utf-8").splitlines()) == 4  # pct list and the batch per node, as before
        hostvars = inventory["_meta"]["hostvars"]
        assert hostvars["ct342"]["pct_keep_env"] is False
        assert "pct_keep_env" not in hostvars["ct344"] and "pct_keep_env" not in hostvars["ct345"]
        call_log.unlink()
        result = run_cli("ansible", "-i", str(source), "ct342,ct344", "-m", "ansible.builtin.command", "-a", "cat /etc/hostname", "-o")
    finally:
        for path in knobs.values():
            path.unlink(missing_ok=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ct342 | CHANGED | rc=0 | (stdout) trainer-c" in result.stdout and "does not know the option --keep-env" not in result.stderr
    execs = [(call["node"], call["argv"][3:call["argv"].index("--")]) for call in map(json.loads, call_log.read_text(encoding="utf-8").splitlines())
             if call["argv"][1] == "exec"]
    assert sorted(execs) == [("pve-c", []), ("pve-d", ["--keep-env", "1"])], execs


def test_pve_cluster_down_on_a_node(nodes: Nodes, tmp_path: Path) -> None:
    """pmxcfs down on pve-c, pct's die exiting 255 as ssh's own failures do: named as pve-cluster's, not ssh's."""
    knobs = NODES_BASE / "pve-c" / "root" / "knobs.conf"
    knobs.write_text("cluster=down\ndie_status=255\n", encoding="utf-8")
    try:
        source = write_source(tmp_path / "down.pct_containers.yml", nodes=["pve-c", "pve-d"], ssh_args=f"-F {nodes.ssh_config}")
        result = run_cli("ansible-inventory", "-i", str(source), "--list", env={"ANSIBLE_INVENTORY_UNPARSED_FAILED": "1"})
    finally:
        knobs.unlink(missing_ok=True)
    message = " ".join(result.stderr.split())
    assert result.returncode != 0
    assert ("Cannot list the containers of node pve-c: pve-cluster (pmxcfs, the file system of /etc/pve) is not running on node pve-c, "
            "so pct cannot read the configuration") in message, message
    assert "ssh could not" not in message


def test_unreachable_node(nodes: Nodes, tmp_path: Path) -> None:
    """An unreachable node fails the source with its name; with node_errors=warn the others are listed."""
    down = {"name": "pve-down", "ssh_args": f"-F {nodes.ssh_config} -o HostName=127.0.0.1 -o Port=9"}
    source = write_source(tmp_path / "bad.pct_containers.yml", nodes=["pve-c", down], ssh_args=f"-F {nodes.ssh_config}")
    result = run_cli("ansible-inventory", "-i", str(source), "--list", env={"ANSIBLE_INVENTORY_UNPARSED_FAILED": "1"})
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "Cannot list the containers of node pve-down: ssh could not run pct on node pve-down (exit status 255)" in message, message
    assert "Connection refused" in message
    write_source(source, nodes=["pve-c", down], ssh_args=f"-F {nodes.ssh_config}", node_errors="warn")
    inventory, stderr = inventory_list(source)
    assert set(inventory["_meta"]["hostvars"]) == {"ct342", "ct343"}
    assert "Cannot list the containers of node pve-down" in " ".join(stderr.split())


def test_values_from_the_node_are_not_templated(nodes: Nodes, tmp_path: Path) -> None:
    """A description holding Jinja is shown as it is; the lookup in it never runs on the controller."""
    marker = Path("/tmp/pct-inventory-pwned")
    marker.unlink(missing_ok=True)
    source = write_source(tmp_path / "pct_containers.yml", nodes=["pve-d"], ssh_args=f"-F {nodes.ssh_config}",
                          hostname_format="{hostname}", compose={"ansible_python_interpreter": "'/usr/bin/python3'"})
    result = run_cli("ansible", "-i", str(source), "eval-d", "-m", "ansible.builtin.debug", "-a", "var=pct_config.description")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "{{ lookup('pipe', 'touch /tmp/pct-inventory-pwned') }}\\nsecond line" in result.stdout, result.stdout
    assert not marker.exists()


def test_example_source(nodes: Nodes, tmp_path: Path) -> None:
    """examples/remote/pct_containers.yml works as it is, pointed at pve-c and pve-d instead of its nodes."""
    example = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    example.update(nodes=list(REMOTE), ssh_args=f"-F {nodes.ssh_config}")
    inventory, dummy = inventory_list(write_source(tmp_path / "pct_containers.yml", **example))
    assert set(inventory["_meta"]["hostvars"]) == {"ct342", "ct344", "ct345"}
    assert hosts_of(inventory, "tag_train") == {"ct342"}
    assert inventory["_meta"]["hostvars"]["ct342"]["ansible_python_interpreter"] == "/usr/bin/python3"


def test_measure_batched_config(nodes: Nodes, tmp_path: Path) -> None:
    """Report what batching saves: one ssh call for every pct config of a node vs. one ssh call each."""
    base = ["ssh", "-F", str(nodes.ssh_config), "-T", "-o", "BatchMode=yes"]
    vmids = ["344", "345"] * 5  # 10 configs
    started = time.monotonic()
    for vmid in vmids:
        subprocess.run([*base, "pve-d", "--", f"pct config {vmid}"], stdin=subprocess.DEVNULL, capture_output=True, check=True)
    single = time.monotonic() - started
    started = time.monotonic()
    script = 'for id do echo "### $id"; pct config "$id"; done'
    subprocess.run([*base, "pve-d", "--", shlex.join(["sh", "-c", script, "sh", *vmids])], stdin=subprocess.DEVNULL,
                   capture_output=True, check=True)
    batched = time.monotonic() - started
    print(f"10 x pct config on pve-d: {single:.2f} s in 10 ssh calls, {batched:.2f} s in one")
    assert batched < single
