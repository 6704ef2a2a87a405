# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Verify trainops.pct_launch.tmux inside the container, through the pct connection.

testinfra's ansible backend runs every command with ``ansible -m shell`` against
molecule's inventory (``force_ansible``), so it takes the same path as the role:
the collection's connection plugin and ``pct exec``.
"""
from __future__ import annotations

import os
import re

import testinfra.utils.ansible_runner

_INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = [
    f"ansible://{name}?ansible_inventory={_INVENTORY}&force_ansible=true"
    for name in testinfra.utils.ansible_runner.AnsibleRunner(_INVENTORY).get_hosts("all")
]

# tmux that Debian ships per release.
EXPECTED_TMUX = {"bullseye": "3.1c", "bookworm": "3.3a", "trixie": "3.5a"}
RELEASE = os.environ.get("MOLECULE_PCT_RELEASE", "bookworm")


def test_tmux_package_is_installed(host):
    assert host.package("tmux").is_installed


def test_tmux_prints_its_version(host):
    out = host.check_output("tmux -V")
    assert re.fullmatch(r"tmux (next-)?\d+\.\d+[a-z]?", out), out
    if RELEASE in EXPECTED_TMUX:
        assert out == f"tmux {EXPECTED_TMUX[RELEASE]}"


def test_tmux_runs_a_detached_session(host):
    session = "molecule-verify"
    socket = "/tmp/molecule-verify.tmux"
    tmux = f"tmux -S {socket}"
    host.run(f"{tmux} kill-server")
    try:
        host.check_output(f"{tmux} new-session -d -s {session} 'sleep 300'")
        # The session outlives the pct exec that started it.
        assert host.run(f"{tmux} has-session -t ={session}").rc == 0
        assert host.check_output(f"{tmux} list-sessions -F '#{{session_name}}'") == session
        assert host.run(f"{tmux} has-session -t ={session}x").rc == 1
        host.check_output(f"{tmux} kill-session -t ={session}")
        assert host.run(f"{tmux} has-session -t ={session}").rc != 0
    finally:
        host.run(f"{tmux} kill-server")
        host.run(f"rm -f {socket}")
