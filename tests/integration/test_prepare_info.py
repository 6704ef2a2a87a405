# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""prepare_info on a stand-in container through the pct connection: one ordinary module run, pipelined or not.

The container's interpreter is files/record_stdin.sh (pushed to /usr/local/bin/record-python), which keeps what
python3 reads on its standard input: a pipelined module sends AnsiballZ (its shebang first), a module that is not
pipelined nothing. The stand-in's call log counts the task's ``pct`` calls.
"""

from __future__ import annotations

import base64
import json
import typing as t
import uuid
from pathlib import Path

import pytest

from .conftest import StandinNode, knob_pct
from .playbook_results import PlayRun, container_host, run_tasks

pytestmark = pytest.mark.integration

CT = 257
HOST = f"ct{CT}"
RECORDER = Path(__file__).resolve().parent / "files" / "record_stdin.sh"
RECORDING_PYTHON = "/usr/local/bin/record-python"
ANSIBALLZ_START = f"#!{RECORDING_PYTHON}"
CHECK = {"tmux_min_version": "3.0", "workdir": "/w", "venv_path": "/opt/no-venv", "venv_requirements": ["numpy"],
         "files": [{"src": "job.py", "dest": "/w/job.py", "mode": "0644"}]}


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> int:
    """A container with tmux, /w, and the recording interpreter."""
    standin.create(CT)
    standin.install_tmux(CT, "/w")
    standin.pct("push", CT, str(RECORDER), RECORDING_PYTHON, "--perms", "0755", check=True)
    return CT


def check(tmp_path: Path, args: t.Mapping[str, t.Any], options: t.Sequence[str] = (), **host_vars: t.Any) -> tuple[PlayRun, int, list[str]]:
    """prepare_info once: (the run, the task's pct calls, what the interpreter read on stdin in each run)."""
    folder = tmp_path / uuid.uuid4().hex[:8]
    folder.mkdir()
    (folder / "job.py").write_text("print('step 1 loss 0.5')\n", encoding="utf-8")
    calls = folder / "calls.jsonl"
    host = container_host(CT, **{"ansible_python_interpreter": RECORDING_PYTHON, "pct_path": knob_pct(folder, call_log=str(calls)),
                                 **host_vars})
    run = run_tasks(folder, {HOST: host}, [{"name": "check", "trainops.pct_launch.prepare_info": dict(args), "ignore_errors": True}],
                    options=options)
    made = [json.loads(line)["argv"] for line in calls.read_text(encoding="utf-8").splitlines()] if calls.exists() else []
    return run, len(made), recorded()


def recorded() -> list[str]:
    """The start of what the recording interpreter read in each run since the last call (then forgotten)."""
    proc = StandinNode(None).sh(CT, 'cd /tmp/python-stdin 2>/dev/null || exit 0; for f in $(ls | sort -n); do '
                                    'head -c 400 "$f" | base64 -w0; echo; done; rm -rf /tmp/python-stdin')
    return [base64.b64decode(line).decode(errors="replace") for line in proc.stdout.decode().splitlines()]


def written(standin: StandinNode) -> bytes:
    """Every file and folder where a module could write, with its modification time (the recorder's aside, and the
    folders themselves: the recorder's folder comes and goes in /tmp)."""
    return standin.sh(CT, "find /w /root /tmp /opt -xdev -mindepth 1 -not -path '/tmp/python-stdin*' -printf '%p %T@\\n' 2>/dev/null | sort").stdout


def verdict(run: PlayRun) -> dict[str, t.Any]:
    result = dict(run.result("check", HOST))
    for key in ("invocation", "_ansible_no_log", "_ansible_verbose_always"):
        result.pop(key, None)
    return result


def test_a_pipelined_check_is_one_module_run_in_one_pct_exec(ct: int, tmp_path: Path) -> None:
    run, calls, stdin = check(tmp_path, CHECK)
    assert run.proc.returncode == 0, run.proc.stdout
    assert calls == 1 and len(stdin) == 1 and stdin[0].startswith(ANSIBALLZ_START), (calls, stdin)
    result = verdict(run)
    assert result["prepared"] is False and result["tmux"]["ok"] is True and result["workdir"] == {"ok": True, "reason": ""}
    assert result["needs"] == ["no venv at /opt/no-venv", "the boot unit /etc/systemd/system/trainops-boot.service is missing or differs",
                               "copy /w/job.py"], result


def test_the_module_gives_the_same_report_where_the_task_is_not_pipelined(ct: int, tmp_path: Path) -> None:
    piped, _calls, stdin = check(tmp_path, CHECK)
    module, calls, module_stdin = check(tmp_path, CHECK, ansible_pipelining=False)
    assert stdin[0].startswith(ANSIBALLZ_START) and module_stdin == [""], "the module runs from a file it copied in, its stdin empty"
    assert calls > 1, "a module that is not pipelined is copied in first"
    assert verdict(module) == verdict(piped)


def test_check_mode_reports_the_same_and_writes_nothing(ct: int, tmp_path: Path, standin: StandinNode) -> None:
    before = written(standin)
    normal, _calls, _stdin = check(tmp_path, CHECK)
    checked, calls, stdin = check(tmp_path, CHECK, options=["--check", "--diff"])
    assert calls == 1 and stdin[0].startswith(ANSIBALLZ_START)
    assert verdict(checked) == verdict(normal) and checked.result("check", HOST)["changed"] is False
    assert written(standin) == before


@pytest.mark.parametrize(("wrong", "start"), [
    ({"bogus": 1}, "Unsupported parameters for (trainops.pct_launch.prepare_info) module: bogus. "
                   "Supported parameters include: boot_unit, boot_unit_checksum, files,"),
    ({"venv_site_packages": "maybe"}, "argument 'venv_site_packages' is of type str and we were unable to convert to bool"),
])
def test_a_wrong_option_is_named_and_nothing_is_written(ct: int, tmp_path: Path, standin: StandinNode,
                                                        wrong: dict[str, t.Any], start: str) -> None:
    before = written(standin)
    run, calls, _stdin = check(tmp_path, dict(CHECK, **wrong))
    result = run.result("check", HOST)
    assert result["status"] == "failed" and calls == 1, (calls, result)  # the module's own check, in its one pct exec
    assert written(standin) == before
    assert result["msg"].startswith(start), result["msg"]


def test_an_interpreter_ansible_must_discover_runs_the_module_first(ct: int, tmp_path: Path) -> None:
    # ansible_python_interpreter left at auto: Ansible discovers /usr/bin/python3 (a call of its own); both runs
    # report the same.
    folder = tmp_path / "auto"
    calls = folder / "calls.jsonl"
    folder.mkdir()
    (folder / "job.py").write_text("print('step 1 loss 0.5')\n", encoding="utf-8")
    host = container_host(CT, pct_path=knob_pct(folder, call_log=str(calls)))
    host.pop("ansible_python_interpreter")
    tasks = [{"name": name, "trainops.pct_launch.prepare_info": CHECK} for name in ("first", "second")]
    run = run_tasks(folder, {HOST: host}, tasks)
    assert run.proc.returncode == 0, run.proc.stdout
    first, second = run.result("first", HOST), run.result("second", HOST)
    assert first["ansible_facts"]["discovered_interpreter_python"].startswith("/")
    assert {k: v for k, v in first.items() if k not in ("ansible_facts", "invocation", "warnings")} == \
        {k: v for k, v in second.items() if k not in ("invocation", "warnings")}


def test_a_missing_interpreter_is_named(ct: int, tmp_path: Path) -> None:
    run, calls, _stdin = check(tmp_path, CHECK, ansible_python_interpreter="/usr/bin/python9")
    result = run.result("check", HOST)
    assert calls == 1 and result["status"] == "failed" and result["rc"] == 127, result
    assert result["msg"].startswith("The module interpreter '/usr/bin/python9' was not found."), result["msg"]
