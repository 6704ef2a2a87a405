# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: one answer of a node per task, shared by the worker processes of one ansible-playbook run.

The run's own temporary directory, ``ansible.constants.DEFAULT_LOCAL_TMP``, is made by the main process
(``mkdtemp`` of ``ansible-local-PID...``), inherited by the forked workers and removed at exit. In it, per key,
an exclusive ``fcntl.flock`` on ``KEY.lock`` lets one worker ask while the others of that key wait, then read its
answer from ``KEY.json``. An answer with an ``error`` is not kept: each host asks for itself (then without the lock,
so that hosts of an unreachable node do not wait for one another's timeouts). Any OSError of the cache itself means
asking directly: the cache never fails a task.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import typing as t

from ansible import constants as C

SUBDIR = "trainops-node-once"
FAILED = ".failed"


def answer_key(task_uuid: str, reach: t.Sequence[str], program: str) -> str:
    """SHA-256 hex of the task, the argv prefix that reaches the node (ssh, user, port, node) and the node's program."""
    text = json.dumps([str(task_uuid), [str(arg) for arg in reach], str(program)], ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def cache_dir() -> str:
    """Where the answers of this run are kept (under the run's ``DEFAULT_LOCAL_TMP``)."""
    return os.path.join(str(C.DEFAULT_LOCAL_TMP), SUBDIR)


def _read(path: str) -> dict[str, t.Any] | None:
    """The kept answer, or None when there is none (or it cannot be read as a JSON object)."""
    try:
        with open(path, "rb") as handle:
            answer = json.loads(handle.read().decode("utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return answer if isinstance(answer, dict) else None


def _write(path: str, answer: t.Mapping[str, t.Any]) -> None:
    """Write ``answer`` to ``path`` atomically (a temporary file in the same directory, then ``os.replace``)."""
    fd, temp = tempfile.mkstemp(prefix=".answer-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(json.dumps(answer).encode("utf-8"))
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _keep(path: str, answer: t.Mapping[str, t.Any]) -> None:
    """Keep an answer without ``error`` for the other hosts; an OSError only means it is not shared."""
    if not answer.get("error"):
        with contextlib.suppress(OSError):
            _write(path, answer)


def shared_answer(key: str, ask: t.Callable[[], dict[str, t.Any]]) -> tuple[dict[str, t.Any], bool]:
    """``(answer, shared)``: the answer another worker kept for ``key`` (shared True), else ``ask()``'s (False).

    Under the key's lock: a kept answer is returned; else ``ask()`` runs and an answer without ``error`` is kept.
    After a failed answer for the key, later callers ask without waiting for the lock (and keep a good answer).
    """
    folder = cache_dir()
    answer_path, failed_path = os.path.join(folder, key + ".json"), os.path.join(folder, key + FAILED)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        lock = os.open(os.path.join(folder, key + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return ask(), False
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            kept = _read(answer_path)
            failed = os.path.exists(failed_path)
        except OSError:  # the cache cannot be used: ask directly (below, without the lock)
            kept, failed = None, True
        if kept is not None:
            return kept, True
        if not failed:
            answer = ask()
            _keep(answer_path, answer)
            if answer.get("error"):
                with contextlib.suppress(OSError):
                    _write(failed_path, {})
            return answer, False
    finally:
        os.close(lock)  # releases the lock
    answer = ask()  # a failure was seen for this key: ask on our own, in parallel with the others
    _keep(answer_path, answer)
    return answer, False
