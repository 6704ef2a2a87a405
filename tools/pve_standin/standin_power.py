# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""How the ``pct`` stand-in stops a container: pve-container's ``PVE::LXC::vm_stop``, with LXC's own ``lxc-stop``.

pve-container (src/PVE/LXC.pm ``vm_stop($vmid, $kill, $shutdown_timeout, $kill_after_timeout)``) runs
``lxc-stop -n VMID --kill`` for a stop, else ``lxc-stop -n VMID [--nokill] [--timeout T]`` (``--nokill`` unless
``$kill_after_timeout``; ``run_command`` gets T + 5 s), then waits for the container's command socket to close: read
until EOF when lxc-stop succeeded, else warn lxc-stop's failure and poll the socket T + 5 s more; a socket still open
is ``die "container did not stop\\n"``. Its callers (src/PVE/API2/LXC/Status.pm, src/PVE/VZDump/LXC.pm):

* ``pct stop`` (vm_stop API): ``vm_stop($vmid, 1)``, a kill;
* ``pct shutdown [--timeout 60] [--forceStop 0]`` (vm_shutdown API): ``vm_stop($vmid, 0, $timeout, $forceStop)``;
* ``pct reboot [--timeout]`` (vm_reboot, LXC.pm): ``vm_stop($vmid, 0, $timeout, 1)``, then ``vm_start``;
* ``vzdump --mode stop``: ``vm_stop($vmid, 0, $stopwait * 60)``.

Without ``--kill``, lxc-stop asks the container's init to stop (LXC src/lxc/lxccontainer.c ``do_lxcapi_shutdown``):
the signal ``lxc.signal.halt``, else SIGRTMIN+3 when init blocks it (systemd does), else SIGPWR, then it waits up to
T seconds (lxc-stop's default: 60) and, unless ``--nokill``, kills what is left (src/lxc/tools/lxc_stop.c).
"""
from __future__ import annotations

import re
import select
import socket
import subprocess
import sys
import time

from standin_core import Node, PctError
from standin_faults import TaskFailed

# pve-container's run_command gets this much more than the shutdown timeout, and so does the poll after a failure.
EXTRA_WAIT = 5


def _pve_argv(vmid: str, kill: bool, timeout: int | None, kill_after_timeout: bool) -> list[str]:
    """lxc-stop's arguments as pve-container builds them (without the stand-in's ``-P LXCPATH``)."""
    if kill:
        return ["--kill"]  # lxc-stop's -k allows no timeout
    argv = [] if kill_after_timeout else ["--nokill"]
    return argv + (["--timeout", str(timeout)] if timeout is not None else [])


def _lxc_stop(node: Node, vmid: str, args: list[str], limit: float | None) -> str | None:
    """Run lxc-stop; None when it succeeded, else pve-container's run_command error."""
    shown = " ".join(["lxc-stop", "-n", vmid, *args])
    try:
        result = subprocess.run(node.lxc("stop", vmid, *args), capture_output=True, text=True, timeout=limit,
                                stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return f"command '{shown}' failed: got timeout"
    if result.returncode != 0:
        return f"command '{shown}' failed: exit code {result.returncode}"
    return None


def command_socket(node: Node, vmid: str) -> socket.socket | None:
    """The container's LXC command socket (abstract ``@LXCPATH/VMID/command``) connected, as vm_stop opens it; None when
    nothing listens (the container is not running) or LXC named it otherwise (a hash, for a long path)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(f"\0{node.lxcpath}/{vmid}/command")
    except OSError:
        sock.close()
        return None
    return sock


def _stopped_within(node: Node, vmid: str, sock: socket.socket | None, seconds: float | None) -> bool:
    """Whether the container's monitor is gone (its command socket closed) within ``seconds`` (None: as long as it
    takes, as reading the socket does). The monitor leaves after the container's STOPPED state, once it cleaned up:
    a start before that fails (``Received container state "ABORTING"``)."""
    if sock is None:  # no socket to watch: the container's state
        argv = node.lxc("wait", vmid, "-s", "STOPPED", *(["-t", str(int(seconds) or 1)] if seconds is not None else []))
        subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, check=False)
        return not node.is_running(vmid)
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([sock], [], [], left)[0]:
            return False
        try:
            if not sock.recv(4096):
                return True  # EOF: the monitor is gone and the container has stopped
        except OSError:
            return True


def vm_stop(node: Node, vmid: str, kill: bool, timeout: int | None = None, kill_after_timeout: bool = False) -> None:
    """Stop the container as pve-container's vm_stop does; ``container did not stop`` (a task error) otherwise."""
    if not node.is_running(vmid):
        return  # the command socket refuses the connection: nothing to stop
    sock = command_socket(node, vmid)
    try:
        args = _pve_argv(vmid, kill, timeout, kill_after_timeout)
        limit = timeout + EXTRA_WAIT if timeout is not None and not kill else None
        error = _lxc_stop(node, vmid, args, limit)
        if error is None and _stopped_within(node, vmid, sock, None):
            return
        if error is not None:
            sys.stderr.write(error + "\n")  # pve-container warns it, then polls the socket
            if _stopped_within(node, vmid, sock, limit):
                return
        raise TaskFailed("container did not stop")
    finally:
        if sock is not None:
            sock.close()


def timeout_option(value: str | None) -> int | None:
    """``--timeout`` as the shutdown and reboot APIs take it: an integer of at least 0 (seconds)."""
    if value is None:
        return None
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        raise PctError(f"400 Parameter verification failed.\ntimeout: type check ('integer') failed - got '{value}'")
    if int(value) < 0:
        raise PctError("400 Parameter verification failed.\ntimeout: value must have a minimum value of 0")
    return int(value)
