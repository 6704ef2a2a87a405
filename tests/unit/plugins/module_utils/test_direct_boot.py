# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""_direct_boot as a target runs it: a fresh ``python3 -I`` reading the program the controller builds on its stdin.

The interpreter is isolated (``-I``), started in an empty folder with an empty ``PYTHONPATH``: it can import the
collection's code only from the sources in the payload, so a source the controller failed to send fails the test.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import pwd
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _session_info
from ansible_collections.trainops.pct_launch.plugins.module_utils._direct_boot import SourceImporter
from ansible_collections.trainops.pct_launch.plugins.module_utils._prepare_check import ARGUMENT_SPEC, report
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._direct_run import PACKAGE, program, sources, validate

IMPORT_SENT = Path(__file__).resolve().parent / "files" / "import_sent.py"
HOSTILE = ["it's", 'say "hi"', "'''", '"""', "back\\slash", "new\nline", "$(touch /tmp/pwned)", "`id`", "caf\u00e9 \u2192 \u00fc",
           "tab\there", "{{ not_a_template }}", "%s %d", "\\u0041"]


def target_run(tmp_path: Path, entry: str, params: t.Mapping[str, t.Any], check_mode: bool = False,
               cache: str | None = None) -> tuple[int, dict[str, t.Any], str]:
    """Run the program as the target would; (exit status, its result line, stderr). Nothing may be left behind.

    The compiled code is kept in ``cache`` (TRAINOPS_CODE_CACHE), by default ``tmp_path/cache``.
    """
    folder = tmp_path / "target"
    folder.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder), "PYTHONDONTWRITEBYTECODE": "",
           "TRAINOPS_CODE_CACHE": str(tmp_path / "cache") if cache is None else cache}
    proc = subprocess.run([sys.executable, "-I", "-"], input=program(entry, params, check_mode), capture_output=True,
                          cwd=folder, env=env, timeout=60, check=False)
    lines = proc.stdout.decode().splitlines()
    assert lines, proc.stderr.decode()
    assert list(folder.iterdir()) == [], "the direct run wrote nothing on the target"
    return proc.returncode, json.loads(lines[-1]), proc.stderr.decode()


def prepare_params(**given: t.Any) -> dict[str, t.Any]:
    params, secrets, message = validate("trainops.pct_launch.prepare_info", ARGUMENT_SPEC, given, {})
    assert message is None and not secrets, message
    return params


def test_prepare_info_gives_what_the_module_gives(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o755)
    workdir.chmod(0o755)
    params = prepare_params(workdir=str(workdir), venv_path=str(tmp_path / "no-venv"), venv_requirements=["numpy"],
                            files=[{"dest": str(tmp_path / "absent.py"), "checksum": "0" * 40}])
    status, result, stderr = target_run(tmp_path, "_prepare_check", params)
    assert status == 0, stderr
    assert result == report(params)
    assert result["prepared"] is False and result["workdir"] == {"ok": True, "reason": ""}, result
    assert result["needs"][-1] == f"copy {tmp_path / 'absent.py'}"


def test_tmux_session_info_gives_what_the_module_gives(tmp_path: Path) -> None:
    # a session that does not exist, with a log that does not either: the report reads the same in both
    params, secrets, message = validate("trainops.pct_launch.tmux_session_info", _session_info.ARGUMENT_SPEC,
                                        {"session_name": f"ut-absent-{os.getpid()}", "log_path": str(tmp_path / "no.log")},
                                        _session_info.RULES)
    assert message is None and not secrets, message
    status, result, stderr = target_run(tmp_path, "_session_info", params)
    assert status == 0, stderr
    assert result == _session_info.info(params)
    assert result["session"]["state"] == "absent" and result["changed"] is False, result
    wrong = dict(params, session_name="a.b")
    status, result, stderr = target_run(tmp_path, "_session_info", wrong)
    assert status == 1 and result == {"failed": True, "msg": _session_info.info(wrong)["msg"]}, (result, stderr)
    assert result["msg"].startswith("Invalid session_name 'a.b'")


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_options_arrive_as_given(tmp_path: Path, name: str) -> None:
    workdir = str(tmp_path / name)
    status, result, stderr = target_run(tmp_path, "_prepare_check", prepare_params(workdir=workdir))
    assert status == 0, stderr
    assert result["workdir"] == {"ok": False, "reason": f"{workdir} does not exist"}
    assert not Path("/tmp/pwned").exists()


def test_an_error_in_the_code_is_a_failed_result_with_its_traceback(tmp_path: Path) -> None:
    params = prepare_params()
    del params["tmux_min_version"]
    status, result, _stderr = target_run(tmp_path, "_prepare_check", params)
    assert status == 1
    assert result["failed"] is True and result["msg"] == "KeyError: 'tmux_min_version'", result
    assert "report" in result["exception"] and "<ansible_collections.trainops.pct_launch.plugins.module_utils._prepare_check>" in result["exception"]


