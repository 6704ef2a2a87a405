# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Device passthrough of the stand-in: Proxmox VE 8.1+'s ``devN: PATH[,mode=0666][,uid=N][,gid=N][,deny-write=1]``.

As pve-container does it (read in its sources, pve-container 6.x):

- the entry's format: src/PVE/LXC/Config.pm ``$dev_desc`` (mode ``0[0-7]{3}``, uid and gid integers >= 0,
  ``deny-write`` boolean) and ``$MAX_DEVICES`` (256: dev0 .. dev255); ``set`` checks the path with
  src/PVE/LXC/Tools.pm ``get_device_mode_and_rdev`` (its messages: ``Device PATH does not exist``, ``PATH is not a
  device``);
- at start, src/lxc-pve-prestart-hook makes the node under ``/var/lib/lxc/VMID/passthrough`` with
  src/PVE/LXC.pm ``create_passthrough_device_node``: mknod with the host node's type and numbers, ``chmod`` to
  ``mode`` (default 0660), ``chown`` to uid:gid (default 0:0) mapped to the host's ids (100000 + id in an
  unprivileged CT, ``map_ct_uid_to_host``); src/lxc-pve-autodev-hook then bind-mounts it on the same path in
  the container's /dev;
- the device cgroup: src/PVE/LXC.pm ``update_lxc_config`` writes ``lxc.cgroup2.devices.allow = c MAJOR:MINOR rw``
  (``r`` and a ``deny ... w`` line with deny-write);
- ``pct set`` on a running CT hot-plugs a devN it did not have (src/PVE/LXC/Config.pm ``vmconfig_hotplug_pending``
  -> src/PVE/LXC.pm ``device_passthrough_hotplug``: the node is made, cloned with ``open_tree``, the CT's user and
  mount namespaces are entered, a file is created at the path and the node ``move_mount``-ed onto it, then
  ``lxc-cgroup devices.allow``); a changed or deleted devN waits for the next start.

