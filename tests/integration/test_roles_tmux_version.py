# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The tmux role's version check, against fake ``tmux -V`` outputs on localhost.

One ansible-playbook run covers every case: each case is an inventory host
(local connection) with its own fake tmux on its PATH, and the play records
per host whether the role passed, the ``tmux_version`` fact, or the failure
message. Containers are not needed; molecule/tmux covers the real install.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

# name: (what `tmux -V` prints, or None for no tmux at all; tmux_min_version; expected)
# expected: ("ok", tmux_version) or ("fail", text the message must contain)
CASES: dict[str, tuple[str | None, object, tuple[str, str]]] = {
    "debian12": ("tmux 3.3a", "3.0", ("ok", "3.3a")),
    "plain": ("tmux 3.0", "3.0", ("ok", "3.0")),
    "letter-after-plain": ("tmux 3.0a", "3.0", ("ok", "3.0a")),
    "ubuntu2004": ("tmux 3.0a", "3.0", ("ok", "3.0a")),
    "next": ("tmux next-3.4", "3.0", ("ok", "3.4")),
    "two-digit-minor": ("tmux 3.10", "3.9", ("ok", "3.10")),
    "same-letter": ("tmux 3.1c", "3.1c", ("ok", "3.1c")),
    "min-as-yaml-float": ("tmux 3.2a", 3.0, ("ok", "3.2a")),
    "rocky8": ("tmux 2.7", "3.0", ("fail", "tmux 2.7 on rocky8 is too old")),
    "letter-below": ("tmux 2.9a", "3.0", ("fail", "needs tmux 3.0 or newer")),
    "earlier-letter": ("tmux 3.1b", "3.1c", ("fail", "tmux 3.1b on earlier-letter is too old")),
    "plain-below-letter": ("tmux 3.0", "3.0a", ("fail", "is too old")),
    "master": ("tmux master", "3.0", ("fail", "printed 'tmux master', which holds no version number")),
    "missing": (None, "3.0", ("fail", "tmux is missing on missing or cannot be run")),
    "bad-minimum": ("tmux 3.3a", "3", ("fail", "tmux_min_version is '3' for bad-minimum")),
}

PLAYBOOK = textwrap.dedent("""\
    - name: Run the tmux role's version check
      hosts: all
      gather_facts: false
      environment:
        PATH: "{{ case_bin }}"
      tasks:
        - name: Check tmux without installing it
          block:
            - name: Run the role
              ansible.builtin.include_role:
                name: trainops.pct_launch.tmux
              vars:
                tmux_install: false
            - name: Record the success
              ansible.builtin.copy:
                content: "{{ {'ok': true, 'version': tmux_version} | to_json }}"
                dest: "{{ case_result }}"
                mode: "0644"
          rescue:
            - name: Record the failure
              ansible.builtin.copy:
                content: "{{ {'ok': false, 'msg': ansible_failed_result.msg} | to_json }}"
                dest: "{{ case_result }}"
                mode: "0644"
    """)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """Run the playbook once for all cases and return each host's recorded outcome."""
    work = tmp_path_factory.mktemp("tmux-version")
    hosts = {}
    for name, (output, minimum, _expected) in CASES.items():
        case_bin = work / name / "bin"
        case_bin.mkdir(parents=True)
        if output is not None:
            fake = case_bin / "tmux"
            fake.write_text(f"#!/bin/sh\necho '{output}'\n", encoding="utf-8")
            fake.chmod(0o755)
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "case_bin": str(case_bin),
            "case_result": str(work / name / "result.json"),
            "tmux_min_version": minimum,
        }
    inventory = work / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}), encoding="utf-8")
    playbook = work / "playbook.yml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")
    env = dict(os.environ, ANSIBLE_FORKS="8", ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    run = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory), str(playbook)],
        capture_output=True, text=True, env=env, timeout=300, check=False, stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return {
        name: json.loads((work / name / "result.json").read_text(encoding="utf-8"))
        for name in CASES
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_tmux_version_check(outcomes: dict[str, dict[str, object]], case: str) -> None:
    verdict, detail = CASES[case][2]
    outcome = outcomes[case]
    if verdict == "ok":
        assert outcome == {"ok": True, "version": detail}
    else:
        assert outcome["ok"] is False
        assert detail in str(outcome["msg"]), outcome["msg"]
