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

An unprivileged container (``unprivileged: 1``, pve-container's ``lxc.idmap = u 0 100000 65536``) needs files
owned by the mapped ids: its lower layer is a second cached copy of the release's root file system with every
uid and gid shifted by 100000 (ACLs and file capabilities too), made once, as pve-container's restore_archive
(src/PVE/LXC/Create.pm) unpacks a template through ``lxc-usernsexec`` with that map. LXC 5.0.2's idmapped
rootfs (``lxc.rootfs.options = idmap=container``) would avoid the copy, but it refuses every storage driver
but ``dir`` ("Idmapped rootfs currently only supports the dir storage driver", measured), overlay included.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

from standin_core import DEFAULT_RELEASE, IMAGE_PACKAGES, RELEASES, Node, PctError, run_checked
from standin_devices import DEVICES_MARK, PASSTHROUGH, Device, allow_running, bind_into, make_node, prepare_devices

HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
CGROUP_ROOT = Path("/sys/fs/cgroup")
LXC_COMMON = "/usr/share/lxc/config/debian.common.conf"
# pve-container includes <ostype>.userns.conf for an unprivileged CT (src/PVE/LXC.pm update_lxc_config)
LXC_USERNS = "/usr/share/lxc/config/debian.userns.conf"
# pve-container's default id map (src/PVE/LXC.pm update_lxc_config: "lxc.idmap = u 0 100000 65536")
ID_SHIFT = 100000
ID_COUNT = 65536
MIB = 1024 * 1024
ACL_XATTRS = ("system.posix_acl_access", "system.posix_acl_default")
CAPS_XATTR = "security.capability"
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


def _shifted_id(value: int, delta: int) -> int:
    """An id moved by ``delta`` when it lies in the range the shift maps (0..65535 up, 100000.. down), else as is."""
    low = 0 if delta > 0 else -delta
    return value + delta if low <= value < low + ID_COUNT else value


def shift_acl(value: bytes, delta: int) -> bytes:
    """A POSIX ACL xattr (version 2: entries of tag, perm, id) with its named users and groups shifted."""
    version, = struct.unpack_from("<I", value)
    out = [struct.pack("<I", version)]
    for offset in range(4, len(value) - 7, 8):
        tag, perm, ident = struct.unpack_from("<HHI", value, offset)
        if tag in (0x02, 0x08):  # ACL_USER, ACL_GROUP: the others carry no id
            ident = _shifted_id(ident, delta)
        out.append(struct.pack("<HHI", tag, perm, ident))
    return b"".join(out)


def shift_caps(value: bytes, delta: int) -> bytes:
    """File capabilities for the shifted root: VFS_CAP v3 with rootid (v2 has none: it means the host's root)."""
    magic, = struct.unpack_from("<I", value)
    caps = value[4:20]
    rootid = struct.unpack_from("<I", value, 20)[0] if len(value) >= 24 else 0
    rootid = _shifted_id(rootid, delta)
    if rootid == 0:
        return struct.pack("<I", (magic & 0x00FFFFFF) | 0x02000000) + caps
    return struct.pack("<I", (magic & 0x00FFFFFF) | 0x03000000) + caps + struct.pack("<I", rootid)


def _move_overlay_xattrs(path: str, names: list[str], to_user: bool) -> None:
    """Move overlayfs' own xattrs (opaque, redirect, ...) to ``user.overlay.*`` (an unprivileged CT's ``userxattr``
    mount) or back to ``trusted.overlay.*``."""
    old, new = ("trusted.overlay.", "user.overlay.") if to_user else ("user.overlay.", "trusted.overlay.")
    for name in names:
        if name.startswith(old):
            os.setxattr(path, new + name[len(old):], os.getxattr(path, name, follow_symlinks=False), follow_symlinks=False)
            os.removexattr(path, name, follow_symlinks=False)


def _shift_one(path: str, delta: int, overlay_to_user: bool | None = None) -> None:
    """Shift one file's owner, group, ACLs and capabilities; chown's clearing of setuid bits is undone.

    ``overlay_to_user`` True or False also moves overlayfs' xattrs (an upper layer changing sides).
    """
    info = os.lstat(path)
    link = stat.S_ISLNK(info.st_mode)
    saved: dict[str, bytes] = {}
    if not link:
        names = os.listxattr(path, follow_symlinks=False)
        for name in names:
            if name in ACL_XATTRS or name == CAPS_XATTR:
                saved[name] = os.getxattr(path, name, follow_symlinks=False)
        if overlay_to_user is not None:
            _move_overlay_xattrs(path, names, overlay_to_user)
    os.chown(path, _shifted_id(info.st_uid, delta), _shifted_id(info.st_gid, delta), follow_symlinks=False)
    if not link and info.st_mode & 0o6000:
        os.chmod(path, stat.S_IMODE(info.st_mode))
    for name, value in saved.items():
        os.setxattr(path, name, shift_caps(value, delta) if name == CAPS_XATTR else shift_acl(value, delta),
                    follow_symlinks=False)


def shift_tree(root: Path, delta: int, overlay_to_user: bool | None = None) -> None:
    """Shift the ids of every file under ``root`` (itself included) by ``delta`` (+100000, or back with -100000)."""
    _shift_one(str(root), delta, overlay_to_user)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            _shift_one(os.path.join(folder, name), delta, overlay_to_user)


def ensure_shifted_rootfs(node: Node, release: str) -> Path:
    """The release's root file system owned by the ids of an unprivileged CT (+100000), made once from the image.

    Made again when the image was rebuilt after it (its stamp is newer). Built beside, then renamed into place.
    """
    base = ensure_rootfs(node, release)
    base_stamp = base.with_name(base.name + ".complete")
    shifted = base.with_name(f"{base.name}-userns-{ID_SHIFT}")
    stamp = shifted.with_name(shifted.name + ".complete")
    with node.lock(f"image-{release}-userns", node.cache):
        if stamp.is_file() and stamp.stat().st_mtime >= base_stamp.stat().st_mtime:
            return shifted
        started = time.monotonic()
        building = shifted.with_name(shifted.name + ".building")
        for stale in (building, shifted):
            shutil.rmtree(stale, ignore_errors=True)
        run_checked(["cp", "-a", "--", str(base), str(building)], f"copying the Debian {release} image for unprivileged CTs")
        shift_tree(building, ID_SHIFT)
        building.rename(shifted)
        stamp.write_text(f"shifted by {ID_SHIFT} in {time.monotonic() - started:.1f}s\n", encoding="utf-8")
    return shifted


@dataclasses.dataclass(frozen=True)
class HostCgroups:
    """What this host's cgroups offer: memory in the unified (v2) hierarchy, or the v1 memory controller."""

    v2_memory: bool = False
    v1_memory: bool = False
    v1_memsw: bool = False

    @classmethod
    def probe(cls, root: Path = CGROUP_ROOT) -> HostCgroups:
        """Read the host: ``ROOT/cgroup.controllers`` (pure v2) and ``ROOT/memory/`` (v1)."""
        unified = root / "cgroup.controllers"
        v2 = unified.is_file() and "memory" in unified.read_text(encoding="ascii").split()
        legacy = root / "memory"
        return cls(v2, (legacy / "memory.limit_in_bytes").is_file(), (legacy / "memory.memsw.limit_in_bytes").is_file())


@dataclasses.dataclass(frozen=True)
class CtSpec:
    """What a container's LXC config is made of. ``memory`` None: no limit at all (the stand-in's default)."""

    vmid: str
    hostname: str
    folder: Path
    lower: Path
    unprivileged: bool = True
    memory: int | None = None
    swap: int = 0


def memory_constraints(megabytes: int) -> tuple[int, int]:
    """(max, high) in bytes, as pve-container's calculate_memory_constraints (src/PVE/LXC/Config.pm) computes them."""
    high = (megabytes - 128) * MIB if megabytes >= 16 * 1024 else megabytes * 1024 * 1016
    return megabytes * MIB, high


def memory_limits(vmid: str, megabytes: int, swap: int, cgroups: HostCgroups) -> str:
    """The LXC lines that hold a CT to ``megabytes`` of memory and ``swap`` MB of swap.

    cgroup v2 as src/PVE/LXC.pm update_lxc_config writes them (memory.max, memory.high at about 99.2 %,
    memory.swap.max); cgroup v1 as pve-common's PVE::CGroup change_memory_limit sets them: limit_in_bytes and
    memsw.limit_in_bytes = memory + swap (when the kernel counts swap; else swap is not limited). v1 has no
    memory.high: only the hard limit.
    """
    limit, high = memory_constraints(megabytes)
    if cgroups.v2_memory:
        return (f"lxc.cgroup2.memory.max = {limit}\nlxc.cgroup2.memory.high = {high}\n"
                f"lxc.cgroup2.memory.swap.max = {swap * MIB}\n")
    if cgroups.v1_memory:
        lines = f"lxc.cgroup.memory.limit_in_bytes = {limit}\n"
        if cgroups.v1_memsw:  # after limit_in_bytes: memsw may never be below it
            lines += f"lxc.cgroup.memory.memsw.limit_in_bytes = {limit + swap * MIB}\n"
        return lines
    raise PctError(f"limiting the memory of CT {vmid} failed: the host has no memory cgroup controller "
                   f"({CGROUP_ROOT}/cgroup.controllers does not name it, {CGROUP_ROOT}/memory/memory.limit_in_bytes "
                   "does not exist): create it without --memory")


def privilege_lines(unprivileged: bool) -> str:
    """What an unprivileged CT adds: userns.conf and the id map (LXC.pm update_lxc_config), and this host's mounts.

    Measured here (LXC 5.0.2, host network namespace): a user namespace may not mount sysfs for the host's
    network namespace, so /sys is bind-mounted instead of ``sys:mixed``; systemd as init exits 255 unless the
    cgroup mount is ``cgroup:mixed:force``. The overlay rootfs, mounted in the user namespace, cannot set its
    ``trusted.overlay.*`` xattrs: without ``userxattr`` every rename of a directory fails with EXDEV (dpkg:
    "unable to install new version of './usr/share/doc/tmux': Invalid cross-device link").
    """
    if not unprivileged:
        return ""
    return (f"lxc.include = {LXC_USERNS}\n"
            "lxc.rootfs.options = userxattr\n"
            "lxc.mount.auto =\n"
            "lxc.mount.auto = proc:mixed cgroup:mixed:force\n"
            "lxc.mount.entry = /sys sys none rbind,create=dir,optional 0 0\n"
            f"lxc.idmap = u 0 {ID_SHIFT} {ID_COUNT}\n"
            f"lxc.idmap = g 0 {ID_SHIFT} {ID_COUNT}\n")


def lxc_config(name: str, rootfs: str, hostname: str, limits: str = "", unprivileged: bool = False) -> str:
    """The LXC config of a stand-in container: pve-container's cgroup layout and id map, host network, ``limits``.

    The cgroup keys are update_lxc_config's for LXC >= 4 (src/PVE/LXC.pm: the monitor in ``lxc.monitor/VMID``, the
    CT in ``lxc/VMID`` with its cgroup namespace at ``lxc/VMID/ns``), for privileged and unprivileged CTs alike.
    ``pct start`` appends the devN lines after ``DEVICES_MARK``.
    """
    return ("lxc.cgroup.relative = 0\n"
            f"lxc.cgroup.dir.monitor = lxc.monitor/{name}\n"
            f"lxc.cgroup.dir.container = lxc/{name}\n"
            "lxc.cgroup.dir.container.inner = ns\n"
            "lxc.arch = amd64\n"
            f"lxc.include = {LXC_COMMON}\n"
            f"{privilege_lines(unprivileged)}"
            "lxc.tty.max = 2\n"
            f"lxc.uts.name = {hostname}\n"
            f"{limits}"
            f"lxc.rootfs.path = {rootfs}\n"
            "lxc.net.0.type = none\n"
            f"# stand-in container {name}\n")


def container_config(spec: CtSpec, cgroups: HostCgroups) -> str:
    """``lxc_config`` of a CtSpec: its overlay rootfs and its memory limit."""
    limits = memory_limits(spec.vmid, spec.memory, spec.swap, cgroups) if spec.memory is not None else ""
    rootfs = f"overlay:{spec.lower}:{spec.folder / 'overlay' / 'delta'}"
    return lxc_config(spec.vmid, rootfs, spec.hostname, limits, spec.unprivileged)


def lower_for(node: Node, release: str, unprivileged: bool) -> Path:
    """The cached root file system a CT's overlay stands on: the image, or its copy shifted for the id map."""
    return ensure_shifted_rootfs(node, release) if unprivileged else ensure_rootfs(node, release)


def make_reachable(folder: Path) -> list[Path]:
    """Give the folders above ``folder`` the search bit for others (o+x) where they lack it; those changed.

    LXC mounts an unprivileged CT's overlay inside its user namespace, as the CT's root (uid 100000): it must be
    able to walk to the upper layer (a state root under pytest's /tmp/pytest-of-root, mode 0700, is not).
    """
    changed = []
    for parent in reversed(folder.parents):
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)
            changed.append(parent)
    return changed


