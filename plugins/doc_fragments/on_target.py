# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection's modules share: they run on the host they target, which needs Python and tmux."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Requirements, the platform attribute and the note on reaching containers, for every module."""

    DOCUMENTATION = r"""
requirements:
  - On the target, Python 3.7 or later and C(tmux) 3.0a or later (role C(trainops.pct_launch.tmux) installs it).
attributes:
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
notes:
  - The module runs on the host the task targets. A Proxmox VE container is such a host through the collection's
    C(trainops.pct_launch.pct) connection (host variable C(pct_vmid), and C(pct_node) for a remote node); a task
    then costs one C(pct exec) with pipelining, which that connection turns on by default. Earlier releases reached
    containers from the node with the options C(vmid) and C(pct_path); they are gone (see the changelog).
"""
