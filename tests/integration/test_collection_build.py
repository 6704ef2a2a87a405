# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The collection builds with ansible-galaxy and its tarball installs offline."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tarfile
import typing as t

import pytest
import yaml

pytestmark = pytest.mark.integration

# Paths (relative to the collection root) that must never be shipped.
FORBIDDEN_PREFIXES = (
    ".venv",
    ".ci/",
    ".git/",
    ".cache/",
    ".ansible/",
    ".build/",
    ".pytest_cache",
    ".hypothesis",
    "tests/output/",
)
FORBIDDEN_PARTS = ("__pycache__", ".pytest_cache", ".hypothesis", ".molecule")


def _galaxy_env(tmp_path: pathlib.Path) -> dict[str, str]:
    """Environment for ansible-galaxy that cannot reach any Galaxy server.

    The server is a closed port on loopback: if the command tried to download
    anything it would fail instead of quietly using the network.  The
    collections path is empty, so the checkout (which tools/env.sh puts on
    ANSIBLE_COLLECTIONS_PATH) does not count as already installed.
    """
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        ANSIBLE_GALAXY_SERVER="http://127.0.0.1:9/",
        ANSIBLE_GALAXY_SERVER_TIMEOUT="5",
        ANSIBLE_GALAXY_CACHE_DIR=str(tmp_path / "galaxy-cache"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
    )
    return env


def _run(argv: list[str], env: dict[str, str], cwd: pathlib.Path | None = None) -> str:
    result = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (
        f"{' '.join(argv)} exited {result.returncode}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def galaxy_meta(collection_root: pathlib.Path) -> dict[str, t.Any]:
    """The parsed galaxy.yml."""
    data = yaml.safe_load((collection_root / "galaxy.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def built_tarball(
    collection_root: pathlib.Path,
    galaxy_meta: dict[str, t.Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> pathlib.Path:
    """Build the collection once for this module and return the tarball."""
    if shutil.which("ansible-galaxy") is None:
        pytest.fail("ansible-galaxy is not on PATH: source tools/env.sh")
    tmp_path = tmp_path_factory.mktemp("build")
    out = tmp_path / "dist"
    _run(
        ["ansible-galaxy", "collection", "build", str(collection_root), "--output-path", str(out)],
        env=_galaxy_env(tmp_path),
    )
    expected = out / f"{galaxy_meta['namespace']}-{galaxy_meta['name']}-{galaxy_meta['version']}.tar.gz"
    assert expected.is_file(), sorted(p.name for p in out.iterdir())
    return expected


def test_galaxy_metadata(galaxy_meta: dict[str, t.Any], collection_root: pathlib.Path) -> None:
    assert galaxy_meta["namespace"] == "trainops"
    assert galaxy_meta["name"] == "pct_launch"
    assert galaxy_meta["license"] == ["GPL-3.0-or-later"]
    # Galaxy is unreachable wherever this collection is built and tested.
    assert not galaxy_meta.get("dependencies")
    runtime = yaml.safe_load((collection_root / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    assert runtime["requires_ansible"] == ">=2.17.0"


def test_tarball_contents(built_tarball: pathlib.Path) -> None:
    with tarfile.open(built_tarball) as tar:
        names = tar.getnames()
        manifest = json.load(t.cast(t.IO[bytes], tar.extractfile("MANIFEST.json")))
        files = json.load(t.cast(t.IO[bytes], tar.extractfile("FILES.json")))

    info = manifest["collection_info"]
    assert (info["namespace"], info["name"]) == ("trainops", "pct_launch")
    assert info["license"] == ["GPL-3.0-or-later"]
    assert info["dependencies"] == {}

    for required in ("meta/runtime.yml", "LICENSE", "changelogs/changelog.yaml"):
        assert required in names, f"{required} missing from {built_tarball.name}"

    shipped = [entry["name"] for entry in files["files"]]
    offending = [
        name
        for name in shipped
        if name.startswith(FORBIDDEN_PREFIXES)
        or any(part in FORBIDDEN_PARTS for part in name.split("/"))
        or name.endswith((".pyc", ".tar.gz"))
    ]
    assert not offending, f"build_ignore misses: {offending}"


def test_tarball_installs_offline(
    built_tarball: pathlib.Path,
    galaxy_meta: dict[str, t.Any],
    tmp_path: pathlib.Path,
) -> None:
    env = _galaxy_env(tmp_path)
    dest = tmp_path / "collections"
    _run(["ansible-galaxy", "collection", "install", str(built_tarball), "-p", str(dest)], env=env)

    installed = dest / "ansible_collections" / "trainops" / "pct_launch"
    manifest = json.loads((installed / "MANIFEST.json").read_text(encoding="utf-8"))
    assert manifest["collection_info"]["version"] == galaxy_meta["version"]

    # Every installed file matches the checksums recorded at build time.
    _run(["ansible-galaxy", "collection", "verify", "--offline", "trainops.pct_launch"], env=env)

    listing = _run(["ansible-galaxy", "collection", "list", "--format", "json", "-p", str(dest)], env=env)
    found = {
        name: meta["version"]
        for path_entries in json.loads(listing).values()
        for name, meta in path_entries.items()
    }
    assert found.get("trainops.pct_launch") == galaxy_meta["version"]
