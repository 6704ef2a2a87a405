# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The GPU device files a job needs, opened as its user: which files, and what each open says (errno)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _gpu_devices as D

U = [f"GPU-{i}bbbbbbb-0000-4000-8000-00000000000{i}" for i in range(3)]
VISIBLE = [{"index": i, "uuid": U[i]} for i in range(3)]


def _files(*names: str, missing: t.Sequence[str] = ()) -> list[dict[str, t.Any]]:
    return [{"path": f"/dev/{name}", "present": name not in missing, "char_device": name not in missing} for name in names]


FILES = _files("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1", "nvidia2")


def test_all_or_a_count_needs_every_gpu_file() -> None:
    every = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]
    assert D.needed_paths(("all", None), VISIBLE, FILES) == every
    assert D.needed_paths(("count", 1), VISIBLE, FILES) == every
    assert D.needed_paths(("all", None), VISIBLE, _files("nvidiactl", "nvidia-uvm", "nvidia0", missing=["nvidia-uvm"])) == [
        "/dev/nvidiactl", "/dev/nvidia0"]  # a missing file is reported as missing, not opened


def test_a_list_needs_the_files_of_its_gpus(tmp_path: Path) -> None:
    """By the minor number the driver reports for the GPU's UUID, else by the index; every file when none is visible."""
    none = str(tmp_path / "none" / "*" / "information")
    assert D.needed_paths(("ids", ("1",)), VISIBLE, FILES, none) == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"]
    assert D.needed_paths(("ids", (U[2], "0")), VISIBLE, FILES, none)[2:] == ["/dev/nvidia0", "/dev/nvidia2"]
    for bus, uuid, minor in (("0000:07:00.0", U[0], 2), ("0000:0f:00.0", U[2], 0)):
        (tmp_path / "gpus" / bus).mkdir(parents=True)
        (tmp_path / "gpus" / bus / "information").write_text(
            f"Model: \t\t NVIDIA A100\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n", encoding="utf-8")
    info = str(tmp_path / "gpus" / "*" / "information")
    assert D.gpu_minors(info) == {U[0]: 2, U[2]: 0}
    assert D.needed_paths(("ids", ("0",)), VISIBLE, FILES, info)[2:] == ["/dev/nvidia2"]
    assert D.needed_paths(("ids", ("0",)), [], FILES, info)[2:] == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]


@pytest.fixture()
def nodes() -> t.Iterator[Path]:
    """Device nodes (root only) in a folder every user reaches: ``null`` 1:3 0666, ``closed`` 1:3 0660 root:root,
    ``nodriver`` 195:0 0666 (no driver for major 195 here; a GPU node's would answer)."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    if os.path.exists("/proc/driver/nvidia"):
        pytest.skip("an NVIDIA driver is loaded here: major 195 answers")
    folder = Path(tempfile.mkdtemp(prefix="gpu-devices-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        for name, numbers, mode in (("null", (1, 3), 0o666), ("closed", (1, 3), 0o660), ("nodriver", (195, 0), 0o666)):
            os.mknod(folder / name, stat.S_IFCHR | mode, os.makedev(*numbers))
            os.chmod(folder / name, mode)
        yield folder
    finally:
        shutil.rmtree(folder)


def _by_name(found: t.Sequence[dict[str, t.Any]]) -> dict[str, tuple[t.Any, ...]]:
    return {Path(item["path"]).name: (item["user"], item["opened"], item["failure"], item["errno"]) for item in found}


def test_the_kernel_answers_each_open_as_the_user(nodes: Path) -> None:
    """As root everything the mode allows opens; as nobody (a child that became it) the 0660 file is EACCES."""
    paths = [str(nodes / name) for name in ("null", "closed", "nodriver")]
    assert _by_name(D.check_access(paths, None)) == {"null": ("root", True, None, None), "closed": ("root", True, None, None),
                                                     "nodriver": ("root", False, "open", "ENXIO")}
    found = D.check_access(paths, "nobody")
    assert _by_name(found) == {"null": ("nobody", True, None, None), "closed": ("nobody", False, "open", "EACCES"),
                               "nodriver": ("nobody", False, "open", "ENXIO")}
    assert {key: found[1][key] for key in ("mode", "owner", "device", "error")} == {
        "mode": "0660", "owner": "root:root", "device": "1:3", "error": "Permission denied"}
    assert found[2]["device"] == "195:0"


def test_the_device_cgroup_refusal_is_eperm(nodes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EPERM as the container's device cgroup gives it (the open itself refused), also in the user's child."""
    real_open = os.open

    def refused(path: str, flags: int, *args: t.Any) -> int:
        if path.endswith("/null"):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), path)
        return real_open(path, flags, *args)
    monkeypatch.setattr(D.os, "open", refused)
    for user in (None, "nobody"):
        assert _by_name(D.check_access([str(nodes / "null")], user))["null"][1:] == (False, "open", "EPERM")


def test_no_user_a_user_that_cannot_be_become_and_a_hanging_driver(nodes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(nodes / "null")
    assert _by_name(D.check_access([path], "no-such-user-here")) == {"null": ("no-such-user-here", False, "no_user", None)}
    assert D.check_access([], "nobody") == []

    def cannot(_uid: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")
    with monkeypatch.context() as patch:
        patch.setattr(D.os, "setuid", cannot)
        found = D.check_access([path], "nobody")
    assert _by_name(found) == {"null": ("nobody", False, "switch", None)}
    assert found[0]["error"] == "cannot become user nobody: Operation not permitted (this runs as root)"

    def hangs(_path: str) -> int:
        time.sleep(30)
        return 0
    monkeypatch.setattr(D, "open_errno", hangs)
    started = time.monotonic()
    found = D.check_access([path, path], "nobody", timeout=0.5)
    assert time.monotonic() - started < 5
    assert [item["failure"] for item in found] == ["timeout", "timeout"] and found[0]["error"] == "opening it did not return within 0.5 s"
