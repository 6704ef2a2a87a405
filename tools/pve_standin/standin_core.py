# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A local stand-in for Proxmox VE's ``pct``, backed by real LXC containers.

It reproduces the command-line surface and the output of pve-container's
``pct`` for the verbs the collection uses (exec, status, list, start, stop,
shutdown, reboot, config, push, pull) and adds ``create`` and ``destroy`` that build
containers from a cached Debian root file system made with mmdebstrap.

Layout (``PVE_STANDIN_ROOT``, default ``/var/lib/pve-standin``):

- ``node``: the node name (default: the host name), as in ``nodes/<node>/``;
- ``nodes/<node>/lxc/<vmid>.conf``: the Proxmox-style container config;
- ``lxc/``: the LXC path holding the containers (named by VMID) and the
  per-release base containers ``tmpl-<release>`` they are overlay clones of;
- ``knobs.conf``: ``key=value`` lines, see ``Knobs``.

Root file systems are cached as tarballs in ``PVE_STANDIN_CACHE`` (default
``/var/cache/pve-standin``), so several stand-in nodes share one build.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PVE_PATH = "/sbin:/bin:/usr/sbin:/usr/bin"
RELEASES = {"bullseye": "11", "bookworm": "12", "trixie": "13"}
DEFAULT_RELEASE = "bookworm"
IMAGE_PACKAGES = ("python3", "ca-certificates", "systemd-sysv", "procps")
KNOB_ENV = {"pty": "PVE_STANDIN_PTY", "delay": "PVE_STANDIN_DELAY", "delay_mode": "PVE_STANDIN_DELAY_MODE",
            "call_log": "PVE_STANDIN_CALL_LOG", "pve_container": "PVE_STANDIN_PVE_CONTAINER",
            "cluster": "PVE_STANDIN_CLUSTER", "die_status": "PVE_STANDIN_DIE_STATUS"}
# The pve-container version pct behaves as (knob pve_container): the newest of the mirrored sources' changelog.
DEFAULT_PVE_CONTAINER = "6.1.10"
CLUSTER_STATES = ("up", "down")
# How a call spends its delay: ``sleep`` waits it out; ``cpu`` burns that much CPU time in a busy loop, as real pct
# (Perl loading the PVE stack on every call) does, so that on a busy machine the call takes longer than the delay.
DELAY_MODES = ("sleep", "cpu")
VMID_RE = re.compile(r"^[1-9][0-9]{2,8}$")
# dev0 .. dev255: passthrough devices (pve-container's src/PVE/LXC/Config.pm $MAX_DEVICES), taking a value each.
DEVICE_OPTIONS = {f"dev{index}": False for index in range(256)}
USAGE = {
    "exec": "pct exec <vmid> [<extra-args>] [OPTIONS]",
    "status": "pct status <vmid> [OPTIONS]",
    "list": "pct list",
    "start": "pct start <vmid> [OPTIONS]",
    "stop": "pct stop <vmid> [OPTIONS]",
    "shutdown": "pct shutdown <vmid> [OPTIONS]",
    "reboot": "pct reboot <vmid> [OPTIONS]",
    "config": "pct config <vmid> [OPTIONS]",
    "push": "pct push <vmid> <file> <destination> [OPTIONS]",
    "pull": "pct pull <vmid> <path> <destination> [OPTIONS]",
    "create": ("pct create <vmid> [<ostemplate>] [--release bullseye|bookworm|trixie] [--hostname NAME] [--memory MB] "
               "[--swap MB] [--unprivileged 0|1] [--dev[n] PATH[,mode=0660][,uid=N][,gid=N][,deny-write=1]] [--start 0|1]"),
    "set": "pct set <vmid> [--dev[n] PATH[,mode=0660][,uid=N][,gid=N][,deny-write=1]] [--delete KEYS] [OPTIONS]",
    "destroy": "pct destroy <vmid> [--force 0|1]",
}
# Options each verb takes, and whether they are flags (may stand without a value).
OPTIONS: dict[str, dict[str, bool]] = {
    "exec": {"keep-env": True},
    "status": {"verbose": True},
    "list": {},
    "start": {"skiplock": True},
    "stop": {"skiplock": True, "timeout": False},
    "shutdown": {"timeout": False, "forceStop": True},
    "reboot": {"timeout": False},
    "config": {"current": True, "snapshot": False},
    "push": {"perms": False, "user": False, "group": False},
    "pull": {"perms": False, "user": False, "group": False},
    "create": {"release": False, "hostname": False, "start": True, "memory": False, "swap": False, "cores": False,
               "unprivileged": True, **DEVICE_OPTIONS},
    "set": {"delete": False, "unprivileged": True, **DEVICE_OPTIONS},
    "destroy": {"force": True, "purge": True},
}
POSITIONALS = {"exec": 1, "status": 1, "list": 0, "start": 1, "stop": 1, "shutdown": 1, "reboot": 1, "config": 1,
               "push": 3, "pull": 3, "create": 1, "set": 1, "destroy": 1}


