# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.prepare_info``: what only the controller knows, sent to the module.

The requirements file is read on the controller (as the venv role copies it from there), and each job file's
source is found like ``ansible.builtin.copy`` finds it (the play's ``files/`` folders, then the path as given)
and its SHA-1 checksum computed, the one ``copy`` compares. A source that cannot be found gets no checksum:
the module then reports the file as one to copy, and ``copy`` reports why it cannot.

The check runs as a direct run where it can (``plugin_utils/_direct_run.py``): the same one ``pct exec``, without
the module runtime's import on the target; otherwise as the module.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.utils.hashing import checksum

from ansible_collections.trainops.pct_launch.plugins.module_utils._prepare_check import ARGUMENT_SPEC
from ansible_collections.trainops.pct_launch.plugins.plugin_utils._direct_run import DirectRunAction


class ActionModule(DirectRunAction):
    """Read the controller's files, then run the module."""

    MODULE_NAME = "trainops.pct_launch.prepare_info"
    ENTRY = "_prepare_check"
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def module_args(self, args: dict[str, t.Any]) -> dict[str, t.Any]:
        """The task's options, with the requirements file's text and each job file's checksum, read on the controller."""
        source = args.get("venv_requirements_file")
        if source:
            try:
                with open(self._find_needle("files", source), "rb") as handle:
                    args["venv_requirements_text"] = to_text(handle.read(), errors="surrogate_or_replace")
            except (AnsibleError, OSError):
                args["venv_requirements_text"] = "-r cannot-read-on-the-controller"  # not judged: the venv role says why
        args["files"] = [self._with_checksum(item) for item in args.get("files") or []]
        return args

    def _with_checksum(self, item: t.Any) -> t.Any:
        if not isinstance(item, dict) or not item.get("src"):
            return item
        try:
            return dict(item, checksum=checksum(self._find_needle("files", str(item["src"]))))
        except AnsibleError:
            return dict(item, checksum=None)
