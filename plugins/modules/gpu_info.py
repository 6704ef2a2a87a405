#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_info
short_description: Report the NVIDIA GPUs of a Proxmox VE container as its node sees them, and what a GPU job there would lack
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Reports the NVIDIA GPUs the target can open, which processes hold them and where those processes run, and what a job
    asking for GPUs would lack on the target. C(playbooks/preflight.yml) runs it before every launch.
  - Inside a container, C(nvidia-smi --query-compute-apps) lists no process (the driver knows processes only by their
    PID on the node, and cannot map them into a container's PID namespace), while utilisation and memory are visible.
    So on a container of the C(trainops.pct_launch.pct) connection the action asks the B(node) too, through the
    connection's own way to the node (the local node, or C(ssh) to O(trainops.pct_launch.pct#connection:node) as
    O(trainops.pct_launch.pct#connection:node_user), never with privilege escalation); C(python3) there runs
    C(nvidia-smi --query-gpu=index,uuid,name,driver_version,utilization.gpu,memory.used,memory.total) and
    C(nvidia-smi --query-compute-apps=pid,gpu_uuid,process_name,used_memory) (C(--format=csv,noheader,nounits)),
    and reads C(/proc/PID/cgroup) of each process to tell the container it belongs to (C(/lxc/VMID/) on Proxmox VE,
    C(lxc.payload.VMID) with LXC elsewhere) or the node itself.
  - On any other host (a VM with GPUs passed through, a server) the host is its own node and the module lists the
    processes itself.
  - In the target it checks the device files (C(/dev/nvidiactl), C(/dev/nvidia-uvm), C(/dev/nvidiaN)) and the versions of
    the driver's user-space libraries (C(libcuda.so.VERSION), C(libnvidia-ml.so.VERSION)) against the node's driver.
  - With O(gpus) it opens each device file the job needs for reading and writing, as CUDA does, as the job's O(user)
    (RV(device_access)), and tells what refused it - the file's mode and owner (C(EACCES); Proxmox VE's C(devN)
    passthrough makes the file C(0660) C(root:root) unless C(mode=), C(uid=) or C(gid=) are given), the container's
    device cgroup (C(EPERM); no C(lxc.cgroup2.devices.allow) line for it), or the node's driver (C(ENXIO), C(ENODEV);
    none loaded for that device number). RV(problems) names the file, the user, the error and the fix. Opening a GPU's
    file may wake the GPU up on a node without persistence mode, which can take seconds.
  - It only reads; no GPU and no C(nvidia-smi) is not an error (RV(gpus) is empty).
extends_documentation_fragment:
  - trainops.pct_launch.on_target
  - trainops.pct_launch.attributes
  - trainops.pct_launch.attributes.info_module
  - trainops.pct_launch.attributes.action
