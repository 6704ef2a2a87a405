# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Fixtures for integration tests on real LXC containers behind the pct stand-in.

Containers are unprivileged unless a test asks otherwise (``StandinNode.create(privileged=True)``), as the Proxmox
VE web UI and ``pct create`` of pve-container 6.0.6+ make them. A test marked ``both_privileges`` runs twice: as
``[unprivileged]``, and as ``[privileged]`` after every other test of its module, with the containers its
module- and session-scoped fixtures created turned privileged in place (stopped, their ids shifted back, started
again: ``privileges``) and every container it creates itself privileged.
"""
from __future__ import annotations

import http.server
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import typing as t
import uuid
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STANDIN_DIR = REPO / "tools" / "pve_standin"
STANDIN_PCT = STANDIN_DIR / "pct"
INSTALL_TMUX = Path(__file__).resolve().parent / "files" / "install_tmux.sh"
BOTH_PRIVILEGES = "both_privileges"
PRIVILEGES = ("unprivileged", "privileged")


def _have_lxc() -> bool:
    return os.geteuid() == 0 and shutil.which("lxc-start") is not None and shutil.which("mmdebstrap") is not None


NO_STANDIN = "needs root, LXC and mmdebstrap: run tools/pve_standin/setup.sh"


def require_standin() -> None:
    """Skip when the stand-in cannot run here; in CI (CI set) that is a failure, not a skip."""
    if _have_lxc():
        return
    if os.environ.get("CI"):
        pytest.fail(NO_STANDIN)
    pytest.skip(NO_STANDIN)


def knob_pct(folder: Path, **knobs: str) -> str:
    """A pct_path wrapper of this machine's pct with stand-in knobs (``delay``, ``call_log``) for the calls of one run.

    The connection runs pct with a clean environment, so the knobs cannot come from ansible-playbook's.
    """
    wrapper = folder / f"pct-knobs-{uuid.uuid4().hex[:8]}"
    exports = "".join(f"export PVE_STANDIN_{key.upper()}={shlex.quote(value)}\n" for key, value in knobs.items())
    wrapper.write_text(f'#!/bin/sh\n{exports}exec {shlex.quote(str(STANDIN_PCT))} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return str(wrapper)


class StandinNode:
    """A stand-in Proxmox node with its own state root; its containers are destroyed at the end.

    ``privileged_run`` is True while a ``both_privileges`` test runs as ``[privileged]``: every ``pct create`` made
    through ``pct`` without ``--unprivileged`` then makes a privileged container.
    """

    privileged_run = False

    def __init__(self, root: Path | None, env: dict[str, str] | None = None) -> None:
        self.env = dict(os.environ)
        if root is not None:
            self.env["PVE_STANDIN_ROOT"] = str(root)
        self.env.update(env or {})
        self.created: list[int] = []

    def pct(self, *args: str | int, check: bool = False, input: bytes | None = None,  # pylint: disable=redefined-builtin
            timeout: float = 120, extra_env: dict[str, str] | None = None,
            capture: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run the stand-in's pct with these arguments; stdin is a pipe (never a tty).

        With ``capture=False`` stdout and stderr go to /dev/null: a job that keeps
        inherited pipes open would otherwise hold the call until it ends.
        """
        env = dict(self.env, **(extra_env or {}))
        out = subprocess.PIPE if capture else subprocess.DEVNULL
        argv = [str(arg) for arg in args]
        if argv[:1] == ["create"] and StandinNode.privileged_run and "--unprivileged" not in argv:
            argv += ["--unprivileged", "0"]
        result = subprocess.run([str(STANDIN_PCT), *argv], input=input or b"", stdout=out, stderr=out,
                                env=env, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"pct {' '.join(map(str, args))} exited {result.returncode}: {result.stderr!r}")
        if argv[:1] == ["create"] and result.returncode == 0:
            _CREATED[argv[1]] = (self, _FIXTURES[-1] if _FIXTURES else ("", ""))
        return result

    def sh(self, vmid: int, script: str, *args: str, check: bool = True, input: bytes | None = None,  # pylint: disable=redefined-builtin
           timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        """Run a POSIX sh script inside a container, with positional arguments."""
        return self.pct("exec", vmid, "--", "sh", "-c", script, "sh", *args, check=check, input=input, timeout=timeout)

    def apt_install(self, vmid: int, *packages: str) -> None:
        """Install Debian packages inside a container.

        apt's output goes to a file inside: apt drops to the _apt user, whose gpgv
        cannot reopen a root-owned pipe as /dev/stderr ("Unknown error executing
        apt-key"), as with real pct exec over a non-tty ssh session.
        """
        script = ('export DEBIAN_FRONTEND=noninteractive; { apt-get update -qq && apt-get install -y -qq "$@"; } '
                  '>/tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }')
        self.sh(vmid, script, *packages, timeout=600)

    def install_tmux(self, vmid: int, *dirs: str) -> str:
        """Install tmux in a container unless it has it (files/install_tmux.sh), make ``dirs``; its ``tmux -V``."""
        out = self.sh(vmid, INSTALL_TMUX.read_text(encoding="utf-8"), *dirs, check=False, timeout=600)
        assert out.returncode == 0, f"installing tmux in CT {vmid} failed: {out.stderr.decode(errors='replace')}"
        return out.stdout.decode(errors="replace").strip()

    def create(self, vmid: int, release: str = "bookworm", start: bool = True, privileged: bool = False) -> int:
        """Create (and start) a fresh container, replacing any left over from an earlier run.

        Unprivileged (``--unprivileged 1``) unless ``privileged`` or a ``both_privileges`` test's privileged run.
        """
        if self.pct("config", vmid).returncode == 0:
            self.pct("destroy", vmid, "--force", check=True)
        privileged = privileged or StandinNode.privileged_run
        args: list[str] = ["create", str(vmid), "--release", release, "--unprivileged", "0" if privileged else "1"]
        if start:
            args += ["--start", "1"]
        self.pct(*args, check=True, timeout=600)
        self.created.append(vmid)
        return vmid

    def destroy_all(self) -> None:
        """Destroy every container this fixture created."""
        for vmid in self.created:
            self.pct("destroy", vmid, "--force")

    def set_privileged(self, vmid: int | str, privileged: bool) -> bool:
        """Turn a container privileged or unprivileged in place (stopped, ids shifted, started again when it ran).

        Real pct refuses (``unprivileged`` is read-only): this is the stand-in's own (standin_image.set_privilege),
        for the ``both_privileges`` runs. True when the container changed.
        """
        if str(STANDIN_DIR) not in sys.path:
            sys.path.insert(0, str(STANDIN_DIR))
        import standin_core  # pylint: disable=import-outside-toplevel,import-error
        import standin_image  # pylint: disable=import-outside-toplevel,import-error
        node = standin_core.state_from_env(self.env)
        if (node.read_conf(str(vmid)).get("unprivileged") == "1") != privileged:
            return False
        running = node.is_running(str(vmid))
        if running:
            self.pct("stop", vmid, check=True)
        standin_image.set_privilege(node, str(vmid), not privileged)
        if running:
            self.pct("start", vmid, check=True)
        return True


@pytest.fixture(autouse=True)
def shared_ssh_per_test() -> Iterator[Path]:
    """The pct connection's shared ssh connections (pct_ssh_control_persist, on as shipped) live for one test.

    As shipped, a run reuses the connection another run left open to the same node and user for 60 s, without a
    new handshake: a test that breaks the node's keys or address must not reuse an earlier test's. So every test
    gets its own folder (ANSIBLE_PCT_SSH_CONTROL_PATH_DIR, short: a socket path has at most 107 bytes), and the
    connections left in it are closed after the test.
    """
    folder = Path(tempfile.mkdtemp(prefix="cp-", dir="/tmp"))
    previous = os.environ.get("ANSIBLE_PCT_SSH_CONTROL_PATH_DIR")
    os.environ["ANSIBLE_PCT_SSH_CONTROL_PATH_DIR"] = str(folder)
    try:
        yield folder
    finally:
        if previous is None:
            os.environ.pop("ANSIBLE_PCT_SSH_CONTROL_PATH_DIR", None)
        else:
            os.environ["ANSIBLE_PCT_SSH_CONTROL_PATH_DIR"] = previous
        for socket in folder.glob("pct-*"):
            subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "shared-connection"], capture_output=True, timeout=30, check=False)
        shutil.rmtree(folder, ignore_errors=True)