def write_container(spec: CtSpec, cgroups: HostCgroups) -> None:
    """Write a CT's LXC folder: its config, the overlay's upper layer (owned by the CT's root)."""
    text = container_config(spec, cgroups)
    shutil.rmtree(spec.folder, ignore_errors=True)
    upper = spec.folder / "overlay" / "delta"
    upper.mkdir(parents=True)
    if spec.unprivileged:  # LXC mounts the overlay (and makes overlay/work) as the CT's root
        for folder in (spec.folder / "overlay", upper):
            os.chown(folder, ID_SHIFT, ID_SHIFT)
        for folder in make_reachable(upper):  # the CT's own folder too: mkdir gave it the mode of pct's umask
            sys.stderr.write(f"pct: made {folder} searchable by others (o+x): the unprivileged CT's root "
                             f"(uid {ID_SHIFT}) must reach {spec.folder}\n")
    (spec.folder / "config").write_text(text, encoding="utf-8")


def clone_container(node: Node, spec: CtSpec, release: str) -> None:
    """Create a container as an overlay clone of the release's cached root file system (``spec.lower`` is ignored)."""
    cgroups = HostCgroups.probe()
    if spec.memory is not None:
        memory_limits(spec.vmid, spec.memory, spec.swap, cgroups)  # fail before anything is built
    lower = lower_for(node, release, spec.unprivileged)
    write_container(dataclasses.replace(spec, lower=lower), cgroups)


