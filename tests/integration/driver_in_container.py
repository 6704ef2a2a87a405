# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Run tmux_session's launch code inside a stand-in container without Ansible, for values Ansible cannot carry.

Values with bytes that are not UTF-8 cannot pass through AnsibleModule (its JSON is UTF-8), so
test_hostile_input.py and test_secrets.py launch those through files/module_utils_driver.py, run in
the container by its python3 next to a copy of the collection's ``plugins/module_utils``: what
tmux_session's main() runs after AnsibleModule (spec_from_params, launch, result).
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import typing as t
from pathlib import Path

from ansible_collections.trainops.pct_launch.plugins.modules import tmux_session

from .conftest import REPO, StandinNode

DRIVER = Path(__file__).resolve().parent / "files" / "module_utils_driver.py"
DRIVER_DIR = "/opt/trainops-test-driver"
PACKAGE = "ansible_collections/trainops/pct_launch/plugins/module_utils"


def install_driver(node: StandinNode, vmid: int) -> None:
    """Copy the collection's plugins/module_utils (as the package PACKAGE) and the driver to DRIVER_DIR in the container."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted((REPO / "plugins" / "module_utils").glob("*.py")):
            tar.add(str(path), arcname=f"{PACKAGE}/{path.name}")
        tar.add(str(DRIVER), arcname=DRIVER.name)
    node.sh(vmid, 'rm -rf "$1" && mkdir -p "$1" && tar -x -o -C "$1"', DRIVER_DIR, input=buffer.getvalue())


def drive(node: StandinNode, vmid: int, args: dict[str, t.Any], pct: str | None = None) -> dict[str, t.Any]:
    """tmux_session with these options through the driver in the container: the values' bytes exactly, no Ansible.

    The parameters are the module's, defaults filled in as AnsibleModule would; non-UTF-8 bytes travel
    as surrogate escapes of ASCII JSON, both ways, on standard input and output of one ``pct exec``
    (of ``pct``, a program given, else the stand-in's).
    """
    params = dict({key: spec.get("default") for key, spec in tmux_session.ARGUMENT_SPEC.items()}, **args)
    data = json.dumps(params, ensure_ascii=True).encode("ascii")
    argv = ["exec", str(vmid), "--", "python3", f"{DRIVER_DIR}/{DRIVER.name}"]
    if pct is None:
        result = node.pct(*argv, input=data, timeout=120)
    else:
        result = subprocess.run([pct, *argv], input=data, capture_output=True, env=node.env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
