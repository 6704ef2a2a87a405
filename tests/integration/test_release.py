# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The built tarball, installed as a user installs it, runs the example launch.

1. `ansible-galaxy collection build` with the development venv's ansible-core
   (how a release is built);
2. installed offline into a temporary collections path with the oldest
   supported ansible-core, from .venv-2.17 (`tools/bootstrap.sh --compat`, which
   holds nothing but ansible-core and pytest: a user's fresh venv), and verified
   against its checksums;
3. with ANSIBLE_COLLECTIONS_PATH naming only that path, and the development
   venv off PATH: `ansible-playbook trainops.pct_launch.launch` with the
   installed collection's examples/standin/job.yml, whose job files must come
   from the installed collection, on a fresh container of its own, with the
   collection's JUnit callback as in docs/ci/; then status (`step` lines),
   stop, and a job that dies at once (exit status 2 and a JUnit failure that says why).

Environment: TRAINOPS_RELEASE_VMID (default 521).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET

import pytest
import yaml

from tests.compat.launch_helpers import ROOT, STEP_LINE, ansible_core_version, ansible_env, owned_container, pct, run, write_inventory

pytestmark = pytest.mark.integration

VMID = int(os.environ.get("TRAINOPS_RELEASE_VMID", "521"))
HOSTNAME = "trainops-release"
HOST = f"ct{VMID}"
USER_VENV = ROOT / ".venv-2.17"


@pytest.fixture(scope="module", name="user_bin")
def fixture_user_bin() -> pathlib.Path:
    """The bin folder of the oldest-ansible-core venv, made (or found up to date) by tools/bootstrap.sh --compat."""
    subprocess.run(["bash", str(ROOT / "tools" / "bootstrap.sh"), "--compat"], stdin=subprocess.DEVNULL, check=True,
                   timeout=900)
    return USER_VENV / "bin"


@pytest.fixture(scope="module", name="installed")
def fixture_installed(tmp_path_factory: pytest.TempPathFactory, user_bin: pathlib.Path) -> pathlib.Path:
    """The collection built from the checkout and installed offline into a temporary collections path."""
    tmp_path = tmp_path_factory.mktemp("release")
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))
    env = ansible_env(
        ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        # a closed port: any attempt to reach a Galaxy server fails instead of using the network
        ANSIBLE_GALAXY_SERVER="http://127.0.0.1:9/",
        ANSIBLE_GALAXY_SERVER_TIMEOUT="5",
        ANSIBLE_GALAXY_CACHE_DIR=str(tmp_path / "galaxy-cache"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
    )
    dist = tmp_path / "dist"
    run([str(pathlib.Path(sys.executable).parent / "ansible-galaxy"), "collection", "build", str(ROOT), "--output-path", str(dist)],
        env=env, cwd=tmp_path)
    tarball = dist / f"trainops-pct_launch-{galaxy['version']}.tar.gz"
    assert tarball.is_file()
    run([str(user_bin / "ansible-galaxy"), "collection", "install", "--offline", str(tarball), "-p", str(tmp_path / "collections")],
        env=env, cwd=tmp_path)
    run([str(user_bin / "ansible-galaxy"), "collection", "verify", "--offline", "trainops.pct_launch"], env=env, cwd=tmp_path)
    installed = tmp_path / "collections" / "ansible_collections" / "trainops" / "pct_launch"
    assert installed.is_dir() and not installed.is_symlink()
    assert not any(path.is_symlink() for path in installed.rglob("*")), "the installed collection links to somewhere"
    return installed


def _user_env(installed: pathlib.Path, user_bin: pathlib.Path, tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    """A user's shell: the old ansible-core first on PATH, the development venv not at all, only the installed collection."""
    dev_bin = str(pathlib.Path(os.environ.get("TRAINOPS_VENV", ROOT / ".venv")) / "bin")
    path = [str(user_bin)] + [entry for entry in os.environ.get("PATH", "").split(os.pathsep)
                              if entry and entry not in (dev_bin, str(ROOT / ".venv" / "bin"), str(user_bin))]
    env = ansible_env(
        PATH=os.pathsep.join(path),
        VIRTUAL_ENV=str(user_bin.parent),
        ANSIBLE_COLLECTIONS_PATH=str(installed.parents[2]),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        **extra,
    )
    for key in ("PYTHONPATH", "TRAINOPS_COLLECTIONS"):
        env.pop(key, None)
    return env


def test_installed_collection_is_the_only_one(installed: pathlib.Path, user_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    env = _user_env(installed, user_bin, tmp_path)
    listing = json.loads(run(["ansible-galaxy", "collection", "list", "--format", "json"], env=env, cwd=tmp_path).stdout)
    paths = [path for path, collections in listing.items() if "trainops.pct_launch" in collections]
    assert paths == [str(installed.parents[1])], listing
    # what the example job needs ships in the tarball
    for relative in ("examples/standin/job.yml", "examples/train/train.py", "playbooks/launch.yml", "plugins/callback/junit_launch.py"):
        assert (installed / relative).is_file(), f"{relative} is not in the installed collection"


def test_example_launch_from_the_installed_collection(installed: pathlib.Path, user_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    version = ansible_core_version(user_bin)
    print(f"user's ansible-core: {version}")
    assert version.startswith("2.17."), version

    # Mark the installed train.py: the copy in the container must be this one, not the checkout's.
    marker = f"# installed copy {uuid.uuid4()}"
    train = installed / "examples" / "train" / "train.py"
    train.write_text(train.read_text(encoding="utf-8") + f"\n{marker}\n", encoding="utf-8")

    inventory = write_inventory(tmp_path / "inventory.yml", VMID, HOST)
    job = installed / "examples" / "standin" / "job.yml"
    junit = tmp_path / "junit"
    env = _user_env(installed, user_bin, tmp_path, ANSIBLE_CALLBACKS_ENABLED="trainops.pct_launch.junit_launch",
                    JUNIT_OUTPUT_DIR=str(junit))
    work = tmp_path / "work"  # not the checkout: no ansible.cfg, no collections/ beside it
    work.mkdir()

    def playbook(name: str, *extra: str, expect_rc: int = 0) -> str:
        argv = ["ansible-playbook", "-i", str(inventory), f"trainops.pct_launch.{name}", "-e", f"@{job}", *extra]
        return run(argv, env=env, cwd=work, expect_rc=expect_rc).stdout

    with owned_container(VMID, HOSTNAME):
        launched = playbook("launch")
        assert f"train-example in CT {VMID}: started" in launched
        assert str(ROOT) not in launched

        copied = pct("exec", VMID, "--", "tail", "-n", "1", "/workspace/train.py")
        assert copied.stdout.strip() == marker, "the job's train.py did not come from the installed collection"

        reports = sorted(junit.glob("launch-*.xml"))
        assert len(reports) == 1, reports
        report = ET.parse(reports[0]).getroot()
        assert report.get("failures") == "0" and report.get("errors") == "0", reports[0].read_text(encoding="utf-8")
        names = [case.get("name") for case in report.iter("testcase")]
        assert f"[{HOST}] Start the job in its detached tmux session" in names
        assert f"[{HOST}] Wait for the job's log to prove it started" not in names, "the launch task proves the start itself"

        status = playbook("status")
        assert f"CT {VMID} session train-example: running" in status
        assert STEP_LINE.search(status), "status shows no `step N loss X` line"

        stopped = playbook("stop")
        assert "changed=1" in stopped

        # A job that dies at once fails the run (the pipeline), and the report says why.
        broken = {"job_session_name": "train-broken", "job_log_path": "/workspace/broken.log",
                  "job_command": "python3 -c 'import no_such_module_xyz'", "job_wait_timeout": 60}
        failed = playbook("launch", "-e", json.dumps(broken), expect_rc=2)
        assert re.search(rf"{HOST} +: .* failed=[1-9]", failed), "the recap shows no failure"
        reports = sorted(set(junit.glob("launch-*.xml")) - set(reports))
        assert len(reports) == 1, reports
        failures = [case.findtext("failure") or "" for case in ET.parse(reports[0]).getroot().iter("testcase")
                    if case.find("failure") is not None]
        assert failures, "the JUnit report of a failed launch has no failure"
        assert any("no_such_module_xyz" in text for text in failures), failures
