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
  - "The same call to the node reads two things a container cannot see: the driver's fault reports, C(NVRM: Xid) lines
    of the node's kernel log of the last O(xid_hours) hours (RV(xid), per GPU, each with NVIDIA's meaning and recommended
    action), and the driver's versions (RV(driver)): the loaded kernel module's (C(/sys/module/nvidia/version), else
    C(/proc/driver/nvidia/version)) against the installed user-space driver's (the version in the name of the file
    C(libnvidia-ml.so.1) or C(libcuda.so.1) points to) and the module's on disk (C(modinfo -F version nvidia)). When
    they differ (an C(apt upgrade) of the driver since the node booted), C(nvidia-smi) and every new CUDA process fail
    with C(Failed to initialize NVML: Driver/library version mismatch), and a warning says so, with the fix."
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
  xid_hours:
    description:
      - "How many hours back RV(xid) reads the node's kernel log for the driver's C(NVRM: Xid) lines; V(0) reads none."
      - The default O(node_kernel_log) reads the kernel messages of the node's current boot (C(journalctl -k)), or what
        the kernel's ring buffer still holds (C(dmesg)); either needs the node user to be root (or in the
        C(systemd-journal) group for C(journalctl)). When neither can be read, a warning says why.
    type: int
    default: 24
  node_kernel_log:
    description:
      - "The program and arguments that print the node's kernel log, run there as given (no shell); only the lines with
        C(NVRM: Xid) are kept (the last 200), and those older than O(xid_hours) are left out by their times."
      - Default C(journalctl -k -o short-iso-precise --no-pager --since=-Nh) (N is O(xid_hours)), else
        C(dmesg --time-format iso). Lines with another prefix are read too (plain C(dmesg)'s seconds since boot are
        counted from the node's boot time); a line whose time is unknown is left out.
      - The stand-in node passes its own (C(tools/pve_standin/node_kernel_log.py)).
    type: list
    elements: str
  node_root:
    description:
      - The directory under which the node's C(/proc), C(/sys) and driver library folders are read for RV(driver) (and
        C(modinfo -b) looks for the module). V(/) on a real node; tests point it at a fake tree.
    type: str
    default: /
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
    pci_bus_id: {description: "The GPU's PCI bus id as C(nvidia-smi) prints it (V(00000000:2A:00.0)).", type: str}
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
xid:
  description:
    - "One entry per GPU of the node whose driver logged C(NVRM: Xid) errors in the last O(xid_hours) hours, in PCI bus
      order; empty when none did (or with O(xid_hours=0)). A GPU C(nvidia-smi) does not list (one that fell off the bus)
      has null C(index) and C(uuid). A warning names each GPU's Xids with NVIDIA's meaning and action."
    - Meanings and actions are NVIDIA's (its Xid catalog,
      U(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), and Xid errors documentation), for the
      Xids a GPU job meets most; another Xid points to the catalog.
  returned: always
  type: list
  elements: dict
  contains:
    pci_bus_id: {description: "The GPU's PCI bus id in C(nvidia-smi)'s form (the kernel log's C(PCI:0000:2a:00) is V(00000000:2A:00.0)).", type: str}
    index: {description: "The GPU's index on the node; null when C(nvidia-smi) there does not list it.", type: int}
    uuid: {description: "The GPU's UUID; null when C(nvidia-smi) there does not list it.", type: str}
    errors:
      description: Its Xid errors, oldest first.
      type: list
      elements: dict
      contains:
        xid: {description: The Xid number., type: int}
        time: {description: "When, in UTC (V(2024-03-05T13:22:07Z)).", type: str}
        pid: {description: "The process the driver names (a PID of the node), null when it names none.", type: int}
        process_name: {description: "That process's name, null when the driver names none.", type: str}
        text: {description: "The rest of the driver's line (V(GPU has fallen off the bus.)).", type: str}
        name: {description: "NVIDIA's name of the Xid (V(GPU has fallen off the bus)); null for one not in the catalog here.", type: str}
        meaning: {description: What it means., type: str}
        action: {description: "NVIDIA's recommended action, with the catalog's resolution bucket (V(RESTART_BM)).", type: str}
        message: {description: "All in words: C(Xid 79 (GPU has fallen off the bus): ...; action: ...).", type: str}
  sample:
    - pci_bus_id: "00000000:2A:00.0"
      index: 0
      uuid: GPU-3f0c2a1e-7b4d-4e2a-9c1b-5d6e7f809a1b
      errors:
        - {xid: 79, time: "2024-03-05T13:22:07Z", pid: 1234, process_name: python3, text: GPU has fallen off the bus.,
           name: GPU has fallen off the bus, meaning: "the driver cannot reach the GPU over PCI Express, ...",
           action: "reboot the node (RESTART_BM); ...", message: "Xid 79 (GPU has fallen off the bus): ..."}
