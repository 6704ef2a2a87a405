# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``trainops.pct_launch.prepare_info``: what only the controller knows, sent to the module.

The requirements file is read on the controller (as the venv role copies it from there), and each job file's
source is found like ``ansible.builtin.copy`` finds it (the play's ``files/`` folders, then the path as given)
and its SHA-1 checksum computed, the one ``copy`` compares. A source that cannot be found gets no checksum:
the module then reports the file as one to copy, and ``copy`` reports why it cannot.

The boot unit's checksum is that of the collection's own file (``roles/boot_recorder/files/trainops-boot.service``,
which the role ``trainops.pct_launch.boot_recorder`` installs), found beside this plugin.

The module then runs as ansible.builtin's ``normal`` action runs one (one ``pct exec`` when pipelined).
"""

from __future__ import annotations

import os
import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.utils.hashing import checksum
from ansible.utils.vars import merge_hash

MODULE_NAME = "trainops.pct_launch.prepare_info"
# the collection's root is two folders above plugins/action/
BOOT_UNIT_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                              "roles", "boot_recorder", "files", "trainops-boot.service")


class ActionModule(ActionBase):
    """Read the controller's files, then run the module."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """The module's result, its options completed on the controller."""
        result = super().run(tmp, task_vars)
        del tmp
        # as ansible.builtin's normal action runs a module: an async task through async_wrapper, whose files stay for it
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        module_args = self.module_args(dict(self._task.args))
        result = merge_hash(result, self._execute_module(module_name=MODULE_NAME, module_args=module_args,
                                                         task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(None)  # the temporary folder of the connection's shell, as the normal action removes it
        return result

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
        args["boot_unit_checksum"] = checksum(BOOT_UNIT_FILE) if os.path.isfile(BOOT_UNIT_FILE) else None
        return args

    def _with_checksum(self, item: t.Any) -> t.Any:
        if not isinstance(item, dict) or not item.get("src"):
            return item
        try:
            return dict(item, checksum=checksum(self._find_needle("files", str(item["src"]))))
        except AnsibleError:
            return dict(item, checksum=None)
