# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Run a module's main() in the test process, as Ansible runs it on the node."""

from __future__ import annotations

import contextlib
import io
import json
import os
import typing as t
from unittest import mock

from ansible.module_utils.testing import patch_module_args

# ansible-core 2.19 checks module arguments for strict UTF-8 when ansible.constants is imported (the
# controller's MODULE_STRICT_UTF8_RESPONSE). On a node no controller is loaded, so the module takes
# surrogate-escaped bytes in its arguments; the test process imports the controller for other tests,
# so the node's behaviour is restored with the setting's documented variable.
NODE_ENVIRONMENT = {"ANSIBLE_MODULE_STRICT_UTF8_RESPONSE": "false"}


def run_main(module: t.Any, args: dict[str, t.Any]) -> dict[str, t.Any]:
    """Run ``module.main()`` with ``args`` in this process; return the result it printed."""
    buffer = io.StringIO()
    with mock.patch.dict(os.environ, NODE_ENVIRONMENT), patch_module_args(args), contextlib.redirect_stdout(buffer):
        with contextlib.suppress(SystemExit):
            module.main()
    return json.loads(buffer.getvalue())
