# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The supervisor's staged files (``_job_stage.py``): written where they differ, left as they are otherwise.

A start that rewrote an unchanged file gave it a new mtime, so Python compiled the supervisor anew at every start
(its ``__pycache__`` entry is checked against the source's mtime and size). These tests stage into a real folder and
run the staged program's import with a real Python, reading whether the cached code was used again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_stage


def _files(run_dir: Path) -> dict[str, os.stat_result]:
    return {path: os.lstat(path) for path, _text in _job_stage.program_files(str(run_dir))}


def test_a_second_stage_leaves_every_unchanged_file_as_it_is(tmp_path: Path) -> None:
    assert _job_stage.stage(str(tmp_path)) is None
    first = _files(tmp_path)
    assert _job_stage.stage(str(tmp_path)) is None
    second = _files(tmp_path)
    assert len(first) == len(_job_stage.PROGRAM) + 1 + len(_job_stage.PACKAGE)
    for path, before in first.items():
        assert (second[path].st_ino, second[path].st_mtime_ns) == (before.st_ino, before.st_mtime_ns), path


def test_a_changed_file_a_wrong_mode_and_a_symlink_are_written_anew(tmp_path: Path) -> None:
    assert _job_stage.stage(str(tmp_path)) is None
    paths = [path for path, _text in _job_stage.program_files(str(tmp_path))]
    changed, loose, linked = paths[0], paths[-1], paths[-2]
    Path(changed).write_text("# not the parent\n", encoding="utf-8")
    os.chmod(loose, 0o644)
    target = tmp_path / "elsewhere.py"
    target.write_text("# not ours\n", encoding="utf-8")
    os.unlink(linked)
    os.symlink(target, linked)
    assert _job_stage.stage(str(tmp_path)) is None
    texts = dict(_job_stage.program_files(str(tmp_path)))
    for path in (changed, loose, linked):
        info = os.lstat(path)
        assert (oct(info.st_mode & 0o7777), Path(path).read_text(encoding="utf-8")) == ("0o600", texts[path]), path
    assert target.read_text(encoding="utf-8") == "# not ours\n"


def test_the_staged_supervisor_is_compiled_once_over_two_starts(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "import ansible_collections.trainops.pct_launch.plugins.module_utils._job_supervise as m; print(m.__cached__)")

    def start() -> int:
        run = subprocess.run([sys.executable, "-I", "-c", probe, str(lib)], capture_output=True, text=True, check=True)
        return os.stat(run.stdout.strip()).st_mtime_ns

    assert _job_stage.stage(str(tmp_path)) is None
    for path, _text in _job_stage.program_files(str(tmp_path)):  # an hour old: a file written again gets a new mtime
        os.utime(path, (1_700_000_000, 1_700_000_000))
    first = start()
    assert _job_stage.stage(str(tmp_path)) is None
    assert start() == first  # the pyc of the first start is the one the second start used (not written again)


def test_the_staged_program_holds_every_module_its_supervisor_imports(tmp_path: Path) -> None:
    # the supervisor runs outside Ansible's module runtime: what it imports of the collection must be staged (_job_layout too)
    assert _job_stage.stage(str(tmp_path)) is None
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "import ansible_collections.trainops.pct_launch.plugins.module_utils._job_supervise; "
             "print(' '.join(sorted(name for name in sys.modules if name.startswith('ansible_collections.trainops.pct_launch.plugins.module_utils.'))))")
    run = subprocess.run([sys.executable, "-I", "-c", probe, str(tmp_path / "lib")], capture_output=True, text=True, check=True)
    assert set(run.stdout.split()) == {module.__name__ for module in _job_stage.PROGRAM}, run.stdout
