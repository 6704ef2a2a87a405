# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the trainops.pct_launch.pct_containers inventory plugin, against fake nodes.

``_execute`` (the plugin's one way to run a command) is replaced by a fake that answers ``pct list``
and the batched ``pct config`` for the local node and for nodes reached with ``ssh``, and records
every call, so the tests can count them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleParserError
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import inventory_loader
from ansible.template import Templar

from ansible_collections.trainops.pct_launch.plugins.inventory import pct_containers

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core < 2.19: every template string is trusted

    def trust_as_template(value: str) -> str:  # type: ignore[misc]
        return value

ROW = "%-10s %-10s %-12s %-20s\n"
LOCAL = "local"


def config_text(vmid: int, hostname: str, extra: str = "") -> str:
    """``pct config`` output of a small container."""
    return (f"arch: amd64\ncores: 2\nhostname: {hostname}\nmemory: 1024\nostype: debian\n"
            f"rootfs: local:subvol-{vmid}-disk-0,size=8G\n{extra}")


class FakeNodes:
    """Containers per node (``local`` is the controller) and a log of the commands run."""

    def __init__(self, pct_path: str) -> None:
        self.pct_path = pct_path
        self.nodes: dict[str, dict[int, tuple[str, str | None]]] = {}
        self.unreachable: set[str] = set()
        self.cluster_down: dict[str, int] = {}  # node: the exit status of pct's die when pmxcfs is down there
        self.sudo_refuses: set[str] = set()
        self.pve_container: dict[str, str] = {}  # node: version, for its `pct help exec` (none: no help section)
        self.calls: list[tuple[str, list[str], list[str]]] = []

    def add(self, node: str, vmid: int, status: str, config: str | None) -> None:
        """A container; ``config`` None: it vanishes before pct config reads it."""
        self.nodes.setdefault(node, {})[vmid] = (status, config)

    def node_side(self, argv: list[str]) -> tuple[str, list[str]]:
        """(node, argv run on it) of a controller-side argv."""
        if argv[0] != "ssh":
            assert argv[0] in (self.pct_path, "/bin/sh", "sudo"), argv
            return LOCAL, argv
        assert argv[1:4] == ["-T", "-o", "BatchMode=yes"], argv
        node, remote = argv[-3], shlex.split(argv[-1])
        assert argv[-2] == "--"
        assert remote[:4] == ["env", "-i", "-C", "/"]
        side = remote[4:]
        while side and re.match(r"[A-Z_][A-Z0-9_]*=", side[0]):
            side = side[1:]
        return node, side

    def list_output(self, node: str) -> str:
        rows = sorted(self.nodes.get(node, {}).items())
        if not rows:
            return ""
        lines = [ROW % ("VMID", "Status", "Lock", "Name")]
        lines += [ROW % (vmid, status, "", f"CT{vmid}") for vmid, (status, dummy) in rows]
        return "".join(lines)

    def batch_output(self, node: str, marker: str, vmids: list[str]) -> tuple[str, str]:
        out, err = [], []
        if node in self.pve_container:
            new = tuple(map(int, self.pve_container[node].split("."))) >= (5, 0, 9)
            out.append(f"{marker} help\nUSAGE: pct exec <vmid> [<extra-args>]{' [OPTIONS]' if new else ''}\n\n"
                       "  <vmid>     <integer> (100 - 999999999)\n             The (unique) ID of the VM.\n\n"
                       + ("  --keep-env <boolean>   (default=1)\n             Keep the current environment.\n\n" if new else ""))
        for vmid in vmids:
            out.append(f"\n{marker} {vmid}\n")
            config = self.nodes.get(node, {}).get(int(vmid), ("", None))[1]
            if config is None:
                err.append(f"Configuration file 'nodes/{node}/lxc/{vmid}.conf' does not exist\n")
                out.append(f"\n{marker} {vmid} failed 2\n")
            else:
                out.append(config)
        return "".join(out), "".join(err)

    def __call__(self, argv: list[str], env: dict[str, str] | None, timeout: int) -> subprocess.CompletedProcess[bytes]:
        node, side = self.node_side(argv)
        self.calls.append((node, argv, side))
        assert (env is None) == (node != LOCAL)
        assert timeout > 0
        if node in self.unreachable:
            return subprocess.CompletedProcess(argv, 255, b"", f"ssh: connect to host {node} port 22: Connection refused\n".encode())
        if node in self.cluster_down:
            return subprocess.CompletedProcess(argv, self.cluster_down[node], b"", CLUSTER_DOWN)
        if side[0] == "sudo" and node in self.sudo_refuses:
            return subprocess.CompletedProcess(argv, 1, b"", b"sudo: a password is required\n")
        if side[-1] == "list":
            return subprocess.CompletedProcess(argv, 0, self.list_output(node).encode(), b"")
        assert side[:2] == ["/bin/sh", "-c"], side
        out, err = self.batch_output(node, side[4], batch_vmids(side))
        return subprocess.CompletedProcess(argv, 0, out.encode(), err.encode())

    def count(self, node: str) -> int:
        return sum(1 for call in self.calls if call[0] == node)


def batch_vmids(side: list[str]) -> list[str]:
    """The VMIDs of a config batch (``/bin/sh -c SCRIPT sh MARKER VMID... -- PCT-INVOCATION``)."""
    return side[5:side.index("--", 5)]


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNodes]:
    pct = tmp_path / "pct"
    pct.write_text("#!/bin/sh\nexit 99\n", encoding="utf-8")
    pct.chmod(0o755)
    nodes = FakeNodes(str(pct))
    monkeypatch.setattr(pct_containers, "_execute", nodes)
    nodes.add(LOCAL, 340, "running", config_text(340, "trainer-a", "tags: gpu;train\n"))
    nodes.add(LOCAL, 341, "stopped", config_text(341, "spare"))
    nodes.add("pve-c", 342, "running", config_text(342, "trainer-c", "net0: name=eth0,bridge=vmbr0,ip=10.0.0.42/24\n"))
    nodes.add("pve-c", 343, "stopped", config_text(343, "old-c"))
    nodes.add("pve-d", 344, "running", config_text(344, "trainer-d", "description: {{ 7 * 6 }}%0Aline two\n"))
    yield nodes