@pytest.mark.parametrize("entry", ["_prepare_check", "_tmux_job", "_log_poll", "_tmux_sessions", "_tmux_run", "_log_chunk", "_session_info"])
def test_every_module_an_entry_imports_is_sent(tmp_path: Path, entry: str) -> None:
    # files/import_sent.py, in an isolated interpreter that has only the sent sources, imports each of them
    sent = sources(entry)
    boot = sys.modules[SourceImporter.__module__].__file__ or ""
    proc = subprocess.run([sys.executable, "-I", str(IMPORT_SENT), boot], input=json.dumps(sent).encode(),
                          capture_output=True, cwd=tmp_path, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    assert int(proc.stdout) == len(sent)
    assert f"{PACKAGE}.{entry}" in sent


def test_the_sources_are_the_files_and_a_lazy_import_is_among_them() -> None:
    sent = sources("_tmux_job")
    root = Path(sys.modules[SourceImporter.__module__].__file__ or "").parent
    for name, text in sent.items():
        assert text == (root / f"{name.rsplit('.', 1)[1]}.py").read_text(encoding="utf-8")
    # _job_gpus imports _gpu_smi only inside a function (a lazy import), and _tmux_job needs it for gpus
    assert f"{PACKAGE}._gpu_smi" in sent
    assert sources("_prepare_check") == {f"{PACKAGE}._prepare_check": (root / "_prepare_check.py").read_text(encoding="utf-8")}


def _kept(tmp_path: Path) -> Path:
    """The folder where target_run's Python keeps its compiled code (as the target names it)."""
    env = {"TRAINOPS_CODE_CACHE": str(tmp_path / "cache")}
    probe = "import sys, json; sys.path.insert(0, sys.argv[1]); import _direct_boot as b; print(b.code_folder())"
    boot_dir = str(Path(sys.modules[SourceImporter.__module__].__file__ or "").parent)
    proc = subprocess.run([sys.executable, "-I", "-c", probe, boot_dir], capture_output=True, text=True, env=env, check=True)
    return Path(proc.stdout.strip())


def _plant(folder: Path, entry: str, answer: str) -> Path:
    """Keep, for the digest of ``entry``'s source, code whose direct_run answers ``answer``."""
    digest = hashlib.sha256(sources(entry)[f"{PACKAGE}.{entry}"].encode("utf-8")).hexdigest()
    code = compile(f"def direct_run(params, check_mode, diff):\n    return {{'answer': {answer!r}}}\n", "<planted>", "exec")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{digest}.code"
    path.write_bytes(marshal.dumps(code))
    return path


def test_compiled_code_is_kept_once_and_then_used(tmp_path: Path) -> None:
    params = prepare_params()
    status, result, stderr = target_run(tmp_path, "_prepare_check", params)
    assert status == 0 and result == report(params), stderr
    folder = _kept(tmp_path)
    kept = sorted(path.name for path in folder.iterdir())
    digest = hashlib.sha256(sources("_prepare_check")[f"{PACKAGE}._prepare_check"].encode("utf-8")).hexdigest()
    assert kept == [f"{digest}.code"]
    assert (oct(folder.stat().st_mode & 0o777), oct((folder / kept[0]).stat().st_mode & 0o777)) == ("0o700", "0o600")
    _plant(folder, "_prepare_check", "from the cache")  # the next run runs what is kept for the source's digest
    status, result, stderr = target_run(tmp_path, "_prepare_check", params)
    assert (status, result) == (0, {"answer": "from the cache"}), stderr


def test_check_mode_keeps_nothing_and_an_empty_setting_no_cache(tmp_path: Path) -> None:
    status, _result, stderr = target_run(tmp_path, "_prepare_check", prepare_params(), check_mode=True)
    assert status == 0, stderr
    assert not (tmp_path / "cache").exists()
    _plant(_kept(tmp_path), "_prepare_check", "from the cache")
    status, result, stderr = target_run(tmp_path, "_prepare_check", prepare_params(), cache="")
    assert status == 0 and "answer" not in result, (result, stderr)


@pytest.mark.parametrize("fault", ["folder others may write", "folder above others may write", "file of another user",
                                   "symlink", "not marshal data", "marshal data of no code"])
def test_kept_code_that_cannot_be_trusted_or_loaded_is_compiled_anew(tmp_path: Path, fault: str) -> None:
    folder = _kept(tmp_path)
    path = _plant(folder, "_prepare_check", "from the cache")
    if fault == "folder others may write":
        folder.chmod(0o777)
    elif fault == "folder above others may write":
        folder.parent.chmod(0o777)
    elif fault == "file of another user":
        if os.geteuid() != 0:
            pytest.skip("chown needs root")
        os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    elif fault == "symlink":
        real = tmp_path / "elsewhere.code"
        path.rename(real)
        path.symlink_to(real)
    elif fault == "not marshal data":
        path.write_bytes(b"\x00not marshal")
    else:
        path.write_bytes(marshal.dumps({"not": "code"}))
    params = prepare_params()
    status, result, stderr = target_run(tmp_path, "_prepare_check", params)
    assert (status, result) == (0, report(params)), stderr
