# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Verify trainops.pct_launch.venv inside the container, through the pct connection.

testinfra's ansible backend runs every command with ``ansible -m shell`` against
molecule's inventory (``force_ansible``), so it takes the same path as the role:
the collection's connection plugin and ``pct exec``. Each command costs an
Ansible run, so the checks of one venv share a few commands.
"""
from __future__ import annotations

import json
import os
import shlex

import pytest
import testinfra.utils.ansible_runner

_INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = [
    f"ansible://{name}?ansible_inventory={_INVENTORY}&force_ansible=true"
    for name in testinfra.utils.ansible_runner.AnsibleRunner(_INVENTORY).get_hosts("all")
]

# What converge.yml asks for: venv, module installed into it, owner, system site-packages.
VENVS = [
    ("/opt/trainops/venv-root", "packaging", "root", False),
    ("/srv/trainee/venv", "six", "trainee", True),
    ("/opt/trainops/venv-remote", "six", "root", False),
]

PROBE = """
import json, sys
import {module}
print(json.dumps({{
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "module_file": {module}.__file__,
    "sees_system": any(p.startswith("/usr/lib/python3/dist-packages") for p in sys.path),
}}))
"""


def test_os_packages_are_installed(host):
    for package in ("python3", "python3-venv", "python3-packaging"):
        assert host.package(package).is_installed, package


@pytest.mark.parametrize(("venv", "module", "owner", "site_packages"), VENVS)
def test_venv_python_runs_and_imports_the_requirement(host, venv, module, owner, site_packages):
    del owner
    probe = json.loads(host.check_output(f"{venv}/bin/python -c {shlex.quote(PROBE.format(module=module))}"))
    assert probe["prefix"] == venv
    assert probe["base_prefix"] == "/usr"
    # Imported from the venv's own site-packages, not from the system.
    assert probe["module_file"].startswith(f"{venv}/lib/"), probe
    assert probe["sees_system"] is site_packages
    assert host.file(f"{venv}/pyvenv.cfg").contains(
        f"^include-system-site-packages = {str(site_packages).lower()}$")


@pytest.mark.parametrize(("venv", "module", "owner", "site_packages"), VENVS)
def test_venv_belongs_to_its_owner(host, venv, module, owner, site_packages):
    del module, site_packages
    assert host.file(venv).user == owner
    assert host.file(venv).mode == 0o755
    # Everything inside was made by the owner: python and pip ran as that user.
    assert host.check_output(f"find {venv} ! -user {owner} -print") == ""


def test_requirements_file_from_the_controller_was_copied(host):
    copied = host.file("/srv/trainee/venv/requirements.txt")
    assert copied.is_file
    assert copied.user == "trainee"
    assert copied.contains("^six$")


def test_pip_was_upgraded_in_the_user_venv(host):
    out = host.run("/srv/trainee/venv/bin/python -m pip list --outdated --format=json")
    assert out.rc == 0, out.stderr
    assert "pip" not in [item["name"] for item in json.loads(out.stdout)], out.stdout
