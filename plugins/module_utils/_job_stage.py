# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The supervisor's files, staged in ``RUN_DIR`` of the target at each start (docs/job-life.md).

``RUN_DIR/supervisor.py`` is ``_supervisor_entry.py``; the supervisor it runs and the files that one imports
go to ``RUN_DIR/lib/ansible_collections/trainops/pct_launch/plugins/module_utils/`` with empty
``__init__.py`` files (a regular package, so that another ``ansible_collections`` installed in the
target cannot shadow it), and are imported from there by their usual names. The sources come from the
module's own zip (AnsiballZ) or files, so the job runs the code of the collection that launched it.
A file already there with the same text (a regular file of ours, mode 0600) is left as it is: its mtime stays,
so the compiled code Python keeps beside it (``__pycache__``) is used again by the next start's supervisor.

The boot recorder is staged the same way into ``BOOT_DIR`` (``_boot_stage``): another entry point and more modules.
"""

from __future__ import annotations

import os
import stat
import types
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import (
    _cuda_probe,
    _job_end,
    _job_gpu_idle,
    _job_history,
    _job_layout,
    _job_live,
    _job_memory,
    _job_notify,
    _job_process,
    _job_restart,
    _job_shutdown,
    _job_supervise,
    _job_watch,
    _notify_format,
    _supervisor_entry,
)
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import LIB_DIR, SUPERVISOR_FILE
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import write_whole

# every module the supervisor imports, and those they import (a unit test imports them from the staged copy alone)
PROGRAM: tuple[types.ModuleType, ...] = (_job_supervise, _job_restart, _job_watch, _job_gpu_idle, _job_end, _job_memory, _job_shutdown,
                                         _job_notify, _job_history, _job_live, _job_process, _job_layout, _notify_format, _cuda_probe)
PACKAGE = ("ansible_collections", "trainops", "pct_launch", "plugins", "module_utils")


def source_of(module: types.ModuleType) -> str:
    """The text of a module as shipped (from the module's zip, or the file)."""
    loader = getattr(module, "__loader__", None)
    source = loader.get_source(module.__name__) if loader is not None and hasattr(loader, "get_source") else None
    if source is None:
        with open(str(module.__file__), encoding="utf-8") as handle:
            source = handle.read()
    # Ansible's collection loader (ansible-test units) returns bytes; zipimport (AnsiballZ) and files, text
    return source.decode("utf-8") if isinstance(source, bytes) else source


Entry = t.Tuple[str, types.ModuleType]


def program_files(run_dir: str, entry: Entry | None = None,
                  modules: t.Sequence[types.ModuleType] | None = None) -> t.Iterator[tuple[str, str]]:
    """(path, text) of every file of the staged program: by default the supervisor (``SUPERVISOR_FILE`` and
    ``PROGRAM``); ``entry`` (its file name and module) and ``modules`` stage another one."""
    name, main = entry or (SUPERVISOR_FILE, _supervisor_entry)
    yield os.path.join(run_dir, name), source_of(main)
    folder = os.path.join(run_dir, LIB_DIR)
    for part in PACKAGE:
        folder = os.path.join(folder, part)
        yield os.path.join(folder, "__init__.py"), ""
    for module in PROGRAM if modules is None else modules:
        yield os.path.join(folder, module.__name__.rpartition(".")[2] + ".py"), source_of(module)


def unchanged(path: str, text: str) -> bool:
    """Whether ``path`` is a regular file of this user's, mode 0600, that holds ``text`` already."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o600:
            return False
        with open(path, "rb") as handle:
            return handle.read() == text.encode("utf-8", "surrogateescape")
    except OSError:
        return False


def stage(run_dir: str, entry: Entry | None = None, modules: t.Sequence[types.ModuleType] | None = None) -> str | None:
    """Write the program into ``run_dir`` (mode 0600, folders 0700) where it differs; the first file that could not be written, or None."""
    for path, text in program_files(run_dir, entry, modules):
        folder = os.path.dirname(path)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError:
            return path
        if not unchanged(path, text) and not write_whole(path, text, 0o600):
            return path
    return None
