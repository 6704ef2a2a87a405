# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The CI pipeline examples in docs/ci/ are valid and use what the collection provides.

What they run is exercised for real by tests/integration/test_release.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import typing as t

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "ci"
EXAMPLES = {
    "github-actions.yml": "vendor.github-workflows",
    "gitlab-ci.yml": "vendor.gitlab-ci",
}
CALLBACK = "trainops.pct_launch.junit_launch"


def _load(name: str) -> dict[str, t.Any]:
    data = yaml.safe_load((DOCS / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _commands(name: str) -> list[str]:
    """Every shell command line of the pipeline (run steps, before_script and script entries)."""
    data = _load(name)
    lines: list[str] = []
    if name == "github-actions.yml":
        for job in data["jobs"].values():
            lines += [step["run"] for step in job["steps"] if "run" in step]
    else:
        for job in (value for value in data.values() if isinstance(value, dict) and "script" in value):
            lines += job.get("before_script", []) + job["script"]
    return [" ".join(line.split()) for line in lines]


def _job_variables(name: str) -> dict[str, str]:
    data = _load(name)
    if name == "github-actions.yml":
        (job,) = data["jobs"].values()
        return {key: str(value) for key, value in job["env"].items()}
    (job,) = (value for value in data.values() if isinstance(value, dict) and "script" in value)
    return {key: str(value) for key, value in job["variables"].items()}


@pytest.mark.parametrize(("name", "schema"), sorted(EXAMPLES.items()))
def test_schema(name: str, schema: str) -> None:
    pytest.importorskip("check_jsonschema", reason="check-jsonschema is in requirements-dev.txt")
    result = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(DOCS / name)],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_uses_the_collections_callback(name: str) -> None:
    from ansible_collections.trainops.pct_launch.plugins.callback import junit_launch  # pylint: disable=import-outside-toplevel

    doc = yaml.safe_load(junit_launch.DOCUMENTATION)
    env_names = {entry["name"] for entry in doc["options"]["output_dir"]["env"]}
    variables = _job_variables(name)
    assert variables["ANSIBLE_CALLBACKS_ENABLED"] == CALLBACK
    assert any(key in variables for key in env_names), f"no output_dir variable of {CALLBACK} ({sorted(env_names)})"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_commands(name: str) -> None:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))
    commands = _commands(name)
    installs = [line for line in commands if line.startswith("ansible-galaxy collection install")]
    assert installs and all("--offline" in line for line in installs), installs
    assert any(f"{galaxy['namespace']}-{galaxy['name']}-" in line for line in installs)
    assert any(re.search(r'pip install "ansible-core>=2\.17', line) for line in commands)
    runs = [line for line in commands if line.startswith("ansible-playbook")]
    assert any(" trainops.pct_launch.launch " in f"{line} " for line in runs), runs
    for line in runs:
        # the exit status of ansible-playbook is the step's: no pipe, no `|| true`
        assert "|" not in line, line
        playbook = re.search(r"trainops\.pct_launch\.(\w+)", line)
        assert playbook and (ROOT / "playbooks" / f"{playbook.group(1)}.yml").is_file(), line


def test_readme_inventory_parses(tmp_path: pathlib.Path) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (DOCS / "README.md").read_text(encoding="utf-8"), flags=re.S)
    inventory = next(block for block in blocks if "pct_node:" in block)
    job = next(block for block in blocks if "job_command:" in block)
    assert {"job_hosts", "job_session_name", "job_command", "job_log_path", "job_wait_pattern"} <= set(yaml.safe_load(job))
    (tmp_path / "inventory.yml").write_text(inventory, encoding="utf-8")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    result = subprocess.run(["ansible-inventory", "-i", str(tmp_path / "inventory.yml"), "--list"], env=env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "[WARNING]" not in result.stderr, result.stderr
    listing = json.loads(result.stdout)
    assert listing["training"]["hosts"] == ["ct200"]
    assert listing["_meta"]["hostvars"]["ct200"]["pct_node"] == "pve1"
    assert "pve1" in listing["proxmox"]["hosts"]
