# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The CUDA probe (``_cuda_probe``) against a stand-in libcuda built for each test (tests/integration/fake_libcuda.py):
GPUs that initialise, the driver's errors named with their fix, no libcuda, the job's user, a driver that hangs or
crashes, and CUDA_VISIBLE_DEVICES passed to the driver as the job gives it."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _cuda_probe as P
from tests.integration.fake_libcuda import build, conf_text, values

UUIDS = ["GPU-aaaaaaaa-1111-2222-3333-444444444444", "GPU-bbbbbbbb-5555-6666-7777-888888888888"]
BUS_IDS = ["0000:2A:00.0", "0000:81:00.0"]


@pytest.fixture()
def libcuda(tmp_path: Path) -> Path:
    return build(tmp_path)


@pytest.fixture()
def no_uvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``/dev/nvidia-uvm`` read from a path that does not exist (a test creates it for a node whose uvm is loaded)."""
    path = tmp_path / "nvidia-uvm"
    monkeypatch.setattr(P, "UVM", str(path))
    return path


@pytest.fixture()
def uvm(no_uvm: Path) -> Path:
    """``/dev/nvidia-uvm`` read from a file that exists: the node's uvm module is loaded."""
    no_uvm.touch()
    return no_uvm


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {"FAKE_CUDA_UUIDS": ",".join(UUIDS), "FAKE_CUDA_BUS_IDS": ",".join(BUS_IDS), "FAKE_CUDA_RECORD": str(tmp_path / "record")}
    env.update(more)
    return env


def test_two_gpus_initialise_with_their_uuids_and_bus_ids(libcuda: Path, tmp_path: Path) -> None:
    result = P.probe_as(None, _env(tmp_path), library=str(libcuda))
    assert result["ran"] and result["ok"] and result["count"] == 2 and result["library"] == str(libcuda)
    assert [(gpu["ordinal"], gpu["uuid"], gpu["pci_bus_id"]) for gpu in result["devices"]] == [(0, UUIDS[0], BUS_IDS[0]), (1, UUIDS[1], BUS_IDS[1])]
    assert values(tmp_path / "record", "ctx_create") == values(tmp_path / "record", "ctx_destroy") == ["0", "1"]
    assert values(tmp_path / "record", "CUDA_VISIBLE_DEVICES unset") == [""]
    assert P.message(result, "GPUs 0,1") == ""


