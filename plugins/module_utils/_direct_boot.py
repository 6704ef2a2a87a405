# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The program a module's direct run sends to its target: our module code without Ansible's module runtime.

A module run through AnsiballZ imports ``ansible.module_utils.basic`` from a zip, compiled anew on every run:
about 0.2 s of the target's CPU before the module does anything (``benchmarks/README.md``). When the options were
validated on the controller already (``plugins/plugin_utils/_direct_run.py``), the work itself needs none of it.
The controller sends this file's source, then one line that calls ``main`` with the payload, to the target's Python
on its standard input (as Ansible pipelines a module): the sources of the collection's ``module_utils`` files the
entry needs, the entry's name and the validated options. ``main`` imports those sources from memory (nothing is
written on the target), calls the entry's ``direct_run(params, check_mode, diff)`` and prints its result as one JSON line,
or, when the code raised, a failed result with the traceback, as a module would.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import traceback
import types
import typing as t

PACKAGE = "ansible_collections.trainops.pct_launch.plugins.module_utils"


class SourceImporter(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the modules of ``sources`` (name → Python source) and the packages above them, from memory."""

    def __init__(self, sources: t.Mapping[str, str]) -> None:
        self.sources = dict(sources)
        self.packages = {name.rsplit(".", depth)[0] for name in self.sources for depth in range(1, name.count(".") + 1)}

    def find_spec(self, fullname: str, path: t.Any = None, target: t.Any = None) -> importlib.machinery.ModuleSpec | None:
        """A spec for our modules and their packages; None lets the other finders look (the standard library)."""
        del path, target
        if fullname in self.sources or fullname in self.packages:
            return importlib.util.spec_from_loader(fullname, self, origin=f"<{fullname}>", is_package=fullname in self.packages)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        """The default module object."""
        del spec

    def get_source(self, fullname: str) -> str | None:
        """The source of one of our modules (``_job_stage`` stages the supervisor's from it); None for a package."""
        return self.sources.get(fullname)

    def exec_module(self, module: types.ModuleType) -> None:
        """Run the module's source in it; a package is empty."""
        name = module.__name__
        if name in self.packages:
            module.__path__ = []
            return
        code = compile(self.sources[name], f"<{name}>", "exec", dont_inherit=True)
        exec(code, module.__dict__)  # pylint: disable=exec-used  # our own module_utils' source, sent by the controller


def run(payload: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The entry's result for the payload's options."""
    sys.meta_path.insert(0, SourceImporter(payload["sources"]))
    entry = importlib.import_module(f"{PACKAGE}.{payload['entry']}")
    return dict(entry.direct_run(payload["params"], bool(payload["check_mode"]), bool(payload.get("diff"))))


def main(text: str) -> None:
    """Print the result of the JSON payload ``text`` as one line; exit 1 when it failed."""
    try:
        result = run(json.loads(text))
    except Exception as exc:  # pylint: disable=broad-except  # reported as a module reports what it did not foresee
        result = {"failed": True, "msg": f"{type(exc).__name__}: {exc}", "exception": traceback.format_exc()}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    sys.exit(1 if result.get("failed") else 0)  # pylint: disable=ansible-bad-function  # a module runner, as ansible-core's own
