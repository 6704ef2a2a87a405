# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The role ``boot_recorder`` run by ``ansible-playbook`` on localhost, its unit folder in the test's temp dir.

The init system is the test's (a module of the test's own gives ``service_mgr``), and ``systemctl`` a script that
notes its arguments: nothing of this host's systemd is touched. Check mode writes nothing; a real run installs and
enables the unit as ``systemctl enable`` would; a second run changes nothing; without systemd nothing is installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "roles" / "boot_recorder" / "files" / "trainops-boot.service"
FACTS_MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={"service_mgr": {"type": "str"}}, supports_check_mode=True)
module.exit_json(changed=False, ansible_facts={"service_mgr": module.params["service_mgr"]})
'''
PLAY = '''- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: The init system of the test
      test_facts:
        service_mgr: "{{ init }}"
    - name: The role
      ansible.builtin.include_role:
        name: trainops.pct_launch.boot_recorder
'''

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role installs as root")


class Host:
    """The test's playbook, its unit folder and its systemctl."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.units = tmp_path / "etc/systemd/system"  # there on every systemd system
        self.units.mkdir(parents=True)
        (tmp_path / "library").mkdir()
        (tmp_path / "library/test_facts.py").write_text(FACTS_MODULE, encoding="utf-8")
        (tmp_path / "bin").mkdir()
        self.calls = tmp_path / "systemctl.calls"
        systemctl = tmp_path / "bin/systemctl"
        systemctl.write_text(f'#!/bin/sh\necho "$*" >> {self.calls}\n', encoding="utf-8")
        systemctl.chmod(0o755)
        (tmp_path / "play.yml").write_text(PLAY, encoding="utf-8")

    def run(self, init: str = "systemd", check: bool = False) -> dict[str, t.Any]:
        """The play's recap for localhost (``ok``, ``changed``) and its output."""
        extra = {"init": init, "__boot_recorder_unit_dir": str(self.units), "ansible_python_interpreter": sys.executable}
        argv = ["ansible-playbook", "-i", "localhost,", str(self.tmp_path / "play.yml"), "-e", json.dumps(extra)] + (["--check"] if check else [])
        env = dict(os.environ, ANSIBLE_LIBRARY=str(self.tmp_path / "library"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCAL_TEMP=str(self.tmp_path / "tmp"), PATH=f"{self.tmp_path / 'bin'}:{os.environ.get('PATH', '')}")
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False, cwd=self.tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        recap = re.search(r"^localhost\s+:\s+ok=(\d+)\s+changed=(\d+)", proc.stdout, flags=re.M)
        assert recap, proc.stdout[-3000:]
        return {"ok": int(recap.group(1)), "changed": int(recap.group(2)), "output": proc.stdout}

    def installed(self) -> bool:
        return (self.units / "trainops-boot.service").exists()


@pytest.fixture()
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def test_check_mode_writes_nothing_then_a_run_installs_and_enables_the_unit_once(host: Host) -> None:
    checked = host.run(check=True)
    assert checked["changed"] >= 1 and not any(host.units.iterdir()), "check mode writes nothing"
    assert not host.calls.exists()
    first = host.run()
    assert first["changed"] == 3, first["output"][-2000:]  # the unit, the wants folder, the link
    unit = host.units / "trainops-boot.service"
    assert unit.read_bytes() == UNIT.read_bytes() and oct(unit.stat().st_mode & 0o7777) == "0o644"
    link = host.units / "multi-user.target.wants/trainops-boot.service"
    assert os.readlink(link) == str(unit), "what systemctl enable links for WantedBy=multi-user.target"
    assert host.calls.read_text(encoding="utf-8").split() == ["daemon-reload"], "systemd reloads its units once"
    again = host.run()
    assert again["changed"] == 0, again["output"][-2000:]
    assert host.calls.read_text(encoding="utf-8").split() == ["daemon-reload"]
    assert host.run(check=True)["changed"] == 0


def test_a_changed_unit_is_installed_again(host: Host) -> None:
    host.run()
    (host.units / "trainops-boot.service").write_text("[Unit]\n", encoding="utf-8")
    assert host.run()["changed"] == 1
    assert (host.units / "trainops-boot.service").read_bytes() == UNIT.read_bytes()


def test_without_systemd_nothing_is_installed_and_the_role_says_so(host: Host) -> None:
    result = host.run(init="openrc")
    assert result["changed"] == 0 and not host.installed()
    assert "does not run systemd (openrc): the boot unit is not installed" in result["output"]
