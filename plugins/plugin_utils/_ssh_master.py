# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: one ssh handshake per node and run, however many workers reach the node at once.

With ssh's connection sharing (the pct connection's ``ssh_control_persist``, ``ControlMaster=auto``), the first call
to a node opens the master and later calls go through it. In a cold run the workers of a task start together: each
finds no master yet and makes a handshake of its own (``benchmarks/README.md``: 32 containers on 2 nodes took 5 s
longer cold than with the masters open). ``ensure_master`` makes the first call per node and run the only one that
connects: under an exclusive ``fcntl.flock`` in the run's temporary folder (``_node_once.cache_dir``), the first
worker asks ssh whether a master is up (``ssh -O check``) and opens one when none is (``ssh -f -N``: it
authenticates, then stays in the background as the master), then marks the node for the run; the others wait for
the lock (the handshake's time), find the mark and go through the master. A master that cannot be opened is marked
too: later calls then connect as they would without this, and each reports its own error. Options of the user's
own about sharing in ``pct_ssh_args`` (``ControlMaster``, ``ControlPath``, ``-M``, ``-S``) leave it all to ssh.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import typing as t

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._node_once import cache_dir
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pct_command import PctTarget, ssh_master_argv

# ssh's own options about connection sharing: given in pct_ssh_args, they are the user's to manage.
_SHARING = ("controlmaster", "controlpath", "controlpersist")
# Seconds beyond the connection's timeout that opening a master may take (authentication after the TCP connect).
_GRACE = 30


def managed(target: PctTarget) -> bool:
    """Whether this module opens the node's master: sharing is on and ``pct_ssh_args`` say nothing about it."""
    if not target.is_remote or not target.ssh_control:
        return False
    return not any(arg == "-M" or arg.startswith("-S") or any(word in arg.lower() for word in _SHARING) for arg in target.ssh_args)


def _key(target: PctTarget) -> str:
    """The node's key: SHA-256 hex of the argv that checks its master (ssh, options, user, node)."""
    return hashlib.sha256("\0".join(ssh_master_argv(target, "check")).encode("utf-8", "surrogateescape")).hexdigest()


def _run(argv: list[str], timeout: float) -> int:
    """Exit status of ``argv`` with no input or output (a master in the background keeps none of our pipes)."""
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=timeout, check=False).returncode
    except (OSError, subprocess.TimeoutExpired):
        return -1


def open_master(target: PctTarget) -> bool:
    """Whether the node's master is up: it was, or ``ssh -f -N`` opened it."""
    if _run(ssh_master_argv(target, "check"), target.timeout + _GRACE) == 0:
        return True
    return _run(ssh_master_argv(target, "open"), target.timeout + _GRACE) == 0


def ensure_master(target: PctTarget, opener: t.Callable[[PctTarget], bool] = open_master) -> None:
    """Before a call to the node: make sure the run has tried once to open its master (see the module's docstring)."""
    if not managed(target):
        return
    mark = os.path.join(cache_dir(), _key(target) + ".master")
    if os.path.exists(mark):
        return
    try:
        os.makedirs(cache_dir(), mode=0o700, exist_ok=True)
        lock = os.open(mark + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return  # no shared folder: the call connects as ssh would anyway
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(mark):
            opener(target)
            with contextlib.suppress(OSError), open(mark, "w", encoding="ascii"):
                pass
    except OSError:
        pass
    finally:
        os.close(lock)
