# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Stand-in GPUs for integration tests: ``nvidia-smi`` (tools/pve_standin/nvidia_smi.py) on the node and in
real stand-in containers, NVIDIA device files and libraries inside, and stand-in GPU processes whose host PIDs
are in the node's ``nvidia-smi`` state, so code that maps GPU PIDs to containers is tested on real processes.

- The node's ``nvidia-smi`` (view ``node``) lists the live processes of its state with their host PIDs.
- A container's ``nvidia-smi`` (view ``container``, /usr/bin/nvidia-smi) lists GPUs and memory but no processes,
  as the real one does (the driver knows host PIDs only).
- ``gpu_process_in_container`` starts ``python3 -c <sleep> <marker>`` inside (no tty, stdin /dev/null, setsid),
  finds its host PID by the marker in /proc/PID/cmdline and checks that /proc/PID/cgroup names the container.
- Device files: no NVIDIA driver is loaded here, so a file with NVIDIA's numbers (195:N) cannot be opened. The
  stand-in's files have the null device's numbers 1:3 (``ANSWERING``, ``device_numbers``): allowed by LXC's device
  rules, and a driver answers every open, as on a GPU node. Opening a device node, the kernel checks the file's mode
  (EACCES), then the container's device cgroup (EPERM), then the driver (ENXIO when none is registered for the
  major). So a test makes a file a user cannot open with ``make_device_node(mode=..., owner=...)``, one the device
  cgroup forbids with ``nvidia_numbers(name)`` in a privileged container (LXC's common.conf denies all but a list),
  and one with no driver behind it with ``nvidia_numbers(name)`` once ``allow_devices(vmid, "c 195:* rwm")``.

What ``/proc/PID/cgroup`` says for a process in a container (the PID -> VMID parser must handle both):

Stand-in on this machine since it places containers as Proxmox VE does (``lxc.cgroup.dir.container = lxc/VMID``,
inner ``ns``; cgroup v1 + v2 hybrid), measured for a process started with ``pct exec 670 -- ...``::

    5:devices:/lxc/670/ns
    4:memory:/lxc/670/ns
    0::/lxc/670/ns/.lxc

and the container's init at ``lxc/VMID/ns/init.scope``. Before that (Debian's LXC, no lxc.cgroup.dir), measured for a process
started with ``pct exec 670 -- setsid -f python3 ...`` on the local node; the same lines with 671 for one
started in container 671 through pve-a's sshd (its own LXC path; same kernel, same cgroup names)::

    9:name=systemd:/lxc.payload.670
    8:pids:/lxc.payload.670
    7:blkio:/lxc.payload.670
    6:freezer:/lxc.payload.670
    5:devices:/lxc.payload.670
    4:memory:/lxc.payload.670
    3:cpuset:/lxc.payload.670
    2:cpuacct:/lxc.payload.670
    1:cpu:/lxc.payload.670
    0::/lxc.payload.670/.lxc

(``.lxc`` is where lxc-attach puts attached processes in the unified hierarchy.) The container's own processes
are deeper, measured for container 673: init ``0::/lxc.payload.673/init.scope`` and
``9:name=systemd:/lxc.payload.673/init.scope``, a service ``0::/lxc.payload.673/system.slice/systemd-journald.service``.
The LXC monitor is in ``lxc.monitor.670`` (``0::/lxc.monitor.670``): not a container process. When a stale cgroup of
that name exists, LXC picks ``lxc.payload.VMID-1``, ``-2``, ...; stale ``lxc.payload.200-1`` .. ``-7`` exist here.

