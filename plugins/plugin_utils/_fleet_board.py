# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet board: how the waits of one fleet launch, each in its own worker process, learn of a failure.

Each ``wait_for_log`` with the same ``fleet_id`` runs in its own Ansible worker process on the controller.
The first member whose wait fails (the job died, ``fail_pattern``, a timeout, the node lost) posts it here:
it creates ``first.json`` in the fleet's folder with ``O_EXCL``, so exactly one member is the first, whatever
the races. Every other member looks at the folder while its own chunk runs and ends its wait as soon as
``first.json`` exists, naming that member. ``waiting-<host, hex>`` files say which members still wait for
their own proof. The folder lives in the controller's temporary directory, one per user; boards older than a
day are removed when a new one is made.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import typing as t
from pathlib import Path

FLEET_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
MAX_AGE = 86400.0
FIRST = "first.json"


def fleet_id_error(fleet_id: str) -> str | None:
    """An error message for a fleet_id that cannot name a folder, else None."""
    if FLEET_ID_RE.match(fleet_id) and fleet_id not in (".", ".."):
        return None
    return (f"Cannot use option fleet_id {fleet_id!r}: use 1 to 128 characters of [A-Za-z0-9_.-], "
            "the same for every container of one launch")


def _root() -> Path:
    return Path(tempfile.gettempdir()) / f"trainops-fleet-{os.getuid()}"


def board(fleet_id: str) -> Path:
    """The fleet's folder (made when missing, mode 0700); old boards are swept away."""
    root = _root()
    root.mkdir(mode=0o700, exist_ok=True)
    folder = root / fleet_id
    if not folder.is_dir():
        _sweep(root)
        folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _sweep(root: Path) -> None:
    now = time.time()
    for old in root.iterdir():
        try:
            if now - old.stat().st_mtime > MAX_AGE:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue


def post_failure(fleet_id: str, record: t.Mapping[str, t.Any]) -> bool:
    """Post a member's failure; True when it is the first of the fleet (then the others end their waits)."""
    path = board(fleet_id) / FIRST
    data = json.dumps(dict(record, posted_at=time.time()), sort_keys=True).encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    # A reader that finds the file empty (written a moment later) tries again at its next look.
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return True


def first_failure(fleet_id: str) -> dict[str, t.Any] | None:
    """The first failure posted in the fleet, or None while there is none (or it is being written)."""
    try:
        text = (board(fleet_id) / FIRST).read_text(encoding="utf-8")
        return dict(json.loads(text)) if text else None
    except (OSError, ValueError):
        return None


def _waiting_path(fleet_id: str, host: str) -> Path:
    return board(fleet_id) / ("waiting-" + host.encode("utf-8").hex())


def mark_waiting(fleet_id: str, host: str) -> None:
    """Member ``host`` waits for its proof."""
    _waiting_path(fleet_id, host).touch(mode=0o600)


def mark_done(fleet_id: str, host: str) -> None:
    """Member ``host`` waits no more (proven, or its wait ended)."""
    _waiting_path(fleet_id, host).unlink(missing_ok=True)


def waiting(fleet_id: str) -> list[str]:
    """The members that still wait for their proof."""
    names = []
    for path in board(fleet_id).glob("waiting-*"):
        try:
            names.append(bytes.fromhex(path.name[len("waiting-"):]).decode("utf-8"))
        except ValueError:
            continue
    return sorted(names)
