# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: which container a host is, from its variables, in the pct connection's names and community.proxmox's.

``pct_vmid`` and ``pct_node`` come first; ``proxmox_vmid`` and ``proxmox_node`` (community.proxmox's inventory and
``proxmox_pct_remote`` connection) are read when they are not set. The connection reads the same variables.
"""

from __future__ import annotations

import typing as t


def _first(task_vars: t.Mapping[str, t.Any], *names: str) -> t.Any:
    for name in names:
        value = task_vars.get(name)
        if value is not None and value != "":
            return value
    return None


def host_vmid(task_vars: t.Mapping[str, t.Any]) -> t.Any:
    """The host's VMID (``pct_vmid``, else ``proxmox_vmid``), None for a host that is no container."""
    return _first(task_vars, "pct_vmid", "proxmox_vmid")


def host_node(task_vars: t.Mapping[str, t.Any]) -> t.Any:
    """The host's Proxmox VE node (``pct_node``, else ``proxmox_node``), None for the local node."""
    return _first(task_vars, "pct_node", "proxmox_node")
