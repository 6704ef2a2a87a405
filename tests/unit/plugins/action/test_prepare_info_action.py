# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for the action plugin of trainops.pct_launch.prepare_info: what the controller adds to the module's
options (the requirements file's text, each job file's checksum), and the module run as the normal action runs one.

``_execute_module`` is replaced by a recorder, ``_find_needle`` by a lookup in a temporary ``files/`` folder.
"""

from __future__ import annotations

import typing as t
from pathlib import Path
from unittest.mock import MagicMock

import pytest
from ansible.errors import AnsibleError
from ansible.utils.hashing import checksum

from ansible_collections.trainops.pct_launch.plugins.action import prepare_info
from ansible_collections.trainops.pct_launch.plugins.action.prepare_info import MODULE_NAME, ActionModule

COLLECTION = Path(__file__).resolve().parents[4]


class Recorder:
    """Stands in for ``_execute_module`` (records each call's keyword arguments) and ``_remove_tmp_path``."""

    def __init__(self, result: dict[str, t.Any]) -> None:
        self.result = result
        self.calls: list[dict[str, t.Any]] = []
        self.removed: list[t.Any] = []

    def __call__(self, **kwargs: t.Any) -> dict[str, t.Any]:
        self.calls.append(kwargs)
        return dict(self.result)

    def remove(self, tmp_path: t.Any, force: bool = False) -> None:
        """What ``_remove_tmp_path`` was asked to remove."""
        del force
        self.removed.append(tmp_path)


def make_action(args: dict[str, t.Any], files: Path, recorder: Recorder, monkeypatch: pytest.MonkeyPatch,
                async_val: int = 0, native_async: bool = False) -> ActionModule:
    """The action plugin with a mocked task and connection; sources are found in ``files`` only."""
    task = MagicMock()
    task.args = args
    task.async_val = async_val
    task.check_mode = False
    task.action = MODULE_NAME
    connection = MagicMock()
    connection.has_native_async = native_async
    action = ActionModule(task, connection, MagicMock(), loader=None, templar=None, shared_loader_obj=None)

    def find_needle(dirname: str, needle: str) -> str:
        assert dirname == "files"
        path = files / needle
        if not path.is_file():
            raise AnsibleError(f"Cannot find {needle}")
        return str(path)

    monkeypatch.setattr(action, "_find_needle", find_needle)
    monkeypatch.setattr(action, "_execute_module", recorder)
    monkeypatch.setattr(action, "_remove_tmp_path", recorder.remove)
    return action


@pytest.fixture(name="files")
def files_folder(tmp_path: Path) -> Path:
    """The play's ``files/`` folder: a requirements file and one job file."""
    (tmp_path / "requirements.txt").write_text("numpy>=1.26\n", encoding="utf-8")
    (tmp_path / "train.py").write_text("print('step 1 loss 2.5')\n", encoding="utf-8")
    return tmp_path


def test_the_module_gets_the_requirements_text_and_each_checksum(files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder({"changed": False, "prepared": True, "needs": []})
    args = {"venv_path": "/opt/venv", "venv_requirements_file": "requirements.txt",
            "files": [{"src": "train.py", "dest": "/w/train.py"}, {"src": "gone.py", "dest": "/w/gone.py"}, {"dest": "/w/x"}]}
    result = make_action(args, files, recorder, monkeypatch).run(task_vars={"inventory_hostname": "ct200"})
    assert result == {"changed": False, "prepared": True, "needs": []}
    [call] = recorder.calls
    assert call["module_name"] == MODULE_NAME and call["wrap_async"] is False
    assert call["task_vars"] == {"inventory_hostname": "ct200"}
    sent = call["module_args"]
    assert sent["venv_requirements_text"] == "numpy>=1.26\n" and sent["venv_path"] == "/opt/venv"
    assert sent["files"] == [{"src": "train.py", "dest": "/w/train.py", "checksum": checksum(str(files / "train.py"))},
                             {"src": "gone.py", "dest": "/w/gone.py", "checksum": None},  # not found: the module says copy it
                             {"dest": "/w/x"}]
    assert recorder.removed == [None], "the connection shell's temporary folder is removed, as the normal action does"


def test_a_requirements_file_that_cannot_be_read_is_not_judged(files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder({"changed": False})
    make_action({"venv_path": "/v", "venv_requirements_file": "missing.txt"}, files, recorder, monkeypatch).run(task_vars={})
    [call] = recorder.calls
    assert call["module_args"]["venv_requirements_text"] == "-r cannot-read-on-the-controller"
    assert call["module_args"]["files"] == []


def test_without_a_requirements_file_no_text_is_sent(files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder({"changed": False})
    make_action({"tmux_min_version": "3.2"}, files, recorder, monkeypatch).run(task_vars={})
    args = recorder.calls[0]["module_args"]
    assert args == {"tmux_min_version": "3.2", "files": [], "boot_unit_checksum": checksum(prepare_info.BOOT_UNIT_FILE)}


def test_the_boot_units_checksum_is_that_of_the_roles_file() -> None:
    # the module compares the installed unit with it: the file the role boot_recorder copies
    assert Path(prepare_info.BOOT_UNIT_FILE).resolve() == COLLECTION / "roles" / "boot_recorder" / "files" / "trainops-boot.service"
    assert Path(prepare_info.BOOT_UNIT_FILE).is_file()


@pytest.mark.parametrize("native_async, wrapped", [(False, True), (True, False)])
def test_an_async_task_is_passed_on_as_wrap_async(files: Path, monkeypatch: pytest.MonkeyPatch, native_async: bool, wrapped: bool) -> None:
    recorder = Recorder({"ansible_job_id": "j1", "started": 1, "finished": 0})
    result = make_action({}, files, recorder, monkeypatch, async_val=60, native_async=native_async).run(task_vars={})
    assert result["ansible_job_id"] == "j1" and recorder.calls[0]["wrap_async"] is wrapped
    assert recorder.removed == ([] if wrapped else [None]), "async_wrapper's files stay for it"