class PctError(Exception):
    """An error pct reports with a message on stderr and a non-zero exit."""

    def __init__(self, message: str, code: int = 255) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclasses.dataclass
class Call:
    """A parsed command line: the verb, its positional arguments, options and extra args."""

    verb: str
    args: list[str]
    opts: dict[str, str]
    extra: list[str]


@dataclasses.dataclass
class Knobs:
    """Test knobs: a pty for exec, a delay per call (slept or burnt as CPU time), a log of every call, and the
    faults of standin_faults.py: the pve-container version, pve-cluster down, the exit status of a die."""

    pty: bool = False
    delay: float = 0.0
    delay_mode: str = "sleep"
    call_log: str = ""
    pve_container: str = DEFAULT_PVE_CONTAINER
    cluster: str = "up"
    die_status: int | None = None

    @classmethod
    def load(cls, root: Path, environ: dict[str, str]) -> Knobs:
        """Read ``knobs.conf`` from the state root; environment variables win."""
        values: dict[str, str] = {}
        conf = root / "knobs.conf"
        if conf.is_file():
            for line in conf.read_text(encoding="utf-8").splitlines():
                key, sep, value = line.partition("=")
                if sep and not line.lstrip().startswith("#"):
                    values[key.strip()] = value.strip()
        for key, var in KNOB_ENV.items():
            if var in environ:
                values[key] = environ[var]
        checked = _Checked(values, environ, conf)
        return cls(
            pty=values.get("pty", "0").lower() in ("1", "true", "yes", "on"),
            delay=float(values.get("delay", "0") or 0),
            delay_mode=checked.choice("delay_mode", DELAY_MODES),
            call_log=values.get("call_log", ""),
            pve_container=checked.version("pve_container", DEFAULT_PVE_CONTAINER),
            cluster=checked.choice("cluster", CLUSTER_STATES),
            die_status=checked.status("die_status"),
        )


@dataclasses.dataclass
class _Checked:
    """Knob values checked, failing every call with a message naming where a bad value came from."""

    values: dict[str, str]
    environ: dict[str, str]
    conf: Path

    def fail(self, key: str, expected: str) -> PctError:
        var = KNOB_ENV[key]
        where = var if var in self.environ else f"{key} in {self.conf} ({var} unset)"
        return PctError(f"invalid stand-in knob {where}: '{self.values[key]}' is not {expected}")

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self.values.get(key, "").strip().lower() or choices[0]
        if value not in choices:
            raise self.fail(key, f"one of {', '.join(choices)}")
        return value

    def version(self, key: str, default: str) -> str:
        value = self.values.get(key, "").strip() or default
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)*(-[0-9]+)?", value):
            raise self.fail(key, "a pve-container version such as 5.0.8")
        return value

    def status(self, key: str) -> int | None:
        value = self.values.get(key, "").strip()
        if not value:
            return None
        if not re.fullmatch(r"[0-9]+", value) or not 1 <= int(value) <= 255:
            raise self.fail(key, "an exit status from 1 to 255")
        return int(value)


