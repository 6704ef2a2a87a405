# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""prepare_info's checks: sure answers from the state itself, "not ok" whenever unsure."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils import _prepare_check as P

INSTALLED = {"numpy": "1.26.4", "torch": "2.3.0", "typing-extensions": "4.12.2", "odd": "1.0rc1"}


@pytest.mark.parametrize(("line", "met"), [
    ("numpy", True), ("NumPy", True), ("numpy==1.26.4", True), ("numpy==1.26", False), ("numpy>=1.26,<2", True),
    ("numpy>=2", False), ("numpy~=1.26.0", True), ("numpy~=1.25", True), ("numpy~=1.27.0", False), ("numpy==1.26.*", True),
    ("numpy!=1.26.*", False), ("numpy<=1.26.4", True), ("numpy>1.26.4", False), ("numpy!=1.0", True),
    ("typing_extensions>=4", True), ("Typing.Extensions", True), ("torch[cuda]>=2.0", True),
    ("scipy", False), ("", True), ("# a comment", True), ("numpy  # pinned below", True),
    ("numpy; python_version > '3.8'", None), ("torch @ https://example.invalid/torch.whl", None), ("-r other.txt", None),
    ("--extra-index-url https://example.invalid", None), ("odd", None), ("numpy===1.26.4", None), ("numpy>=1.26.0b1", None),
    ("git+https://example.invalid/x.git", None),
])
def test_requirements(line: str, met: bool | None) -> None:
    assert P.requirement_met(line, INSTALLED) is met


def _dist(site: Path, folder: str, meta: str, text: str) -> None:
    (site / folder).mkdir(parents=True)
    (site / folder / meta).write_text(text, encoding="utf-8")