options:
  gpus:
    description:
      - The GPUs the job will ask for, as O(trainops.pct_launch.tmux_session#module:gpus) takes them (V(all), a count,
        a list of indices or UUIDs). With it, RV(problems) lists what such a job would lack and RV(blocking) keeps the
        findings of RV(busy) that stand in its way.
    type: raw
  nvidia_smi:
    description:
      - The C(nvidia-smi) program on the target, a name looked up in C(PATH) and
        C(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin), or an absolute path.
    type: str
    default: nvidia-smi
  node_nvidia_smi:
    description:
      - The C(nvidia-smi) program on the Proxmox VE node (only for a container of the C(trainops.pct_launch.pct) connection).
    type: str
    default: nvidia-smi
  busy_utilization:
    description:
      - Utilisation in percent from which a GPU with no process the node can name counts as busy.
    type: int
    default: 10
  busy_memory:
    description:
      - Memory in use, in MiB, from which a GPU with no process the node can name counts as busy.
    type: int
    default: 512
  user:
    description:
      - The user the job will run as (O(trainops.pct_launch.tmux_session#module:user); C(playbooks/preflight.yml) passes
        C(job_user)). With O(gpus), the device files the job needs are opened as this user, by a child process that
        takes the user's groups, group ID and user ID as the job's start does, which needs the module to run as root.
      - Default is the user the module runs as (root in a container of the C(trainops.pct_launch.pct) connection), who
        still meets the container's device cgroup and the node's driver.
    type: str
attributes:
  action:
    details:
      - The action asks the Proxmox VE node for its view (a container of the C(trainops.pct_launch.pct) connection) and
        works out RV(busy), RV(blocking) and RV(problems).
notes:
  - Needs C(python3) on the node, which every Proxmox VE node has.
seealso:
  - module: trainops.pct_launch.tmux_session
  - name: nvidia-smi documentation
    description: NVIDIA System Management Interface, its query options and CSV format.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Ask the node which processes hold the container's GPUs
  trainops.pct_launch.gpu_info:
    gpus: 2
  register: gpu

- name: Refuse the launch while a process holds a GPU the job would use
  ansible.builtin.fail:
    msg: "{{ gpu.blocking | map(attribute='message') | join('; ') }}"
  when: gpu.blocking | length > 0

- name: Start the job on free GPUs only
  trainops.pct_launch.tmux_session:
    session_name: train
    argv: [python3, train.py]
    log_path: /workspace/train.log
    gpus: 2
    gpu_exclude: "{{ gpu.busy_uuids }}"
"""

RETURN = r"""
gpus:
  description: The GPUs the target can open, as its C(nvidia-smi) lists them (empty without GPUs or C(nvidia-smi)).
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: Index as C(nvidia-smi) numbers it on the target., type: int}
    uuid: {description: The GPU's UUID (the same on the node and in every container)., type: str}
    name: {description: Product name., type: str}
    driver_version: {description: The kernel driver's version., type: str}
    utilization: {description: Utilisation in percent; null when not reported., type: int}
    memory_used: {description: Memory in use in MiB; null when not reported., type: int}
    memory_total: {description: Memory in MiB; null when not reported., type: int}
nvidia_smi:
  description: Path of the target's C(nvidia-smi); null when it has none.
  returned: always
  type: str
error:
  description: Why the target's C(nvidia-smi) could not list its GPUs (for example C(Driver/library version mismatch)); null when it could.
  returned: always
  type: str
node:
  description:
    - The node's view, C(gpus), C(driver_version), C(error) and C(processes) (each with C(pid), C(gpu_uuid), C(process_name),
      C(used_memory) in MiB, and C(vmid), the container it runs in, null for the node itself).
    - On a container of the C(trainops.pct_launch.pct) connection, the node is asked once per container and task
      (each container of a node asks it for itself).
    - On a host that is no container of the C(trainops.pct_launch.pct) connection, the host's own view.
  returned: always
  type: dict
device_files:
  description: NVIDIA's device files on the target, each with C(path), C(present) and C(char_device).
  returned: always
  type: list
  elements: dict
device_access:
  description:
    - With O(gpus), each device file the job needs, opened for reading and writing as O(user) - C(/dev/nvidiactl),
      C(/dev/nvidia-uvm), and the C(/dev/nvidiaN) of the job's GPUs (every one for V(all) or a count, whose GPUs are
      chosen at the start; for a list, those of the GPUs named, N being the minor number the driver reports in
      C(/proc/driver/nvidia/gpus/*/information), else the GPU's index). Files that are missing are in RV(device_files).
    - Empty without O(gpus).
  returned: always
  type: list
  elements: dict
  contains:
    path: {description: The device file., type: str}
    mode: {description: "Its access mode in octal (V(0660)); null when it cannot be read.", type: str}
    owner: {description: "Its owner and group (V(root:root)); numbers when they have no name there.", type: str}
    device: {description: "Its device number, major:minor (V(195:0)).", type: str}
    user: {description: The user who opened it., type: str}
    opened: {description: Whether it opened., type: bool}
    failure:
      description:
        - Null when it opened; V(open) when the kernel refused (see C(errno)); V(no_user) when O(user) does not exist;
          V(switch) when the module could not become O(user) (it must run as root); V(timeout) when the open did not
          return within 30 s (the node's driver hangs).
      type: str
    errno:
      description:
        - The name of the open's error, null unless C(failure) is V(open). V(EACCES) no permission (the file's mode and
          owner); V(EPERM) not allowed by the container's device cgroup; V(ENXIO) or V(ENODEV) no driver behind the device
          number on the node.
      type: str
    error: {description: The cause as text (C(Permission denied)); null when it opened., type: str}
  sample:
    - {path: /dev/nvidia0, mode: "0660", owner: "root:root", device: "195:0", user: trainer, opened: false, failure: open,
       errno: EACCES, error: Permission denied}
libraries:
  description: The versions of C(libcuda.so) and C(libnvidia-ml.so) installed on the target, by library.
  returned: always
  type: dict
  sample: {"libcuda.so": ["550.54.15"], "libnvidia-ml.so": ["550.54.15"]}
held:
  description: GPU UUID -> session name, for the GPUs that running sessions of M(trainops.pct_launch.tmux_session) on the target were given.
  returned: always
  type: dict
busy:
  description:
    - One finding per process on a GPU the target can open, and per such GPU busy (O(busy_utilization), O(busy_memory))
      with no process the node can name. Each has C(index), C(uuid), C(kind) (V(this_container), V(other_container),
      V(node) or V(unnamed)), C(vmid), C(pid), C(process_name), C(session_name) (the session of this module's that
      holds the GPU, when the process is in this container) and C(message), which names the GPU, the process and its container.
  returned: always
  type: list
  elements: dict
busy_uuids:
  description: UUIDs of the GPUs in RV(busy), for O(trainops.pct_launch.tmux_session#module:gpu_exclude).
  returned: always
  type: list
  elements: str
blocking:
  description: The findings of RV(busy) that stand in the way of O(gpus) (all of them without O(gpus), none for a count, which takes free GPUs).
  returned: always
  type: list
  elements: dict
container_checked:
  description:
    - Whether the module ran in the target. On a container of the C(trainops.pct_launch.pct) connection whose node
      has no GPU (no C(nvidia-smi), or it lists none) and without O(gpus), the target is not asked (no C(pct exec)),
      and its RV(gpus), RV(device_files), RV(device_access), RV(libraries) and RV(held) are empty.
  returned: always
  type: bool
problems:
  description:
    - What a job asking for O(gpus) would lack on the target (device files, device files O(user) cannot open, user-space
      driver libraries of the node's version, GPUs), each with its fix; empty without O(gpus).
    - "A device file that does not open reads, for example, C(cannot open /dev/nvidia0 (c 195:0, 0660 root:root) as user
      trainer in the container: EACCES, no permission: ...), followed by the fix for that error."
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_alloc import GpuError, held, parse_request
from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_devices import check_access, needed_paths
from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_smi import device_files, gpus, library_versions, processes
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import run_root
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Tmux, probe

ARGUMENT_SPEC = dict(
    gpus=dict(type="raw"),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    node_nvidia_smi=dict(type="str", default="nvidia-smi"),
    busy_utilization=dict(type="int", default=10),
    busy_memory=dict(type="int", default=512),
    user=dict(type="str"),
)


def main() -> None:
    """Report what this host sees of its GPUs (it only reads)."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        request = parse_request(module.params["gpus"])
    except GpuError as exc:
        module.fail_json(msg=str(exc))
    result = gpus(module.params["nvidia_smi"])
    # in a container the list is empty (the driver knows the node's PIDs only): the action asks the node
    if result["nvidia_smi"] and not result["error"]:
        result["processes"], result["error"] = processes(result["nvidia_smi"])
    root, tmux, files = run_root(), Tmux(), device_files()
    # a GPU job's device files, opened as its user: a file that exists may still be closed to the job
    access = check_access(needed_paths(request, result["gpus"], files), module.params["user"]) if request else []
    result.update(changed=False, device_files=files, device_access=access, libraries=library_versions(),
                  held=held(root, lambda name: probe(tmux, name, f"{root}/{name}", None).running, ""))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