def burn_cpu(seconds: float) -> None:
    """Spin until this process has used ``seconds`` more CPU time (user and system) than when it was called."""
    deadline = time.process_time() + seconds
    while time.process_time() < deadline:
        sum(range(1000))


def parse_bool(name: str, value: str) -> bool:
    """Parse a Proxmox boolean option value (0/1, yes/no, on/off, true/false)."""
    lowered = value.lower()
    if lowered in ("1", "yes", "on", "true"):
        return True
    if lowered in ("0", "no", "off", "false"):
        return False
    raise PctError(f"400 Parameter verification failed.\n{name}: type check ('boolean') failed - got '{value}'")


def parse_args(argv: Sequence[str]) -> Call:
    """Parse ``pct VERB ...`` the way PVE's CLI handler does for these verbs."""
    if not argv:
        raise PctError("ERROR: no command specified\n" + "\n".join(USAGE.values()))
    verb, rest = argv[0], list(argv[1:])
    if verb not in USAGE:
        raise PctError(f"ERROR: unknown command 'pct {verb}'\n" + "\n".join(USAGE.values()))
    extra: list[str] = []
    if "--" in rest:
        cut = rest.index("--")
        rest, extra = rest[:cut], rest[cut + 1:]
    args, opts = _split_options(verb, rest)
    if verb == "exec":
        args, extra = args[:1], args[1:] + extra
    want = POSITIONALS[verb]
    if verb == "create":
        want = len(args) if len(args) in (1, 2) else 1
    if len(args) != want:
        raise PctError(f"400 wrong number of arguments\n{USAGE[verb]}")
    if want and not VMID_RE.match(args[0]):
        raise PctError("400 Parameter verification failed.\n"
                       f"vmid: invalid format - value does not look like a valid VM ID\n\n{USAGE[verb]}")
    return Call(verb, args, opts, extra)


def _split_options(verb: str, rest: list[str]) -> tuple[list[str], dict[str, str]]:
    """Separate ``--name value`` / ``--name=value`` options from positional arguments."""
    known = OPTIONS[verb]
    args: list[str] = []
    opts: dict[str, str] = {}
    i = 0
    while i < len(rest):
        item = rest[i]
        i += 1
        if not item.startswith("-") or item == "-" or (verb == "exec" and args[1:]):
            args.append(item)
            continue
        name, sep, value = item.lstrip("-").partition("=")
        if name not in known:
            raise PctError(f"400 Parameter verification failed.\n{name}: property is not defined in schema "
                           f"and the schema does not allow additional properties\n\n{USAGE[verb]}")
        if not sep:
            flag = known[name]
            if i < len(rest) and not rest[i].startswith("-") and (not flag or rest[i] in ("0", "1")):
                value = rest[i]
                i += 1
            elif flag:
                value = "1"
            else:
                raise PctError(f"400 Parameter verification failed.\n{name}: missing value\n\n{USAGE[verb]}")
        if known[name]:
            value = "1" if parse_bool(name, value) else "0"
        opts[name] = value
    return args, opts


