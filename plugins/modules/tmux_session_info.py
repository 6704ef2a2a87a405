#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: tmux_session_info
short_description: Report the tmux sessions of the target host (a Proxmox VE container, a server) and the state of their jobs
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Reports the tmux sessions of the host the task targets, the ones launched by M(trainops.pct_launch.tmux_session)
    and any other tmux session, or one session (O(session_name)).
  - The module runs on its target like any module (a Proxmox VE container through the C(trainops.pct_launch.pct)
    connection, one C(pct exec) per task; an C(ssh) host; C(localhost)) and needs Python 3.7 or later there.
  - Each session has a RV(sessions[].state) as docs/launch-protocol.md of the collection defines it, its pane process,
    command, start time, exit status and end time when it finished, and the last O(lines) lines of its log.
  - Sessions of M(trainops.pct_launch.tmux_session) that are no longer in tmux are found through
    C(/run/trainops/NAME/log_path) on the target (gone after a restart of the target), or with O(session_name) and O(log_path).
  - When tmux is not installed or no tmux server runs, the result lists no running session; this is not an error.
  - Each session of M(trainops.pct_launch.tmux_session) also has what its job's supervisor (docs/job-life.md of the collection)
    records - while the job runs, its live state from C(RUN_DIR/state.json) (attempt, supervisor state, last output and progress);
    once it ended, the classification of the end from the exit record (C(end_state), C(cause), C(reason), C(signal), C(attempts)).
    These keys are null for launches made before the supervisor, and when the files are missing or unreadable.
  - With O(history=true), the result also has the target's history of launches, RV(history).
extends_documentation_fragment:
  - trainops.pct_launch.on_target
  - trainops.pct_launch.gpu_xid
  - trainops.pct_launch.attributes
  - trainops.pct_launch.attributes.info_module
options:
  session_name:
    description:
      - Report only this session (C(^[A-Za-z0-9_-]{1,64}$)), matched exactly.
      - It is reported even when it does not exist (RV(sessions[].state=absent)).
    type: str
  log_path:
    description:
      - Absolute path of the log of O(session_name) on the target, used when the session is no longer in tmux.
      - While the session runs, its C(@trainops_log) tmux option gives the log path.
      - Requires O(session_name).
    type: str
  lines:
    description:
      - How many last lines of each log to return in RV(sessions[].log_tail).
    type: int
    default: 20
  history:
    description:
      - Also return RV(history), the last O(history_limit) launches of the target's history
        (C(/var/lib/trainops/history.jsonl) for root, C(~/.local/state/trainops/history.jsonl) for another user),
        of O(session_name) only when it is set.
    type: bool
    default: false
  history_limit:
    description:
      - How many launches RV(history) holds at most, the newest ones (from 1 to 1000).
    type: int
    default: 100
seealso:
  - module: trainops.pct_launch.tmux_session
  - module: trainops.pct_launch.wait_for_log
"""

EXAMPLES = r"""
# On the host whose sessions are reported: a container through the pct connection, an ssh host, localhost.
- name: All tmux sessions of container 200
  trainops.pct_launch.tmux_session_info: {}
  register: info

- name: Show the running ones
  ansible.builtin.debug:
    msg: "{{ info.sessions | selectattr('state', 'eq', 'running') | map(attribute='name') }}"

- name: The training job, with its last 50 log lines
  trainops.pct_launch.tmux_session_info:
    session_name: train
    log_path: /workspace/train.log
    lines: 50
  register: train

- name: The last 20 launches of the training job, newest last
  trainops.pct_launch.tmux_session_info:
    session_name: train
    lines: 0
    history: true
    history_limit: 20
  register: launches

- name: Fail when the job ended badly
  ansible.builtin.assert:
    that: train.session.state != 'finished' or train.session.exit_status == 0
    fail_msg: "train ended with {{ train.session.exit_status }}: {{ train.session.log_tail | join('\n') }}"
"""

RETURN = r"""
tmux:
  description: V(running) (a tmux server runs), V(no_server) or V(missing) (tmux is not installed).
  returned: always
  type: str
  sample: running
