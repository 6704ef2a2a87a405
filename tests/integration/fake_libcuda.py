# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A stand-in ``libcuda.so.1`` (files/fake_libcuda.c) built for a test: the CUDA Driver API calls the CUDA probe
(``_cuda_probe``) makes, with their real C signatures and error codes, scripted by the environment (``FAKE_CUDA_*``,
see the C file) and CUDA_VISIBLE_DEVICES::

    library = build(tmp_path)  # tmp_path / "libcuda.so.1"; fails without a C compiler (tools/system-packages.sh tests)
    probe_as(None, {"FAKE_CUDA_DEVICES": "2", "FAKE_CUDA_FAIL": "cuInit:999"}, library=str(library))

A ``FAKE_CUDA_*`` setting not in the environment is read from ``CONF`` (``/etc/fake-cuda.conf``; the environment's
``FAKE_CUDA_CONF`` names another file), again at each ``cuInit``: one ``FAKE_CUDA_NAME=VALUE`` a line, the same names
as the environment's, ``#`` comments and blank lines ignored, the environment winning. The probe runs with the job's
environment alone, so a test scripts the libcuda of a container there (``conf_text``)::

    FAKE_CUDA_FAIL=cuInit:999

``records(path)`` reads back what it wrote to ``FAKE_CUDA_RECORD``: the uid and CUDA_VISIBLE_DEVICES it ran with, the
contexts it created and destroyed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import typing as t
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "files" / "fake_libcuda.c"
LIBRARY = "libcuda.so.1"
CONF = "/etc/fake-cuda.conf"
NO_COMPILER = ("building the stand-in libcuda failed: no C compiler (cc or gcc) on this machine; install the tests' packages as root "
               "with `tools/system-packages.sh tests` (gcc, libc6-dev)")


def compiler() -> str | None:
    """The C compiler (``cc``, else ``gcc``), or None."""
    return shutil.which("cc") or shutil.which("gcc")


def build(directory: Path) -> Path:
    """``directory / libcuda.so.1`` compiled from the stand-in's source (mode 0755, readable by any user). Without a C
    compiler it raises RuntimeError (the test fails, never skips: a skipped test cannot fail on CI)."""
    cc = compiler()
    if cc is None:
        raise RuntimeError(NO_COMPILER)
    target = Path(directory) / LIBRARY
    done = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(target), str(SOURCE)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"building the stand-in libcuda {target} failed: {done.stderr.strip()}; install the tests' packages as root "
                           "with `tools/system-packages.sh tests` (gcc, libc6-dev)")
    os.chmod(target, 0o755)
    return target


def conf_text(**settings: str) -> str:
    """The text of a configuration file (``CONF``) with these settings: ``conf_text(FAIL="cuInit:999")`` is
    ``FAKE_CUDA_FAIL=cuInit:999``."""
    return "".join(f"FAKE_CUDA_{name}={value}\n" for name, value in settings.items())


def records(path: Path) -> list[tuple[str, str]]:
    """(key, value) of each record the stand-in wrote to ``FAKE_CUDA_RECORD``, in order."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    found: list[tuple[str, str]] = []
    for item in data.split(b"\0")[:-1]:
        key, value = item.decode("utf-8", "surrogateescape").partition("=")[::2]
        found.append((key, value))
    return found


def values(path: Path, key: str) -> t.List[str]:
    """The values recorded under ``key``."""
    return [value for name, value in records(path) if name == key]
