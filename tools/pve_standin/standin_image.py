# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Debian root file systems for the stand-in, and the containers cloned from them.

A release's root file system is built once with ``mmdebstrap --variant=minbase``
into the cache. It holds python3 (Ansible needs it) but neither tmux nor
python3-venv: the collection's roles install those, as on a fresh Proxmox CT.
It carries the host's apt mirrors, the extra CA certificates the host trusts and
a pip.conf that points pip at the system CA bundle, so apt and pip inside reach
the package registries exactly as the host does.

Each container is an overlay clone of it: ``lxc.rootfs.path = overlay:LOWER:UPPER``
with the cached directory as the read-only lower layer, as ``lxc-copy -s -B
overlay`` makes (lxc-copy itself refuses a source rootfs outside the lxcpath).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

from standin_core import DEFAULT_RELEASE, IMAGE_PACKAGES, RELEASES, Node, PctError, run_checked

HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
CGROUP_ROOT = Path("/sys/fs/cgroup")
LXC_COMMON = "/usr/share/lxc/config/debian.common.conf"
DEFAULT_MIRRORS = ("http://deb.debian.org/debian", "http://deb.debian.org/debian-security")
TEMPLATE_RE = re.compile(r"debian-(\d+)")


def host_mirrors(apt_dir: Path = Path("/etc/apt")) -> tuple[str, str]:
    """The host's Debian mirror and security mirror, read from its apt sources."""
    uris: list[str] = []
    for path in sorted(apt_dir.glob("sources.list.d/*.sources")):
        uris += re.findall(r"^URIs:\s*(\S+)", path.read_text(encoding="utf-8"), re.M)
    for path in [apt_dir / "sources.list", *sorted(apt_dir.glob("sources.list.d/*.list"))]:
        if path.is_file():
            uris += re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", path.read_text(encoding="utf-8"), re.M)
    debian = [u for u in uris if re.search(r"/debian/?$", u)]
    security = [u for u in uris if re.search(r"/debian-security/?$", u)]
    return (debian[0] if debian else DEFAULT_MIRRORS[0], security[0] if security else DEFAULT_MIRRORS[1])


def release_from(call_release: str | None, ostemplate: str | None) -> str:
    """Pick the Debian release from ``--release`` or a Proxmox template name like debian-12-standard."""
    if call_release:
        if call_release not in RELEASES:
            raise PctError(f"400 Parameter verification failed.\nrelease: value '{call_release}' does not have "
                           f"a value in the enumeration '{', '.join(RELEASES)}'")
        return call_release
    if ostemplate:
        match = TEMPLATE_RE.search(ostemplate)
        by_version = {v: k for k, v in RELEASES.items()}
        if not match or match.group(1) not in by_version:
            raise PctError(f"unable to create CT - the stand-in has no template '{ostemplate}' "
                           f"(it builds debian-11, debian-12 and debian-13)")
        return by_version[match.group(1)]
    return DEFAULT_RELEASE


def sources_text(release: str, mirrors: tuple[str, str]) -> str:
    """A deb822 sources file for a release, on the host's mirrors."""
    return (f"Types: deb\nURIs: {mirrors[0]}\nSuites: {release} {release}-updates\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {mirrors[1]}\nSuites: {release}-security\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")


