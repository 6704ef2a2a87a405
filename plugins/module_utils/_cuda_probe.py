# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Whether CUDA initialises on the job's GPUs: the CUDA driver API called through ``ctypes`` (issue 35).

Every device-file check may pass while CUDA still fails: after a node reboot ``/dev/nvidia-uvm`` exists only once
the uvm module is loaded, an unprivileged container cannot load it, and CUDA then answers ``cuInit`` with error 999
``CUDA_ERROR_UNKNOWN`` (community-scripts/ProxmoxVE#5740; NVIDIA/enroot#106). So the probe does what a job does:
``cuInit(0)``, ``cuDeviceGetCount``, and for each GPU it sees ``cuDeviceGet``, ``cuDeviceGetUuid`` (16 bytes, printed
``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` as nvidia-smi does), ``cuDeviceGetPCIBusId`` and
``cuCtxCreate_v2`` + ``cuCtxDestroy_v2``, with the job's ``CUDA_VISIBLE_DEVICES`` in its environment, so that the
driver enumerates the job's GPUs only. ``probe_as`` runs it in a forked child that became the job's user
(``initgroups``, ``setgid``, ``setuid``, as ``_gpu_devices`` opens the device files) with the job's environment, and
reads the result back from a pipe as JSON; a child that does not answer in time (a driver stuck in the kernel) is
killed and reported as ``timeout``. Without ``libcuda`` there is no probe and no error.

The codes and names are ``CUresult`` of the CUDA Driver API: https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html
(enum ``cudaError_enum``), checked against NVIDIA's cuda-python listing of the same enum (``cuda.bindings.driver.CUresult``,
https://nvidia.github.io/cuda-python/, generated from cuda.h of CUDA 13.1): 2 OUT_OF_MEMORY,
3 NOT_INITIALIZED, 34 STUB_LIBRARY, 46 DEVICE_UNAVAILABLE (the driver's name; the runtime calls 46
``cudaErrorDevicesUnavailable``), 100 NO_DEVICE, 101 INVALID_DEVICE, 304 OPERATING_SYSTEM, 803 SYSTEM_DRIVER_MISMATCH,
804 COMPAT_NOT_SUPPORTED_ON_DEVICE, 999 UNKNOWN. 35 is the runtime API's ``cudaErrorInsufficientDriver`` (the driver
API has no 35); it is mapped too, for a code taken from a runtime message. Names and texts come from the driver
(``cuGetErrorName``, ``cuGetErrorString``); ``NAMES`` is the fallback. Standard library only and no import of the
collection: the supervisor may stage this file beside its own (``_job_stage``).
"""

from __future__ import annotations

import ctypes
import errno
import faulthandler
import json
import os
import pwd
import select
import signal
import time
import typing as t

LIBCUDA = ("libcuda.so.1", "libcuda.so")
UVM = "/dev/nvidia-uvm"
PROBE_TIMEOUT = 30.0
NAMES = {2: "CUDA_ERROR_OUT_OF_MEMORY", 3: "CUDA_ERROR_NOT_INITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY", 35: "cudaErrorInsufficientDriver",
         46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE", 304: "CUDA_ERROR_OPERATING_SYSTEM",
         803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 999: "CUDA_ERROR_UNKNOWN"}
_P = ctypes.POINTER
SIGNATURES: dict[str, tuple[t.Any, ...]] = {
    "cuInit": (ctypes.c_uint,), "cuDeviceGetCount": (_P(ctypes.c_int),), "cuDeviceGet": (_P(ctypes.c_int), ctypes.c_int),
    "cuDeviceGetUuid_v2": (ctypes.c_char_p, ctypes.c_int), "cuDeviceGetUuid": (ctypes.c_char_p, ctypes.c_int),
    "cuDeviceGetPCIBusId": (ctypes.c_char_p, ctypes.c_int, ctypes.c_int), "cuCtxCreate_v2": (_P(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int),
    "cuCtxDestroy_v2": (ctypes.c_void_p,), "cuGetErrorName": (ctypes.c_int, _P(ctypes.c_char_p)), "cuGetErrorString": (ctypes.c_int, _P(ctypes.c_char_p)),
}
_UVM_FIX = ("load the uvm module on the node before the container starts: `nvidia-modprobe -u -c=0` (or `modprobe nvidia-uvm`), "
            "then restart the container")
_DRIVER_FIX = ("install in the container the NVIDIA user-space libraries (libcuda) of the node's driver version (`cat /proc/driver/nvidia/version` "
               "on the node), with no CUDA forward-compatibility libraries (cuda-compat) ahead of them on the library path")
_KERNEL_LOG = "look for NVRM Xid lines in the node's kernel log (`journalctl -k`; Xid 79: the GPU fell off the bus)"
FIXES = {
    2: "another process holds the GPU's memory: `nvidia-smi` on the node lists it; end it or give the job another GPU",
    34: ("the libcuda found is the CUDA toolkit's stub: take its stubs folder off LD_LIBRARY_PATH and install the NVIDIA user-space "
         "libraries of the node's driver version"),
    35: _DRIVER_FIX, 803: _DRIVER_FIX, 804: _DRIVER_FIX, "load_error": _DRIVER_FIX, "no_symbol": _DRIVER_FIX,
    46: ("the GPU is in an exclusive or prohibited compute mode and another process holds it (`nvidia-smi -q -d COMPUTE` on the node): "
         "wait for that process to end, or set `nvidia-smi -i N -c DEFAULT`"),
    100: ("the container sees no GPU: pass the GPU's device files (/dev/nvidiaN) into it (Proxmox VE `devN:`), and let "
          "CUDA_VISIBLE_DEVICES ({visible}) name GPUs it has"),
    101: "CUDA_VISIBLE_DEVICES ({visible}) names a GPU the container does not have: name one that `nvidia-smi -L` lists in the container",
    304: ("an operating-system call of the driver failed: let the job's user open the NVIDIA device files (gpu_info's device check) and "
          "the container's device cgroup allow them (lxc.cgroup2.devices.allow)"),
    999: _UVM_FIX + "; with the module loaded already, reload it on the node (`rmmod nvidia_uvm && modprobe nvidia_uvm`, no CUDA process running) "
    "or reboot the node, and " + _KERNEL_LOG,
    "timeout": "the driver did not answer: " + _KERNEL_LOG + ", then reset the GPU (`nvidia-smi -r -i N` on the node) or reboot the node",
    "crashed": "the driver ended the probe: " + _KERNEL_LOG + ", and check that the container's libcuda is of the node's driver version",
    "switch": "give the job a user that exists in the container, and run this check as root (become) so that it can become that user",
}


class CudaFailure(Exception):
    """A driver call that did not return CUDA_SUCCESS (``code`` None: no such symbol, or no driver error)."""

    def __init__(self, call: str, code: int | None, device: dict[str, t.Any] | None = None, text: str | None = None) -> None:
        super().__init__(call, code)
        self.call, self.code, self.device, self.text = call, code, device, text


def fix_for(code: int | str | None, facts: t.Mapping[str, t.Any]) -> str:
    """The fix for a failure with ``code`` (a CUresult, or a name: ``timeout``, ``crashed``, ``switch``, ``load_error``);
    ``facts``: ``uvm`` (whether ``/dev/nvidia-uvm`` exists) and ``visible_devices`` (the job's CUDA_VISIBLE_DEVICES)."""
    uvm = facts.get("uvm", True)
    visible = facts.get("visible_devices")
    if not uvm and code in (3, 100, 999):
        return f"{UVM} is missing in the container: {_UVM_FIX}"
    fix = FIXES.get(code if code is not None else "", "")
    if not fix:
        return _KERNEL_LOG + ", and check that the container's libcuda is of the node's driver version"
    shown = "unset" if visible is None else repr(visible) if len(visible) <= 120 else repr(visible[:120]) + "..."
    return fix.replace("{visible}", shown)


def _function(lib: t.Any, call: str) -> t.Any:
    try:
        function = getattr(lib, call)
    except AttributeError:
        raise CudaFailure(call, None, text=f"the library has no {call}") from None
    function.restype, function.argtypes = ctypes.c_int, SIGNATURES[call]
    return function


def _call(lib: t.Any, progress: t.Callable[[str], None], call: str, *args: t.Any, device: dict[str, t.Any] | None = None) -> None:
    progress(call)
    code = _function(lib, call)(*args)
    if code:
        raise CudaFailure(call, code, device)


def _describe(lib: t.Any, code: int) -> tuple[str, str]:
    """The driver's name and text of ``code`` (``NAMES`` and no text when it has none)."""
    found = []
    for call in ("cuGetErrorName", "cuGetErrorString"):
        text = ctypes.c_char_p()
        try:
            answered = _function(lib, call)(code, ctypes.byref(text)) == 0 and text.value is not None
        except CudaFailure:
            answered = False
        found.append(t.cast(bytes, text.value).decode("utf-8", "replace") if answered else "")
    return found[0] or NAMES.get(code, f"CUresult {code}"), found[1]


def uuid_text(raw: bytes) -> str:
    """16 bytes of a CUuuid as nvidia-smi prints the GPU's UUID: ``GPU-`` and 8-4-4-4-12 hex digits."""
    digits = raw[:16].hex()
    return f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:32]}"


def _device(lib: t.Any, ordinal: int, progress: t.Callable[[str], None]) -> dict[str, t.Any]:
    """UUID and PCI bus id of the ``ordinal``-th visible GPU, once a context was created and destroyed on it."""
    handle = ctypes.c_int(0)
    found: dict[str, t.Any] = {"ordinal": ordinal, "uuid": None, "pci_bus_id": None}
    _call(lib, progress, "cuDeviceGet", ctypes.byref(handle), ordinal, device=found)
    for call in ("cuDeviceGetUuid_v2", "cuDeviceGetUuid"):
        raw = ctypes.create_string_buffer(16)
        try:
            _call(lib, progress, call, raw, handle.value, device=found)
        except CudaFailure:
            continue
        found["uuid"] = uuid_text(raw.raw)
        break
    bus = ctypes.create_string_buffer(64)
    try:
        _call(lib, progress, "cuDeviceGetPCIBusId", bus, len(bus) - 1, handle.value, device=found)
        found["pci_bus_id"] = bus.value.decode("ascii", "replace")
    except CudaFailure:
        pass
    context = ctypes.c_void_p()
    _call(lib, progress, "cuCtxCreate_v2", ctypes.byref(context), 0, handle.value, device=found)
    _call(lib, progress, "cuCtxDestroy_v2", context, device=found)
    return found


def _load(library: str | None) -> t.Any:
    """The loaded libcuda; None when there is none; CudaFailure ``dlopen`` when one is there but does not load."""
    for name in (library,) if library else LIBCUDA:
        try:
            return ctypes.CDLL(name)
        except OSError as exc:  # glibc's dlerror names the file it could not find: only then there is none
            if not str(exc).startswith(f"{name}: cannot open shared object file"):
                raise CudaFailure("dlopen", None, text=str(exc)) from None
    return None


def _failure(lib: t.Any, exc: CudaFailure, facts: dict[str, t.Any]) -> dict[str, t.Any]:
    name, text = _describe(lib, exc.code) if exc.code is not None else ("load_error" if exc.call == "dlopen" else "no_symbol", "")
    key: int | str | None = exc.code if exc.code is not None else name
    return {"ok": False, "call": exc.call, "code": exc.code, "name": name, "text": exc.text or text, "device": exc.device, "fix": fix_for(key, facts)}


def _quiet(call: str) -> None:
    """No progress report."""


def probe(visible_devices: str | None, library: str | None = None, progress: t.Callable[[str], None] | None = None) -> dict[str, t.Any]:
    """Initialise CUDA on the GPUs ``visible_devices`` (CUDA_VISIBLE_DEVICES; None: unset) names, in this process.

    Sets CUDA_VISIBLE_DEVICES in this process's environment and leaves the driver initialised: meant for a child
    (``probe_as``). ``progress`` is called with each driver call's name before the call."""
    uvm, progress = os.path.exists(UVM), progress or _quiet
    facts: dict[str, t.Any] = {"ran": True, "ok": True, "uvm": uvm, "visible_devices": visible_devices, "library": None, "count": None, "devices": []}
    if visible_devices is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices
    lib = None
    try:
        lib = _load(library)
        if lib is None:
            return {"ran": False, "reason": "no libcuda", "uvm": uvm}
        facts["library"] = getattr(lib, "_name", library)
        _call(lib, progress, "cuInit", 0)
        count = ctypes.c_int(0)
        _call(lib, progress, "cuDeviceGetCount", ctypes.byref(count))
        facts["count"] = count.value
        if count.value < 1:  # the driver answers 100 from cuInit itself; a count of 0 is reported the same way
            raise CudaFailure("cuDeviceGetCount", 100)
        for ordinal in range(count.value):
            facts["devices"].append(_device(lib, ordinal, progress))
    except CudaFailure as exc:
        facts.update(_failure(lib, exc, facts))
    return facts


def library_path(env: t.Mapping[str, str], library: str | None = None) -> str | None:
    """``library`` (default ``LIBCUDA``) as the job finds it first: in the folders of the job's LD_LIBRARY_PATH, which
    the dynamic loader of a running process no longer reads; else the name as given (the loader's own search)."""
    if library and "/" in library:
        return library
    for folder in str(env.get("LD_LIBRARY_PATH") or "").split(":"):
        for name in (library,) if library else LIBCUDA:
            if folder and os.path.isfile(os.path.join(folder, name)):
                return os.path.join(folder, name)
    return library


def _become(entry: t.Any) -> dict[str, t.Any] | None:
    """Become the user of ``entry`` (None, or the user this runs as: nothing to do); the failure, or None."""
    if entry is None or entry.pw_uid == os.geteuid():
        return None
    try:
        os.initgroups(entry.pw_name, entry.pw_gid)
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
    except OSError as exc:
        return {"ran": True, "ok": False, "call": "setuid", "code": None, "name": "switch", "device": None, "fix": FIXES["switch"],
                "text": f"cannot become user {entry.pw_name}: {os.strerror(exc.errno or errno.EPERM)} (this runs as uid {os.geteuid()})"}
    return None


def _quiet_output() -> None:
    """Nothing the driver prints reaches stdout (an Ansible module's JSON), and a crash is reported by the parent alone."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.close(null)
    if faulthandler.is_enabled():
        faulthandler.disable()


def _child(write_fd: int, entry: t.Any, env: t.Mapping[str, str], library: str | None) -> None:
    """In the forked child: become the user, take the job's environment, probe, write one line per step; never returns."""
    def say(kind: str, text: str) -> None:
        os.write(write_fd, f"{kind} {text}\n".encode("utf-8", "surrogateescape"))

    try:
        _quiet_output()
        failed = _become(entry)
        if failed:
            say("result", json.dumps(failed))
            return
        os.environ.clear()
        for key, value in env.items():
            try:
                os.environ[str(key)] = str(value)
            except ValueError:  # a NUL byte or a "=" in a name: the job cannot have it either
                continue
        say("result", json.dumps(probe(os.environ.get("CUDA_VISIBLE_DEVICES"), library_path(env, library), lambda call: say("call", call))))
    except Exception as exc:  # pylint: disable=broad-exception-caught  # reported, not raised into the parent's copy of the program
        say("result", json.dumps({"ran": True, "ok": False, "call": "probe", "code": None, "name": "error", "text": repr(exc), "device": None,
                                  "fix": fix_for("error", {})}))
    finally:
        os._exit(0)  # pylint: disable=protected-access  # a forked child leaves without the module's exit handlers


def read_lines(read_fd: int, timeout: float) -> tuple[list[str], bool]:
    """The child's lines, and whether it finished before ``timeout`` (``_gpu_devices`` reads its child so too)."""
    data, deadline = b"", time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([read_fd], [], [], left)[0]:
            return data.decode("utf-8", "replace").splitlines(), False
        chunk = os.read(read_fd, 65536)
        if not chunk:
            return data.decode("utf-8", "replace").splitlines(), True
        data += chunk


def reap(pid: int, done: bool) -> int | None:
    """The child's wait status; one that did not finish is killed, and left to init if it stays stuck in the driver."""
    if not done:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 1.0
    while True:
        found, status = os.waitpid(pid, 0 if done else os.WNOHANG)
        if found:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _outcome(lines: list[str], done: bool, status: int | None, timeout: float) -> dict[str, t.Any]:
    """The child's result line, else what became of it: ``timeout`` or ``crashed`` in the last call it began."""
    calls = [line.split(" ", 1)[1] for line in lines if line.startswith("call ")]
    results = [line.split(" ", 1)[1] for line in lines if line.startswith("result ")]
    if results:
        return t.cast(t.Dict[str, t.Any], json.loads(results[-1]))
    uvm = os.path.exists(UVM)
    if not done:
        name, text = "timeout", f"no answer within {timeout:g} s"
    else:
        number = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
        name, text = "crashed", f"the probe ended by {signal.Signals(number).name}" if number else "the probe ended without a result"
    return {"ran": True, "ok": False, "uvm": uvm, "call": calls[-1] if calls else "cuInit", "code": None, "name": name, "text": text,
            "device": None, "fix": fix_for(name, {"uvm": uvm})}


def probe_as(user: str | None, env: t.Mapping[str, str], library: str | None = None, timeout: float = PROBE_TIMEOUT) -> dict[str, t.Any]:
    """``probe`` in a forked child that became ``user`` (None: the user this runs as) with the job's environment ``env``
    (its CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH, ...); ``user`` in the result."""
    try:
        entry = pwd.getpwnam(user) if user else None
    except KeyError:
        return {"ran": True, "ok": False, "user": user, "call": "getpwnam", "code": None, "name": "switch",
                "text": f"user {user} does not exist", "device": None, "fix": FIXES["switch"]}
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(write_fd, entry, env, library)
    os.close(write_fd)
    lines: list[str] = []
    done, status = False, None
    try:
        lines, done = read_lines(read_fd, timeout)
    finally:
        os.close(read_fd)
        status = reap(pid, done)
    return dict(_outcome(lines, done, status, timeout), user=user)


def _gpu_label(result: t.Mapping[str, t.Any], gpus_label: str) -> str:
    """``GPU 2 (GPU-...)``: the failing GPU by its CUDA_VISIBLE_DEVICES entry (else its CUDA ordinal) and UUID; else ``gpus_label``."""
    device = result.get("device")
    if not device:
        return gpus_label
    entries = str(result.get("visible_devices") or "").split(",") if result.get("visible_devices") is not None else []
    ordinal = int(device.get("ordinal") or 0)
    name = entries[ordinal].strip() if ordinal < len(entries) and entries[ordinal].strip() else str(ordinal)
    uuid = device.get("uuid")
    return f"GPU {name} ({uuid})" if uuid and uuid != name else f"GPU {name}"


def message(result: t.Mapping[str, t.Any], gpus_label: str) -> str:
    """One line for a failed probe (empty for one that passed or did not run): ``CUDA cannot initialise GPU 0 (GPU-...)
    for the job: cuCtxCreate failed with CUDA_ERROR_UNKNOWN (999, unknown error); fix: ...``."""
    if not result.get("ran") or result.get("ok"):
        return ""
    call = str(result.get("call") or "cuInit")
    call = call[:-3] if call.endswith("_v2") else call
    code, name, text = result.get("code"), result.get("name"), result.get("text")
    if code is not None:
        cause = f"{call} failed with {name} ({code}, {text})" if text else f"{call} failed with {name} ({code})"
    else:
        cause = f"{call} failed: {text or name}"
    return f"CUDA cannot initialise {_gpu_label(result, gpus_label)} for the job: {cause}; fix: {result.get('fix')}"