class Source:
    """Writes an inventory source file and parses it with the plugin."""

    def __init__(self, tmp_path: Path, fake: FakeNodes) -> None:
        self.tmp_path = tmp_path
        self.fake = fake
        self.plugin: Any = None

    def parse(self, name: str = "test.pct_containers.yml", use_cache: bool = True, **options: Any) -> InventoryData:
        """Parse a source with these options; ``use_cache`` is parse()'s ``cache`` (False: refresh)."""
        options.setdefault("pct_path", self.fake.pct_path)
        path = self.tmp_path / name
        path.write_text(yaml.safe_dump({"plugin": "trainops.pct_launch.pct_containers", **options}), encoding="utf-8")
        self.plugin = inventory_loader.get("trainops.pct_launch.pct_containers")
        assert self.plugin.verify_file(str(path))
        inventory = InventoryData()
        self.plugin.parse(inventory, DataLoader(), str(path), cache=use_cache)
        return inventory


@pytest.fixture()
def source(tmp_path: Path, fake: FakeNodes) -> Source:
    return Source(tmp_path, fake)


def hostvars(inventory: InventoryData, name: str) -> dict[str, Any]:
    return dict(inventory.get_host(name).get_vars())


def members(inventory: InventoryData, group: str) -> list[str]:
    return sorted(host.name for host in inventory.groups[group].get_hosts())


@pytest.mark.parametrize(("name", "accepted"), [
    ("pct_containers.yml", True), ("pct_containers.yaml", True), ("lab.pct_containers.yml", True),
    ("lab.pct_containers.yaml", True), ("inventory.yml", False), ("pct_containers.json", False), ("xpct_containers.yml", False),
])
def test_verify_file(tmp_path: Path, name: str, accepted: bool) -> None:
    path = tmp_path / name
    path.write_text("plugin: trainops.pct_launch.pct_containers\n", encoding="utf-8")
    assert inventory_loader.get("trainops.pct_launch.pct_containers").verify_file(str(path)) is accepted


def test_local_node_by_default(source: Source, fake: FakeNodes) -> None:
    inventory = source.parse()
    assert sorted(inventory.hosts) == ["ct340", "ct341"]
    assert members(inventory, "pct_node_local") == ["ct340", "ct341"]
    assert members(inventory, "pct_running") == ["ct340"]
    assert members(inventory, "pct_stopped") == ["ct341"]
    ct340 = hostvars(inventory, "ct340")
    assert ct340["ansible_connection"] == "trainops.pct_launch.pct"
    assert ct340["pct_vmid"] == 340
    assert ct340["pct_path"] == fake.pct_path
    assert "pct_node" not in ct340 and "pct_ssh_args" not in ct340
    assert ct340["pct_tags"] == ["gpu", "train"]
    assert (ct340["pct_hostname"], ct340["pct_cores"], ct340["pct_memory"]) == ("trainer-a", 2, 1024)
    assert [call[2][:2] for call in fake.calls] == [[fake.pct_path, "list"], ["/bin/sh", "-c"]]


