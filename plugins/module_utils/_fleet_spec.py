# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of ``fleet_run`` (module docs, action plugin): which modules it runs, on which hosts, with what."""

from __future__ import annotations

import typing as t

# The modules fleet_run runs, by their short name; each may be given by its FQCN too.
MODULES = ("tmux_session", "tmux_session_info", "prepare_info", "gpu_info", "wait_for_log")
COLLECTION = "trainops.pct_launch"

ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = dict(
    hosts=dict(type="list", elements="str", required=True),
    module=dict(type="str", required=True, choices=[name for short in MODULES for name in (short, f"{COLLECTION}.{short}")]),
    args=dict(type="dict", default={}),
    parallel=dict(type="int", default=32),
)


def module_name(name: str) -> str:
    """The short name of a module of ``MODULES`` given by either of its names (the spec's choices)."""
    return name.rsplit(".", 1)[-1]
