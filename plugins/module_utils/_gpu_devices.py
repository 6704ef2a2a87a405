# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Whether the job's user can open the NVIDIA device files a GPU job needs (``gpu_info`` with ``gpus``).

A device file that exists and is a character device may still be closed to the job. Opening a device node, the
kernel checks in this order: the file's permissions (EACCES: Proxmox VE's ``devN:`` passthrough makes the node
0660 root:root unless ``mode``, ``uid`` or ``gid`` are given), the container's device cgroup (EPERM: a container
without ``lxc.cgroup2.devices.allow`` lines for the device; ``devN:`` adds them), then the driver behind the
device number (ENXIO or ENODEV when the node has none loaded for it). So each file is opened for reading and
writing, as CUDA opens it, by a child process that became the job's user (``initgroups``, ``setgid``,
``setuid``, as the job's start does), and the child reports each ``errno`` back on a pipe. Without a user the
files are opened as the user the module runs as (root in a container), which still meets the cgroup and the driver.
"""

from __future__ import annotations

import errno
import glob
import grp
import os
import pwd
import re
import stat
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._cuda_probe import reap, read_lines

ALWAYS = ("nvidiactl", "nvidia-uvm")
GPU_INFO = "/proc/driver/nvidia/gpus/*/information"
OPEN_TIMEOUT = 30.0
_GPU_FILE = re.compile(r"nvidia([0-9]+)")


def gpu_minors(pattern: str = GPU_INFO) -> dict[str, int]:
    """GPU UUID -> the minor number of its ``/dev/nvidiaN``, from the driver's ``information`` files (empty without them)."""
    minors: dict[str, int] = {}
    for path in glob.glob(pattern):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        uuid = re.search(r"^GPU UUID:\s*(\S+)", text, re.M)
        minor = re.search(r"^Device Minor:\s*([0-9]+)", text, re.M)
        if uuid and minor:
            minors[uuid.group(1)] = int(minor.group(1))
    return minors


def needed_paths(request: tuple[str, t.Any], visible: t.Sequence[t.Mapping[str, t.Any]],
                 files: t.Sequence[t.Mapping[str, t.Any]], pattern: str = GPU_INFO) -> list[str]:
    """The device files (present character devices of ``files``) a job asking for ``request`` opens.

    ``nvidiactl`` and ``nvidia-uvm``, and the ``nvidiaN`` of the job's GPUs: every one for ``all`` or a count (which
    GPUs a count gets is decided at the start), those of the GPUs named for a list (N: the GPU's minor number the
    driver reports, else its index), every one when none of them is visible.
    """
    present = [str(item["path"]) for item in files if item.get("present") and item.get("char_device")]
    fixed = [path for path in present if os.path.basename(path) in ALWAYS]
    numbered = [path for path in present if _GPU_FILE.fullmatch(os.path.basename(path))]
    named = [gpu for gpu in visible if request[0] == "ids"
             and (str(gpu.get("index")) in request[1] or gpu.get("uuid") in request[1])]
    if named:
        minors = gpu_minors(pattern)
        wanted = {f"nvidia{minors.get(str(gpu.get('uuid')), gpu.get('index'))}" for gpu in named}
        numbered = [path for path in numbered if os.path.basename(path) in wanted]
    return fixed + numbered


def describe(path: str) -> dict[str, t.Any]:
    """``path``, ``mode`` (``0660``), ``owner`` (``root:root``) and ``device`` (``195:0``) of a device file."""
    try:
        info = os.stat(path)
    except OSError:
        return {"path": path, "mode": None, "owner": None, "device": None}
    return {"path": path, "mode": f"{stat.S_IMODE(info.st_mode):04o}", "owner": f"{_name(info.st_uid, True)}:{_name(info.st_gid, False)}",
            "device": f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}" if stat.S_ISCHR(info.st_mode) else None}


def _name(number: int, user: bool) -> str:
    try:
        return pwd.getpwuid(number).pw_name if user else grp.getgrgid(number).gr_name
    except KeyError:
        return str(number)


def open_errno(path: str) -> int:
    """0 when ``path`` opens for reading and writing (closed again at once), else the errno of the refusal."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
    except OSError as exc:
        return exc.errno or errno.EIO
    return 0


def _child(write_fd: int, entry: t.Any, paths: t.Sequence[str]) -> None:
    """In the forked child: become the user, open each file, write one line per step; never returns."""
    try:
        try:
            os.initgroups(entry.pw_name, entry.pw_gid)
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
        except OSError as exc:
            os.write(write_fd, f"switch {exc.errno or errno.EPERM}\n".encode())
            return
        os.write(write_fd, b"switch 0\n")
        for path in paths:
            os.write(write_fd, f"{open_errno(path)}\n".encode())
    finally:
        os._exit(0)  # pylint: disable=protected-access  # a forked child leaves without the module's exit handlers


def codes_as(entry: t.Any, paths: t.Sequence[str], timeout: float = OPEN_TIMEOUT) -> tuple[int, list[int | None]]:
    """(errno of becoming the user, errno of each open: None when it did not answer in time), through a child."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(write_fd, entry, paths)
    os.close(write_fd)
    lines: list[str] = []
    done = False
    try:
        lines, done = read_lines(read_fd, timeout)
    finally:
        os.close(read_fd)
        reap(pid, done)
    switch = int(lines[0].split()[1]) if lines else errno.EIO if done else 0
    codes: list[int | None] = [int(line) for line in lines[1:]]
    return switch, codes + [None] * (len(paths) - len(codes))


def _result(path: str, user: str, failure: str | None, code: int | None, error: str | None) -> dict[str, t.Any]:
    named = errno.errorcode.get(code, str(code)) if failure == "open" and code else None
    return dict(describe(path), user=user, opened=failure is None, failure=failure, errno=named, error=error)


def _me() -> t.Any:
    try:
        return pwd.getpwuid(os.geteuid())
    except KeyError:
        return pwd.struct_passwd((str(os.geteuid()), "", os.geteuid(), os.getegid(), "", "/", "/bin/sh"))


def check_access(paths: t.Sequence[str], user: str | None, timeout: float = OPEN_TIMEOUT) -> list[dict[str, t.Any]]:
    """Each of ``paths`` opened as ``user`` (None: the user this runs as): one result per path (see gpu_info's RETURN)."""
    if not paths:
        return []
    me = _me()
    try:
        entry = pwd.getpwnam(user) if user else me
    except KeyError:
        return [_result(path, str(user), "no_user", None, f"user {user} does not exist") for path in paths]
    if entry.pw_uid == me.pw_uid:  # the job's user runs this: open here, with this process's groups
        switch, codes = 0, [open_errno(path) for path in paths]
    else:
        switch, codes = codes_as(entry, paths, timeout)
    if switch:
        why = f"cannot become user {entry.pw_name}: {os.strerror(switch)} (this runs as {me.pw_name})"
        return [_result(path, entry.pw_name, "switch", None, why) for path in paths]
    found = []
    for path, code in zip(paths, codes):
        if code is None:
            found.append(_result(path, entry.pw_name, "timeout", None, f"opening it did not return within {timeout:g} s"))
        else:
            found.append(_result(path, entry.pw_name, "open" if code else None, code, os.strerror(code) if code else None))
    return found
