# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: the cause when a module of the collection could not run on its target at all."""

from __future__ import annotations

import typing as t

_PYTHON_HINT = "; the target needs Python 3.7 or later: install python3 there (or set ansible_python_interpreter)"


def module_answered(result: t.Mapping[str, t.Any]) -> bool:
    """Whether the module ran and answered (it sets ``verdict`` or ``error``, or did not fail)."""
    return not result.get("failed") or "verdict" in result or "error" in result


def module_failure_cause(result: t.Mapping[str, t.Any]) -> str:
    """``the module could not run there: MSG`` and, when the interpreter is missing, what to do about it."""
    cause = " ".join(str(result.get("msg") or "no error message").split())
    hint = _PYTHON_HINT if result.get("rc") == 127 or "interpreter" in cause else ""
    return f"the module could not run there: {cause}{hint}"