def test_remote_nodes_two_ssh_calls_each(source: Source, fake: FakeNodes) -> None:
    for vmid in range(346, 356):
        fake.add("pve-d", vmid, "running", config_text(vmid, f"w{vmid}"))
    inventory = source.parse(nodes=["local", "pve-c", {"name": "pve-d", "ssh_args": "-p 2222"}], ssh_args="-F '/tmp/my cfg'", node_user="root")
    assert (fake.count(LOCAL), fake.count("pve-c"), fake.count("pve-d")) == (2, 2, 2)
    assert members(inventory, "pct_node_pve_c") == ["ct342", "ct343"]
    assert len(members(inventory, "pct_node_pve_d")) == 11
    ct342 = hostvars(inventory, "ct342")
    assert (ct342["pct_node"], ct342["pct_node_user"], ct342["pct_ssh_args"]) == ("pve-c", "root", "-F '/tmp/my cfg'")
    assert ct342["pct_ip"] == "10.0.0.42"
    assert ct342["pct_net"] == {"net0": {"name": "eth0", "bridge": "vmbr0", "ip": "10.0.0.42/24"}}
    assert hostvars(inventory, "ct344")["pct_ssh_args"] == "-p 2222"
    ssh = [call[1] for call in fake.calls if call[0] == "pve-c"][0]
    assert ssh[:9] == ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-l", "root", "-F"]
    assert ssh[9] == "/tmp/my cfg"


def test_status_filter_skips_configs(source: Source, fake: FakeNodes) -> None:
    fake.add("pve-e", 356, "stopped", config_text(356, "off"))
    inventory = source.parse(nodes=["local", "pve-c", "pve-e"], status=["running"])
    assert sorted(inventory.hosts) == ["ct340", "ct342"]
    batches = [call[2] for call in fake.calls if call[2][0] == "/bin/sh"]
    assert sorted(batch_vmids(batch) for batch in batches) == [["340"], ["342"]]  # nodes are listed in parallel
    assert fake.count("pve-e") == 1
    assert "pct_stopped" not in inventory.groups


def test_empty_node(source: Source, fake: FakeNodes) -> None:
    inventory = source.parse(nodes=["pve-empty"])
    assert not inventory.hosts
    assert fake.count("pve-empty") == 1


def test_unreachable_node_is_an_error_naming_it(source: Source, fake: FakeNodes) -> None:
    fake.unreachable.add("pve-c")
    expected = (r"Cannot list the containers of node pve-c: ssh could not run pct on node pve-c \(exit status 255\): "
                r".*ssh: connect to host pve-c port 22: Connection refused")
    with pytest.raises(AnsibleParserError, match=expected):
        source.parse(nodes=["local", "pve-c", "pve-d"])


CLUSTER_DOWN = (b"ipcc_send_rec[1] failed: Connection refused\nipcc_send_rec[2] failed: Connection refused\n"
                b"ipcc_send_rec[3] failed: Connection refused\nUnable to load access control list: Connection refused\n")


@pytest.mark.parametrize("status", [111, 255])  # Perl's die: $! (ECONNREFUSED) or 255, which over ssh is not ssh's
def test_pve_cluster_down_on_a_node_is_named(source: Source, fake: FakeNodes, status: int) -> None:
    fake.cluster_down["pve-c"] = status
    expected = (r"Cannot list the containers of node pve-c: pve-cluster \(pmxcfs, the file system of /etc/pve\) is not running on node pve-c, "
                r"so pct cannot read the configuration \(pct: ipcc_send_rec\[3\] failed: Connection refused \| "
                r"Unable to load access control list: Connection refused\); start it there \(systemctl start pve-cluster")
    with pytest.raises(AnsibleParserError, match=expected):
        source.parse(nodes=["local", "pve-c"])


def test_unreachable_node_warns_with_node_errors_warn(source: Source, fake: FakeNodes, capsys: pytest.CaptureFixture[str]) -> None:
    fake.unreachable.add("pve-c")
    inventory = source.parse(nodes=["local", "pve-c", "pve-d"], node_errors="warn")
    assert sorted(inventory.hosts) == ["ct340", "ct341", "ct344"]
    assert "Cannot list the containers of node pve-c" in " ".join(capsys.readouterr().err.split())