The stand-in differs in two ways (tools/pve_standin/README.md): it accepts a device path outside /dev (tests
make nodes with mknod under a temporary folder, never in the host's /dev), which the container then sees as
``/dev/<file name>``; on this hybrid host the device rules go to the cgroup v1 ``devices`` controller
(``lxc.cgroup.devices.*``; a hot-plugged rule is written into the container's devices cgroups, top down).
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path

from standin_core import PctError

MAX_DEVICES = 256
DEV_KEY_RE = re.compile(r"^dev([0-9]+)$")
DEFAULT_MODE = "0660"
CGROUP_ROOT = Path("/sys/fs/cgroup")
PASSTHROUGH = "passthrough"
# The LXC config of a CT ends with its devN lines, written again by every start from this line on.
DEVICES_MARK = "# devN passthrough, written by pct start from the Proxmox config\n"
# x86_64 syscall numbers and flags of the new mount API (linux/mount.h), as pve-container uses them through PVE::Tools.
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429
OPEN_TREE_CLONE = 1
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
AT_FDCWD = -100
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000


@dataclasses.dataclass(frozen=True)
class Device:
    """One ``devN`` entry."""

    path: str
    mode: str | None = None
    uid: int | None = None
    gid: int | None = None
    deny_write: bool = False

    def text(self) -> str:
        """The entry as pve-container prints it (PVE::JSONSchema print_property_string: the path, then sorted keys)."""
        parts = [self.path]
        if self.deny_write:
            parts.append("deny-write=1")
        for key in ("gid", "mode", "uid"):
            value = getattr(self, key)
            if value is not None:
                parts.append(f"{key}={value}")
        return ",".join(parts)

    def inside(self) -> str:
        """Where the container sees the device: its own path under /dev, else ``/dev/<file name>`` (stand-in)."""
        return self.path if self.path.startswith("/dev/") else "/dev/" + os.path.basename(self.path)


def _invalid(key: str, detail: str) -> PctError:
    return PctError(f"400 Parameter verification failed.\n{key}: invalid format - {detail}")


def parse_device(key: str, value: str) -> Device:
    """Parse ``PATH[,mode=0666][,uid=N][,gid=N][,deny-write=1]`` (``path=PATH`` too), checked as pve-container does."""
    fields: dict[str, str] = {}
    for item in value.split(","):
        name, sep, text = item.partition("=")
        name, text = (name, text) if sep else ("path", item)
        if name not in ("path", "mode", "uid", "gid", "deny-write"):
            raise _invalid(key, f"format error\n{key}.{name}: property is not defined in schema")
        if name in fields:
            raise _invalid(key, f"format error\n{key}.{name}: duplicate key in comma-separated list property")
        fields[name] = text
    path = fields.get("path", "")
    if not path:
        raise PctError(f"400 Parameter verification failed.\n{key}: Path has to be defined")
    # pve-lxc-dev-string (Config.pm verify_lxc_dev_string) also demands /dev/: the stand-in allows any absolute path.
    if not path.startswith("/") or re.search(r"/\.\.?(?:/|$)", path) or re.search(r"\s", path):
        raise _invalid(key, f"{path} is not a valid device path")
    mode = fields.get("mode")
    if mode is not None and not re.fullmatch(r"0[0-7]{3}", mode):
        raise _invalid(key, f"format error\n{key}.mode: value does not match the regex pattern")
    ids = {}
    for name in ("uid", "gid"):
        if name in fields:
            if not re.fullmatch(r"[0-9]+", fields[name]):
                raise _invalid(key, f"format error\n{key}.{name}: type check ('integer') failed - got '{fields[name]}'")
            ids[name] = int(fields[name])
    deny = fields.get("deny-write", "0").lower()
    if deny not in ("0", "1", "yes", "no", "on", "off", "true", "false"):
        raise _invalid(key, f"format error\n{key}.deny-write: type check ('boolean') failed - got '{deny}'")
    return Device(path, mode, ids.get("uid"), ids.get("gid"), deny in ("1", "yes", "on", "true"))


def devices_of(conf: dict[str, str]) -> list[tuple[str, Device]]:
    """The ``devN`` entries of a Proxmox config, in index order."""
    keys = sorted((k for k in conf if DEV_KEY_RE.match(k)), key=lambda k: int(k[3:]))
    return [(key, parse_device(key, conf[key])) for key in keys]


def device_mode_and_rdev(path: str) -> tuple[int, int]:
    """``st_mode`` and ``st_rdev`` of a device node, failing as Tools.pm get_device_mode_and_rdev does."""
    try:
        info = os.stat(path)
    except FileNotFoundError as err:
        raise PctError(f"Device {path} does not exist") from err
    except OSError as err:
        raise PctError(f"Error accessing device {path}") from err
    if not stat.S_ISCHR(info.st_mode) and not stat.S_ISBLK(info.st_mode):
        raise PctError(f"{path} is not a device")
    return info.st_mode, info.st_rdev


def host_id(ct_id: int, shift: int, kind: str) -> int:
    """A container uid/gid as the host knows it: ``shift + id`` in an unprivileged CT (lxc.idmap 0 100000 65536)."""
    if shift and not 0 <= ct_id < 65536:
        raise PctError(f"failed to map {kind} {ct_id} of the container to the host: the id map covers 0 to 65535")
    return shift + ct_id


def make_node(folder: Path, device: Device, shift: int) -> Path:
    """The device node the container gets, under ``folder`` (LXC.pm create_passthrough_device_node)."""
    st_mode, rdev = device_mode_and_rdev(device.path)
    node = folder / device.inside().lstrip("/")
    node.parent.mkdir(parents=True, exist_ok=True)
    node.unlink(missing_ok=True)
    os.mknod(node, stat.S_IFMT(st_mode) | 0o600, rdev)
    os.chmod(node, int(device.mode or DEFAULT_MODE, 8))  # chmod: the umask does not get a say
    os.chown(node, host_id(device.uid or 0, shift, "uid"), host_id(device.gid or 0, shift, "gid"))
    return node


def rule(device: Device) -> tuple[str, str]:
    """``(type, "MAJOR:MINOR")`` of a device for the device cgroup."""
    st_mode, rdev = device_mode_and_rdev(device.path)
    return ("b" if stat.S_ISBLK(st_mode) else "c"), f"{os.major(rdev)}:{os.minor(rdev)}"


def cgroup_lines(device: Device, v1: bool) -> list[str]:
    """The device cgroup lines of one device (LXC.pm update_lxc_config), for cgroup v1 or v2."""
    prefix = "lxc.cgroup.devices" if v1 else "lxc.cgroup2.devices"
    kind, numbers = rule(device)
    lines = [f"{prefix}.allow = {kind} {numbers} {'r' if device.deny_write else 'rw'}"]
    if device.deny_write:
        lines.append(f"{prefix}.deny = {kind} {numbers} w")
    return lines


def devices_conf(nodes: Iterable[tuple[Device, Path]], v1: bool) -> str:
    """The LXC lines of the passed-through devices: a bind mount of each node, its device cgroup rule."""
    lines = [DEVICES_MARK.rstrip("\n")]
    for device, node in nodes:
        lines.append(f"lxc.mount.entry = {node} {device.inside().lstrip('/')} none bind,create=file 0 0")
        lines += cgroup_lines(device, v1)
    return "\n".join(lines) + "\n"


def prepare_devices(folder: Path, conf: dict[str, str], shift: int, cgroup_root: Path = CGROUP_ROOT) -> str:
    """Before a start: make the nodes of every devN afresh; the LXC lines that pass them (``devices_conf``)."""
    passthrough = folder / PASSTHROUGH
    shutil.rmtree(passthrough, ignore_errors=True)
    passthrough.mkdir()
    nodes = []
    for key, device in devices_of(conf):
        try:
            nodes.append((device, make_node(passthrough, device, shift)))
        except PctError as err:
            raise PctError(f"starting the CT failed: passthrough device {key}: {err.message}") from err
    return devices_conf(nodes, (cgroup_root / "devices" / "devices.allow").is_file())


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def _bind_in_child(pid: int, node: Path, target: str) -> None:
    """In a forked child: clone the node's mount, enter the CT's namespaces, create the target, move the mount on it."""
    libc = ctypes.CDLL(None, use_errno=True)
    tree = _check(libc.syscall(SYS_OPEN_TREE, AT_FDCWD, os.fsencode(node), OPEN_TREE_CLONE | os.O_CLOEXEC), "open_tree")
    mnt_ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    if os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user"):
        # an unprivileged CT's /dev belongs to its user namespace: files there are made as its root
        _check(libc.setns(os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC), CLONE_NEWUSER), "setns user")
        os.setgid(0)
        os.setgroups([])
        os.setuid(0)
    path = f"/proc/{pid}/root{target}"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    dest = os.open(path, os.O_CREAT | os.O_RDONLY | os.O_CLOEXEC, 0o000)
    _check(libc.setns(mnt_ns, CLONE_NEWNS), "setns mnt")
    flags = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
    _check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", dest, b"", flags), "move_mount")


def bind_into(pid: int, node: Path, target: str) -> None:
    """Bind-mount a node of the host onto ``target`` in the mount namespace of the CT whose init is ``pid``."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read_end)
        code = 0
        try:
            _bind_in_child(pid, node, target)
        except OSError as err:
            os.write(write_end, str(err).encode("utf-8", "replace"))
            code = 1
        os._exit(code)  # pylint: disable=protected-access
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read().decode("utf-8", "replace")
    _pid, status = os.waitpid(child, 0)
    if status != 0:
        raise PctError(message or f"the mount helper exited with status {status}")


def container_cgroup(pid: int, vmid: str, controller: str = "devices") -> str | None:
    """The container's own cgroup of a v1 controller (``lxc/VMID`` or ``lxc.payload.VMID``), from /proc/PID/cgroup."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            match = re.match(rf"^(/(?:.*/)?(?:lxc/{vmid}|lxc\.payload\.{vmid}(?:-[0-9]+)?))(?:/|$)", parts[2])
            return match.group(1) if match else None
    return None


def allow_running(lxc_argv: list[str], pid: int, vmid: str, device: Device, cgroup_root: Path = CGROUP_ROOT) -> None:
    """Open the device cgroup of a running CT for a hot-plugged device (LXC.pm device_passthrough_hotplug).

    cgroup v1 copies a cgroup's rules to the sub-cgroups made after them only, so the rule goes into the
    container's cgroup and every one below it, top down. On cgroup v2 it is ``lxc-cgroup devices.allow``.
    """
    kind, numbers = rule(device)
    changes = [("devices.allow", f"{kind} {numbers} {'r' if device.deny_write else 'rw'}")]
    if device.deny_write:
        changes.append(("devices.deny", f"{kind} {numbers} w"))
    top = container_cgroup(pid, vmid)
    if not (cgroup_root / "devices" / "devices.allow").is_file() or top is None:
        for name, value in changes:
            subprocess.run([*lxc_argv, name, value], capture_output=True, check=False)
        return
    for folder, _dirs, _files in os.walk(cgroup_root / "devices" / top.lstrip("/")):
        for name, value in changes:
            try:
                Path(folder, name).write_text(value + "\n", encoding="ascii")
            except OSError:
                pass  # a cgroup that went away meanwhile
