# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Run by test_direct_boot.py in an isolated Python: import every module of the sources on stdin through
_direct_boot.SourceImporter alone (the file given as the first argument), and print how many there were."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys


def main() -> None:
    """Load the boot program from its file, then import each sent module from memory."""
    spec = importlib.util.spec_from_file_location("direct_boot", sys.argv[1])
    assert spec is not None and spec.loader is not None
    boot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(boot)
    sent = json.loads(sys.stdin.read())
    sys.meta_path.insert(0, boot.SourceImporter(sent))
    for name in sorted(sent):
        importlib.import_module(name)
    print(len(sent))


if __name__ == "__main__":
    main()
