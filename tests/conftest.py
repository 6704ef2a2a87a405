# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Shared pytest set-up for the collection's tests.

* Makes ``ansible_collections.trainops.pct_launch`` importable from this
  checkout (the same way ansible-test does for unit tests), and exports
  ``ANSIBLE_COLLECTIONS_PATH`` so that ``ansible-playbook`` and friends started
  by integration tests find the collection without Ansible Galaxy.
* Registers Hypothesis profiles: ``ci`` (used when ``CI`` is set: no deadline,
  since a loaded 2-core machine makes timings meaningless) and ``dev``.
  ``HYPOTHESIS_PROFILE`` picks one explicitly.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile

import pytest

COLLECTION_ROOT = pathlib.Path(__file__).resolve().parent.parent
NAMESPACE = "trainops"
NAME = "pct_launch"


def _points_here(collections_root: pathlib.Path) -> bool:
    """Whether ``collections_root`` holds this checkout as trainops.pct_launch."""
    candidate = collections_root / "ansible_collections" / NAMESPACE / NAME
    try:
        return candidate.resolve() == COLLECTION_ROOT
    except OSError:
        return False


def collections_root() -> pathlib.Path:
    """Return a collections path whose trainops.pct_launch is this checkout.

    The first entry of ``ANSIBLE_COLLECTIONS_PATH`` (set by tools/env.sh) is
    used when it already points at this checkout; otherwise a private one is
    made in the temporary directory, keyed by the checkout's path.
    """
    for entry in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep):
        if entry and _points_here(pathlib.Path(entry)):
            return pathlib.Path(entry)
    key = hashlib.sha256(str(COLLECTION_ROOT).encode()).hexdigest()[:12]
    root = pathlib.Path(tempfile.gettempdir()) / f"trainops-collections-{key}"
    link = root / "ansible_collections" / NAMESPACE / NAME
    if not _points_here(root):
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp_link = link.with_name(f".{NAME}.{os.getpid()}")
        tmp_link.symlink_to(COLLECTION_ROOT)
        tmp_link.replace(link)
    return root


def _install_collection_finder(root: pathlib.Path) -> None:
    """Let Python import ``ansible_collections.*`` from ``root``."""
    # pylint: disable-next=import-outside-toplevel
    from ansible.utils.collection_loader import AnsibleCollectionConfig
    # pylint: disable-next=import-outside-toplevel
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    if AnsibleCollectionConfig.collection_finder is not None:
        return
    # pylint: disable-next=protected-access
    _AnsibleCollectionFinder(paths=[str(root)], scan_sys_paths=False)._install()


def _register_hypothesis_profiles() -> None:
    try:
        # pylint: disable-next=import-outside-toplevel
        from hypothesis import HealthCheck, settings
    except ImportError:  # pragma: no cover - hypothesis is in requirements-dev.txt
        return
    settings.register_profile(
        "ci",
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("dev", deadline=None)
    default = "ci" if os.environ.get("CI") else "dev"
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))


_COLLECTIONS_ROOT = collections_root()
os.environ["ANSIBLE_COLLECTIONS_PATH"] = str(_COLLECTIONS_ROOT)
os.environ.setdefault("ANSIBLE_COLLECTIONS_SCAN_SYS_PATH", "false")
_install_collection_finder(_COLLECTIONS_ROOT)
_register_hypothesis_profiles()


@pytest.fixture(scope="session")
def collection_root() -> pathlib.Path:
    """The checkout of the collection under test."""
    return COLLECTION_ROOT


@pytest.fixture(scope="session")
def ansible_collections_path() -> pathlib.Path:
    """A collections path (for ANSIBLE_COLLECTIONS_PATH) that holds this checkout."""
    return _COLLECTIONS_ROOT