driver:
  description:
    - The node's NVIDIA driver versions; a warning when RV(driver.drift).
  returned: always
  type: dict
  contains:
    loaded: {description: "The loaded kernel module's version; null when no nvidia module is loaded.", type: str}
    installed: {description: The installed user-space driver's version (its libraries'); null when none is installed., type: str}
    module_installed: {description: "The version of the nvidia module on disk for the running kernel (C(modinfo)); null when unknown.", type: str}
    drift:
      description:
        - Whether the loaded module differs from the installed driver (RV(driver.installed), or RV(driver.module_installed));
          the node must reboot, or load the installed module, before GPU jobs start again.
      type: bool
  sample: {loaded: 550.54.14, installed: 550.90.07, module_installed: 550.90.07, drift: true}
device_files:
  description: NVIDIA's device files on the target, each with C(path), C(present) and C(char_device).
  returned: always
  type: list
  elements: dict
cuda:
  description:
    - With O(gpus), on a target with GPUs and C(libcuda), CUDA initialised on the job's GPUs as O(user) - C(cuInit),
      C(cuDeviceGetCount), and a context created and destroyed on each GPU, in a child process with the job's
      C(CUDA_VISIBLE_DEVICES) (the UUIDs of the GPUs a list names, else of every GPU the target can open) - the only
      test that finds a GPU CUDA cannot use although its device files open (CUDA error 999 after a node reboot, when
      the node has not loaded C(nvidia-uvm) yet). A failure is one of RV(problems), with the CUDA error's name and
      number and its fix.
    - Null without O(gpus) or GPUs; C(ran) V(false) without C(libcuda) (no error).
  returned: always
  type: dict
  contains:
    ran: {description: Whether the probe ran (V(false) - no C(libcuda) in the target)., type: bool}
    ok: {description: Whether CUDA initialised on every GPU., type: bool}
    call: {description: The driver call that failed., type: str, sample: cuInit}
    code: {description: Its CUresult (null for a probe that hung or crashed)., type: int, sample: 999}
    name: {description: The error's name (C(timeout) or C(crashed) for a probe that hung or crashed)., type: str, sample: CUDA_ERROR_UNKNOWN}
    fix: {description: What fixes it., type: str}
    devices:
      description: The GPUs CUDA initialised, each with C(ordinal), C(uuid) and C(pci_bus_id).
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

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.pct_launch.plugins.module_utils._cuda_probe import probe_as
from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_alloc import GpuError, held, parse_request
from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_devices import check_access, needed_paths
from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_smi import device_files, gpus, library_versions, node_extras, processes
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import run_root
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_cli import Tmux, probe

ARGUMENT_SPEC = dict(
    gpus=dict(type="raw"),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    node_nvidia_smi=dict(type="str", default="nvidia-smi"),
    xid_hours=dict(type="int", default=24),
    node_kernel_log=dict(type="list", elements="str"),
    node_root=dict(type="str", default="/"),
    busy_utilization=dict(type="int", default=10),
    busy_memory=dict(type="int", default=512),
    user=dict(type="str"),
)


def probed_devices(request: tuple[str, t.Any], visible: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    """CUDA_VISIBLE_DEVICES of the probe: the UUIDs of the GPUs a list names, else of every GPU the target can open
    (which of them a count gets is decided at the start)."""
    named = [gpu for gpu in visible if request[0] == "ids" and (str(gpu.get("index")) in request[1] or gpu.get("uuid") in request[1])]
    return ",".join(str(gpu.get("uuid")) for gpu in (named or visible))


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
    # and CUDA initialised on them as the job's user: device files that open may still give CUDA error 999
    cuda = probe_as(module.params["user"], {"CUDA_VISIBLE_DEVICES": probed_devices(request, result["gpus"])}) if request and result["gpus"] else None
    result.update(changed=False, device_files=files, device_access=access, cuda=cuda, libraries=library_versions(),
                  held=held(root, lambda name: probe(tmux, name, f"{root}/{name}", None).running, ""))
    # a host that is its own node reads its kernel log and driver versions here (in a container the action asks the node)
    result.update(node_extras(max(module.params["xid_hours"], 0), module.params["node_kernel_log"], module.params["node_root"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