def _config_facts(config: str, vmid: str) -> tuple[Path, Path, int]:
    """(lower, upper, id shift) from a container's LXC config."""
    rootfs = re.search(r"^lxc\.rootfs\.path\s*=\s*overlay:([^\n:]+):(/[^:\n]+)$", config, re.M)
    if rootfs is None:
        raise PctError(f"starting CT {vmid} failed: its LXC config has no overlay rootfs")
    idmap = re.search(r"^lxc\.idmap\s*=\s*u\s+0\s+([0-9]+)\s", config, re.M)
    return Path(rootfs.group(1)), Path(rootfs.group(2)), int(idmap.group(1)) if idmap else 0


def _upper_dir(lower: Path, upper: Path, name: str) -> Path:
    """A folder of the upper layer with the owner and mode of the lower's (else the merged folder takes root's)."""
    target = upper / name
    if not target.is_dir():
        target.mkdir(parents=True)
        info = os.stat(lower / name)
        os.chown(target, info.st_uid, info.st_gid)
        os.chmod(target, stat.S_IMODE(info.st_mode))
    return target


def clear_stale_cgroups(vmid: str, cgroup_root: Path = CGROUP_ROOT) -> None:
    """Remove the empty cgroups ``lxc/VMID`` and ``lxc.monitor/VMID`` an earlier failed start left behind.

    With pve-container's fixed cgroup names LXC refuses to start when they exist ("Failed to create monitor
    cgroup"), where its default names would have moved on to ``lxc.payload.VMID-1``.
    """
    roots = [cgroup_root] + [d for d in cgroup_root.iterdir() if d.is_dir() and not d.is_symlink()]
    for root in roots:
        for top in (root / "lxc" / vmid, root / "lxc.monitor" / vmid):
            if not (top / "cgroup.procs").is_file():
                continue
            for folder, _dirs, _files in os.walk(top, topdown=False):
                try:
                    os.rmdir(folder)
                except OSError:
                    pass
            if top.exists():
                pids = " ".join(pid for procs in top.rglob("cgroup.procs")
                                for pid in procs.read_text(encoding="ascii").split())
                raise PctError(f"starting CT {vmid} failed: its cgroup {top} is still in use (processes {pids}), "
                               "left from an earlier start: end those processes, then start it again")