Proxmox VE 7 and newer (pure cgroup v2; Proxmox's LXC places a container at ``lxc/VMID`` with an inner ``ns``
level that is the container's cgroup namespace root, and the monitor at ``lxc.monitor/VMID``), from
pve-container/LXC knowledge, not measured here::

    0::/lxc/200/ns/system.slice/ssh.service        # a service inside CT 200 (systemd in the CT)
    0::/lxc/200/ns/init.scope                       # the CT's init
    0::/lxc/200/ns                                  # a process attached with pct exec / lxc-attach
    0::/lxc.monitor/200                             # the monitor: NOT a container process

Proxmox VE 6 (hybrid) gave ``N:CONTROLLER:/lxc/200/...`` lines per v1 controller (not measured). A host process shows ``0::/system.slice/...`` or
``0::/user.slice/...``.
"""
from __future__ import annotations

import contextlib
import fcntl
import inspect
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from . import fake_libcuda
from .conftest import REPO, StandinNode

SMI_SOURCE = REPO / "tools" / "pve_standin" / "nvidia_smi.py"
# Installed as a program: the source has no shebang (ansible-test allows none that names python3), the copy gets one.
SHEBANG = b"#!/usr/bin/env python3\n"
DRIVER = "550.54.15"
GPU_UUIDS = (
    "GPU-3f0c2a1e-7b4d-4e2a-9c1b-5d6e7f809a1b",
    "GPU-8a1d5e02-4c3b-11ee-b962-0242ac120002",
    "GPU-c7e4b9a6-2f18-4d5c-8e07-91a3b6d4f2e8",
    "GPU-05b2e8d1-93c4-47fa-a6e1-3d9c0b7f5a24",
)
GPU_NAME = "NVIDIA A100-SXM4-40GB"
GPU_MEMORY = 40960
LIB_DIR = "/usr/lib/x86_64-linux-gnu"
_LIBCUDA: list[bytes] = []  # the stand-in libcuda, once built
NVIDIA_MAJOR = 195
UVM_MAJOR = 511
# The numbers every stand-in NVIDIA device file gets: the null device's. LXC's default device rules allow it
# (common.conf: c 1:3 rwm) and its driver answers every open, as the NVIDIA driver does on a GPU node.
ANSWERING = (1, 3)
DEVICES_CGROUP = Path("/sys/fs/cgroup/devices")
SLEEPER = "import time\nwhile True:\n    time.sleep(3600)\n"
MARKER_PREFIX = "gpu-standin-"
NODE_SIDE_ROOT = "/var/lib/pve-standin"


def gpu_entries(n: int, memory_used: int = 0, utilization: int = 0) -> list[dict[str, Any]]:
    """``n`` (at most len(GPU_UUIDS)) GPUs for an nvidia-smi state: A100 40 GB, PCI bus 07, 0f, 47, 4e."""
    buses = ("07", "0F", "47", "4E")
    return [{"index": i, "uuid": GPU_UUIDS[i], "name": GPU_NAME, "pci_bus_id": f"00000000:{buses[i]}:00.0",
             "memory_total": GPU_MEMORY, "memory_used": memory_used, "utilization": utilization}
            for i in range(n)]


def smi_state(view: str, gpus: Sequence[dict[str, Any]], driver_version: str = DRIVER,
              library_version: str | None = None) -> dict[str, Any]:
    """A state document for nvidia_smi.py."""
    state: dict[str, Any] = {"view": view, "driver_version": driver_version, "driver_loaded": True,
                             "gpus": [dict(g) for g in gpus], "processes": []}
    if library_version is not None:
        state["library_version"] = library_version
    return state


def install_node_smi(directory: Path, gpus: Sequence[dict[str, Any]], driver_version: str = DRIVER) -> Path:
    """Install the node's nvidia-smi (view node) as ``directory/nvidia-smi``; returns the program's path.

    Its state is ``directory/nvidia-smi.json`` (``program.with_suffix(".json")``). For a remote node use
    ``install_remote_node_smi``, which puts it where the node's sshd sees it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / "nvidia-smi"
    program.write_bytes(SHEBANG + SMI_SOURCE.read_bytes())
    program.chmod(0o755)
    write_state(state_of(program), smi_state("node", gpus, driver_version))
    return program


def install_remote_node_smi(node: Any, gpus: Sequence[dict[str, Any]], driver_version: str = DRIVER,
                            subdir: str = "gpu-standin") -> tuple[Path, str]:
    """Install nvidia-smi for a remote node (``nodes.RemoteNode``) under its state root.

    Returns (controller-side program path, node-side program path): the node's sshd sees
    ``NODES_BASE/<name>/root/<subdir>`` as ``/var/lib/pve-standin/<subdir>``. The state file is the
    controller-side ``program.with_suffix(".json")``; run the node-side path over ssh.
    """
    program = install_node_smi(Path(node.state_root) / subdir, gpus, driver_version)
    return program, f"{NODE_SIDE_ROOT}/{subdir}/nvidia-smi"


def state_of(program: Path) -> Path:
    """The state file of an installed nvidia-smi."""
    return program.with_name("nvidia-smi.json")


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write a state file atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


@contextlib.contextmanager
def edit_state(path: Path) -> Iterator[dict[str, Any]]:
    """Load, change and write back a state file under a lock (tests may run processes in parallel)."""
    with open(path.with_name(path.name + ".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(path.read_text(encoding="utf-8"))
        yield state
        write_state(path, state)


def add_process(state_file: Path, pid: int, gpu_uuid: str, used_memory: int) -> None:
    """Record a process as holding ``used_memory`` MiB on a GPU in a node's state."""
    with edit_state(state_file) as state:
        state.setdefault("processes", []).append({"pid": pid, "gpu_uuid": gpu_uuid, "used_memory": used_memory})


def remove_process(state_file: Path, pid: int) -> None:
    """Forget a process in a node's state (as when its CUDA context is destroyed)."""
    with edit_state(state_file) as state:
        state["processes"] = [p for p in state.get("processes", []) if int(p["pid"]) != pid]


def device_names(gpus: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The device files a container gets for these GPUs: nvidiactl, nvidia-uvm, nvidia<index>..."""
    return ("nvidiactl", "nvidia-uvm", *(f"nvidia{int(g['index'])}" for g in gpus))


def nvidia_numbers(name: str) -> tuple[int, int]:
    """(major, minor) of an NVIDIA device file on a GPU node: nvidiaN 195:N, nvidiactl 195:255, nvidia-uvm 511:0.

    No driver answers for them here: the device cgroup of a privileged stand-in container refuses them (EPERM), and
    where it allows them the kernel finds no driver for the major (ENXIO).
    """
    fixed = {"nvidiactl": (NVIDIA_MAJOR, 255), "nvidia-modeset": (NVIDIA_MAJOR, 254),
             "nvidia-uvm": (UVM_MAJOR, 0), "nvidia-uvm-tools": (UVM_MAJOR, 1)}
    if name in fixed:
        return fixed[name]
    match = re.fullmatch(r"nvidia([0-9]+)", name)
    if not match:
        raise ValueError(f"not an NVIDIA device: {name}")
    return NVIDIA_MAJOR, int(match.group(1))


def device_numbers(name: str) -> tuple[int, int]:
    """(major, minor) of a stand-in NVIDIA device file whose driver answers: ``ANSWERING`` (1:3) for every name."""
    nvidia_numbers(name)  # an NVIDIA name
    return ANSWERING


def push_file(node: StandinNode, vmid: int, path: str, data: bytes, mode: str = "0644") -> None:
    """Write a file inside a container, its content fed through pct's stdin as a pipe."""
    node.sh(vmid, 'mkdir -p "$(dirname "$1")" && cat > "$1.tmp" && chmod "$2" "$1.tmp" && mv "$1.tmp" "$1"',
            path, mode, input=data)


def _passed_devices(node: StandinNode, vmid: int) -> dict[str, dict[str, str]]:
    """The container's ``devN`` entries from ``pct config``: {key: {"path": ..., "mode": ..., ...}}."""
    found = {}
    for line in node.pct("config", vmid, check=True).stdout.decode("utf-8", "replace").splitlines():
        key, _sep, value = line.partition(": ")
        if re.fullmatch(r"dev[0-9]+", key):
            items = [item.partition("=") for item in value.split(",")]
            found[key] = {name if sep else "path": text if sep else name for name, sep, text in items}
    return found


def make_devices(node: StandinNode, vmid: int, names: Iterable[str], *, mode: str = "0666", uid: int | None = None,
                 gid: int | None = None) -> None:
    """Pass NVIDIA device files into a container as a Proxmox VE node does: ``devN`` entries (``pct set``).

    Each node is made once with mknod on this host under a temporary folder, never in the host's /dev
    (``device_numbers``); the stand-in shows a device path outside /dev as ``/dev/<file name>`` inside. A devN the
    container lacks is hot-plugged into the running container, as Proxmox VE 8.1+ does; a changed one (mode, uid,
    gid) applies at the next start, so the container is then restarted (its processes end). ``mode`` (Proxmox's
    default is 0660), ``uid`` and ``gid`` are the devN options: the mode and owner the files get inside. Works in
    unprivileged containers, where mknod inside is refused, and in privileged ones.
    """
    import stat  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel
    folder = Path(tempfile.gettempdir()) / "gpu-standin-devices"
    folder.mkdir(exist_ok=True)
    names = list(names)
    passed = _passed_devices(node, vmid)
    by_path = {entry["path"]: key for key, entry in passed.items()}
    free = (f"dev{index}" for index in range(256) if f"dev{index}" not in passed)
    shown = node.sh(vmid, 'for n in "$@"; do if test -c "/dev/$n"; then echo "$n"; fi; done', *names).stdout.split()
    wanted = {"mode": mode, **({"uid": str(uid)} if uid is not None else {}), **({"gid": str(gid)} if gid is not None else {})}
    args: list[str] = []
    deleted: list[str] = []
    restart = False
    for name in names:
        host = folder / name
        rdev = os.makedev(*device_numbers(name))
        try:
            os.mknod(host, 0o666 | stat.S_IFCHR, rdev)
        except FileExistsError:
            if os.stat(host).st_rdev != rdev:
                raise
        spec = ",".join([str(host)] + [f"{key}={value}" for key, value in wanted.items()])
        key = by_path.get(str(host))
        if key is not None and name.encode() in shown:
            if {k: v for k, v in passed[key].items() if k != "path"} != wanted:
                args += [f"--{key}", spec]
                restart = True
            continue
        if key is not None:  # gone inside (taken away): a new entry is hot-plugged
            deleted.append(key)
        args += [f"--{next(free)}", spec]
    if deleted:
        args += ["--delete", ",".join(deleted)]
    if args:
        node.pct("set", vmid, *args, check=True)
    if restart:
        node.pct("reboot", vmid, check=True)


def remove_devices(node: StandinNode, vmid: int, names: Iterable[str]) -> None:
    """Take device files away inside a container (``nvidia-uvm``, ``nvidia1``, ...).

    Their devN entries are deleted (Proxmox VE applies that at the next start, so a restart does not bring them
    back) and the files are unmounted and removed inside at once.
    """
    names = list(names)
    keys = [key for key, entry in _passed_devices(node, vmid).items() if os.path.basename(entry["path"]) in names]
    if keys:
        node.pct("set", vmid, "--delete", ",".join(keys), check=True)
    node.sh(vmid, 'for n in "$@"; do while umount "/dev/$n" 2>/dev/null; do :; done; rm -f "/dev/$n"; done', *names)


def create_privileged(node: StandinNode, vmid: int) -> int:
    """Create (and start) a privileged container: mknod inside, and LXC's device cgroup rules (``make_device_node``)."""
    if "privileged" in inspect.signature(node.create).parameters:
        return node.create(vmid, privileged=True)  # type: ignore[call-arg]
    if node.pct("config", vmid).returncode == 0:  # as StandinNode.create, before it could say privileged
        node.pct("destroy", vmid, "--force", check=True)
    node.pct("create", vmid, "--unprivileged", "0", "--start", "1", check=True, timeout=600)
    node.created.append(vmid)
    return vmid


def make_device_node(node: StandinNode, vmid: int, name: str, numbers: tuple[int, int] = ANSWERING,
                     mode: str = "0666", owner: str = "0:0") -> None:
    """``/dev/NAME`` in a privileged container with mknod (LXC allows ``c *:* m``), of this mode and owner (uid:gid).

    ``ANSWERING`` (the default) opens for whoever the mode lets in; ``nvidia_numbers(name)`` is refused by the
    container's device cgroup (EPERM), or, once ``allow_devices`` allowed its major, finds no driver (ENXIO).
    """
    # a file passed through (devN:) is a bind mount: unmount it first (root in a privileged container may)
    script = 'while umount "$1" 2>/dev/null; do :; done; rm -f "$1" && mknod -m "$4" "$1" c "$2" "$3" && chown "$5" "$1"'
    node.sh(vmid, script, f"/dev/{name}", str(numbers[0]), str(numbers[1]), mode, owner)


def device_cgroup(vmid: int) -> Path:
    """The container's cgroup v1 ``devices`` folder on this host: ``lxc/VMID`` (Proxmox VE's layout, with the inner
    ``ns`` below it) or ``lxc.payload.VMID`` (plain LXC), read from /proc/PID/cgroup of its processes."""
    pattern = re.compile(rf"^[0-9]+:devices:(/lxc/{vmid}|/lxc\.payload\.{vmid}(?:-[0-9]+)?)(?:/|$)", re.M)
    for entry in os.listdir("/proc"):
        match = pattern.search(proc_cgroup(int(entry))) if entry.isdigit() else None
        if match:
            return DEVICES_CGROUP / match.group(1).lstrip("/")
    raise AssertionError(f"no process of container {vmid} in a devices cgroup (is the container running, cgroup v1?)")


def allow_devices(vmid: int, rule: str) -> None:
    """Add ``rule`` (``c 195:* rwm``) to a running container's device cgroups, top down (a cgroup v1 child gets no more
    than its parent), as an ``lxc.cgroup2.devices.allow`` line of its config (or ``devN:`` passthrough) does. Gone
    when the container restarts."""
    for folder, _dirs, _files in os.walk(device_cgroup(vmid)):
        (Path(folder) / "devices.allow").write_text(rule + "\n", encoding="utf-8")


def built_libcuda() -> bytes:
    """The stand-in libcuda (files/fake_libcuda.c), built once per test process."""
    if not _LIBCUDA:
        with tempfile.TemporaryDirectory(prefix="fake-libcuda-") as folder:
            _LIBCUDA.append(fake_libcuda.build(Path(folder)).read_bytes())
    return _LIBCUDA[0]


def install_libraries(node: StandinNode, vmid: int, version: str) -> None:
    """The stand-in libcuda.so.VERSION (a real shared library that the CUDA probe loads, fake_libcuda) and a small
    libnvidia-ml.so.VERSION, with the .so.1 and .so symlinks."""
    script = ('set -e; cd "$1"; for lib in libcuda libnvidia-ml; do '
              '[ "$lib" = libcuda ] || printf "stand-in %s.so.%s\\n" "$lib" "$2" > "$lib.so.$2"; '
              'for old in "$lib".so.[0-9]*.[0-9]*; do [ "$old" = "$lib.so.$2" ] || rm -f "$old"; done; '
              'ln -sfn "$lib.so.$2" "$lib.so.1"; ln -sfn "$lib.so.1" "$lib.so"; done')
    push_file(node, vmid, f"{LIB_DIR}/libcuda.so.{version}", built_libcuda(), "0755")
    node.sh(vmid, script, LIB_DIR, version)


def install_cuda_conf(node: StandinNode, vmid: int, gpus: Sequence[dict[str, Any]], **settings: str) -> None:
    """The stand-in libcuda's settings in the container (fake_libcuda.CONF): these GPUs (UUIDs, PCI bus ids), and
    ``settings`` (``FAIL="cuInit:999"``)."""
    text = fake_libcuda.conf_text(UUIDS=",".join(str(gpu["uuid"]) for gpu in gpus),
                                  BUS_IDS=",".join(str(gpu["pci_bus_id"])[4:] for gpu in gpus), **settings)
    push_file(node, vmid, fake_libcuda.CONF, text.encode("utf-8"))


def install_in_container(node: StandinNode, vmid: int, gpus: Sequence[dict[str, Any]], driver_version: str = DRIVER,
                         library_version: str | None = None, devices: Sequence[str] | None = None,
                         libraries: bool = True) -> None:
    """Make a running container look like a Proxmox CT with GPUs passed through.

    /usr/bin/nvidia-smi (view container; state /usr/bin/nvidia-smi.json: the GPUs, no processes), device files
    (default: ``device_names(gpus)``), and the user-space libraries of ``library_version`` (default: the driver's;
    another version makes nvidia-smi fail with the driver/library mismatch, exit 18). Device files live in the
    container's /dev (a tmpfs): a container restart removes them, call this again after one.
    """
    state = smi_state("container", gpus, driver_version, library_version)
    push_file(node, vmid, "/usr/bin/nvidia-smi", SHEBANG + SMI_SOURCE.read_bytes(), "0755")
    push_file(node, vmid, "/usr/bin/nvidia-smi.json", (json.dumps(state, indent=1) + "\n").encode())
    make_devices(node, vmid, device_names(gpus) if devices is None else devices)
    if libraries:
        install_libraries(node, vmid, library_version or driver_version)
        install_cuda_conf(node, vmid, gpus)


def sync_container_view(node: StandinNode, vmid: int, node_state_file: Path) -> None:
    """Give a container's nvidia-smi the node's current memory totals (live processes counted), no processes."""
    state = json.loads(node_state_file.read_text(encoding="utf-8"))
    live = [p for p in state.get("processes", []) if Path(f"/proc/{int(p['pid'])}").exists()]
    for gpu in state.get("gpus", []):
        gpu["memory_used"] = int(gpu.get("memory_used", 0)) + sum(
            int(p["used_memory"]) for p in live if p["gpu_uuid"] == gpu["uuid"])
    out = dict(state, view="container", processes=[])
    current = json.loads(node.pct("exec", vmid, "--", "cat", "/usr/bin/nvidia-smi.json", check=True).stdout)
    out["driver_version"] = current.get("driver_version", out.get("driver_version"))
    if "library_version" in current:
        out["library_version"] = current["library_version"]
    push_file(node, vmid, "/usr/bin/nvidia-smi.json", (json.dumps(out, indent=1) + "\n").encode())


# ---------------------------------------------------------------------------
# Stand-in GPU processes
# ---------------------------------------------------------------------------
_STARTED: list[int] = []


def proc_cgroup(pid: int) -> str:
    """The text of /proc/PID/cgroup ("" when the process is gone)."""
    try:
        return Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8")
    except OSError:
        return ""


def cgroup_names_container(cgroup_text: str, vmid: int) -> bool:
    """Whether /proc/PID/cgroup text puts the process in container ``vmid`` (stand-in or Proxmox layout)."""
    pattern = re.compile(rf"(?:^|/)(?:lxc\.payload\.{vmid}(?:-[0-9]+)?|lxc/{vmid})(?:/|$)")
    return any(pattern.search(line.split(":", 2)[2]) for line in cgroup_text.splitlines() if line.count(":") >= 2)


def find_marked(marker: str) -> list[int]:
    """Host PIDs whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline.split(b"\0"):
            found.append(int(entry))
    return found


def wait_marked(marker: str, timeout: float = 10) -> int:
    """The single host PID carrying ``marker``, waiting for it to appear."""
    deadline = time.monotonic() + timeout
    while True:
        found = find_marked(marker)
        if len(found) == 1:
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"expected one process marked {marker}, found {found}")
        time.sleep(0.05)


def gpu_process_in_container(node: StandinNode, vmid: int, gpu_uuid: str, used_memory: int, state_file: Path) -> int:
    """Start a long-running stand-in GPU process in a container; record it in the node's state; return its host PID.

    The process (``python3 -c <sleep> gpu-standin-<token>``, process_name ``python3``) leads its own session
    (``setsid -f``), has no tty, stdin /dev/null, and survives the call. Its host PID is found by the marker
    in /proc, and /proc/PID/cgroup must name the container.
    """
    marker = MARKER_PREFIX + secrets.token_hex(6)
    node.sh(vmid, 'setsid -f python3 -c "$1" "$2" </dev/null >/dev/null 2>&1', SLEEPER, marker)
    pid = wait_marked(marker)
    _STARTED.append(pid)
    cgroup = proc_cgroup(pid)
    if not cgroup_names_container(cgroup, vmid):
        raise AssertionError(f"PID {pid} is not in container {vmid}: {cgroup!r}")
    add_process(state_file, pid, gpu_uuid, used_memory)
    return pid


def gpu_process_on_node(gpu_uuid: str, used_memory: int, state_file: Path) -> subprocess.Popen[bytes]:
    """Start a stand-in GPU process on the node itself (this host, outside any container) and record it."""
    marker = MARKER_PREFIX + secrets.token_hex(6)
    argv = [sys.executable, "-c", SLEEPER, marker]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,  # pylint: disable=consider-using-with
                            stderr=subprocess.DEVNULL, start_new_session=True)
    _STARTED.append(proc.pid)
    add_process(state_file, proc.pid, gpu_uuid, used_memory)
    return proc


def kill_gpu_process(pid: int, timeout: float = 5) -> None:
    """Kill one stand-in GPU process (SIGKILL) and wait until it is gone.

    It stays in the node's state: nvidia-smi drops dead PIDs, as the driver does.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    deadline = time.monotonic() + timeout
    while _is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _is_alive(pid: int) -> bool:
    """False for a zombie (it still has /proc/PID, but the driver would have forgotten it)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"


def kill_all_gpu_processes() -> None:
    """Kill every stand-in GPU process these helpers started (only those, by PID)."""
    while _STARTED:
        pid = _STARTED.pop()
        if MARKER_PREFIX.encode() in _cmdline(pid):
            kill_gpu_process(pid)


def _cmdline(pid: int) -> bytes:
    """The raw /proc/PID/cmdline (b"" when the process is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@contextlib.contextmanager
def gpu_processes() -> Iterator[None]:
    """Kill every stand-in GPU process started inside the ``with`` block (and any left before) at its end."""
    try:
        yield
    finally:
        kill_all_gpu_processes()


# ---------------------------------------------------------------------------
# The node's kernel log and driver versions (tools/pve_standin/README.md, "The node's kernel log and driver versions")
# ---------------------------------------------------------------------------
KERNEL_LOG_SOURCE = REPO / "tools" / "pve_standin" / "node_kernel_log.py"
# gpu_info's node_kernel_log after the program: what journalctl -k is asked on a Proxmox VE node (without --since: the
# collection passes a given command as it is, and reads the lines' own times)
KERNEL_LOG_ARGS = ("-k", "-o", "short-iso-precise", "--no-pager")


def xid_line(seconds: float, gpu: dict[str, Any], xid: int, text: str, pid: int = 1234, name: str = "python3") -> str:
    """A driver's Xid line of ``gpu`` (an entry of ``gpu_entries``) as ``journalctl -k -o short-iso-precise`` prints it:
    ``...+0000 pve-standin kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1234, name=python3, GPU has fallen off the bus.``"""
    _domain, bus, device = str(gpu["pci_bus_id"]).split(".", maxsplit=1)[0].split(":")
    message = f"NVRM: Xid (PCI:0000:{bus.lower()}:{device.lower()}): {xid}, pid={pid}, name={name}, {text}"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1e6):06d}+0000"
    return f"{stamp} pve-standin kernel: {message}"


def install_node_kernel_log(directory: Path, lines: Sequence[str]) -> list[str]:
    """Install the node's kernel log stand-in as ``directory/node-kernel-log`` with ``lines`` in ``directory/kernel.log``;
    returns gpu_info's ``node_kernel_log`` (the program and journalctl's arguments)."""
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / "node-kernel-log"
    program.write_bytes(SHEBANG + KERNEL_LOG_SOURCE.read_bytes())
    program.chmod(0o755)
    (directory / "kernel.log").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return [str(program), *KERNEL_LOG_ARGS]


def install_driver_tree(root: Path, loaded: str, installed: str) -> Path:
    """A node's driver files under ``root`` (gpu_info's ``node_root``): the loaded kernel module's version in
    ``sys/module/nvidia/version`` and the installed user-space driver, ``libnvidia-ml.so.INSTALLED`` and its ``.so.1`` link."""
    module = root / "sys" / "module" / "nvidia"
    module.mkdir(parents=True, exist_ok=True)
    (module / "version").write_text(loaded + "\n", encoding="utf-8")
    libs = root / LIB_DIR.lstrip("/")
    libs.mkdir(parents=True, exist_ok=True)
    for old in libs.glob("libnvidia-ml.so*"):
        old.unlink()
    (libs / f"libnvidia-ml.so.{installed}").write_text(f"stand-in libnvidia-ml.so.{installed}\n", encoding="utf-8")
    (libs / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{installed}")
    return root


def set_container_utilization(node: StandinNode, vmid: int, utilization: Sequence[int]) -> None:
    """The utilisation (%) a container's nvidia-smi reports for its GPUs, in index order (as a training job's GPUs would)."""
    text = node.pct("exec", vmid, "--", "cat", "/usr/bin/nvidia-smi.json", check=True).stdout
    state = json.loads(text)
    for gpu, value in zip(sorted(state["gpus"], key=lambda g: int(g["index"])), utilization):
        gpu["utilization"] = int(value)
    push_file(node, vmid, "/usr/bin/nvidia-smi.json", (json.dumps(state, indent=1) + "\n").encode())
