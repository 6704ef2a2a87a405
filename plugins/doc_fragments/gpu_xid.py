# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readers of a job's end that name the Xid errors of its GPUs from the node's kernel log."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Option C(node_kernel_log) and the note on how a GPU fault is named (wait_for_log, tmux_session_info)."""

    DOCUMENTATION = r"""
options:
  node_kernel_log:
    description:
      - "The program and arguments that print the Proxmox VE node's kernel log, run on the node as given (no shell), to
        find the C(NVRM: Xid) lines of a failed GPU job's GPUs."
      - Default C(journalctl -k -o short-iso-precise --no-pager --since=-Nh) (N covers the job's last attempt), else
        C(dmesg --time-format iso). The stand-in node passes its own (C(tools/pve_standin/node_kernel_log.py)).
      - Read on the controller only (the module never sees it).
    type: list
    elements: str
notes:
  - "When a job with GPUs ended other than V(finished) or V(stopped), and the task reaches its container through the
    collection's C(trainops.pct_launch.pct) connection, the action asks the node (the way
    M(trainops.pct_launch.gpu_info) does; a container cannot read its node's kernel log) for the C(NVRM: Xid) lines of
    the job's GPUs (their PCI bus ids, from the exit record) between its last attempt's start and 10 s after its end.
    When there are any, the end's C(cause) becomes V(gpu_xid) (the job's own cause is kept in C(job_cause)), C(xid)
    lists the errors with NVIDIA's name, meaning and recommended action, and C(xid_reason) says it in one line.
    A kernel log the node's user cannot read is a warning, not a failure."
"""