# Which fixture created each container (by VMID): the innermost fixture being set up when ``pct create`` ran, as
# (name, the node ID of the folder or module that defines it).
_CREATED: dict[str, tuple[StandinNode, tuple[str, str]]] = {}
_FIXTURES: list[tuple[str, str]] = []
_TURNED: set[str] = set()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object]) -> Generator[None, None, None]:
    """Remember which fixture is being set up, so that ``privileges`` knows which containers a fixture made."""
    _FIXTURES.append((fixturedef.argname, fixturedef.baseid))
    try:
        yield
    finally:
        _FIXTURES.pop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A ``both_privileges`` test runs as ``[unprivileged]`` and ``[privileged]``."""
    if metafunc.definition.get_closest_marker(BOTH_PRIVILEGES) is not None:
        metafunc.parametrize("privileges", PRIVILEGES, indirect=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``[privileged]`` runs go after every other test of their module: their containers are turned once."""
    def privileged(item: pytest.Item) -> bool:
        callspec = getattr(item, "callspec", None)
        return callspec is not None and callspec.params.get("privileges") == "privileged"

    order: dict[object, list[pytest.Item]] = {}
    for item in items:
        order.setdefault(getattr(item, "module", None), []).append(item)
    items[:] = [item for group in order.values() for item in sorted(group, key=privileged)]