def test_installed_distributions_from_the_venvs_metadata(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    _dist(site, "numpy-1.26.4.dist-info", "METADATA", "Metadata-Version: 2.1\nName: numpy\nVersion: 1.26.4\n\nName: not-a-header\n")
    _dist(site, "Typing_Extensions-4.12.2.dist-info", "METADATA", "Name: typing_extensions\nVersion: 4.12.2\n")
    _dist(site, "old.egg-info", "PKG-INFO", "Name: Old.Thing\nVersion: 0.1\n")
    _dist(site, "broken.dist-info", "RECORD", "")
    assert P.installed_distributions(str(tmp_path)) == {"numpy": "1.26.4", "typing-extensions": "4.12.2", "old-thing": "0.1"}


def _venv(tmp_path: Path, site_packages: bool = False) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("", encoding="utf-8")
    os.symlink(sys.executable, venv / "bin" / "python")
    (venv / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = {str(site_packages).lower()}\n", encoding="utf-8")
    _dist(venv / "lib" / "python3.11" / "site-packages", "numpy-1.26.4.dist-info", "METADATA", "Name: numpy\nVersion: 1.26.4\n")
    return venv


def test_venv_state(tmp_path: Path) -> None:
    venv = str(_venv(tmp_path))
    assert P.venv_state(venv, ["numpy>=1.20"], "numpy\n# c\n", False) == {"ok": True, "reason": ""}
    assert P.venv_state(venv, ["scipy"], None, False) == {"ok": False, "reason": "requirement 'scipy' is not met"}
    assert P.venv_state(venv, [], "-r base.txt\n", False)["reason"] == "requirement '-r base.txt' cannot be judged here"
    assert P.venv_state(venv, [], None, True)["reason"].endswith("does not say include-system-site-packages = true")
    assert P.venv_state(str(tmp_path / "none"), [], None, False) == {"ok": False, "reason": f"no venv at {tmp_path / 'none'}"}


def test_a_real_venv_with_pip_is_judged_from_its_own_metadata(tmp_path: Path) -> None:
    venv = tmp_path / "real"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    assert P.venv_state(str(venv), ["pip"], None, False)["ok"] is True
    assert P.venv_state(str(venv), ["pip<1"], None, False)["ok"] is False


def test_directory_and_files(tmp_path: Path) -> None:
    folder = tmp_path / "w"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    assert P.directory_state(str(folder))["ok"] and not P.directory_state(str(tmp_path / "x"))["ok"]
    os.chmod(folder, 0o700)
    assert P.directory_state(str(folder))["reason"].endswith("is no directory of mode 0755")
    dest = tmp_path / "train.py"
    dest.write_bytes(b"print(1)\n")
    os.chmod(dest, 0o644)
    sha1 = hashlib.sha1(b"print(1)\n").hexdigest()  # nosec - the checksum ansible.builtin.copy compares
    assert P.file_differs(str(dest), sha1, "0644") is False
    assert P.file_differs(str(dest), sha1, "644") is False
    assert P.file_differs(str(dest), sha1, "0755") is True
    assert P.file_differs(str(dest), "0" * 40, "0644") is True
    assert P.file_differs(str(dest), None, "0644") is True  # the source was not found on the controller
    assert P.file_differs(str(dest), sha1, "u=rw,g=r,o=r") is True  # a symbolic mode: not judged, copy decides
    assert P.file_differs(str(tmp_path / "missing"), sha1, "0644") is True


def test_tmux_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    tmux = fake / "tmux"
    monkeypatch.setenv("PATH", str(fake))
    for printed, minimum, ok in (("tmux 3.3a", "3.0", True), ("tmux 3.0a", "3.0", True), ("tmux 2.9", "3.0", False),
                                 ("tmux 3.2", "3.2a", False), ("tmux next-3.4", "3.0", True)):
        tmux.write_text(f"#!/bin/sh\necho '{printed}'\n", encoding="utf-8")
        tmux.chmod(0o755)
        assert P.tmux_state(minimum)["ok"] is ok, printed
    tmux.write_text("#!/bin/sh\necho 'tmux master'\n", encoding="utf-8")
    assert P.tmux_state("3.0") == {"ok": False, "version": None, "reason": "cannot read a version from 'tmux master'"}


UNIT = Path(__file__).resolve().parents[4] / "roles" / "boot_recorder" / "files" / "trainops-boot.service"


def _installed(root: Path, text: bytes, enabled: bool = True) -> tuple[Path, Path]:
    """A container's unit folder with the boot unit as the role leaves it, and its /run/systemd/system."""
    units, running = root / "etc/systemd/system", root / "run/systemd/system"
    (units / "multi-user.target.wants").mkdir(parents=True)
    running.mkdir(parents=True)
    (units / "trainops-boot.service").write_bytes(text)
    os.chmod(units / "trainops-boot.service", 0o644)
    if enabled:
        (units / "multi-user.target.wants/trainops-boot.service").symlink_to(units / "trainops-boot.service")
    return units, running


def test_the_boot_unit_is_ok_when_installed_with_the_collections_text_and_enabled(tmp_path: Path) -> None:
    sha1 = hashlib.sha1(UNIT.read_bytes()).hexdigest()  # nosec - the checksum the action sends
    units, running = _installed(tmp_path, UNIT.read_bytes())
    assert P.boot_unit_state(sha1, str(units), str(running)) == {"ok": True, "covered": True, "reason": ""}
    assert P.boot_unit_state("0" * 40, str(units), str(running)) == {
        "ok": False, "covered": True, "reason": f"the boot unit {units}/trainops-boot.service is missing or differs"}
    (units / "multi-user.target.wants/trainops-boot.service").unlink()
    assert P.boot_unit_state(sha1, str(units), str(running))["reason"] == (
        f"the boot unit trainops-boot.service is not enabled ({units}/multi-user.target.wants/trainops-boot.service)")
    (units / "trainops-boot.service").unlink()
    assert not P.boot_unit_state(sha1, str(units), str(running))["ok"]


def test_a_container_without_systemd_is_not_covered_and_told_so(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1/comm").write_text("openrc-init\n", encoding="ascii")
    state = P.boot_unit_state("0" * 40, str(tmp_path / "etc"), str(tmp_path / "run/systemd/system"), str(proc))
    assert (state["ok"], state["covered"], state["reason"]) == (True, False, "")
    assert state["warning"].startswith("the init of this container is not systemd (PID 1 is openrc-init): a job running when the "
                                       "container goes away is not recorded at its next boot")


def test_the_report_needs_the_boot_unit_unless_it_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, "boot_unit_state", lambda checksum: {"ok": False, "covered": True, "reason": f"install {checksum}"})
    params = {"tmux_min_version": "0.1", "venv_path": None, "workdir": None, "files": [], "boot_unit": True, "boot_unit_checksum": "c"}
    monkeypatch.setattr(P, "tmux_state", lambda minimum: {"ok": True, "version": "3.3a", "reason": ""})
    report = P.report(params)
    assert (report["prepared"], report["needs"], report["boot_unit"]["ok"]) == (False, ["install c"], False)
    report = P.report(dict(params, boot_unit=False))
    assert (report["prepared"], report["boot_unit"]) == (True, {"ok": True, "reason": ""})
