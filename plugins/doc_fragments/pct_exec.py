# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options the collection's modules share for their earlier interface: reaching a container from its node."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Options O(vmid) and O(pct_path) (deprecated: run the module on the container instead)."""

    DOCUMENTATION = r"""
options:
  vmid:
    description:
      - VMID of a container, an integer from V(100) to V(999999999), to reach it from the Proxmox VE node with
        C(pct exec); the task then runs on that node (C(delegate_to)).
      - Omit it (recommended) to run the module on the host the task targets, a container through the
        C(trainops.pct_launch.pct) connection included. O(vmid) and O(pct_path) will be removed in a later release.
    type: int
  pct_path:
    description:
      - The C(pct) program on the node, a name looked up in C(PATH) and the C(sbin) directories, or a path.
      - Used only with O(vmid).
    type: str
    default: pct
"""