class Node:
    """One stand-in Proxmox node: its state root, containers and knobs."""

    def __init__(self, root: Path, cache: Path, environ: dict[str, str]) -> None:
        self.root = root
        self.cache = cache
        self.environ = environ
        self.lxcpath = root / "lxc"
        self.name = self._node_name()
        self.confdir = root / "nodes" / self.name / "lxc"
        self.knobs = Knobs.load(root, environ)

    def _node_name(self) -> str:
        path = self.root / "node"
        if path.is_file():
            return path.read_text(encoding="utf-8").strip()
        return socket.gethostname().split(".")[0]

    def conf_path(self, vmid: str) -> Path:
        """The Proxmox config file of a container."""
        return self.confdir / f"{vmid}.conf"

    def read_conf(self, vmid: str) -> dict[str, str]:
        """Load a container's config, failing as pct does when it does not exist."""
        path = self.conf_path(vmid)
        if not path.is_file():
            raise PctError(f"Configuration file 'nodes/{self.name}/lxc/{vmid}.conf' does not exist")
        conf: dict[str, str] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            key, sep, value = line.partition(": ")
            if sep and not line.startswith("#"):
                conf[key] = value
        return conf

    def write_conf(self, vmid: str, conf: dict[str, str]) -> None:
        """Write a container's config atomically, keys sorted as pct prints them."""
        self.confdir.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{key}: {conf[key]}\n" for key in sorted(conf))
        tmp = self.conf_path(vmid).with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(self.conf_path(vmid))

    def vmids(self) -> list[str]:
        """All container ids of this node, in numeric order."""
        if not self.confdir.is_dir():
            return []
        ids = [p.stem for p in self.confdir.glob("*.conf") if VMID_RE.match(p.stem)]
        return sorted(ids, key=int)

    def lxc(self, tool: str, vmid: str, *args: str) -> list[str]:
        """The argv of an ``lxc-*`` tool for one container of this node."""
        return [f"lxc-{tool}", "-P", str(self.lxcpath), "-n", vmid, *args]

    def is_running(self, vmid: str) -> bool:
        """Whether the LXC container is running."""
        out = subprocess.run(self.lxc("info", vmid, "-sH"), capture_output=True, text=True, check=False)
        return out.stdout.strip() == "RUNNING"

    def require_running(self, vmid: str, message: str | None = None) -> None:
        """Fail as pct does when the container is missing or stopped."""
        self.read_conf(vmid)
        if not self.is_running(vmid):
            raise PctError(message or f"container '{vmid}' not running!")

    def record(self, argv: Sequence[str]) -> None:
        """Apply the per-call knobs: append the call to the call log, then spend the delay (slept, or burnt as CPU)."""
        if self.knobs.call_log:
            entry = {"time": time.time(), "node": self.name, "pid": os.getpid(), "argv": list(argv)}
            with open(self.knobs.call_log, "a", encoding="utf-8") as log:
                fcntl.flock(log, fcntl.LOCK_EX)
                log.write(json.dumps(entry) + "\n")
        if self.knobs.delay > 0:
            if self.knobs.delay_mode == "cpu":
                burn_cpu(self.knobs.delay)
            else:
                time.sleep(self.knobs.delay)

    @contextmanager
    def lock(self, name: str, where: Path | None = None) -> Iterator[None]:
        """Serialise work on a shared resource (an image, a container) across processes."""
        folder = where or self.root
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f".lock-{name}", "w", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield


def run_checked(argv: Sequence[str], what: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a helper command, turning a failure into a PctError that names it."""
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()
        raise PctError(f"{what} failed: {detail or f'exit status {result.returncode}'}")
    return result


def state_from_env(environ: dict[str, str]) -> Node:
    """The node this process acts on, from PVE_STANDIN_ROOT and PVE_STANDIN_CACHE."""
    root = Path(environ.get("PVE_STANDIN_ROOT", "/var/lib/pve-standin"))
    cache = Path(environ.get("PVE_STANDIN_CACHE", "/var/cache/pve-standin"))
    return Node(root, cache, environ)


def clean_environ(environ: dict[str, str]) -> dict[str, str]:
    """The environment pct hands to lxc-attach: the caller's, PATH reset, stand-in knobs removed."""
    env = {k: v for k, v in environ.items() if not k.startswith("PVE_STANDIN_")}
    env["PATH"] = PVE_PATH
    return env


def which_or_die(tool: str) -> None:
    """Fail clearly when an LXC tool is not installed."""
    if shutil.which(tool) is None and not os.path.exists(f"/usr/bin/{tool}"):
        raise PctError(f"stand-in needs {tool}: run tools/pve_standin/setup.sh to install LXC")
