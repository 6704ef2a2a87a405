# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Simulated remote Proxmox VE nodes for integration tests (``tools/pve_standin/node.sh``).

Each node has its own sshd on its own loopback address and its own container set. The session
fixture ``remote_nodes`` brings up pve-a (127.0.0.11) and pve-b (127.0.0.12) with ``node.sh up``
when they are not up yet, and never takes them down (other test sessions may use them). It writes
an ssh client configuration of its own (``ssh_config`` and ``known_hosts`` for these two nodes
only), so that ``node.sh up``/``down`` of other nodes, which rewrite the shared client files, cannot
disturb a run. Host key checking stays on: the configuration sets no ``StrictHostKeyChecking``
(ssh's default, which refuses unknown and changed keys under ``BatchMode``).

Containers are created through the node's sshd (``ssh pve-a pct create ...``): a node's containers
are reachable only from inside its sshd's mount namespace, because LXC names a container's command
socket after the LXC path there. VMIDs must be unique across all nodes for the same reason, so
``RemoteNodes.create`` removes a leftover container with that VMID from every node of the fixture
first. Everything created is destroyed at the end of the session.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from .conftest import REPO, StandinNode, require_standin

NODE_SH = REPO / "tools" / "pve_standin" / "node.sh"
NODES_BASE = Path(os.environ.get("PVE_STANDIN_NODES", "/var/lib/pve-standin-nodes"))
CLIENT_KEY = NODES_BASE / "client" / "id_ed25519"
# The nodes of this collection's remote-node tests; other test sessions use other names and addresses.
REMOTE_NODES = (("pve-a", "127.0.0.11"), ("pve-b", "127.0.0.12"))


def host_block(alias: str, options: Mapping[str, str | None]) -> str:
    """One ``Host`` entry of an ssh_config; options whose value is None are left out."""
    lines = [f"Host {alias}"] + [f"  {key} {value}" for key, value in options.items() if value is not None]
    return "\n".join(lines) + "\n\n"


class RemoteNode(StandinNode):
    """A simulated remote node: ``pct`` runs on it through its sshd, with this session's ssh configuration."""

    def __init__(self, name: str, address: str, port: int, client_dir: Path) -> None:
        super().__init__(None)
        self.name = name
        self.address = address
        self.port = port
        self.client_dir = client_dir

    @property
    def state_root(self) -> Path:
        """The node's stand-in state (seen as /var/lib/pve-standin by whatever runs through its sshd)."""
        return NODES_BASE / self.name / "root"

    @property
    def ssh_config(self) -> Path:
        """This session's ssh_config, which reaches every node of the fixture by name."""
        return self.client_dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        """This session's known_hosts, with the real host key of every node of the fixture."""
        return self.client_dir / "known_hosts"

    def host_key(self) -> str:
        """``TYPE BASE64`` of the node's sshd host key."""
        fields = (NODES_BASE / self.name / "ssh_host_ed25519_key.pub").read_text(encoding="utf-8").split()
        return f"{fields[0]} {fields[1]}"

    def ssh_options(self, **overrides: str | None) -> dict[str, str | None]:
        """The ssh_config options that reach this node; ``overrides`` replace or (None) remove some."""
        options: dict[str, str | None] = {
            "HostName": self.address,
            "Port": str(self.port),
            "User": "root",
            "IdentityFile": str(CLIENT_KEY),
            "IdentitiesOnly": "yes",
            "UserKnownHostsFile": str(self.known_hosts),
            "HostKeyAlias": self.name,
            "BatchMode": "yes",
        }
        options.update(overrides)
        return options

    def ssh_argv(self, remote_argv: list[str]) -> list[str]:
        """``ssh`` reaching this node without a terminal, running ``remote_argv`` there (byte-exact)."""
        return ["ssh", "-F", str(self.ssh_config), "-T", "-o", "ControlMaster=no", self.name, "--", shlex.join(remote_argv)]

    def pct(self, *args: str | int, check: bool = False, input: bytes | None = None,  # pylint: disable=redefined-builtin
            timeout: float = 120, extra_env: dict[str, str] | None = None,
            capture: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run ``pct`` with these arguments on the node, through its sshd; stdin is a pipe (never a tty)."""
        assignments = [f"{key}={value}" for key, value in (extra_env or {}).items()]
        out = subprocess.PIPE if capture else subprocess.DEVNULL
        argv = self.ssh_argv(["env", *assignments, "pct", *map(str, args)])
        result = subprocess.run(argv, input=input or b"", stdout=out, stderr=out, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"pct {' '.join(map(str, args))} on {self.name} exited {result.returncode}: {result.stderr!r}")
        return result

    @contextlib.contextmanager
    def knobs(self, **values: str) -> Iterator[None]:
        """Set stand-in knobs (``knobs.conf`` in the node's state root) for a while; restores the file afterwards."""
        path = self.state_root / "knobs.conf"
        before = path.read_bytes() if path.exists() else None
        kept = [line for line in (before or b"").decode("utf-8").splitlines() if line.split("=", 1)[0].strip() not in values]
        path.write_text("".join(f"{line}\n" for line in kept + [f"{key}={value}" for key, value in values.items()]), encoding="utf-8")
        try:
            yield
        finally:
            if before is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(before)


class RemoteNodes(dict):  # type: ignore[type-arg]
    """The fixture's nodes by name, with the private ssh client configuration that reaches them."""

    def __init__(self, client_dir: Path, nodes: list[RemoteNode]) -> None:
        super().__init__((node.name, node) for node in nodes)
        self.client_dir = client_dir

    @property
    def ssh_config(self) -> Path:
        """The ssh_config of this session (a ``Host`` entry per node)."""
        return self.client_dir / "ssh_config"

    def write_client_files(self) -> None:
        """Write this session's ssh_config and known_hosts."""
        nodes: list[RemoteNode] = list(self.values())
        self.ssh_config.write_text("".join(host_block(node.name, node.ssh_options()) for node in nodes), encoding="utf-8")
        (self.client_dir / "known_hosts").write_text("".join(f"{node.name} {node.host_key()}\n" for node in nodes), encoding="utf-8")

    def create(self, node_name: str, vmid: int, release: str = "bookworm") -> int:
        """Create and start container ``vmid`` on ``node_name``, after removing it from every node of the fixture."""
        for node in self.values():
            if node.pct("config", vmid).returncode == 0:
                node.pct("destroy", vmid, "--force", check=True)
        node = self[node_name]
        node.create(vmid, release=release)
        status = node.pct("status", vmid)
        if status.stdout.strip() != b"status: running":
            raise AssertionError(
                f"container {vmid} on {node_name} did not stay running ({status.stdout!r} {status.stderr!r}); when many containers run, "
                "their systemd may have exhausted root's inotify instances: check sysctl fs.inotify.max_user_instances"
            )
        return vmid

    def destroy_all(self) -> None:
        """Destroy every container created through the fixture."""
        for node in self.values():
            node.destroy_all()


def _node_address(name: str) -> tuple[str, int] | None:
    """Address and port of node ``name`` when node.sh reports it up, else None."""
    listing = subprocess.run([str(NODE_SH), "list"], capture_output=True, text=True, timeout=60, check=False)
    for line in listing.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == name:
            return fields[1], int(fields[2])
    return None


def _require_sshd() -> None:
    if shutil.which("sshd") is None and not os.access("/usr/sbin/sshd", os.X_OK):
        message = "needs the OpenSSH server for simulated remote nodes: apt-get install openssh-server"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def remote_nodes_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteNodes]:
    """Body of the session fixture ``remote_nodes`` (in conftest.py): nodes pve-a (127.0.0.11) and pve-b (127.0.0.12).

    Brings them up when they are not, never takes them down; destroys the containers made through them at the end.
    """
    require_standin()
    _require_sshd()
    client_dir = tmp_path_factory.mktemp("ssh-client")
    nodes = []
    for name, address in REMOTE_NODES:
        where = _node_address(name)
        if where is None:
            subprocess.run([str(NODE_SH), "up", name, address], capture_output=True, timeout=120, check=True)
            where = _node_address(name)
        assert where is not None, f"node {name} did not come up (tools/pve_standin/node.sh up {name} {address})"
        nodes.append(RemoteNode(name, where[0], where[1], client_dir))
    fleet = RemoteNodes(client_dir, nodes)
    fleet.write_client_files()
    for node in nodes:
        probe = subprocess.run(node.ssh_argv(["cat", "/var/lib/pve-standin/node"]), capture_output=True, text=True, timeout=60, check=False)
        assert probe.stdout.strip() == node.name, f"ssh to node {node.name} failed: {probe.stderr}"
    yield fleet
    fleet.destroy_all()