def prepare_start(node: Node, vmid: str, hostname: str) -> None:
    """Before a CT starts: the files Proxmox manages inside (hostname, hosts, resolv.conf, owned by the CT's root),
    the nodes of its devN entries, and no stale cgroups of its name."""
    folder = node.lxcpath / vmid
    config = (folder / "config").read_text(encoding="utf-8")
    lower, upper, shift = _config_facts(config, vmid)
    etc = _upper_dir(lower, upper, "etc")
    files = {"hostname": hostname + "\n",
             "hosts": f"127.0.0.1 localhost\n127.0.1.1 {hostname}\n::1 localhost ip6-localhost\n"}
    resolv = Path("/etc/resolv.conf")
    if resolv.is_file():
        files["resolv.conf"] = resolv.read_text(encoding="utf-8", errors="replace")
    for name, text in files.items():
        (etc / name).unlink(missing_ok=True)
        (etc / name).write_text(text, encoding="utf-8")
        os.chown(etc / name, shift, shift)
    devices = prepare_devices(folder, node.read_conf(vmid), shift)
    (folder / "config").write_text(config.split(DEVICES_MARK)[0] + devices, encoding="utf-8")
    if "lxc.cgroup.dir.container =" in config:
        clear_stale_cgroups(vmid)


def hotplug_device(node: Node, vmid: str, device: Device) -> None:
    """Pass a device into a running CT at once (src/PVE/LXC.pm device_passthrough_hotplug): its node is made under
    the CT's ``passthrough`` folder, bind-mounted into the CT's mount namespace, and the device cgroup opened."""
    folder = node.lxcpath / vmid
    _lower, _upper, shift = _config_facts((folder / "config").read_text(encoding="utf-8"), vmid)
    info = subprocess.run(node.lxc("info", vmid, "-pH"), capture_output=True, text=True, check=False)
    pid = info.stdout.strip()
    if info.returncode != 0 or not pid.isdigit():
        raise PctError(f"failed to open pidfd of container {vmid}'s init process")
    (folder / PASSTHROUGH).mkdir(exist_ok=True)
    bind_into(int(pid), make_node(folder / PASSTHROUGH, device, shift), device.inside())
    allow_running(node.lxc("cgroup", vmid), int(pid), vmid, device)