def test_missing_local_pct(source: Source) -> None:
    expected = r"Cannot list the containers of the local node: /nonexistent/pct was not found at that path on the local node"
    with pytest.raises(AnsibleParserError, match=expected):
        source.parse(pct_path="/nonexistent/pct")


def test_vanished_container_left_out_with_warning(source: Source, fake: FakeNodes, capsys: pytest.CaptureFixture[str]) -> None:
    fake.add("pve-c", 345, "running", None)
    inventory = source.parse(nodes=["pve-c"])
    assert sorted(inventory.hosts) == ["ct342", "ct343"]
    err = " ".join(capsys.readouterr().err.split())  # ansible-core < 2.19 wraps warnings
    assert "Left out container 345 on node pve-c: pct config 345 exited with status 2" in err
    assert "345.conf' does not exist" in err


def test_without_connection_vars(source: Source) -> None:
    inventory = source.parse(nodes=["pve-c"], connection_vars=False, ssh_args="-F cfg")
    ct342 = hostvars(inventory, "ct342")
    assert "ansible_connection" not in ct342 and "pct_ssh_args" not in ct342
    assert (ct342["pct_vmid"], ct342["pct_node"]) == (342, "pve-c")


def test_hostname_format(source: Source) -> None:
    inventory = source.parse(nodes=["local", "pve-c"], hostname_format="{node}-{hostname}")
    assert sorted(inventory.hosts) == ["local-spare", "local-trainer-a", "pve-c-old-c", "pve-c-trainer-c"]


def test_hostname_collision_is_an_error(source: Source, fake: FakeNodes) -> None:
    fake.add("pve-d", 345, "running", config_text(345, "trainer-c"))
    with pytest.raises(AnsibleParserError, match=r"gives the host name trainer-c to both container 342 on node pve-c and container 345 on node pve-d"):
        source.parse(nodes=["pve-c", "pve-d"], hostname_format="{hostname}")


@pytest.mark.parametrize(("options", "message"), [
    ({"hostname_format": "{name}"}, "invalid hostname_format"),
    ({"nodes": ["pve-c", "pve-c"]}, "node pve-c is listed twice"),
    ({"nodes": [{"name": "pve-c", "port": 22}]}, r"unknown key\(s\) port"),
])
def test_invalid_source(source: Source, options: dict[str, Any], message: str) -> None:
    with pytest.raises(AnsibleParserError, match=message):
        source.parse(**options)


def test_constructable(source: Source) -> None:
    inventory = source.parse(
        nodes=["local", "pve-c"],
        compose={"ansible_python_interpreter": "'/usr/bin/python3'", "big": "pct_memory >= 1024"},
        groups={"trainers": "pct_hostname.startswith('trainer')"},
        keyed_groups=[{"key": "pct_tags", "prefix": "tag"}, {"key": "pct_ostype", "prefix": "os"}],
    )
    assert hostvars(inventory, "ct340")["ansible_python_interpreter"] == "/usr/bin/python3"
    assert hostvars(inventory, "ct340")["big"] is True
    assert members(inventory, "trainers") == ["ct340", "ct342"]
    assert members(inventory, "tag_gpu") == ["ct340"]
    assert members(inventory, "os_debian") == ["ct340", "ct341", "ct342", "ct343"]


def test_values_from_nodes_are_never_templated(source: Source) -> None:
    inventory = source.parse(nodes=["pve-d"])
    variables = hostvars(inventory, "ct344")
    assert variables["pct_config"]["description"] == "{{ 7 * 6 }}\nline two"
    templar = Templar(loader=DataLoader(), variables=variables)
    assert templar.template(trust_as_template("{{ 6 * 7 }}")) in (42, "42")
    assert templar.template(trust_as_template("{{ pct_config.description }}")) == "{{ 7 * 6 }}\nline two"


def test_cache(source: Source, fake: FakeNodes, tmp_path: Path) -> None:
    options = {"nodes": ["local", "pve-c"], "cache_plugin": "ansible.builtin.jsonfile",
               "cache_connection": str(tmp_path / "cache")}
    first = source.parse(use_cache=False, cache=True, **options)
    source.plugin.update_cache_if_changed()
    assert len(fake.calls) == 4
    second = source.parse(use_cache=True, cache=True, **options)
    assert len(fake.calls) == 4, "the second parse must be served from the cache"
    assert sorted(second.hosts) == sorted(first.hosts)
    assert hostvars(second, "ct342") == hostvars(first, "ct342")
    filtered = source.parse(use_cache=True, cache=True, status=["stopped"], **options)
    assert sorted(filtered.hosts) == ["ct341", "ct343"]
    source.parse(use_cache=True, cache=True, **dict(options, nodes=["local", "pve-c", "pve-d"]))
    assert len(fake.calls) == 10, "a node missing from the cache refreshes it"


