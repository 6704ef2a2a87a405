# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Every file and program the entry points depend on comes from a package they install.

A newcomer's bare Debian 12 machine has the packages of priority required and nothing else
(debootstrap's minbase, Debian's container images). The entry points (tools/quickstart.sh,
tools/bootstrap.sh, tools/pve_standin/setup.sh and its ``pct``, tools/pve_standin/node.sh,
benchmarks/run.sh) install what they lack through tools/system-packages.sh; these tests fail the
day one of them needs a file or a program that no package of those lists (or their dependencies,
or the base system) provides, as lxc-templates' debian.common.conf and openssh-server once did:

* the files the stand-in's LXC container configuration includes, followed recursively;
* the programs the stand-in's and the benchmarks' Python code runs (argv literals, read with ast);
* the programs that the shell entry points and everything they start really execute on the host,
  traced with strace: setup.sh creating and starting a container and every pct verb on it,
  node.sh up / ssh / list / down of a simulated node, bootstrap.sh, and the benchmark's
  hand-written baseline launch. Programs that run inside a container or a chroot are left out
  (their paths are the container's), and the test checks that this filter keeps them apart.

dpkg tells which package ships each file (``dpkg-query -S``).
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from . import exec_trace
from .conftest import REPO, require_standin

pytestmark = pytest.mark.integration

PACKAGES_SH = REPO / "tools" / "system-packages.sh"
STANDIN = REPO / "tools" / "pve_standin"
VMID = 395
NODE, NODE_ADDRESS = "pve-pkg", "127.0.0.39"
# A bare root shell's PATH on Debian: nothing of this machine's pyenv, venvs or /root/bin.
BARE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUNNERS = {"run", "Popen", "run_checked", "check_output", "check_call", "call"}


@pytest.fixture(scope="module")
def base() -> set[str]:
    """The base system's packages, or a skip where this is no Debian with strace."""
    require_standin()
    if shutil.which("dpkg-query") is None or shutil.which("strace") is None:
        pytest.fail("needs dpkg and strace (tools/system-packages.sh tests installs strace)")
    return exec_trace.base_system()


def allowed(base: set[str], *groups: str) -> set[str]:
    """The packages a machine has after the entry points of these groups ran on a bare system."""
    return base | exec_trace.closure(exec_trace.system_packages(PACKAGES_SH, *groups))


def interpreter_of_venvs() -> set[str]:
    """Where the interpreters of the checkout's venvs live (bootstrap.sh's python3: Debian's on a bare machine)."""
    homes = set()
    for venv in REPO.glob(".venv*"):
        config = venv / "pyvenv.cfg"
        if config.is_file():
            for line in config.read_text(encoding="utf-8").splitlines():
                if line.startswith("home = "):
                    homes.add(os.path.realpath(line.split(" = ", 1)[1]))
    return homes


def unprovided(paths: Iterable[str], packages: set[str]) -> list[str]:
    """The paths that are neither the checkout's own nor shipped by one of ``packages``."""
    venv_homes = interpreter_of_venvs()
    # root's own login files run programs of its home (this machine's pyenv in .bashrc, when sshd
    # starts a shell for pct): the user's, on any machine, not the scripts'.
    home = os.path.realpath(os.path.expanduser("~")) + os.sep
    bad = []
    for path in sorted(set(paths)):
        real = os.path.realpath(path)
        if real.startswith(str(REPO) + os.sep) or (real.startswith(home) and not path.startswith("/usr/")):
            continue
        if os.path.dirname(real) in venv_homes and os.path.basename(real).startswith("python"):
            continue
        package = exec_trace.owner(path)
        if package not in packages:
            bad.append(f"{path} (from {package or 'no Debian package'})")
    return bad


def lxc_includes(path: Path, seen: set[Path] | None = None) -> set[Path]:
    """The files an LXC config file includes, followed recursively (a folder includes its *.conf)."""
    seen = set() if seen is None else seen
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _sep, value = line.partition("=")
        if key.strip() != "lxc.include":
            continue
        target = Path(value.strip())
        for one in sorted(target.glob("*.conf")) if target.is_dir() else [target]:
            if one not in seen:
                seen.add(one)
                if one.is_file():
                    lxc_includes(one, seen)
    return seen


def test_the_container_configuration_includes_only_files_of_installed_packages(base: set[str], tmp_path: Path) -> None:
    sys.path.insert(0, str(STANDIN))
    try:
        import standin_image  # pylint: disable=import-outside-toplevel,import-error
    finally:
        sys.path.remove(str(STANDIN))
    config = tmp_path / "config"
    config.write_text(standin_image.lxc_config("395", "dir:/nonexistent", "ct395"), encoding="utf-8")
    included = lxc_includes(config)
    assert Path(standin_image.LXC_COMMON) in included, included
    missing = [str(path) for path in included if not path.is_file()]
    assert not missing, f"the stand-in's LXC config includes files that do not exist: {missing}"
    bad = unprovided(map(str, included), allowed(base, "standin"))
    assert not bad, f"the stand-in's LXC config includes files that tools/system-packages.sh standin does not install: {bad}"


def argv_programs(tree: ast.AST) -> set[str]:
    """argv[0] of the commands a Python file runs: list literals given to subprocess-like calls, and Node.lxc()."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        first = node.args[0] if node.args else None
        if name == "lxc" and isinstance(first, ast.Constant) and isinstance(first.value, str):
            found.add("lxc-" + first.value)
        elif name in RUNNERS and isinstance(first, (ast.List, ast.Tuple)) and first.elts:
            head = first.elts[0]
            if isinstance(head, ast.Constant) and isinstance(head.value, str):
                found.add(head.value)
    return found


# The benchmarks run with the development venv first on PATH (tools/env.sh): ansible comes from pip.
@pytest.mark.parametrize(("folder", "groups", "path"), [
    ("tools/pve_standin", ("standin",), BARE_PATH),
    ("benchmarks", ("bootstrap", "standin", "nodes"), f"{REPO}/.venv/bin:{BARE_PATH}")])
def test_the_programs_python_code_runs_come_from_installed_packages(
        base: set[str], folder: str, groups: tuple[str, ...], path: str) -> None:
    programs: dict[str, str] = {}
    for source in sorted((REPO / folder).glob("*.py")):
        for program in argv_programs(ast.parse(source.read_text(encoding="utf-8"))):
            programs.setdefault(program, source.name)
    assert "lxc-attach" in programs or folder != "tools/pve_standin", programs
    paths, not_found = [], []
    for program, source in sorted(programs.items()):
        found = shutil.which(program, path=path) if "/" not in program else program
        if found is None:
            not_found.append(f"{program} (in {source})")
        else:
            paths.append(found)
    assert not not_found, f"programs not found on a root PATH: {not_found}"
    bad = unprovided(paths, allowed(base, *groups))
    assert not bad, f"{folder} runs programs of packages that tools/system-packages.sh {' '.join(groups)} does not install: {bad}"


def bare_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a root shell on a bare machine, with a private stand-in node."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VIRTUAL_ENV", "PYENV", "PVE_STANDIN"))}
    env.update(PATH=BARE_PATH, PVE_STANDIN_ROOT=str(tmp_path / "node"), HOME=os.environ.get("HOME", "/root"))
    (tmp_path / "node").mkdir(exist_ok=True)
    (tmp_path / "node" / "node").write_text("pkgnode\n", encoding="utf-8")
    return env


def trace(tmp_path: Path, name: str, script: str, timeout: float = 600) -> exec_trace.Trace:
    """Run a bash script from the checkout under strace, as root with a bare PATH."""
    return exec_trace.traced_programs(["bash", "-euo", "pipefail", "-c", script, name], tmp_path / f"{name}.strace",
                                      {**bare_env(tmp_path), "VMID": str(VMID)}, timeout)


STANDIN_SCRIPT = f"""
cd {REPO}
STANDIN_VMID=$VMID tools/pve_standin/setup.sh
pct status $VMID
pct config $VMID
printf '#!/bin/sh\\necho inside\\n' > "$PVE_STANDIN_ROOT/inside-only.sh"
pct push $VMID "$PVE_STANDIN_ROOT/inside-only.sh" /root/inside-only.sh --perms 0755
pct exec $VMID -- /root/inside-only.sh
pct pull $VMID /etc/hostname "$PVE_STANDIN_ROOT/hostname"
pct reboot $VMID
pct stop $VMID
pct destroy $VMID
"""


def test_setup_sh_and_pct_run_only_programs_of_the_standin_packages(base: set[str], tmp_path: Path) -> None:
    try:
        seen = trace(tmp_path, "standin", STANDIN_SCRIPT)
    finally:
        subprocess.run([str(STANDIN / "pct"), "destroy", str(VMID), "--force", "1"], env=bare_env(tmp_path),
                       capture_output=True, check=False)
    # The filter works: what ran inside the container is not taken for a host program.
    assert "/root/inside-only.sh" in seen.inside and "/root/inside-only.sh" not in seen.programs, seen
    assert any(path.endswith("/lxc-start") for path in seen.programs), sorted(seen.programs)
    bad = unprovided(seen.programs, allowed(base, "standin"))
    assert not bad, f"setup.sh and pct ran programs that tools/system-packages.sh standin does not install: {bad}"


NODE_SCRIPT = f"""
cd {REPO}
tools/pve_standin/node.sh up {NODE} {NODE_ADDRESS}
tools/pve_standin/node.sh list
ssh -F "$(tools/pve_standin/node.sh ssh-config)" {NODE} pct list
tools/pve_standin/node.sh down {NODE}
"""


def test_node_sh_runs_only_programs_of_the_nodes_packages(base: set[str], tmp_path: Path) -> None:
    try:
        seen = trace(tmp_path, "node", NODE_SCRIPT)
    finally:
        subprocess.run([str(STANDIN / "node.sh"), "down", NODE], capture_output=True, check=False, timeout=120)
    assert any(path.endswith("/sshd") for path in seen.programs), sorted(seen.programs)
    bad = unprovided(seen.programs, allowed(base, "nodes", "standin"))
    assert not bad, f"node.sh ran programs that tools/system-packages.sh nodes does not install: {bad}"


def test_bootstrap_and_the_baseline_launch_run_only_programs_of_their_packages(base: set[str], tmp_path: Path) -> None:
    script = f"""
cd {REPO}
tools/bootstrap.sh
benchmarks/baseline_launch.sh -t 1 $VMID sess /tmp/never.log 'never' -- true || true
"""
    seen = trace(tmp_path, "bootstrap", script)
    assert any(path.endswith("/sha256sum") for path in seen.programs), sorted(seen.programs)
    bad = unprovided(seen.programs, allowed(base, "bootstrap", "standin", "nodes"))
    assert not bad, f"bootstrap.sh or benchmarks/baseline_launch.sh ran programs of packages nobody installs: {bad}"
