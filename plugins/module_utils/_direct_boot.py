# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The program a module's direct run sends to its target: our module code without Ansible's module runtime.

A module run through AnsiballZ imports ``ansible.module_utils.basic`` from a zip, compiled anew on every run:
about 0.2 s of the target's CPU before the module does anything (``benchmarks/README.md``). When the options were
validated on the controller already (``plugins/plugin_utils/_direct_run.py``), the work itself needs none of it.
The controller sends this file's source, then one line that calls ``main`` with the payload, to the target's Python
on its standard input (as Ansible pipelines a module): the sources of the collection's ``module_utils`` files the
entry needs, their SHA-256 digests, the entry's name and the validated options. ``main`` imports those sources from
memory, calls the entry's ``direct_run(params, check_mode, diff)`` and prints its result as one JSON line, or, when the
code raised, a failed result with the traceback, as a module would.

Compiling the sources costs the target more than running them (about 25 ms of CPU for a start's, 12 ms for a proof's,
measured in a stand-in container). The code compiled from a source is kept by its digest, as ``marshal`` data, in
``code_folder()``: ``/var/cache/trainops-pct-launch`` for root, else ``~/.cache/trainops-pct-launch`` (or under
``XDG_CACHE_HOME``), or the folder the target's environment names in ``TRAINOPS_CODE_CACHE`` (empty: no cache),
one subfolder per Python (``sys.implementation.cache_tag`` and the bytecode's magic number).
Kept code is used only from a folder (and the folder above it) of the user's own that nobody else may write, from
a regular file of the user's; anything else, or a file that does not load, means compiling the source, as without a
cache. In check mode nothing is written; any error of the cache only means compiling.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import marshal
import os
import stat
import sys
import types
import typing as t

PACKAGE = "ansible_collections.trainops.pct_launch.plugins.module_utils"
CACHE_ROOT = "/var/cache/trainops-pct-launch"
CACHE_NAME = "trainops-pct-launch"
_HEX = frozenset("0123456789abcdef")


def code_folder() -> str | None:
    """The folder of this user's kept code for this Python; None when ``TRAINOPS_CODE_CACHE`` is set empty."""
    base = os.environ.get("TRAINOPS_CODE_CACHE")
    if base is not None:
        if not base:
            return None
    elif os.geteuid() == 0:
        base = CACHE_ROOT
    else:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), CACHE_NAME)
    return os.path.join(base, f"code-{sys.implementation.cache_tag}-{importlib.util.MAGIC_NUMBER.hex()}")


def _private(folder: str) -> bool:
    """Whether ``folder`` and the one above it are directories of this user's that no one else may write."""
    for path in (folder, os.path.dirname(folder)):
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return False
    return True


class CodeCache:
    """Compiled code by the SHA-256 digest of its source, in ``folder``; writes only when ``writable``."""

    def __init__(self, folder: str, writable: bool) -> None:
        self.folder = folder
        self.writable = writable

    def load(self, digest: str) -> types.CodeType | None:
        """The code kept for ``digest``; None when there is none that can be trusted and loaded."""
        try:
            if not _private(self.folder):
                return None
            fd = os.open(os.path.join(self.folder, f"{digest}.code"), os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                    return None
                code = marshal.loads(handle.read())
        except (OSError, ValueError, EOFError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None

    def keep(self, digest: str, code: types.CodeType) -> None:
        """Keep ``code`` for ``digest`` (a new file, then renamed into place); any error only means it is not kept."""
        if not self.writable:
            return
        path = os.path.join(self.folder, f"{digest}.code")
        temp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            if not _private(self.folder):
                return
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(marshal.dumps(code))
            os.replace(temp, path)
        except (OSError, ValueError):
            try:
                os.unlink(temp)
            except OSError:
                pass


class SourceImporter:
    """Imports the modules of ``sources`` (name → Python source) and the packages above them, from memory.

    A finder and loader as ``sys.meta_path`` asks for them (``find_spec``, ``create_module``, ``exec_module``),
    without the base classes of ``importlib.abc``, whose import costs the target about 18 ms (it imports
    ``importlib.resources``, ``pathlib`` and ``tempfile``). A module whose ``digests`` entry (the SHA-256 hex of
    its source) has code in ``cache`` runs that code.
    """

    def __init__(self, sources: t.Mapping[str, str], digests: t.Mapping[str, str] | None = None, cache: CodeCache | None = None) -> None:
        self.sources = dict(sources)
        self.digests = {name: digest for name, digest in (digests or {}).items() if len(digest) == 64 and _HEX.issuperset(digest)}
        self.cache = cache
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
        exec(self.code(name), module.__dict__)  # pylint: disable=exec-used  # our own module_utils' source, sent by the controller

    def code(self, name: str) -> types.CodeType:
        """The code of module ``name``: kept in the cache, else compiled from its source (and kept)."""
        digest = self.digests.get(name)
        code = self.cache.load(digest) if self.cache is not None and digest else None
        if code is None:
            code = compile(self.sources[name], f"<{name}>", "exec", dont_inherit=True)
            if self.cache is not None and digest:
                self.cache.keep(digest, code)
        return code


def run(payload: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The entry's result for the payload's options."""
    folder = code_folder()
    cache = CodeCache(folder, writable=not payload["check_mode"]) if folder else None
    sys.meta_path.insert(0, SourceImporter(payload["sources"], payload.get("digests"), cache))
    entry = importlib.import_module(f"{PACKAGE}.{payload['entry']}")
    return dict(entry.direct_run(payload["params"], bool(payload["check_mode"]), bool(payload.get("diff"))))


def main(text: str) -> None:
    """Print the result of the JSON payload ``text`` as one line; exit 1 when it failed."""
    try:
        result = run(json.loads(text))
    except Exception as exc:  # pylint: disable=broad-except  # reported as a module reports what it did not foresee
        import traceback  # pylint: disable=import-outside-toplevel  # only for a failure
        result = {"failed": True, "msg": f"{type(exc).__name__}: {exc}", "exception": traceback.format_exc()}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    sys.exit(1 if result.get("failed") else 0)  # pylint: disable=ansible-bad-function  # a module runner, as ansible-core's own
