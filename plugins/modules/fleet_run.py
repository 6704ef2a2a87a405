#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_run
short_description: Run one of the collection's modules on many Proxmox VE containers from one task
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Runs M(trainops.pct_launch.tmux_session), M(trainops.pct_launch.tmux_session_info),
    M(trainops.pct_launch.prepare_info), M(trainops.pct_launch.gpu_info) or M(trainops.pct_launch.wait_for_log)
    on every container of O(hosts), with the options O(args), from B(one) task on the controller.
  - A per-host task costs Ansible one worker process per host, forked one after the other by the controller's main
    process; with dozens of containers that, not C(pct), is most of a launch's time. This action runs the module's own
    action plugin for each host in threads of its one worker, each host through its own
    C(trainops.pct_launch.pct) connection with that host's variables (C(pct_vmid), C(pct_node), C(pct_node_user),
    ...), so each host costs what it costs in a per-host task - one C(pct exec) for a direct run, and for
    M(trainops.pct_launch.tmux_session) with O(trainops.pct_launch.tmux_session#module:wait) the launch and its proof -
    and the same result, without a worker of its own. Containers of one node share the node's ssh connection.
  - The C(pct exec) calls that the containers of one remote node make at the same moment go to the node from B(one) ssh
    session instead of one session each. The node's C(python3) starts them all at once and hands each container its
    answer as soon as its call ends. The calls, their results and their errors stay each container's own. A node
    without C(python3) gets each call in a session of its own, as before.
  - Run it with C(run_once=true). The options in O(args) are templated once, with the variables of the host the task
    runs on, and are the same for every host; only the connection is each host's own.
  - A host it cannot run this way is left out and named in RV(left_out) with the reason; run the module there with a
    per-host task. That is a host whose connection is not C(trainops.pct_launch.pct), one with C(ansible_become), one
    with pipelining off, and one whose Python is not known yet (set C(ansible_python_interpreter), or run any module
    there first, which discovers it).
  - The task fails only when its own options are wrong. Each host's failure, or its container or node lost
    (RV(unreachable_hosts)), is in its result; the play decides what to do with it, for example fail those hosts in
    a play of their own.
attributes:
  check_mode:
    support: full
    details:
      - Each host runs the module in check mode, as the module supports it.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - As idempotent as the module it runs; RV(changed) is true when the module changed any host.
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
    details:
      - Everything runs from the action plugin on the controller; the module's code runs on each container.
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
  bypass_host_loop:
    description: Forces a 'global' task that does not execute per host.
    support: none
    details:
      - Run the task with C(run_once=true); it acts on O(hosts), whatever host it runs on.
extends_documentation_fragment:
  - trainops.pct_launch.attributes
options:
  hosts:
    description:
      - The inventory names of the containers, for example V({{ ansible_play_hosts }}). A name listed twice runs once.
    type: list
    elements: str
    required: true
  module:
    description:
      - The module to run, by its short name or its fully qualified name.
    type: str
    required: true
    choices:
      - tmux_session
      - trainops.pct_launch.tmux_session
      - tmux_session_info
      - trainops.pct_launch.tmux_session_info
      - prepare_info
      - trainops.pct_launch.prepare_info
      - gpu_info
      - trainops.pct_launch.gpu_info
      - wait_for_log
      - trainops.pct_launch.wait_for_log
  args:
    description:
      - The module's options, checked with the module's own rules on each host (a wrong option fails every host's
        result with the module's message, and nothing runs).
      - Values of the module's secret options (M(trainops.pct_launch.tmux_session)'s
        O(trainops.pct_launch.tmux_session#module:env)) are kept out of the results as they are in a per-host task.
    type: dict
    default: {}
  parallel:
    description:
      - How many hosts run at the same time, at most.
    type: int
    default: 32
requirements:
  - The hosts are Proxmox VE containers of the C(trainops.pct_launch.pct) connection, with Python 3.7 or later
    (and C(tmux) for the session modules) inside.
seealso:
  - module: trainops.pct_launch.tmux_session
  - module: trainops.pct_launch.wait_for_log
"""

EXAMPLES = r"""
- name: Start the job in every container and prove it started, from one task
  trainops.pct_launch.fleet_run:
    hosts: "{{ ansible_play_hosts }}"
    module: trainops.pct_launch.tmux_session
    args:
      session_name: train
      command: python3 /workspace/train.py
      chdir: /workspace
      log_path: /workspace/train.log
      wait:
        pattern: '^step \d+ loss'
        timeout: 600
  run_once: true
  register: fleet_launch

- name: Fail the containers where the job did not start
  ansible.builtin.fail:
    msg: "{{ fleet_launch.results[inventory_hostname].msg | default('left out: ' ~ fleet_launch.left_out[inventory_hostname]) }}"
  when: inventory_hostname not in fleet_launch.ok_hosts

- name: Report the sessions of every container
  trainops.pct_launch.fleet_run:
    hosts: "{{ groups['training'] }}"
    module: tmux_session_info
    args: {lines: 5}
  run_once: true
  register: fleet_sessions
"""

RETURN = r"""
results:
  description: Each host's result, by inventory name, as a per-host task of the module would register it.
  returned: always
  type: dict
  sample: {"ct200": {"changed": true, "proven": true, "session_name": "train", "pane_pid": 625}}
ok_hosts:
  description: The hosts whose module run did not fail, in the order of O(hosts).
  returned: always
  type: list
  elements: str
failed_hosts:
  description: The hosts whose module run failed (unreachable ones too), in the order of O(hosts).
  returned: always
  type: list
  elements: str
unreachable_hosts:
  description: The hosts whose container or node could not be reached (their result has C(unreachable) and C(msg)).
  returned: always
  type: list
  elements: str
left_out:
  description: The hosts that were not run, each with the reason; run the module there with a per-host task.
  returned: always
  type: dict
  sample: {"gpu-server-1": "its connection is ssh, not trainops.pct_launch.pct"}
changed:
  description: Whether the module changed any host.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.pct_launch.plugins.module_utils._fleet_spec import ARGUMENT_SPEC


def main() -> None:
    """The module only exists for its documentation: the action plugin does the work on the controller."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="fleet_run runs on the controller, through its action plugin trainops.pct_launch.fleet_run; "
                         "it cannot run as a module on a host (is the collection installed where ansible-playbook runs?)")


if __name__ == "__main__":
    main()
