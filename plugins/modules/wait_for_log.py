#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: wait_for_log
short_description: Wait until a job proves in its log that it started, or until it ends, on the target host (a Proxmox VE container, a server)
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Waits until the log of a job launched in a tmux session (for example by M(trainops.pct_launch.tmux_session))
    shows that the job really started, and fails fast with the job's exit status when the job dies first.
  - With O(wait_until=finished) it waits on after the start until the job ends, and succeeds only when the job ended
    with exit status V(0), as the step of a CI pipeline that runs a job to its end needs. The log's lines are then shown as they
    come (O(show_lines)).
  - The module runs on the host the task targets, where the log is (a Proxmox VE container reached with the
    C(trainops.pct_launch.pct) connection, an C(ssh) host or C(localhost)); it needs Python 3.7 or later there.
  - The waiting loop runs on the target, so a wait costs one module run (one C(pct exec)) per chunk of up to 10 seconds,
    not one per poll. A healthy job whose O(pattern) appears within the first chunk costs exactly one C(pct exec).
    The action plugin runs chunks until the verdict or O(timeout), printing a progress line after each chunk
    that ends without a verdict (at least every 15 seconds).
  - The log is read incrementally (each byte once) and only whole lines are matched.
    The protocol lines the job's parent writes (header and trailer, starting with C(### trainops.pct_launch:)) never match.
  - Verdicts (RV(verdict)) with O(wait_until=started) are V(started) (success), V(died) (the session ended, or C(LOG.exit)
    appeared, before the pattern; reported within one poll interval O(sleep) whatever O(timeout) is), V(fail_pattern) and V(timeout).
  - Verdicts with O(wait_until=finished) are V(finished) (success), V(failed), V(fail_pattern) and V(timeout) (see O(wait_until)).
  - A container that shuts down during the wait (C(pct shutdown), C(pct reboot), C(vzdump) in stop mode) ends it within
    seconds with V(died) (V(failed) with O(wait_until=finished)) and RV(shutdown), naming the shutdown. The module's chunk
    survives the SIGTERM the container's init sends every process, waits up to 2 seconds for the job's exit record, and answers.
    A container that is stopped (C(pct stop), a kill) ends the wait with the message that the container is not running any more.
  - "After the container's next boot, the boot unit of role C(trainops.pct_launch.boot_recorder) has recorded such a job:
    a wait for it ends at once with V(died) (V(failed)), RV(end_state) V(lost) and a message with the exit record's reason,
    C(lost: the container restarted at T; ...). A job the boot started again (O(trainops.pct_launch.tmux_session#module:restart_on_boot))
    runs in a session of that name: a wait from O(offset=0) reads from where the new attempt starts, so only its lines prove the start."
  - O(pattern) and O(fail_pattern) are Python regular expressions (module C(re)), checked on the controller before anything runs on the target.
extends_documentation_fragment:
  - trainops.pct_launch.on_target
  - trainops.pct_launch.gpu_xid
  - trainops.pct_launch.attributes
  - trainops.pct_launch.attributes.action
options:
  session_name:
    description:
      - Name of the tmux session that runs the job (C(^[A-Za-z0-9_-]{1,64}$)), matched exactly.
      - When set, the job counts as dead as soon as the session's pane process is gone.
      - When O(log_path) is not set, the log path is read from the session's C(@trainops_log) option.
      - At least one of O(session_name) and O(log_path) is required. Without O(session_name) only C(LOG.exit)
        tells that the job ended.
    type: str
  log_path:
    description:
      - Absolute path of the job's log on the target. C(LOG.exit) next to it carries the exit status.
    type: str
  pattern:
    description:
      - Python regular expression (searched in each whole log line) meaning that the job started, for example V(Epoch 1/).
      - When not set, the first log line after the header line is enough.
      - With O(wait_until=finished) it has no role in the verdict and does not end the wait; the first line matching it
        (without it, the first output line) is still recorded as the proof of the start (see the notes) and returned in
        RV(proven_line).
    type: str
  fail_pattern:
    description:
      - Python regular expression meaning that the job failed, for example V(Traceback|CUDA out of memory).
      - When a line matches both, O(fail_pattern) wins. Lines are judged in log order.
      - With O(wait_until=finished) too, a matching line ends the wait at once (RV(verdict) V(fail_pattern)); the job is
        not stopped.
    type: str
  timeout:
    description:
      - Seconds to wait in total for the verdict.
      - A job that dies is reported within one poll interval, however long O(timeout) is.
      - With O(wait_until=finished), how long the job may take to end. A job still running then is not stopped
        (RV(verdict) V(timeout)).
    type: float
    default: 600
  sleep:
    description:
      - Poll interval on the target in seconds, more than V(0) and at most V(1).
      - This is the longest gap. The first looks at the log come sooner (the first gap is 0.05 s, each next one twice the one
        before, up to O(sleep)), as a job's first lines and an early crash come soon after its start.
    type: float
    default: 0.5
  tail_lines:
    description:
      - How many last lines of the log to return in RV(log_tail).
    type: int
    default: 40
  offset:
    description:
      - Byte offset in the log where reading starts; lines before it are not matched.
      - V(0) on a session the container's boot started again (O(trainops.pct_launch.tmux_session#module:restart_on_boot)) starts
        where that attempt's lines start (the session's C(@trainops_log_from)).
      - The action plugin passes it from one chunk to the next; set it yourself only to skip older content of an appended log,
        or, with O(show_lines), to show only lines written after it (C(playbooks/logs.yml) passes the log's size that
        M(trainops.pct_launch.tmux_session_info) reported, so that the tail it showed is not shown again).
    type: int
    default: 0
  wait_until:
    description:
      - What the wait waits for.
      - V(started) ends the wait when the job proved its start (O(pattern), or its first output), as described above.
      - V(finished) goes on after the start until the job ends. RV(verdict) is then V(finished) when the job ended with
        exit status V(0) (when the exit record has an C(end_state), it must be V(finished) too), a success; V(failed)
        for any other end (an exit status, a signal, the session gone without an exit record, no such session or log);
        V(fail_pattern) as soon as a line matches O(fail_pattern); V(timeout) when the job still runs after O(timeout)
        seconds (the job is not stopped).
      - A job that already ended when the wait begins gives its verdict at once, from its exit record.
      - The result then carries the keys of the exit record that the job's supervisor writes, when it has them
        (RV(attempts), RV(end_state), RV(cause), RV(end_reason), RV(signal)), and the message of V(failed) uses them.
    type: str
    choices: [started, finished]
    default: started
  show_lines:
    description:
      - Print the log's new lines as they come, during the wait, each prefixed with C([HOST]) and a space when the play
        has more than one host, as they are otherwise. The protocol lines of the job's parent (C(### trainops.pct_launch:))
        are not shown.
      - A chunk then ends about 2 seconds after it first read a new line, so that lines are shown soon. While output
        flows, that is one module run (one C(pct exec)) per 2 seconds at most, instead of one per 10 seconds.
      - A chunk shows at most 1000 lines (256 KiB), the last ones; a line C(... N lines not shown) counts the others.
        Bytes that are not UTF-8 are shown as U+FFFD; lines longer than 2000 characters are shortened.
      - When not set, V(true) with O(wait_until=finished), V(false) with O(wait_until=started).
    type: bool
  fleet_id:
    description:
      - Makes this wait one member of a fleet-wide wait. The waits of every container given the same O(fleet_id) in one
        run end together. The first member whose wait fails (the job died, O(fail_pattern), O(timeout), the node lost)
        is posted on the controller, and every other member ends its wait within a fraction of a second with the
        verdict V(fleet_failed), naming that member in RV(fleet_failure), instead of waiting for a peer that will
        never come (a rendezvous of a multi-node job).
      - A member whose job proved its start keeps watching it (chunks in which only the job's end or O(fail_pattern)
        counts) while other members still wait for theirs, so a rank that dies after its own proof fails the fleet
        too (any end but exit status V(0); a job that finishes with V(0) is done, not failed). It returns as soon as
        no member waits any more.
      - Waiting still costs one C(pct exec) per chunk. A member's chunk running when the fleet fails is abandoned
        and ends by itself on the target.
      - 1 to 128 characters of C([A-Za-z0-9_.-]); use a new one for each launch. C(playbooks/launch.yml) sets it
        for a multi-node job and for any launch with C(job_all_or_nothing).
    type: str
attributes:
  check_mode:
    details:
      - The wait only reads, so it waits in check mode too; the proof of the start is then not
        recorded (no C(@trainops_proven), no C(RUN_DIR/proven); RV(proof_recorded) is V(false)), so check mode writes nothing.
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - With the same options it also gives the same verdict for the same log.
  action:
    details:
      - The action checks the options on the controller, then runs the module in chunks.
  async:
    description: Can be used with the C(async) keyword.
    support: none
seealso:
  - module: trainops.pct_launch.tmux_session
  - module: trainops.pct_launch.tmux_session_info
notes:
  - The contract with M(trainops.pct_launch.tmux_session) (log header and trailer, C(LOG.exit), tmux options) is in
    docs/launch-protocol.md of the collection.
  - As a handler notified by M(trainops.pct_launch.tmux_session), follow the launch with the task
    C(ansible.builtin.meta) V(flush_handlers) so that a job that did not start fails the play right there.
  - When the node cannot be reached during the wait, the task is unreachable, with a message naming the node and the
    session and saying that the job's start is not proven (the job may still run).
  - With O(session_name), the verdict V(started) (with O(wait_until=finished), the start seen in the log) is recorded on
    the running session (tmux user option C(@trainops_proven)), so that M(trainops.pct_launch.tmux_session) returns
    RV(trainops.pct_launch.tmux_session#module:proven=true) for it and C(playbooks/launch.yml) does not prove it again,
    and in the file C(/run/trainops/NAME/proven) (the time), from which the job's supervisor sends its C(proven)
    notification (docs/job-life.md of the collection).
  - When C(LOG.exit) is missing or empty (the log's file system was full when the job ended), the exit status is read from
    C(/run/trainops/NAME/exit), the copy the job's parent keeps, if the session's last launch wrote that log.
"""

EXAMPLES = r"""
# On the host the log is on: a container through the pct connection, an ssh host, localhost.
- name: Launch the training job
  trainops.pct_launch.tmux_session:
    session_name: train
    command: python train.py
    log_path: /workspace/train.log
  notify: Wait for the training job to start

- name: Fail here if the job did not start
  ansible.builtin.meta: flush_handlers

# in handlers:
- name: Wait for the training job to start
  trainops.pct_launch.wait_for_log:
    session_name: train
    log_path: /workspace/train.log
    pattern: 'Epoch 1/'
    fail_pattern: 'Traceback|CUDA out of memory'
    timeout: 900

- name: Wait until the log has any output (no pattern)
  trainops.pct_launch.wait_for_log:
    session_name: train
  register: started

- name: Show the line that proved it
  ansible.builtin.debug:
    msg: "{{ started.matched_line }} after {{ started.elapsed }} s"

# A CI pipeline's step: launch, then wait for the job's end (its log's lines shown as they come);
# the task fails unless the job ends with exit status 0 within the hour.
- name: Run the training job to its end
  trainops.pct_launch.wait_for_log:
    session_name: train
    log_path: /workspace/train.log
    wait_until: finished
    fail_pattern: 'CUDA out of memory'
    timeout: 3600
  register: run

- name: Show how it ended
  ansible.builtin.debug:
    msg: "{{ run.verdict }} with exit status {{ run.exit_status }} after {{ run.elapsed }} s ({{ run.end_reason | default('', true) }})"
"""

RETURN = r"""
verdict:
  description:
    - V(started), V(died), V(fail_pattern) or V(timeout). Only V(started) is a success.
    - With O(wait_until=finished), V(finished), V(failed), V(fail_pattern) or V(timeout). Only V(finished) is a success.
    - With O(fleet_id), also V(fleet_failed) when another member of the fleet failed first.
  returned: always
  type: str
  sample: started
elapsed:
  description: Seconds from the start of the wait to the verdict.
  returned: always
  type: float
  sample: 3.2
matched_line:
  description:
    - The log line that matched O(pattern) or O(fail_pattern) (or the first output line without O(pattern)).
    - With O(wait_until=finished), the line that matched O(fail_pattern) for that verdict, else RV(proven_line).
  returned: when RV(verdict) is V(started) or V(fail_pattern); with O(wait_until=finished), always
  type: str
  sample: 'Epoch 1/10'
log_tail:
  description: The last O(tail_lines) lines of the log.
  returned: always
  type: list
  elements: str
  sample: ['### trainops.pct_launch: session=train started_at=2025-01-01T00:00:00Z host=ct200 command=python train.py', 'Epoch 1/10']
log_path:
  description: The log that was watched.
  returned: always
  type: str
  sample: /workspace/train.log
log_exists:
  description: Whether the log existed at the end of the wait.
  returned: always
  type: bool
log_size:
  description: Size of the log in bytes at the end of the wait, when it exists.
  returned: always
  type: int
  sample: 1234
offset:
  description: Byte offset in the log after the last whole line read.
  returned: always
  type: int
session_state:
  description:
    - V(running), V(finished) (C(LOG.exit) exists), V(vanished) (gone, no exit status, log exists),
      V(absent) (nothing) or V(unknown) (no O(session_name)).
  returned: always
  type: str
  sample: running
session_alive:
  description: Whether the job's session was alive at the end of the wait.
  returned: always
  type: bool
tmux_missing:
  description: Whether tmux is missing on the target.
  returned: always
  type: bool
pane_pid:
  description: PID (on the target) of the session's pane process, while it is alive.
  returned: always
  type: int
exit_status:
  description:
    - Exit status of the job from C(LOG.exit) (128+N when killed by signal N), when it ended.
    - Read from C(/run/trainops/NAME/exit) when C(LOG.exit) is missing or empty (see the notes).
  returned: always
  type: int
  sample: 1
ended_at:
  description: When the job ended, from C(LOG.exit).
  returned: always
  type: str
stopped_by:
  description: Set (V(trainops)) when M(trainops.pct_launch.tmux_session) stopped the job.
  returned: always
  type: str
process_tree:
  description: C(ps)-like lines of the pane process and its descendants, on timeout while the session is alive.
  returned: always
  type: list
  elements: str
proof_recorded:
  description:
    - Whether this wait recorded the verdict V(started) on the running session (tmux user option C(@trainops_proven), and
      the file C(/run/trainops/NAME/proven)).
    - False when RV(verdict) is not V(started), when no O(session_name) was given, or when the session ended meanwhile.
    - With O(wait_until=finished), whether it recorded the start it saw (RV(proven_line)) on the running session.
  returned: always
  type: bool
  sample: true
pct_calls:
  description: How many C(pct exec) calls the wait made (one per chunk).
  returned: always
  type: int
  sample: 1
fleet_failure:
  description:
    - The member of the fleet that failed first, when RV(verdict) is V(fleet_failed) (this wait was ended because of it).
    - Keys C(host), C(vmid), C(node), C(verdict), C(exit_status), C(msg) (its message, at most 300 characters) and
      C(posted_at) (seconds since the epoch).
  returned: when RV(verdict) is V(fleet_failed)
  type: dict
  sample: {host: ct362, vmid: 362, node: pve-f, verdict: died, exit_status: 7, msg: "Job did not start in ...", posted_at: 1764580000.5}
reason:
  description:
    - The message without the log lines, in one line, for summaries (C(playbooks/launch.yml) shows it per container).
  returned: when a verdict was reached
  type: str
  sample: "Job did not start in session train in container 200: the job ended with exit status 3 after 1.2 s, ...; fix the job and launch it again"
proven_line:
  description:
    - With O(wait_until=finished), the line that proved the start during this wait (it matched O(pattern), or it was
      the first output without O(pattern)), null when none was seen (an O(offset) past it, or no output).
    - With O(fleet_id), when the job proved its start and then failed while other members still waited, the line
      that proved it (RV(verdict) is then V(died) or V(fail_pattern)).
  returned: with O(wait_until=finished); when the job failed after its own proof in a fleet-wide wait
  type: str
  sample: "rank 2 of 4: world [0, 1, 2, 3]"
fleet_first:
  description: With O(fleet_id), when this wait failed on its own, whether it was the first member of the fleet to fail.
  returned: when O(fleet_id) is set and this wait failed on its own
  type: bool
  sample: true
attempts:
  description:
    - How many times the job's supervisor ran the job (restarts + 1), from the exit record (C(attempts)), when the job ended.
    - Null when the job has not ended or its exit record has no such key (records of jobs launched before the supervisor).
  returned: always
  type: int
  sample: 3
end_state:
  description:
    - How the job ended, from the exit record (C(end_state)), for example V(finished), V(failed), V(timeout), V(stalled),
      V(oom_killed), V(stopped) or V(lost) (its container went away while it ran; recorded at the next boot); null when unknown.
  returned: always
  type: str
  sample: oom_killed
cause:
  description:
    - What ended the job, from the exit record (C(cause)), for example V(exit_status), V(signal), V(oom_kill), V(cuda_oom),
      V(nccl), V(python_exception), V(torchelastic), V(time_limit), V(stall), V(stop), V(shutdown) (the container shut
      down cleanly, RV(end_state) V(stopped)), V(container_restart) (RV(end_state) V(lost)) or V(gpu_xid) (the node logged
      an Xid error of the job's GPUs during its last attempt, RV(xid)) or V(cuda_probe) (CUDA did not initialise on
      the job's GPUs before a restart, so none was made); null when unknown.
  returned: always
  type: str
  sample: python_exception
job_cause:
  description: When RV(cause) is V(gpu_xid), the cause the exit record gave (for example V(exit_status)).
  returned: when RV(cause) is V(gpu_xid)
  type: str
  sample: exit_status
xid:
  description:
    - The Xid errors the node's kernel log holds for the job's GPUs during its last attempt, oldest first.
  returned: when RV(cause) is V(gpu_xid)
  type: list
  elements: dict
  contains:
    xid: {description: "The Xid number.", type: int, sample: 79}
    pci_bus_id: {description: "The GPU's PCI bus id as nvidia-smi prints it.", type: str, sample: "00000000:07:00.0"}
    time: {description: "When the driver logged it (UTC); null when the line has no time.", type: str, sample: "2026-12-06T14:22:07Z"}
    name: {description: "NVIDIA's name of the Xid (null: not in the collection's catalog).", type: str, sample: GPU has fallen off the bus}
    meaning: {description: "What it means, in NVIDIA's words made short.", type: str}
    action: {description: "NVIDIA's recommended action.", type: str}
    message: {description: "The Xid in one line (number, name, meaning and action).", type: str}
    pid: {description: "The process the driver named (null when none).", type: int}
    process_name: {description: "Its name (null when none).", type: str}
    text: {description: "The rest of the driver's line.", type: str}
xid_reason:
  description: RV(xid) in one line, as the failure's message says it.
  returned: when RV(cause) is V(gpu_xid)
  type: str
  sample: "the job's GPU 00000000:07:00.0 logged at 2026-12-06T14:22:07Z: Xid 79 (GPU has fallen off the bus): ...; action: reboot the node ..."
attempt_started_at:
  description: When the job's last attempt started (UTC), from the exit record; null when unknown (records of earlier releases).
  returned: always
  type: str
  sample: "2026-12-06T14:20:00Z"
gpu_bus_ids:
  description: The PCI bus ids of the job's GPUs, from the exit record; empty for a job without GPUs.
  returned: always
  type: list
  elements: str
  sample: ["00000000:07:00.0"]
shutdown:
  description:
    - Set when the job's container shut down (or was shutting down) during the wait, so the job ended with it. It is what
      showed it in the container (for example V(PID 1 was systemd-shutdown)), else the reason of the exit record whose
      RV(cause) is V(shutdown); null otherwise.
  returned: always
  type: str
  sample: PID 1 was systemd-shutdown
end_reason:
  description: Why the job ended, in one line, from the exit record (C(reason)); null when unknown.
  returned: always
  type: str
  sample: "ValueError: loss is NaN"
signal:
  description: The signal that killed the job's last attempt (for example V(KILL)), from the exit record; null when none or unknown.
  returned: always
  type: str
  sample: KILL
new_lines:
  description:
    - With O(show_lines), the new complete lines of the log that one chunk read (at most 1000, 256 KiB; the protocol lines
      left out), for the action plugin, which prints them as they come.
    - The action plugin takes them out of the task's result (they were shown already).
  returned: by each chunk's module run to the action plugin, with O(show_lines); never in the task's result
  type: list
  elements: str
  sample: ['step 10 loss 2.1', 'step 20 loss 1.9']
lines_omitted:
  description: With O(show_lines), how many new lines of the chunk RV(new_lines) leaves out (printed as C(... N lines not shown)).
  returned: by each chunk's module run to the action plugin, with O(show_lines); never in the task's result
  type: int
  sample: 0
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_shutdown import TermDuringShutdown
from ansible_collections.trainops.pct_launch.plugins.module_utils._log_chunk import chunk
from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import ARGUMENT_SPEC, REQUIRED_ONE_OF


def main() -> None:
    """Run one chunk of waiting on this host and report the verdict (check mode records no proof).

    A SIGTERM while the container shuts down does not end the chunk (the chunk then names the shutdown)."""
    with TermDuringShutdown():
        module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_one_of=REQUIRED_ONE_OF, supports_check_mode=True)
        result = chunk(module.params, module.check_mode)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