def test_a_node_whose_pct_has_no_keep_env_gets_pct_keep_env_false(source: Source, fake: FakeNodes, tmp_path: Path) -> None:
    """pve-container 5.0.8 on pve-c: its containers get pct_keep_env false (no refused call per task); 6.x: nothing set."""
    fake.pve_container.update({"pve-c": "5.0.8", LOCAL: "6.1.10"})
    options = {"nodes": ["local", "pve-c", "pve-d"], "cache_plugin": "ansible.builtin.jsonfile", "cache_connection": str(tmp_path / "cache")}
    inventory = source.parse(use_cache=False, cache=True, **options)
    assert (fake.count(LOCAL), fake.count("pve-c"), fake.count("pve-d")) == (2, 2, 2)  # asked in the batch, no call more
    assert hostvars(inventory, "ct342")["pct_keep_env"] is False and hostvars(inventory, "ct343")["pct_keep_env"] is False
    assert "pct_keep_env" not in hostvars(inventory, "ct340")  # knows it: the connection's default passes it
    assert "pct_keep_env" not in hostvars(inventory, "ct344")  # not known (no help section): the connection finds out
    source.plugin.update_cache_if_changed()
    cached = source.parse(use_cache=True, cache=True, **options)
    assert len(fake.calls) == 6 and hostvars(cached, "ct342")["pct_keep_env"] is False
    bare = source.parse(nodes=["pve-c"], connection_vars=False)
    assert "pct_keep_env" not in hostvars(bare, "ct342")


def test_failed_refresh_does_not_update_cache(source: Source, fake: FakeNodes, tmp_path: Path) -> None:
    options = {"nodes": ["local", "pve-c"], "cache_plugin": "ansible.builtin.jsonfile",
               "cache_connection": str(tmp_path / "cache"), "node_errors": "warn"}
    fake.unreachable.add("pve-c")
    source.parse(use_cache=False, cache=True, **options)
    source.plugin.update_cache_if_changed()
    fake.unreachable.clear()
    inventory = source.parse(use_cache=True, cache=True, **options)
    assert "ct342" in inventory.hosts


def test_node_become_runs_pct_under_sudo_and_tells_the_connection(source: Source, fake: FakeNodes) -> None:
    inventory = source.parse(nodes=["pve-c", {"name": "pve-d", "node_user": "root", "node_become": False}], node_user="trainops", node_become=True,
                             pct_path="pct")
    sides = {node: [side for name, dummy, side in fake.calls if name == node] for node in ("pve-c", "pve-d")}
    assert sides["pve-c"][0] == ["sudo", "-n", "--", "pct", "list"]
    assert sides["pve-c"][1][:2] == ["/bin/sh", "-c"] and sides["pve-c"][1][-5:] == ["--", "sudo", "-n", "--", "pct"]
    assert sides["pve-d"][0] == ["pct", "list"] and sides["pve-d"][1][-2:] == ["--", "pct"]
    ct342 = hostvars(inventory, "ct342")
    assert (ct342["pct_node_user"], ct342["pct_node_become"]) == ("trainops", True)
    assert "pct_node_become" not in hostvars(inventory, "ct344")


def test_node_become_refused_names_the_sudoers_rule(source: Source, fake: FakeNodes) -> None:
    fake.sudo_refuses.add("pve-c")
    expected = (r"Cannot list the containers of node pve-c: sudo refused to run pct as root for trainops on node pve-c without a password "
                r"\(sudo -n -- pct: sudo: a password is required\); allow NOPASSWD for pct in sudoers on node pve-c, "
                r"e\.g\. `trainops ALL=\(root\) NOPASSWD: /usr/sbin/pct`")
    with pytest.raises(AnsibleParserError, match=expected):
        source.parse(nodes=["pve-c"], node_user="trainops", node_become=True, pct_path="pct")


def test_local_node_become(source: Source, fake: FakeNodes) -> None:
    inventory = source.parse(node_become=True)
    assert [call[2][:4] for call in fake.calls][0] == ["sudo", "-n", "--", fake.pct_path]
    assert hostvars(inventory, "ct340")["pct_node_become"] is True