def set_privilege(node: Node, vmid: str, unprivileged: bool, release: str = DEFAULT_RELEASE) -> bool:
    """Turn a stopped stand-in CT unprivileged or privileged in place; True when it changed. For the test suite only:
    real pct refuses (``unable to modify read-only option: 'unprivileged'``), a backup and restore does it there.

    The upper layer's ids and overlayfs xattrs are moved, the LXC config is written again over the other lower layer.
    """
    conf = node.read_conf(vmid)
    if (conf.get("unprivileged") == "1") == unprivileged:
        return False
    if node.is_running(vmid):
        raise PctError(f"changing the privilege of CT {vmid} failed: it is running: stop it first")
    folder = node.lxcpath / vmid
    config = (folder / "config").read_text(encoding="utf-8")
    limited = re.search(r"^lxc\.cgroup2?\.memory\.(?:max|limit_in_bytes) =", config, re.M) is not None
    lower, _upper, _shift = _config_facts(config, vmid)
    named = re.match(r"rootfs-debian-[0-9]+-([a-z]+)", lower.name)  # rootfs-debian-12-bookworm[-userns-100000]
    release = named.group(1) if named and named.group(1) in RELEASES else release
    shutil.rmtree(folder / "overlay" / "work", ignore_errors=True)  # overlayfs' scratch space, made again at mount
    shift_tree(folder / "overlay", ID_SHIFT if unprivileged else -ID_SHIFT, overlay_to_user=unprivileged)
    if unprivileged:
        make_reachable(folder)
    spec = CtSpec(vmid, conf.get("hostname", f"CT{vmid}"), folder, lower_for(node, release, unprivileged), unprivileged,
                  int(conf.get("memory", "512")) if limited else None, int(conf.get("swap", "0")))
    (folder / "config").write_text(container_config(spec, HostCgroups.probe()), encoding="utf-8")
    conf.pop("unprivileged", None)
    node.write_conf(vmid, {**conf, **({"unprivileged": "1"} if unprivileged else {})})
    return True


def destroy_container(node: Node, vmid: str) -> None:
    """Remove a stopped container's LXC files and its Proxmox config."""
    if (node.lxcpath / vmid / "config").is_file():
        subprocess.run(["lxc-destroy", "-P", str(node.lxcpath), "-n", vmid], capture_output=True, check=False)
    shutil.rmtree(node.lxcpath / vmid, ignore_errors=True)
    node.conf_path(vmid).unlink(missing_ok=True)