@pytest.fixture(autouse=True)
def privileges(request: pytest.FixtureRequest) -> Iterator[str]:
    """``privileged`` in the privileged run of a ``both_privileges`` test, else ``unprivileged``.

    The containers made by the fixtures this test uses (module- or session-scoped: made before it) are turned to
    that privilege, in place, when they are not yet (after a privileged run, the next test turns them back).
    """
    wanted = getattr(request, "param", "unprivileged")
    for vmid, (node, (fixture, baseid)) in list(_CREATED.items()):
        if fixture not in request.fixturenames or not request.node.nodeid.startswith(baseid):
            continue
        if wanted == "unprivileged" and vmid not in _TURNED:
            continue
        if node.pct("config", vmid).returncode != 0:
            del _CREATED[vmid]
        elif node.set_privileged(vmid, wanted == "privileged"):
            _TURNED.add(vmid)
    StandinNode.privileged_run = wanted == "privileged"
    try:
        yield wanted
    finally:
        StandinNode.privileged_run = False


@pytest.fixture(scope="session")
def standin() -> Iterator[StandinNode]:
    """The default stand-in node (PVE_STANDIN_ROOT as set up by setup.sh)."""
    require_standin()
    node = StandinNode(None)
    yield node
    node.destroy_all()


@pytest.fixture()
def private_node(tmp_path: Path) -> Iterator[StandinNode]:
    """A separate stand-in node of its own (own state root, own knobs), sharing the image cache."""
    require_standin()
    node = StandinNode(tmp_path / "node")
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "node").write_text("testnode\n", encoding="utf-8")
    yield node
    node.destroy_all()


class Hooks(http.server.BaseHTTPRequestHandler):
    """Records every POST body as JSON (the class of each ``webhook`` gets a list of its own)."""

    events: list[dict[str, t.Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).events.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: t.Any) -> None:
        pass


@pytest.fixture()
def webhook() -> Iterator[tuple[str, list[dict[str, t.Any]]]]:
    """A real HTTP server on 127.0.0.1 (the stand-in's containers share the host's network); its URL (with a token in
    the path, as real webhooks have) and the events it got, in order."""
    events: list[dict[str, t.Any]] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Hooks,), {"events": events}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks/T0K3N-{uuid.uuid4().hex}", events
    server.shutdown()


def lines(output: bytes) -> Sequence[str]:
    """Decode command output into lines."""
    return output.decode("utf-8", "replace").splitlines()


# ---------------------------------------------------------------------------
# Simulated remote Proxmox VE nodes over SSH (tests/integration/nodes.py):
# session fixture ``remote_nodes``, nodes pve-a and pve-b each with its own sshd.
# ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def remote_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Simulated remote nodes pve-a and pve-b (a ``nodes.RemoteNodes``): see tests/integration/nodes.py."""
    from .nodes import remote_nodes_session  # pylint: disable=import-outside-toplevel  # nodes.py imports this module
    yield from remote_nodes_session(tmp_path_factory)
