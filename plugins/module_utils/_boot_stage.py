# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What a launch as root leaves for the container's next boot (docs/job-life.md, "A container that goes away").

``keep`` (``_tmux_job``, at each start of a job in ``RUN_ROOT``, so by root) stages the boot recorder into
``BOOT_DIR`` (``/var/lib/trainops/boot``): ``_boot_entry.py`` as ``BOOT_DIR/boot.py``, the modules it imports in
``BOOT_DIR/lib`` (``boot_program``; files the same as before are left as they are) and ``BOOT_DIR/python``, a symbolic
link to the Python running this launch. The unit ``trainops-boot.service`` (role ``trainops.pct_launch.boot_recorder``)
runs that at each boot, when it is there: the code that reads the live records at boot is the code of the collection
that wrote them. Then it writes the job's live record (``_job_live``): no secret values, ``notify_url`` apart and only
with ``notify_url_keep``; with ``restart_on_boot`` also what the start at boot needs (the values of ``public_env``
and of the GPUs chosen, the spec's hash, summary and command).

A launch that is not root (another user of an ``ssh`` host, or a test's run root) keeps nothing: ``places`` says
where, or None.
"""

from __future__ import annotations

import os
import sys
import types
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_live, _job_stage, _supervisor_entry, _tmux_cli
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import BOOT_DIR, BOOT_ENTRY, BOOT_PYTHON, LIVE_DIR, RUN_ROOT
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import LaunchSpec, display_command, spec_hash


def boot_program() -> tuple[types.ModuleType, tuple[types.ModuleType, ...]]:
    """The recorder's entry point, and every module it imports (a unit test imports it from the staged copy alone).

    Imported here, when a launch as root stages it: a module run that stages nothing (a stop, a report) does not pay
    for their import."""
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.trainops.pct_launch.plugins.module_utils import _boot_entry, _job_boot, _job_lost, _job_resume
    return _boot_entry, _job_stage.PROGRAM + (_job_boot, _job_lost, _job_resume, _job_stage, _tmux_cli, _supervisor_entry)


def places(spec: LaunchSpec) -> tuple[str, str] | None:
    """(``LIVE_DIR``, ``BOOT_DIR``) for a launch by root in ``RUN_ROOT``; None for any other."""
    return (LIVE_DIR, BOOT_DIR) if os.geteuid() == 0 and spec.run_root == RUN_ROOT else None


def stage_recorder(boot_dir: str) -> str | None:
    """The boot recorder in ``boot_dir`` and ``BOOT_DIR/python``; None, or the first file that could not be written."""
    if not _job_live.make_folder(boot_dir):
        return boot_dir
    entry, modules = boot_program()
    failed = _job_stage.stage(boot_dir, (BOOT_ENTRY, entry), modules)
    if failed is not None:
        return failed
    link, python = os.path.join(boot_dir, BOOT_PYTHON), sys.executable or ""
    if not python:
        return link
    try:
        if os.path.islink(link) and os.readlink(link) == python:
            return None
        tmp = f"{link}.tmp.{os.getpid()}"
        os.symlink(python, tmp)
        os.replace(tmp, link)
    except OSError:
        return link
    return None


def live_record(spec: LaunchSpec, job: t.Mapping[str, t.Any], env: t.Mapping[str, str], summary: str,
                url: str | None = None) -> dict[str, t.Any]:
    """The live record of a start: ``job.json`` (which never holds ``notify_url``, ``url``), and what a start at boot needs."""
    supervise = dict(job.get("supervise") or {})
    record: dict[str, t.Any] = {
        "format": _job_live.FORMAT, "session_name": spec.session_name, "started_at": job["started_at"], "log_path": spec.log_path,
        "host": job.get("host"), "history_path": job.get("history_path"), "run_dir": spec.run_dir,
        "boot": _job_live.boot_key(), "boot_at": _job_live.boot_time(), "state": "starting", "since": job["started_at"], "attempt": 0,
        "boot_restarts": 0, "restart_on_boot": bool(supervise.get("restart_on_boot")),
        "notify_url_set": url is not None or supervise.get("notify_url") is not None, "notify_url_kept": bool(supervise.get("notify_url_keep")),
        "job": dict(job, supervise=dict(supervise, notify_url=None), live=None)}
    if record["restart_on_boot"]:
        record.update(env=dict(env), tmux={"spec": spec_hash(spec), "command": display_command(spec), "summary": summary})
    return record


def keep(spec: LaunchSpec, job: t.Mapping[str, t.Any], env: t.Mapping[str, str], summary: str,
         url: str | None) -> tuple[str | None, str | None]:
    """Stage the recorder and write the live record of this start: (the record's path, None), or (None, what failed).

    ``env``: the job's env values (those of ``public_env`` and the GPUs' only: ``restart_on_boot`` refuses ``env``
    values); ``summary``: the text of ``RUN_DIR/spec``; ``url``: the launch's ``notify_url`` (job.json has none), kept
    beside the record only with ``notify_url_keep``.
    """
    where = places(spec)
    if where is None:
        return None, None
    live_dir, boot_dir = where
    path = _job_live.record_path(spec.session_name, live_dir)
    record = live_record(spec, job, env, summary, url)
    url = url if record["notify_url_kept"] else None
    failed = stage_recorder(boot_dir)
    if failed is None and not (_job_live.write(path, record) and _job_live.keep_url(path, url)):
        failed = path
    if failed is not None:
        _job_live.discard(path)  # an earlier launch's record must not speak for this one
        return None, f"cannot write {failed}"
    return path, None


def discard(path: str | None) -> None:
    """The live record ``path`` of a start that failed (nothing runs) is gone."""
    if path:
        _job_live.discard(path)
