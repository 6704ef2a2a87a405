# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""pytest plugin: run the collection's unit tests on older ansible-core releases.

The compat stage of tests/run.sh loads it (``-p tests.compat.ansible_polyfill``)
when it runs tests/unit with the oldest supported ansible-core.  The unit tests
are written against the newest ansible-core; what they use from it that older
releases lack is provided here, for the tests only (never for the plugins,
which must work on every supported release as they are):

* ``ansible.module_utils.testing.patch_module_args`` (new in ansible-core 2.19):
  before 2.19 a module reads its arguments from
  ``ansible.module_utils.basic._ANSIBLE_ARGS``, as JSON bytes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import types
import typing as t
from unittest import mock


@contextlib.contextmanager
def patch_module_args(args: dict[str, t.Any] | None = None) -> t.Iterator[None]:
    """Expose ``args`` to the AnsibleModule instances created in this context (ansible-core < 2.19)."""
    # pylint: disable-next=import-outside-toplevel
    from ansible.module_utils import basic

    if not isinstance(args, (dict, type(None))):
        raise TypeError("The `args` arg must be a dict or None.")
    payload = json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}).encode()
    with mock.patch.object(basic, "_ANSIBLE_ARGS", payload):
        yield


def _install() -> None:
    name = "ansible.module_utils.testing"
    if importlib.util.find_spec(name) is not None:
        return  # ansible-core 2.19 or newer: the real one
    module = types.ModuleType(name, __doc__)
    setattr(module, "patch_module_args", patch_module_args)
    sys.modules[name] = module
    # pylint: disable-next=import-outside-toplevel
    import ansible.module_utils

    setattr(ansible.module_utils, "testing", module)


_install()