def test_the_driver_enumerates_the_jobs_gpus_only(libcuda: Path, tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES by UUID prefix or index: the job's GPU is CUDA's device 0."""
    for visible, uuid in (("GPU-bbbb", UUIDS[1]), ("1", UUIDS[1]), ("0", UUIDS[0])):
        result = P.probe_as(None, _env(tmp_path, CUDA_VISIBLE_DEVICES=visible), library=str(libcuda))
        assert result["ok"] and [gpu["uuid"] for gpu in result["devices"]] == [uuid] and result["visible_devices"] == visible


def test_settings_not_in_the_environment_come_from_the_configuration_file(libcuda: Path, tmp_path: Path) -> None:
    """What a container's /etc/fake-cuda.conf scripts reaches a probe that has the job's environment only; the environment wins."""
    conf = tmp_path / "fake-cuda.conf"
    conf.write_text("# the container's stand-in\n\n  " + conf_text(FAIL="cuInit:999", DEVICES="3", RECORD=str(tmp_path / "record")), encoding="utf-8")
    failed = P.probe_as(None, {"FAKE_CUDA_CONF": str(conf)}, library=str(libcuda))
    assert (failed["ok"], failed["call"], failed["code"], failed["name"]) == (False, "cuInit", 999, "CUDA_ERROR_UNKNOWN"), failed
    assert values(tmp_path / "record", "uid") == [str(os.getuid())]
    passed = P.probe_as(None, {"FAKE_CUDA_CONF": str(conf), "FAKE_CUDA_FAIL": ""}, library=str(libcuda))
    assert passed["ok"] and passed["count"] == 3, passed
    conf.unlink()
    assert P.probe_as(None, {"FAKE_CUDA_CONF": str(conf)}, library=str(libcuda))["count"] == 1, "no file: the defaults"


def test_the_library_is_found_on_the_jobs_library_path(libcuda: Path, tmp_path: Path) -> None:
    result = P.probe_as(None, _env(tmp_path, LD_LIBRARY_PATH=f"/nonexistent::{libcuda.parent}"))
    assert result["ok"] and result["library"] == str(libcuda)


def test_cuinit_999_without_uvm_names_nvidia_modprobe(libcuda: Path, tmp_path: Path, no_uvm: Path) -> None:
    result = P.probe_as(None, _env(tmp_path, FAKE_CUDA_FAIL="cuInit:999"), library=str(libcuda))
    assert {key: result[key] for key in ("ran", "ok", "call", "code", "name", "text", "uvm", "device")} == {
        "ran": True, "ok": False, "call": "cuInit", "code": 999, "name": "CUDA_ERROR_UNKNOWN", "text": "unknown error", "uvm": False, "device": None}
    assert result["fix"] == (f"{no_uvm} is missing in the container: load the uvm module on the node before the container starts: "
                             "`nvidia-modprobe -u -c=0` (or `modprobe nvidia-uvm`), then restart the container")
    assert P.message(result, "GPUs 0,1") == (
        "CUDA cannot initialise GPUs 0,1 for the job: cuInit failed with CUDA_ERROR_UNKNOWN (999, unknown error); fix: " + result["fix"])
    no_uvm.touch()  # uvm loaded, and still 999: the same fix, then reloading the module, and the node's kernel log
    fix = P.probe_as(None, _env(tmp_path, FAKE_CUDA_FAIL="cuInit:999"), library=str(libcuda))["fix"]
    assert "missing" not in fix and "nvidia-modprobe -u -c=0" in fix and "rmmod nvidia_uvm" in fix and "journalctl -k" in fix


def test_803_names_the_driver_mismatch(libcuda: Path, tmp_path: Path) -> None:
    result = P.probe_as(None, _env(tmp_path, FAKE_CUDA_FAIL="cuInit:803"), library=str(libcuda))
    assert (result["code"], result["name"], result["text"]) == (
        803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination")
    assert "user-space libraries (libcuda) of the node's driver version" in result["fix"] and "cuda-compat" in result["fix"]


def test_46_on_the_second_gpu_names_it_and_leaves_no_context(libcuda: Path, tmp_path: Path) -> None:
    result = P.probe_as(None, _env(tmp_path, FAKE_CUDA_FAIL="cuCtxCreate_v2:46@1", CUDA_VISIBLE_DEVICES="0,1"), library=str(libcuda))
    assert (result["call"], result["code"], result["name"]) == ("cuCtxCreate_v2", 46, "CUDA_ERROR_DEVICE_UNAVAILABLE")
    assert result["device"] == {"ordinal": 1, "uuid": UUIDS[1], "pci_bus_id": BUS_IDS[1]}
    assert "compute mode" in result["fix"] and "nvidia-smi -i N -c DEFAULT" in result["fix"]
    assert values(tmp_path / "record", "ctx_create") == values(tmp_path / "record", "ctx_destroy") == ["0"]
    assert P.message(result, "GPUs 0,1") == (
        f"CUDA cannot initialise GPU 1 ({UUIDS[1]}) for the job: cuCtxCreate failed with CUDA_ERROR_DEVICE_UNAVAILABLE "
        f"(46, CUDA-capable device(s) is/are busy or unavailable); fix: {result['fix']}")


def test_no_libcuda_is_no_probe_and_no_error(tmp_path: Path, no_uvm: Path) -> None:
    assert P.probe_as(None, {}, library=str(tmp_path / "none" / "libcuda.so.1")) == {"ran": False, "reason": "no libcuda", "uvm": False, "user": None}
    assert P.message({"ran": False, "reason": "no libcuda"}, "GPU 0") == ""
    (tmp_path / "libcuda.so.1").write_text("not a library\n", encoding="utf-8")  # one that is there and does not load is an error
    broken = P.probe_as(None, {}, library=str(tmp_path / "libcuda.so.1"))
    assert (broken["ran"], broken["ok"], broken["call"], broken["name"]) == (True, False, "dlopen", "load_error")
    assert "driver version" in broken["fix"]


def test_probe_in_this_process(libcuda: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``probe`` itself sets CUDA_VISIBLE_DEVICES (restored here by monkeypatch) and reports each call it begins."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "stale")
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    calls: list[str] = []
    result = P.probe("1", str(libcuda), calls.append)
    assert result["ok"] and [gpu["uuid"] for gpu in result["devices"]] == [UUIDS[1]]
    assert calls == ["cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetUuid_v2", "cuDeviceGetPCIBusId", "cuCtxCreate_v2", "cuCtxDestroy_v2"]
    assert values(tmp_path / "record", "CUDA_VISIBLE_DEVICES") == ["1"]


@pytest.fixture()
def shared_libcuda() -> t.Iterator[Path]:
    """The stand-in in a folder every user reaches (pytest's tmp_path is root's alone), with a record file any user appends to."""
    folder = Path(tempfile.mkdtemp(prefix="cuda-probe-"))
    try:
        folder.chmod(0o755)
        library = build(folder)
        (folder / "record").touch(mode=0o666)
        (folder / "record").chmod(0o666)
        yield library
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_probe_as_root_and_as_the_jobs_user(shared_libcuda: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("becoming another user needs root")
    record = shared_libcuda.parent / "record"
    env = {"FAKE_CUDA_DEVICES": "1", "FAKE_CUDA_RECORD": str(record), "CUDA_VISIBLE_DEVICES": "0"}
    assert P.probe_as("root", env, library=str(shared_libcuda))["ok"]
    result = P.probe_as("nobody", env, library=str(shared_libcuda))
    assert result["ok"] and result["user"] == "nobody"
    assert values(record, "uid") == ["0", str(pwd.getpwnam("nobody").pw_uid)]
    missing = P.probe_as("no-such-user-35", env, library=str(shared_libcuda))
    assert (missing["ok"], missing["name"], missing["text"]) == (False, "switch", "user no-such-user-35 does not exist")


def test_probe_as_another_user_needs_root(libcuda: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("runs as root: becoming another user works")
    result = P.probe_as("nobody", {}, library=str(libcuda))
    assert (result["ok"], result["call"], result["name"]) == (False, "setuid", "switch") and "cannot become user nobody" in result["text"]


def test_a_hanging_cuinit_ends_at_the_timeout(libcuda: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    result = P.probe_as(None, _env(tmp_path, FAKE_CUDA_HANG="cuInit"), library=str(libcuda), timeout=1)
    assert time.monotonic() - started < 10
    assert (result["ran"], result["ok"], result["call"], result["code"], result["name"]) == (True, False, "cuInit", None, "timeout")
    assert P.message(result, "GPU 0").startswith(
        "CUDA cannot initialise GPU 0 for the job: cuInit failed: no answer within 1 s; fix: the driver did not answer")


def test_a_driver_that_crashes_the_probe(libcuda: Path, tmp_path: Path) -> None:
    result = P.probe_as(None, _env(tmp_path, FAKE_CUDA_ABORT="cuCtxCreate_v2"), library=str(libcuda))
    assert (result["ok"], result["call"], result["name"], result["text"]) == (False, "cuCtxCreate_v2", "crashed", "the probe ended by SIGABRT")


@pytest.mark.parametrize("visible, count", [
    ("1,$(touch {canary})", 1), ("0;touch {canary}", None), ("`touch {canary}`", None), ("0,1,-1", 2), (" 0", None), ("", None),
    ("'\"\\ ünï\u200b\n0", None), ("0," + "9" * 5000, 1),
])
def test_hostile_cuda_visible_devices_reach_the_driver_untouched(libcuda: Path, tmp_path: Path, uvm: Path, visible: str, count: int | None) -> None:
    """The value is the job's, as given; the driver takes the GPUs it names up to the first entry that names none."""
    canary = tmp_path / "canary"
    visible = visible.replace("{canary}", str(canary))
    result = P.probe_as(None, _env(tmp_path, CUDA_VISIBLE_DEVICES=visible), library=str(libcuda))
    assert values(tmp_path / "record", "CUDA_VISIBLE_DEVICES") == [visible] and not canary.exists()
    if count is None:
        assert (result["call"], result["code"], result["name"]) == ("cuInit", 100, "CUDA_ERROR_NO_DEVICE")
        assert f"CUDA_VISIBLE_DEVICES ({visible!r})" in result["fix"]
    else:
        assert result["ok"] and result["count"] == count


@pytest.mark.parametrize("code, uvm, part", [
    (999, False, "nvidia-modprobe -u -c=0"), (3, False, "nvidia-modprobe -u -c=0"), (100, False, "nvidia-modprobe -u -c=0"),
    (100, True, "the container sees no GPU"), (101, True, "names a GPU the container does not have"), (803, True, "node's driver version"),
    (804, True, "cuda-compat"), (35, True, "node's driver version"), (34, True, "stub"), (46, True, "compute mode"), (2, True, "memory"),
    (304, True, "lxc.cgroup2.devices.allow"), ("timeout", True, "nvidia-smi -r"), (12345, True, "journalctl -k"), (None, True, "journalctl -k"),
])
def test_fix_for(code: int | str | None, uvm: bool, part: str) -> None:
    fix = P.fix_for(code, {"uvm": uvm, "visible_devices": "0,1"})
    assert part in fix
    assert ("missing in the container" in fix) == (not uvm)


def test_message_names_the_gpu_by_the_jobs_entry_and_uuid() -> None:
    failed = {"ran": True, "ok": False, "call": "cuCtxCreate_v2", "code": 999, "name": "CUDA_ERROR_UNKNOWN", "text": "unknown error",
              "visible_devices": "3, 5", "device": {"ordinal": 1, "uuid": UUIDS[0], "pci_bus_id": BUS_IDS[0]}, "fix": "load it"}
    assert P.message(failed, "GPUs 3,5") == (
        f"CUDA cannot initialise GPU 5 ({UUIDS[0]}) for the job: cuCtxCreate failed with CUDA_ERROR_UNKNOWN (999, unknown error); fix: load it")
    by_uuid = dict(failed, visible_devices=UUIDS[0], device={"ordinal": 0, "uuid": UUIDS[0]})
    assert P.message(by_uuid, "GPU x").startswith(f"CUDA cannot initialise GPU {UUIDS[0]} for the job:")
    unset = dict(failed, visible_devices=None, device={"ordinal": 0, "uuid": None}, text="")
    assert P.message(unset, "GPU x") == "CUDA cannot initialise GPU 0 for the job: cuCtxCreate failed with CUDA_ERROR_UNKNOWN (999); fix: load it"
    assert P.uuid_text(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
