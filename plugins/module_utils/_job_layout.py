# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The layout of a launch on the target: every path, file name and tmux option, defined here once.

Every other file imports these names; none spells the literals. The supervisor imports this file too, so it
is staged with it (``_job_stage.PROGRAM``), imports only the standard library and runs with Python 3.7.

=====================================  ====================================================================
Name                                   What it is
=====================================  ====================================================================
``RUN_ROOT`` ``/run/trainops``          the folder of the run dirs for root (``run_root``); another user gets
                                       ``$XDG_RUNTIME_DIR/trainops`` or ``/tmp/trainops-UID``
``RUN_ROOT/gpus.lock``                  ``flock`` of the GPU choices of the launches of a target (``GPU_LOCK``)
``RUN_DIR`` = ``RUN_ROOT/NAME``         one session's folder (mode 0700), kept from launch to launch
``RUN_DIR/supervisor.py``               the pane's program (``_supervisor_entry.py``): tmux runs
                                       ``PYTHON -I RUN_DIR/supervisor.py RUN_DIR`` (earlier releases: ``parent.py``)
``RUN_DIR/lib/ansible_collections/..``  the supervisor's modules (``_job_stage.PROGRAM``)
``RUN_DIR/job.json``                    the job for the supervisor (argv, chdir, venv, user, supervise, ...)
``RUN_DIR/spec``                        the spec's summary, env keys with salted digests, never values
``RUN_DIR/env``                         the job's env values (0600), deleted by the supervisor before the job
``RUN_DIR/log_path``                    the log's path: how a session that left tmux is found again
``RUN_DIR/launch.lock``                 ``flock`` of the session's launches
``RUN_DIR/pgid``                        the process group of the job's running attempt
``RUN_DIR/stop_requested``              the signal of a stop by trainops, written before the signal
``RUN_DIR/proven``                      the time wait_for_log proved the start (the supervisor's cue)
``RUN_DIR/state.json``                  the supervisor's live state
``RUN_DIR/attempt-N-error.json``        torchelastic's error file of attempt N
``RUN_DIR/notify.log``                  the notifier's failures (never a URL)
``RUN_DIR/exit``                        the exit record, written before ``LOG.exit``
``LOG.exit``                            the exit record beside the log (``EXIT_SUFFIX``)
``ROOT_HISTORY``                        ``/var/lib/trainops/history.jsonl``, the launches of root
``HOME/USER_HISTORY``                   ``~/.local/state/trainops/history.jsonl``, those of another user
``@trainops_spec``                      tmux option: the spec's hash (the "same job running" check)
``@trainops_started_at``                tmux option: the launch's start time
``@trainops_log``                       tmux option: the log's path (a session with it is managed)
``@trainops_command``                   tmux option: the command as the log header shows it
``@trainops_proven``                    tmux option: the time wait_for_log proved the start
``@trainops_log_from``                  tmux option: where a wait for the start reads the log from (a start at
                                       boot: the lines of the attempts before it prove nothing)
``LIVE_DIR``                            ``/var/lib/trainops/jobs`` (root, 0700): what a boot needs of each job
                                       of root's that runs (``_job_live``), kept across restarts
``LIVE_DIR/NAME.json``                  the live record of session NAME (0600, no secret values)
``LIVE_DIR/NAME.notify``                its ``notify_url``, only with ``notify_url_keep`` (0600)
``BOOT_DIR``                            ``/var/lib/trainops/boot`` (0700): the boot recorder, staged by each
                                       launch as root (``_boot_stage``)
``BOOT_DIR/boot.py``                    its entry point (``_boot_entry.py``), beside ``BOOT_DIR/lib``
``BOOT_DIR/python``                     a symbolic link to the Python of the last launch
``SYSTEMD_UNIT_DIR/BOOT_UNIT``          ``/etc/systemd/system/trainops-boot.service``, which runs
                                       ``BOOT_DIR/python -I BOOT_DIR/boot.py`` at boot (role
                                       ``trainops.pct_launch.boot_recorder``; its file says the same paths)
=====================================  ====================================================================

A session started by an earlier release runs ``RUN_DIR/parent.py`` (``EARLIER_SUPERVISOR_FILES``). Nothing finds
a supervisor by its file name: a session is known by its tmux options and ``RUN_DIR/log_path``, its job by
``RUN_DIR/pgid``, its end by the exit record, all named as before; so such a session is reported, waited for,
found "the same job running" and stopped as before. The next start in its ``RUN_DIR`` removes ``parent.py``.
"""

from __future__ import annotations

import os

RUN_ROOT = "/run/trainops"
USER_RUN_FOLDER = "trainops"  # in XDG_RUNTIME_DIR
TMP_RUN_PREFIX = "/tmp/trainops-"  # + the euid
GPU_LOCK = "gpus.lock"  # in RUN_ROOT, beside the run dirs

SUPERVISOR_FILE = "supervisor.py"
EARLIER_SUPERVISOR_FILES = ("parent.py",)
LIB_DIR = "lib"
JOB_FILE = "job.json"
SPEC_FILE = "spec"
ENV_FILE = "env"
NOTIFY_URL_FILE = "notify_url"
# what holds secret values in RUN_DIR: written by the start (mode 0600), read and deleted by the supervisor before the
# job starts, and deleted by the start itself when it fails
SECRET_FILES = (ENV_FILE, NOTIFY_URL_FILE)
LOG_PATH_FILE = "log_path"
LOCK_FILE = "launch.lock"
PGID_FILE = "pgid"
STOP_FILE = "stop_requested"
PROVEN_FILE = "proven"
STATE_FILE = "state.json"
NOTIFY_LOG = "notify.log"
EXIT_FILE = "exit"
EXIT_SUFFIX = ".exit"
# the files of a launch's life that each start removes first
LEFTOVERS = (PGID_FILE, STOP_FILE, ENV_FILE, NOTIFY_URL_FILE, EXIT_FILE, PROVEN_FILE, STATE_FILE)

ROOT_HISTORY = "/var/lib/trainops/history.jsonl"
USER_HISTORY = (".local", "state", "trainops", "history.jsonl")

OPT_SPEC = "@trainops_spec"
OPT_STARTED_AT = "@trainops_started_at"
OPT_LOG = "@trainops_log"
OPT_COMMAND = "@trainops_command"
OPT_PROVEN = "@trainops_proven"
OPT_LOG_FROM = "@trainops_log_from"

LIVE_DIR = "/var/lib/trainops/jobs"
LIVE_SUFFIX = ".json"
KEPT_URL_SUFFIX = ".notify"
BOOT_DIR = "/var/lib/trainops/boot"
BOOT_ENTRY = "boot.py"
BOOT_PYTHON = "python"
SYSTEMD_UNIT_DIR = "/etc/systemd/system"
BOOT_UNIT = "trainops-boot.service"
BOOT_UNIT_WANTS = "multi-user.target.wants"  # in SYSTEMD_UNIT_DIR: the unit's WantedBy=, as systemctl enable links it


def run_root() -> str:
    """``RUN_ROOT`` for root; for another user a folder of its own (``XDG_RUNTIME_DIR/trainops`` or ``/tmp/trainops-UID``)."""
    if os.geteuid() == 0:
        return RUN_ROOT
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    if runtime.startswith("/") and os.path.isdir(runtime):
        return os.path.join(runtime, USER_RUN_FOLDER)
    return f"{TMP_RUN_PREFIX}{os.geteuid()}"


def attempt_error_file(number: int) -> str:
    """``attempt-N-error.json``: the error file torchelastic writes for attempt ``number``."""
    return f"attempt-{number}-error.json"
