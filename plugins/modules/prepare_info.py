#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: prepare_info
short_description: Find out in one run what a container still needs for a job (tmux, the venv, the working directory, the files)
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Reports whether the target already has what C(playbooks/prepare.yml) would give it, so that the playbook runs the
    roles and tasks only for what is missing. A re-launch into a prepared container costs one C(pct exec) for the
    whole prepare step instead of one per task of the roles.
  - Each check says V(true) only when it is sure from the state itself, never from a record of an earlier run -
    C(tmux -V) is O(tmux_min_version) or newer; the venv at O(venv_path) exists, its C(pyvenv.cfg) says
    C(include-system-site-packages) as O(venv_site_packages) asks, and the distributions installed in it meet every
    requirement; O(workdir) is a directory of mode C(0755); each file of O(files) has the SHA-1 checksum of its source
    on the controller and its mode.
  - A requirement it cannot judge (an environment marker, a URL, a pre-release or local version, a pip option line)
    counts as not met, so the venv role runs and pip decides, as without this module.
  - With O(boot_unit) it also checks the boot unit that records, at the container's next boot, a job its stop cut off
    (role C(trainops.pct_launch.boot_recorder), C(docs/job-life.md)) - C(/etc/systemd/system/trainops-boot.service)
    has the SHA-1 checksum of the collection's file and is enabled (its link in C(multi-user.target.wants)). Where
    systemd is not the container's init (C(/run/systemd/system) is missing, as with OpenRC on Alpine), there is nothing
    to install - RV(boot_unit.covered) is V(false) and the module warns that such a container is not covered.
  - It only reads.
extends_documentation_fragment:
  - trainops.pct_launch.on_target
  - trainops.pct_launch.attributes
  - trainops.pct_launch.attributes.info_module
  - trainops.pct_launch.attributes.action
options:
  tmux_min_version:
    description: The oldest tmux that will do, as tmux prints versions (V(3.0), V(3.2a)).
    type: str
    default: "3.0"
  venv_path:
    description: Absolute path of the job's venv; not checked when not set.
    type: str
  venv_requirements:
    description: Requirements the venv must meet, one requirement specifier each (V(numpy>=1.26)).
    type: list
    elements: str
    default: []
  venv_requirements_file:
    description:
      - A requirements file on the controller (as the venv role's C(venv_requirements_file)), whose lines the venv must meet.
      - The action plugin reads it on the controller and sends its text as O(venv_requirements_text).
    type: path
  venv_requirements_text:
    description: The text of a requirements file the venv must meet (filled from O(venv_requirements_file) by the action).
    type: str
  venv_site_packages:
    description: Whether the venv must see the system's site-packages (the venv role's C(venv_site_packages)).
    type: bool
    default: false
  workdir:
    description: The job's working directory, which must exist with mode C(0755); not checked when not set.
    type: str
  files:
    description:
      - The job's files as C(playbooks/prepare.yml) copies them (C(job_files)), each with C(src) on the controller, C(dest)
        on the target and C(mode) (default V(0644)). The action plugin adds each source's C(checksum).
    type: list
    elements: dict
    default: []
  boot_unit:
    description:
      - Whether to check the boot unit (see above); V(false) leaves it unchecked, RV(boot_unit.ok) is then V(true).
    type: bool
    default: true
  boot_unit_checksum:
    description:
      - The SHA-1 checksum of the collection's C(trainops-boot.service) (filled by the action from the collection's
        C(roles/boot_recorder/files/)).
    type: str
attributes:
  action:
    details:
      - The action reads O(venv_requirements_file) and computes the checksums of the sources of O(files) and of the
        boot unit's file on the controller.
seealso:
  - module: trainops.pct_launch.tmux_session
  - module: trainops.pct_launch.gpu_info
notes:
  - C(playbooks/prepare.yml) runs the roles C(trainops.pct_launch.tmux), C(trainops.pct_launch.venv) and
    C(trainops.pct_launch.boot_recorder) only when this module finds their work missing.
"""

EXAMPLES = r"""
- name: Find out what the container lacks for the job
  trainops.pct_launch.prepare_info:
    venv_path: /opt/train/venv
    venv_requirements: [numpy]
    workdir: /workspace
    files:
      - {src: train.py, dest: /workspace/train.py, mode: "0644"}
  register: prepared

- name: Install tmux only where it is missing
  ansible.builtin.include_role:
    name: trainops.pct_launch.tmux
  when: not prepared.tmux.ok
"""

RETURN = r"""
prepared:
  description: Whether nothing needs doing.
  returned: always
  type: bool
needs:
  description: What needs doing, one sentence each (empty when RV(prepared)).
  returned: always
  type: list
  elements: str
tmux:
  description: C(ok), C(version) (null when not installed) and C(reason) (empty when ok).
  returned: always
  type: dict
venv:
  description: C(ok) (true without O(venv_path)) and C(reason).
  returned: always
  type: dict
workdir:
  description: C(ok) (true without O(workdir)) and C(reason).
  returned: always
  type: dict
boot_unit:
  description:
    - Whether the boot unit needs doing (true without O(boot_unit), or where systemd is not the init).
  returned: always
  type: dict
  contains:
    ok:
      description: Whether nothing needs doing for the boot unit.
      type: bool
    covered:
      description: Whether the container's init is systemd, so that the boot unit records its lost jobs (absent without O(boot_unit)).
      type: bool
    reason:
      description: What needs doing, empty when RV(boot_unit.ok).
      type: str
files_to_copy:
  description: The C(dest) of each file of O(files) that must be copied (missing, another checksum or mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.pct_launch.plugins.module_utils._prepare_check import ARGUMENT_SPEC, report


def main() -> None:
    """Check what the job needs on this host (it only reads)."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = report(module.params)
    warning = result["boot_unit"].pop("warning", None)
    if warning:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
