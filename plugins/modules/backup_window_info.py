#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: backup_window_info
short_description: Report the Proxmox VE backup jobs that would stop or suspend a container while its job runs
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Reads the backup jobs of the container's Proxmox VE node and reports those that cover the container (RV(jobs)),
    and, as RV(windows), those in mode V(stop) or V(suspend) that are due before O(time_limit) is up (within 24 hours
    without one). C(playbooks/preflight.yml) runs it before every launch and warns about each window.
  - In mode V(stop) C(vzdump) shuts the container down for the backup and starts it again afterwards, which ends the job
    (pve-container's C(PVE::VZDump::LXC) C(stop_vm)); in mode V(suspend) it freezes the container's processes while it
    copies what changed (C(suspend_vm), C(PVE::LXC::freeze)), so the job pauses. V(snapshot) leaves the job running,
    unless a volume of the container has no snapshots, when C(vzdump) falls back to V(suspend) (not known here).
  - On a container of the C(trainops.pct_launch.pct) connection the action asks the B(node), through the connection's
    own way to it (the local node, or C(ssh) to O(trainops.pct_launch.pct#connection:node) as
    O(trainops.pct_launch.pct#connection:node_user), never with privilege escalation); C(python3) there reads
    C(/etc/pve/jobs.cfg) (the backup jobs of the cluster), C(/etc/pve/vzdump.cron) (the jobs of nodes before Proxmox
    VE 7.1, which cron runs), the C(pool:) lines of C(/etc/pve/user.cfg), the C(mode:) of the node's
    C(/etc/vzdump.conf) (the mode of a job without one; else V(snapshot)), which node holds the container
    (C(/etc/pve/nodes/NODE/lxc/VMID.conf)), the time and the node's time zone. Nothing runs in the container.
  - A job covers the container as C(vzdump) selects guests (pve-manager's C(PVE::VZDump::get_included_guests)) -
    its pool (the pool's own guests), else its VMIDs, else all guests but those it excludes; with C(node), only the
    guests of that node. Disabled jobs are listed, never due.
  - Its C(schedule) (a calendar event such as V(sun 01:00), V(mon..fri 21:00), V(*/2:00), V(sat *-1..7 15:00)) is
    evaluated from now in the node's local time, as Proxmox VE's own scheduler and its "Next Run" do (the node's time
    zone by name when the controller knows it, else the node's offset from UTC now). A C(vzdump.cron) line runs at its
    minute and hour on its days of the week.
  - On another host given O(vmid), the host is taken as the Proxmox VE node itself and the module reads the files
    there. On any other host nothing is read (RV(checked) is false).
  - It only reads; a node without C(/etc/pve) (no Proxmox VE) is no error. A file that could not be read is named in
    RV(problems) (C(/etc/pve) is readable by root and the group C(www-data) only).
extends_documentation_fragment:
  - trainops.pct_launch.attributes
  - trainops.pct_launch.attributes.info_module
  - trainops.pct_launch.attributes.action
options:
  time_limit:
    description:
      - The job's wall-clock limit in seconds (O(trainops.pct_launch.tmux_session#module:time_limit);
        C(playbooks/preflight.yml) passes C(job_time_limit)). Backups due at or before it is up are windows.
      - V(0) is none; then backups due within the next 24 hours are windows.
    type: float
    default: 0
  pve_dir:
    description:
      - The node's Proxmox VE configuration folder. The local stand-in keeps its own under its state root
        (C(/var/lib/pve-standin)), where C(jobs.cfg) sits beside C(nodes/).
    type: path
    default: /etc/pve
  vmid:
    description:
      - The container, for a host that is itself the Proxmox VE node. On a container of the
        C(trainops.pct_launch.pct) connection its own VMID is taken (C(pct_vmid)).
    type: int
attributes:
  action:
    details:
      - The action asks the Proxmox VE node through the C(trainops.pct_launch.pct) connection and judges what it read
        (RV(jobs), RV(windows), RV(problems)).
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
requirements:
  - On the Proxmox VE node, C(python3) 3.7 or later, which every node has.
notes:
  - The next run is counted from now, as the "Next Run" of Proxmox VE's backup job list; C(pvescheduler) counts from
    a job's last run, which differs only after a missed run (C(repeat-missed)).
  - Across a change of summer time within the window, a node whose time zone the controller does not know (its
    C(zoneinfo)) is judged with its offset now, an hour off after the change.
seealso:
  - module: trainops.pct_launch.tmux_session
  - module: trainops.pct_launch.gpu_info
  - name: Proxmox VE Backup and Restore
    description: Backup modes, backup jobs and their schedules.
    link: https://pve.proxmox.com/pve-docs/chapter-vzdump.html
  - name: Proxmox VE calendar events
    description: The schedule format of backup jobs.
    link: https://pve.proxmox.com/pve-docs/pve-admin-guide.html#chapter_calendar_events
"""

EXAMPLES = r"""
- name: Find the backups that would stop or suspend the container during a 12-hour job
  trainops.pct_launch.backup_window_info:
    time_limit: 43200
  register: backups

- name: Warn about each one
  ansible.builtin.debug:
    msg: "{{ backups.windows | map(attribute='message') }}"
  when: backups.windows | length > 0

- name: Ask a Proxmox VE node itself about container 200
  trainops.pct_launch.backup_window_info:
    vmid: 200
  delegate_to: pve1
"""

RETURN = r"""
checked:
  description: Whether the node's backup jobs were read (false on a node without C(/etc/pve), or when they could not be read).
  returned: always
  type: bool
reason:
  description: Why they were not read; null when they were.
  returned: always
  type: str
node:
  description: The node that holds the container (its C(nodes/NODE/lxc/VMID.conf)), else the node's own name.
  returned: always
  type: str
  sample: pve1
timezone:
  description: The time zone the schedules were evaluated in (V(Europe/Vienna), or the node's offset as V(UTC+0100)).
  returned: always
  type: str
now:
  description: The node's time when it was asked (Unix time).
  returned: always
  type: int
horizon:
  description: Seconds looked ahead (O(time_limit) rounded up, else 86400).
  returned: always
  type: int
jobs:
  description: Every backup job that covers the container, in the order of C(jobs.cfg), then C(vzdump.cron).
  returned: always
  type: list
  elements: dict
  contains:
    id: {description: "The job's ID (V(backup-4ec7b1e2-9c47)); for a C(vzdump.cron) line the one Proxmox VE gives it (C(SHA1:N)).", type: str}
    source: {description: "V(/etc/pve/jobs.cfg), or V(line 6 of /etc/pve/vzdump.cron).", type: str}
    schedule: {description: "Its calendar event (a C(vzdump.cron) line's as Proxmox VE shows it, V(sat 01:00)).", type: str}
    mode: {description: "V(stop), V(suspend) or V(snapshot) (the job's, else the node's default).", type: str}
    enabled: {description: Whether the job runs at all., type: bool}
    selects: {description: "How it takes the container - V(all guests), V(its VMIDs), V(pool NAME).", type: str}
    next_due: {description: When it is next due (Unix time); null when disabled or never., type: int}
    next_due_local: {description: "The same in the node's local time (V(Sun 2026-12-06 01:00 +0100)).", type: str}
    due_in: {description: Seconds from now until then., type: int}
    in_window: {description: Whether it stops or suspends the container within RV(horizon)., type: bool}
    message: {description: "With RV(jobs[].in_window), the warning (as in RV(windows)).", type: str}
    summary: {description: "With RV(jobs[].in_window), a short line for the launch's report.", type: str}
windows:
  description:
    - The entries of RV(jobs) that stop or suspend the container within RV(horizon), the soonest first.
    - "Each C(message) names the job, what it does to the container and when, its mode and schedule, and the fix, for example
      C(Backup job backup-4ec7b1e2-9c47 stops CT 200 in 5 h 12 min: mode stop, schedule 'sun 01:00' (node time,
      Europe/Vienna), next due Sun 2026-12-06 01:00 +0100, before the job's time_limit of 8 h is up, and it takes CT
      200 as all guests; vzdump shuts the container down ...)."
  returned: always
  type: list
  elements: dict
problems:
  description:
    - What could not be read or judged - a file of the node (with the reason, and what that leaves unknown), a schedule
      Proxmox VE would refuse, the node's answer.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.pct_launch.plugins.module_utils._pve_backup_files import read_node

ARGUMENT_SPEC = dict(
    time_limit=dict(type="float", default=0),
    pve_dir=dict(type="path", default="/etc/pve"),
    vmid=dict(type="int"),
)


def main() -> None:
    """Read this host's backup configuration for container ``vmid`` (the host is the node); the action judges it."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(changed=False, node_files=read_node(module.params["pve_dir"], module.params["vmid"]))


if __name__ == "__main__":
    main()