sessions:
  description: The sessions, in tmux order, then the ones no longer in tmux.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Session name.
      type: str
      sample: train
    state:
      description:
        - V(running) (the session and its pane are alive), V(finished) (C(LOG.exit) exists, or a dead pane with an exit status),
          V(vanished) (gone or dead without an exit status, the log exists) or V(absent) (nothing).
        - A job its container's stop cut off is V(finished) with RV(sessions[].end_state) V(lost) once the container's next
          boot recorded it (the boot unit), and is listed by its name again (its C(RUN_DIR) is made anew).
      type: str
      sample: running
    managed:
      description: Whether M(trainops.pct_launch.tmux_session) launched it (it has C(@trainops_log)).
      type: bool
    pane_pid:
      description: PID (on the target) of the pane process while V(running), else null.
      type: int
      sample: 4242
    command:
      description: The display command (C(@trainops_command)), or the pane's start command for other sessions.
      type: str
      sample: python train.py
    started_at:
      description: ISO 8601 UTC start time (C(@trainops_started_at), C(LOG.exit), or when tmux created the session).
      type: str
      sample: '2025-01-01T12:00:00Z'
    exit_status:
      description:
        - Exit status when V(finished) (128+N when killed by signal N), else null.
        - From C(LOG.exit); when that is missing or empty (the log's file system was full when the job ended), from
          C(/run/trainops/NAME/exit), the copy the job's parent keeps, if the session's last launch wrote that log.
      type: int
      sample: 0
    ended_at:
      description: ISO 8601 UTC end time from C(LOG.exit) when V(finished), else null.
      type: str
    stopped_by:
      description: V(trainops) when M(trainops.pct_launch.tmux_session) had to stop the job, else null.
      type: str
    log_path:
      description: The log on the target, when known.
      type: str
      sample: /workspace/train.log
    log_size:
      description: Size of the log in bytes, null when it does not exist.
      type: int
      sample: 52311
    log_tail:
      description: The last O(lines) lines of the log.
      type: list
      elements: str
    notify_failures:
      description:
        - How many notifications of the launch could not be delivered (a C(notify_url) that answered an error or could not be
          reached, a C(notify_command) that failed or hung), from C(RUN_DIR/notify.log); V(0) when none failed or the launch
          has no run folder here.
      type: int
      sample: 2
    notify_failure:
      description:
        - "The last of them in words (never the URL) - C(notify_url, event failed, at 2026-12-01T10:00:00Z: HTTP status 400),
          or null."
      type: str
      sample: "notify_url, event failed, at 2026-12-01T10:00:00Z: HTTP status 400"
    attempts:
      description:
        - The job's attempt while V(running) (1, then 2 after the first restart), from the supervisor's C(state.json);
          once it ended, the number of attempts from the exit record. Null when unknown.
      type: int
      sample: 1
    supervisor_state:
      description:
        - The supervisor's state while the session is V(running) (C(state.json)), else null.
        - V(running), V(restarting) (waiting before a restart), V(stalled) (the stall watchdog fired, the job still runs),
          V(stopping) (the time limit's or the stall's stop signal sent), V(ended) (for a few seconds, while the last notifications go).
      type: str
      sample: running
    since:
      description:
        - ISO 8601 UTC time of the last change of RV(sessions[].supervisor_state) while V(running); the end time
          (RV(sessions[].ended_at)) when V(finished); else null.
      type: str
      sample: '2025-01-01T12:00:00Z'
    end_state:
      description:
        - How the job ended, from the exit record (docs/job-life.md), else null (while V(running), C(state.json)'s, null until
          the supervisor has classified the end).
        - V(finished) (exit status 0), V(failed), V(timeout), V(stalled), V(oom_killed), V(stopped) (by trainops,
          or by a clean shutdown of the container, RV(sessions[].cause) V(shutdown)) or V(lost) (the job was running when
          its container went away, C(pct stop) or a crash of the node; written at the container's next boot by the boot
          unit of role C(trainops.pct_launch.boot_recorder), RV(sessions[].cause) V(container_restart), RV(sessions[].exit_status) null).
      type: str
      sample: failed
    cause:
      description:
        - What ended the job, from the exit record, else null.
        - V(exit_status), V(signal), V(oom_kill), V(cuda_oom), V(nccl), V(python_exception), V(torchelastic),
          V(time_limit), V(stall), V(stop), V(shutdown) (the container shut down cleanly with C(pct shutdown) or
          C(pct reboot), its init stopped every process) or V(container_restart) (a kill, C(pct stop), or a crash left no
          exit record, so the boot unit wrote it at the container's next boot, RV(sessions[].reason) starting with
          C(lost) and naming the restart; without the boot unit the state is V(vanished)), or V(gpu_xid) (the node logged
          an Xid error of the job's GPUs during its last attempt, RV(sessions[].xid), and RV(sessions[].reason) starts
          with C(gpu_xid) and NVIDIA's name and action), or V(cuda_probe) (CUDA did not initialise on the job's GPUs
          before a restart, so none was made; RV(sessions[].reason) names the CUDA error and its fix).
      type: str
      sample: python_exception
    job_cause:
      description: When RV(sessions[].cause) is V(gpu_xid), the cause the exit record gave.
      type: str
      returned: when RV(sessions[].cause) is V(gpu_xid)
    xid:
      description:
        - The Xid errors of the job's GPUs during its last attempt, each with C(xid), C(pci_bus_id), C(time), NVIDIA's
          C(name), C(meaning) and C(action), and C(message) (as RV(trainops.pct_launch.wait_for_log#module:xid)).
      type: list
      elements: dict
      returned: when RV(sessions[].cause) is V(gpu_xid)
    xid_reason:
      description: RV(sessions[].xid) in one line.
      type: str
      returned: when RV(sessions[].cause) is V(gpu_xid)
    attempt_started_at:
      description: When the job's last attempt started (UTC), from the exit record once V(finished); else null.
      type: str
    gpu_bus_ids:
      description: The PCI bus ids of the job's GPUs, from the exit record once V(finished); else empty.
      type: list
      elements: str
    reason:
      description:
        - "One line saying why the job ended, from the exit record; while V(running), the supervisor's (C(state.json)),
          for example why it is V(stalled), or, while it waits to restart, why it restarts (C(attempt 1: NCCL error: ...;
          restart 1 of 3: cause nccl is in restart_on)). Else null."
        - "When a restart was asked for but not made, it ends saying why (C(; not restarted: cause python_exception is not in
          restart_on), C(; not restarted: restart_limit 3 reached); O(trainops.pct_launch.tmux_session#module:restart_on))."
        - It names memory pressure met during the last attempt (docs/job-life.md, "A job near its memory limit"), for
          example C(the job stalled while its processes waited 12 s for memory (memory.pressure\)) and then why it stalled.
      type: str
      sample: 'ValueError: bad batch'
    signal:
      description: The signal that killed the job's last attempt (V(KILL), V(TERM), ...), from the exit record, else null.
      type: str
    last_output_at:
      description: ISO 8601 UTC time of the job's last log output, from the supervisor's C(state.json), else null.
      type: str
    last_progress_at:
      description:
        - ISO 8601 UTC time of the last log line matching the job's stall pattern (of the last output without a pattern),
          from the supervisor's C(state.json), else null.
      type: str
    last_progress_age:
      description: Seconds from RV(sessions[].last_progress_at) to now, null when that is unknown.
      type: int
      sample: 12
session:
  description: The one session of O(session_name) (the only element of RV(sessions)).
  returned: when O(session_name) is set
  type: dict
  sample: {name: train, state: finished, exit_status: 1}
history:
  description:
    - The target's launches, oldest first, the last O(history_limit) ones (of O(session_name) only when it is set).
    - One entry per launch, merged from the lines of its start, its end (the supervisor's, or the boot unit's for a job
      its container's stop cut off) and each start at boot (O(trainops.pct_launch.tmux_session#module:restart_on_boot)).
  returned: when O(history=true)
  type: list
  elements: dict
  contains:
    session_name:
      description: The session of the launch.
      type: str
      sample: train
    host:
      description: The target's host name at the launch.
      type: str
    started_at:
      description: ISO 8601 UTC start time of the launch's first attempt.
      type: str
      sample: '2025-01-01T12:00:00Z'
    ended_at:
      description: ISO 8601 UTC end time, null while it runs.
      type: str
    end_state:
      description:
        - As RV(sessions[].end_state) (V(lost) with RV(history[].cause) V(container_restart) when the boot unit recorded the
          end), or V(running) (no end yet, the last launch of its session), or V(lost) (no end, and a later launch of the
          session started; the target restarted without the boot unit, or the supervisor was killed).
      type: str
      sample: finished
    exit_status:
      description: The job's exit status, null when unknown.
      type: int
    cause:
      description: As RV(sessions[].cause).
      type: str
    reason:
      description: As RV(sessions[].reason).
      type: str
    attempts:
      description: How many attempts the launch made, null when unknown.
      type: int
    boot_restarts:
      description:
        - How many times the container's boot started the launch again (O(trainops.pct_launch.tmux_session#module:restart_on_boot));
          V(0) or null when never. RV(history[].reason) then says why, until the launch's end says how it ended.
      type: int
    log_path:
      description: The launch's log on the target.
      type: str
    attempt_started_at:
      description: ISO 8601 UTC start time of the launch's last attempt, from its end; null before this release or while it runs.
      type: str
    gpu_bus_ids:
      description: The PCI bus ids of the launch's GPUs, comma-separated, from its end; null without GPUs.
      type: str
    job_cause:
      description: When RV(history[].cause) is V(gpu_xid), the cause the end gave.
      type: str
      returned: when RV(history[].cause) is V(gpu_xid)
    xid:
      description: As RV(sessions[].xid), for a launch whose end the GPU caused.
      type: list
      elements: dict
      returned: when RV(history[].cause) is V(gpu_xid)
    xid_reason:
      description: As RV(sessions[].xid_reason).
      type: str
      returned: when RV(history[].cause) is V(gpu_xid)
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.pct_launch.plugins.module_utils._session_info import ARGUMENT_SPEC, RULES, info


def main() -> None:
    """Report the sessions of this host (it only reads)."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **RULES)
    result = info(module.params)
    if result.get("failed"):
        module.fail_json(msg=result["msg"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