def customize_rootfs(rootfs: Path, release: str) -> None:
    """Give a fresh root file system the host's apt mirrors, extra CAs and pip's CA setting."""
    apt = rootfs / "etc/apt"
    (apt / "sources.list").unlink(missing_ok=True)
    (apt / "sources.list.d").mkdir(parents=True, exist_ok=True)
    (apt / "sources.list.d/debian.sources").write_text(sources_text(release, host_mirrors()), encoding="utf-8")
    cas = sorted(HOST_CA_DIR.glob("*.crt")) if HOST_CA_DIR.is_dir() else []
    target = rootfs / "usr/local/share/ca-certificates"
    target.mkdir(parents=True, exist_ok=True)
    for ca in cas:
        shutil.copy2(ca, target / ca.name)
    if cas:
        run_checked(["chroot", str(rootfs), "update-ca-certificates"], "update-ca-certificates in the image")
    (rootfs / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n", encoding="utf-8")
    (rootfs / "etc/hostname").write_text("localhost\n", encoding="utf-8")


def ensure_rootfs(node: Node, release: str) -> Path:
    """Build the cached root file system of a release once; later calls return it at once."""
    rootfs = node.cache / f"rootfs-debian-{RELEASES[release]}-{release}"
    stamp = rootfs.with_name(rootfs.name + ".complete")
    node.cache.mkdir(parents=True, exist_ok=True)
    with node.lock(f"image-{release}", node.cache):
        if stamp.is_file():
            return rootfs
        shutil.rmtree(rootfs, ignore_errors=True)
        mirror = host_mirrors()[0]
        started = time.monotonic()
        run_checked(["mmdebstrap", "--variant=minbase", "--include=" + ",".join(IMAGE_PACKAGES),
                     release, str(rootfs), mirror], f"building the Debian {release} image with mmdebstrap")
        customize_rootfs(rootfs, release)
        stamp.write_text(f"built in {time.monotonic() - started:.1f}s\n", encoding="utf-8")
    return rootfs


def lxc_config(name: str, rootfs: str, hostname: str, limits: str = "") -> str:
    """The LXC config of a stand-in container: host network, Debian defaults, then ``limits`` (LXC lines)."""
    return (f"lxc.include = {LXC_COMMON}\n"
            "lxc.arch = amd64\n"
            f"lxc.rootfs.path = {rootfs}\n"
            f"lxc.uts.name = {hostname}\n"
            "lxc.net.0.type = none\n"
            "lxc.tty.max = 2\n"
            f"{limits}"
            f"# stand-in container {name}\n")


def memory_limits(vmid: str, megabytes: int, cgroup_root: Path = CGROUP_ROOT) -> str:
    """The LXC lines that hold a container to ``megabytes`` of memory and no swap, for the host's cgroup version.

    As pve-container does for ``memory`` (``lxc.cgroup2.memory.max``, and for cgroup v1
    ``lxc.cgroup.memory.limit_in_bytes``), with the swap limit at 0 so that the limit is reached at once.
    """
    limit = megabytes * 1024 * 1024
    unified = cgroup_root / "cgroup.controllers"
    if unified.is_file() and "memory" in unified.read_text(encoding="ascii").split():
        return f"lxc.cgroup2.memory.max = {limit}\nlxc.cgroup2.memory.swap.max = 0\n"
    legacy = cgroup_root / "memory"
    if (legacy / "memory.limit_in_bytes").is_file():
        lines = f"lxc.cgroup.memory.limit_in_bytes = {limit}\n"
        if (legacy / "memory.memsw.limit_in_bytes").is_file():  # memory + swap: the same value, no swap
            lines += f"lxc.cgroup.memory.memsw.limit_in_bytes = {limit}\n"
        return lines
    raise PctError(f"limiting the memory of CT {vmid} failed: the host has no memory cgroup controller "
                   f"({unified} does not name it, {legacy}/memory.limit_in_bytes does not exist)")


def clone_container(node: Node, vmid: str, release: str, hostname: str, memory: int | None = None) -> None:
    """Create container VMID as an overlay clone of the release's cached root file system.

    With ``memory`` (MB) the container is held to that much memory and no swap; without it, it is unlimited.
    """
    limits = memory_limits(vmid, memory) if memory is not None else ""
    lower = ensure_rootfs(node, release)
    folder = node.lxcpath / vmid
    shutil.rmtree(folder, ignore_errors=True)
    upper = folder / "overlay" / "delta"
    upper.mkdir(parents=True)
    (folder / "config").write_text(lxc_config(vmid, f"overlay:{lower}:{upper}", hostname, limits), encoding="utf-8")


def prepare_start(node: Node, vmid: str, hostname: str) -> None:
    """Refresh the files Proxmox manages in a CT before it starts: hostname, hosts, resolv.conf."""
    config = (node.lxcpath / vmid / "config").read_text(encoding="utf-8")
    rootfs = re.search(r"^lxc\.rootfs\.path\s*=\s*overlay:[^\n]*:(/[^:\n]+)$", config, re.M)
    if rootfs is None:
        raise PctError(f"starting CT {vmid} failed: its LXC config has no overlay rootfs")
    etc = Path(rootfs.group(1)) / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hostname").write_text(hostname + "\n", encoding="utf-8")
    (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {hostname}\n::1 localhost ip6-localhost\n",
                               encoding="utf-8")
    resolv = Path("/etc/resolv.conf")
    if resolv.is_file():
        (etc / "resolv.conf").unlink(missing_ok=True)
        (etc / "resolv.conf").write_bytes(resolv.read_bytes())


def destroy_container(node: Node, vmid: str) -> None:
    """Remove a stopped container's LXC files and its Proxmox config."""
    if (node.lxcpath / vmid / "config").is_file():
        subprocess.run(["lxc-destroy", "-P", str(node.lxcpath), "-n", vmid], capture_output=True, check=False)
    shutil.rmtree(node.lxcpath / vmid, ignore_errors=True)
    node.conf_path(vmid).unlink(missing_ok=True)
