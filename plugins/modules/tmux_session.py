#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: tmux_session
short_description: Start, stop or restart a job in a detached tmux session on the target host
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Starts a job (a shell command line or an argv) in a detached tmux session on the host the task targets
    and stops or restarts it. The job survives the end of the task, of the connection and of C(ansible-playbook).
  - The module runs on its target like any module, be it a Proxmox VE container reached with the collection's
    C(trainops.pct_launch.pct) connection (one C(pct exec) per task, pipelined, never with a terminal), a VM or
    server reached over C(ssh), or C(localhost). The target needs Python 3.7 or later and tmux.
  - Before starting, the target is checked (preflight), also in check mode. C(tmux) must be installed
    (role C(trainops.pct_launch.tmux)); O(chdir), O(venv), the directory of O(log_path) and the script the command
    starts (when its first word, or the script argument of an interpreter such as C(python) or C(bash), names a file)
    must exist. Nothing is started when a check fails.
  - The job runs under its supervisor (C(/run/trainops/NAME/supervisor.py); C(/run/trainops) is for root, another
    user of an C(ssh) host gets a folder in C(XDG_RUNTIME_DIR) or C(/tmp))
    in its own process group, with standard input C(/dev/null) and standard output and error appended to O(log_path).
    The log's first line is a header written before the job starts
    (C(### trainops.pct_launch) followed by the session name, start time, host and command, never environment values);
    when the job ends, the supervisor appends a trailer line and writes C(LOG.exit) with the exit status.
  - A launch as root also keeps, until the job's end is recorded, what the container's next boot needs to record the job
    V(lost) when the container goes away while it runs (C(/var/lib/trainops/jobs/NAME.json), no secret values; the boot
    unit of role C(trainops.pct_launch.boot_recorder) reads it, see O(restart_on_boot), O(notify_url_keep) and
    C(docs/job-life.md)).
  - The job gets a clean environment (C(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin), C(HOME), C(USER),
    C(LOGNAME), C(LANG=C.UTF-8)), then O(env), then O(venv). Nothing of the connection's or the tmux server's environment leaks in.
  - Idempotent. A session of that name running the same job spec (command or argv, O(chdir), O(env), O(venv), O(user),
    O(log_path)) is left alone. A session of that name running another spec makes the task fail, naming what differs
    (environment values are never shown); use O(state=restarted) to replace it.
  - Concurrent launches of one session name on one host are serialised with a lock in C(/run/trainops/NAME), so
    exactly one job starts.
  - O(chdir), O(venv) and O(log_path) are paths on the target, taken literally (no C(~) or C($VAR) expansion).
  - See C(docs/launch-protocol.md) in the collection for the files it writes and the tmux options it sets.
extends_documentation_fragment:
  - trainops.pct_launch.on_target
  - trainops.pct_launch.attributes
  - trainops.pct_launch.attributes.action
options:
  session_name:
    description:
      - Name of the tmux session, 1 to 64 characters from C(A-Z), C(a-z), C(0-9), C(_) and C(-).
      - The session is always targeted by exact name (C(-t =NAME)).
    type: str
    required: true
  command:
    description:
      - Shell command line of the job, run by C(sh -c) on the target.
      - Exactly one of O(command) and O(argv) is required when O(state) is V(started) or V(restarted).
    type: str
  argv:
    description:
      - The job as a list of arguments, run without a shell (the program is looked up in C(PATH)).
      - Exactly one of O(command) and O(argv) is required when O(state) is V(started) or V(restarted).
    type: list
    elements: str
  chdir:
    description:
      - Absolute path of the directory the job starts in. Default is the home directory of O(user) (C(/root) for root).
    type: str
  env:
    description:
      - Environment variables for the job. Values are passed byte-exact and never appear on a process list,
        in the log header or in the task result; quote numbers and booleans in YAML.
      - Names must be shell variable names and must not start with C(TRAINOPS_).
      - The task must be pipelined (the C(trainops.pct_launch.pct) connection pipelines by default;
        elsewhere set C(ansible_pipelining=true)), because without pipelining Ansible writes the module with its arguments
        to a file on the target first, so the action plugin refuses O(env) there and starts nothing.
      - On the target the values are written only to C(RUN_DIR/env) (mode 0600, in C(/run), a tmpfs on most systems),
        which the job's parent deletes before the job starts.
      - Like every value of an option Ansible hides (C(no_log)), each value is masked wherever it appears in the task's
        result, inside other strings too, so a short value such as V(0) garbles the result (RV(pane_pid),
        RV(started_at)). Give values that are not secret in O(public_env).
    type: dict
  public_env:
    description:
      - Environment variables for the job that are not secret (ranks, ports, thread counts), joined with O(env). The job
        gets both, and the spec (idempotency) is that of the joined environment.
      - Their values are not hidden in the task's result. They reach the target as O(env)'s do, without a pipelining
        requirement.
      - The same rules for names as O(env); a name may not be in both.
      - C(playbooks/launch.yml) passes the variables of a multi-node job (C(job_multinode)) here.
    type: dict
  venv:
    description:
      - Absolute path of a Python virtual environment to activate for the job
        (C(VIRTUAL_ENV) is set and its C(bin) is put first in C(PATH)).
    type: str
  user:
    description:
      - Run the job as this user of the target (with C(setpriv --reuid --regid --init-groups) when available,
        else C(su -m -s /bin/sh)). The log is owned by this user. Default is root.
    type: str
  log_path:
    description:
      - Absolute path of the job's log on the target. Its directory must exist. It must not contain a newline.
      - Required when O(state) is V(started) or V(restarted).
    type: str
  log_mode:
    description:
      - What happens to an existing log when a new run starts.
      - V(rotate) renames C(LOG) to C(LOG.1) (and C(LOG.exit) to C(LOG.1.exit)), shifting older ones up to O(log_keep).
      - V(append) keeps appending to C(LOG).
      - V(fail_if_exists) refuses to start when C(LOG) exists.
      - A log is never truncated or overwritten.
    type: str
    choices: [rotate, append, fail_if_exists]
    default: rotate
  log_keep:
    description:
      - Number of rotated logs to keep with O(log_mode=rotate) (C(LOG.1) to C(LOG.N)), from V(1) to V(1000).
    type: int
    default: 5
  state:
    description:
      - V(started) starts the job unless a session of that name runs it already.
      - V(stopped) stops the job (see O(stop_signal)) and ends the session; nothing happens when none runs.
      - V(restarted) stops the running job, if any, and starts it again, in the same task (one C(pct exec) on a container).
    type: str
    choices: [started, stopped, restarted]
    default: started
  stop_signal:
    description:
      - Signal sent to the job's process group to stop it. After O(stop_timeout) seconds the group gets C(SIGKILL).
    type: str
    choices: [TERM, INT, HUP, QUIT, USR1, USR2, KILL]
    default: TERM
  stop_timeout:
    description:
      - Seconds to wait after O(stop_signal) before sending C(SIGKILL).
    type: int
    default: 30
  restart:
    description:
      - When the job's parent (the supervisor in the session, see C(docs/job-life.md)) starts the job again after it ended.
      - V(never) runs it once. V(on_failure) restarts it after any end but exit status V(0), an OOM kill included.
        V(always) restarts it after exit status V(0) too.
      - O(restart_on) narrows the failures restarted to some causes of the end (for example V(nccl), not V(python_exception)).
      - Never restarted, whatever this says - a stop by this module, the O(time_limit), an exit status in O(no_restart_exit_codes).
      - "Why an attempt was or was not started again ends the reason of the V(restarted) event (C(attempt 1: NCCL error: ...;
        restart 1 of 3: cause nccl is in restart_on)) and of the end (C(...; not restarted: cause python_exception is not in
        restart_on), C(...; not restarted: restart_limit 3 reached)), in the exit record and the history
        (RV(trainops.pct_launch.tmux_session_info#module:history[].reason))."
      - "Each attempt is marked in the log (C(### trainops.pct_launch: session=NAME attempt=N ...)), the job sees its number in
        C(TRAINOPS_ATTEMPT) (V(1), V(2), ...) and C(TRAINOPS_RESTARTS), to resume from a checkpoint, and the exit record counts
        them (RV(trainops.pct_launch.tmux_session_info#module:sessions[].attempts))."
    type: str
    choices: [never, on_failure, always]
    default: never
  restart_limit:
    description:
      - At most this many restarts (attempts are restarts plus one), V(0) to V(1000).
      - With O(restart_limit_window), only the restarts of attempts that ended within that many seconds before now count.
    type: int
    default: 3
  restart_delay:
    description:
      - Seconds before the first restart; each further restart waits O(restart_backoff) times longer, at most O(restart_max_delay).
      - With O(restart_limit_window), the backoff counts only the restarts within the window, as O(restart_limit) does.
    type: float
    default: 10
  restart_backoff:
    description:
      - Factor of the delay from one restart to the next, V(1) (no backoff) to V(10).
    type: float
    default: 2
  restart_max_delay:
    description:
      - Longest delay before a restart, in seconds.
    type: float
    default: 300
  no_restart_exit_codes:
    description:
      - Exit statuses that end the job for good, never restarted (for example a job's own "bad configuration" status).
    type: list
    elements: int
    default: []
  restart_on:
    description:
      - "The causes of a failed attempt's end (C(docs/job-life.md), Classification of the end) that O(restart) starts again;
        another cause ends the job at once. V(any) (the default) restarts every failure."
      - V(exit_status) (an exit status, nothing more found), V(signal) (killed by a signal), V(oom_kill) (the kernel's OOM killer,
        the container's memory limit), V(cuda_oom) (C(CUDA out of memory) in the log), V(nccl) (an NCCL error or watchdog
        timeout in the log), V(python_exception) (the last Python exception in the log), V(torchelastic) (torchelastic's error
        file or torchrun's summary), V(stall) (an attempt the stall watchdog stopped, O(stall_action=restart)).
      - Each end has one cause, the first of the classification that applies, for example V(torchelastic) before V(nccl) for a
        worker that failed on an NCCL error under C(torchrun), V(python_exception) for a job a signal ended after it printed a
        traceback.
      - For example V([nccl, oom_kill, signal, torchelastic]) restarts what a restart may fix and ends a job that raised a
        C(ValueError) at once.
      - O(no_restart_exit_codes) still wins. An exit status V(0) under O(restart=always) is restarted whatever this says.
      - Other than V([any]), refused with O(restart=never) (nothing to choose from) unless O(stall_action=restart); V(stall)
        needs O(stall_action=restart), and O(stall_action=restart) needs V(stall) (or V(any)) here.
    type: list
    elements: str
    choices: [any, exit_status, signal, oom_kill, cuda_oom, nccl, python_exception, torchelastic, stall]
    default: [any]
  restart_limit_window:
    description:
      - Seconds; when more than V(0), only the restarts of attempts that ended within that many seconds before now count
        against O(restart_limit) and the backoff of O(restart_delay). V(0) (the default) counts every restart of the launch.
      - For example O(restart_limit=3) with V(3600) - a 4th failure within an hour ends the job, one failure a day is
        restarted for ever.
      - C(TRAINOPS_ATTEMPT) counts every attempt all the same. A start at the container's boot (O(restart_on_boot)) counts every
        restart of the launch (the boot does not know when the earlier attempts ended).
    type: float
    default: 0
  time_limit:
    description:
      - Wall-clock limit of the job in seconds, counted from its first start across all attempts; V(0) is none.
      - O(time_limit_grace) seconds before it, the job's process group gets O(time_limit_signal); at the limit C(SIGKILL).
        The end is recorded as V(timeout) (never restarted) and notified as V(timeout).
    type: float
    default: 0
  time_limit_signal:
    description:
      - Signal sent O(time_limit_grace) seconds before O(time_limit), for the job to save a checkpoint and end.
    type: str
    choices: [TERM, INT, HUP, QUIT, USR1, USR2, KILL]
    default: TERM
  time_limit_grace:
    description:
      - Seconds between O(time_limit_signal) and C(SIGKILL); less than O(time_limit).
    type: float
    default: 30
  stall_timeout:
    description:
      - Stall watchdog - when the log gets no new bytes (with O(stall_pattern), no new line matching it) for this many
        seconds, the job counts as stalled. V(0) turns the watchdog off.
      - A stall is recorded (RV(trainops.pct_launch.tmux_session_info#module:sessions[].supervisor_state) V(stalled)) and
        notified as V(stalled) within O(stall_timeout) plus a quarter of a second, then O(stall_action) applies.
    type: float
    default: 0
  stall_pattern:
    description:
      - Python regular expression of a progress line (for example V(step \\d+|Epoch)); only lines matching it count as
        progress for O(stall_timeout). Without it, any output counts.
    type: str
  stall_action:
    description:
      - What a stall does. V(record) only records and notifies it (a later progress line ends the stall).
        V(stop) sends C(SIGTERM) to the job's process group (C(SIGKILL) 30 s later); the end is recorded as V(stalled).
        V(restart) stops it the same way and restarts it (within O(restart_limit), whatever O(restart) says; past it the
        end is V(stalled)); the attempt's cause is V(stall), which O(restart_on) must take.
    type: str
    choices: [record, stop, restart]
    default: record
  gpu_idle_timeout:
    description:
      - GPU idle watchdog, a second source of stalls - while an attempt runs, the supervisor asks C(nvidia-smi) on the
        target (O(nvidia_smi), C(--query-gpu=uuid,utilization.gpu)) every 5 seconds (a quarter of O(gpu_idle_timeout)
        when that is shorter) for the utilisation of the GPUs O(gpus) gave the job; when any one of them stays below
        O(gpu_idle_utilization) for this many seconds, the job counts as stalled. V(0) turns the watchdog off.
      - "The stall is the log watchdog's (O(stall_timeout)) - recorded as
        RV(trainops.pct_launch.tmux_session_info#module:sessions[].supervisor_state) V(stalled), notified as V(stalled),
        then O(stall_action) applies - with a reason naming the GPUs that idled and their highest reading,
        RV(trainops.pct_launch.tmux_session_info#module:sessions[].reason) C(stalled: 1 of the job's 4 GPUs idled below
        5 % for 600 s ...: GPU-1a2b3c4d 0 %). Any GPU rather than all of them, because a rank stuck in
        its data loader idles its own GPU while the others spin in an NCCL collective."
      - With O(stall_action=record), a reading at or above O(gpu_idle_utilization) of every GPU that idled ends the stall.
      - Counted from the attempt's start, so it must exceed the time the job needs before its GPUs work (loading data
        and model). A GPU that reports no utilisation (C([N/A]), as under MIG) or that C(nvidia-smi) does not list is not
        watched; a missing, failing or slow (5 s) C(nvidia-smi) gives no verdict and never stalls the job; each is noted
        once in the log as a C(### trainops.pct_launch:) line.
      - Only with O(gpus).
    type: float
    default: 0
  gpu_idle_utilization:
    description:
      - The utilisation, in percent (C(nvidia-smi)'s C(utilization.gpu), the share of time a kernel ran), below which a GPU
        idles for O(gpu_idle_timeout). From V(1) to V(100) with O(gpu_idle_timeout).
    type: float
    default: 5
  notify_command:
    description:
      - A program and its arguments, run on the target at each state change in O(notify_states), with the event as one
        JSON object on its standard input and C(TRAINOPS_EVENT), C(TRAINOPS_SESSION_NAME) and C(TRAINOPS_EXIT_STATUS) in its
        environment. It may run at most 30 s. Its output and failures go to C(RUN_DIR/notify.log); a failing notifier
        never harms the job.
      - The event has C(event), C(session_name), C(host), C(attempt), C(time), C(started_at), C(exit_status), C(end_state),
        C(cause), C(reason), C(log_path) and C(log_tail) (the last O(notify_lines) lines).
    type: list
    elements: str
  notify_url:
    description:
      - A webhook - the event is sent to it with C(POST), from the target, at each state change in O(notify_states), in
        the body O(notify_format) says (the event as JSON, as for O(notify_command), by default); 10 s per try, one retry.
        An C(http://) or C(https://) URL.
      - Treated as a secret (webhook URLs hold tokens) - never shown, never written to the log or C(notify.log).
      - It reaches the job's supervisor as the values of O(env) do - in a file of mode 0600 that the supervisor deletes before
        the job starts - and is then held in its memory only, never in C(job.json); it is kept in a file for the
        container's next boot only with O(notify_url_keep).
    type: str
  notify_format:
    description:
      - The body O(notify_url) gets, as the service behind it documents it.
      - V(json) - the event itself (C(Content-Type application/json)), for a receiver of your own, n8n, Home Assistant.
      - V(slack) (an incoming webhook - C(text) and C(blocks)), V(discord) (Execute Webhook - C(content), up to 2000
        characters, mentions in the log ping nobody), V(mattermost) (an incoming webhook - C(text)), V(teams) (a Workflows
        webhook - an Adaptive Card in C(attachments), up to 28 KB), V(gotify) (C(POST /message) - C(message), C(title),
        C(priority); its token in the URL, C(?token=)), V(ntfy) (a plain text body with the C(X-Title), C(X-Tags) and
        C(X-Priority) headers, up to 4096 bytes).
      - Every format but V(json) starts with one line - host, session, event, attempt and reason - and adds the newest
        log lines the service has room for (a code block where the service shows one).
      - Other services - through O(notify_command), for example C(apprise) (docs/job-life.md, "Notifications").
    type: str
    choices: [json, slack, discord, mattermost, teams, gotify, ntfy]
    default: json
  notify_url_keep:
    description:
      - Keep O(notify_url) in a root-only file in the container (C(/var/lib/trainops/jobs/NAME.notify), mode 0600) from the
        start until the job's end is recorded, so that the container's next boot sends the V(lost) event of a job its stop
        cut off (C(pct stop), a crash of the node; the boot unit of role C(trainops.pct_launch.boot_recorder)), and a job
        started again by O(restart_on_boot) notifies as before.
      - Without it such a job is recorded V(lost) all the same, but nobody is called at O(notify_url) (O(notify_command),
        which is no secret, is run); C(notify.log) says so.
      - Needs O(notify_url), and a launch as root (the C(trainops.pct_launch.pct) connection's).
    type: bool
    default: false
  restart_on_boot:
    description:
      - "Start the job again at the container's next boot when the container went away while it ran, as the next attempt
        of the same launch - counted against O(restart_limit) (V(0) is refused), within what is left of O(time_limit),
        marked in the log (C(### trainops.pct_launch: session=NAME attempt=N lost=container_restart ...), then the attempt's
        own line) and in the history (RV(trainops.pct_launch.tmux_session_info#module:history[].boot_restarts)), with
        C(TRAINOPS_ATTEMPT)."
      - A kill (C(pct stop), a crash or power loss of the node, a kill after a shutdown's timeout) is recorded V(lost) and
        started again. A clean shutdown (C(pct shutdown), C(pct reboot), C(vzdump) in stop mode) ends the job V(stopped)
        (cause V(shutdown)), never restarted in the container that goes down, and started again at the next boot.
      - Done by the boot unit of role C(trainops.pct_launch.boot_recorder) (C(playbooks/prepare.yml) installs it; systemd
        containers only). M(trainops.pct_launch.wait_for_log) proves the start from the new attempt's lines (the session's
        C(@trainops_log_from)).
      - Not with values in O(env) - they are secrets, deleted from the container before the job starts, so a start at
        boot would not have them; give the values that are not secret in O(public_env) (kept in a root-only file with the
        job's record), or leave O(restart_on_boot) out.
      - Needs a launch as root (the C(trainops.pct_launch.pct) connection's; the job may run as O(user)).
      - A multi-node job (C(playbooks/launch.yml)'s C(job_multinode)) restarts on one container only; its other ranks are not.
    type: bool
    default: false
  notify_states:
    description:
      - The state changes notified. V(started) (the first attempt started), V(proven) (M(trainops.pct_launch.wait_for_log)
        proved the start), V(restarted), V(stalled), V(timeout) (the limit's signal was sent), V(finished) (exit status V(0)),
        V(failed) (any other end), V(lost) (sent at the container's next boot for a job its stop cut off, with its
        C(end_state) V(lost), or null when O(restart_on_boot) started it again; see O(notify_url_keep)).
    type: list
    elements: str
    choices: [started, proven, restarted, stalled, timeout, finished, failed, lost]
    default: [started, proven, restarted, stalled, timeout, finished, failed, lost]
  notify_lines:
    description:
      - How many last log lines an event carries, V(0) to V(200).
    type: int
    default: 10
  gpus:
    description:
      - The NVIDIA GPUs the job gets, among those the target can open (as C(nvidia-smi) lists them there);
        V(all), a count (V(2)), or a list of indices as C(nvidia-smi) numbers them on the target or GPU UUIDs (V([0, 2])).
      - The job gets C(CUDA_VISIBLE_DEVICES) set to the UUIDs of the GPUs chosen (CUDA accepts UUIDs, which name the same
        GPU on the node and in every container), and RV(gpus) returns them.
      - A count takes the free GPUs with the lowest indices; a GPU that another running session of this module on the target
        holds is never given, so two jobs in one container never share a GPU. V(all) or named GPUs fail when one of them
        is held. The choices of concurrent launches on one target are serialised with a lock (C(/run/trainops/gpus.lock)).
      - Part of the job spec (the request, not the GPUs chosen), so a re-run with the same request leaves the job running.
      - When the GPUs cannot be given, nothing is started and the error names each GPU and what holds it.
      - Not with a C(CUDA_VISIBLE_DEVICES) key in O(env).
    type: raw
  gpu_exclude:
    description:
      - GPUs (indices or UUIDs) a count in O(gpus) must not take, for example the busy ones M(trainops.pct_launch.gpu_info)
        reported from the node (its RV(trainops.pct_launch.gpu_info#module:busy_uuids)).
      - Ignored for V(all) and named GPUs, which the busy-GPU check of C(playbooks/preflight.yml) warns about or refuses.
    type: list
    elements: str
    default: []
  min_free_mb:
    description:
      - Free space, in MiB, the filesystem of O(log_path) needs before a start; less fails the task and starts nothing
        (error C(log_dir_full)). V(0) does not check. A running job is never refused for it.
      - Not part of the job spec.
    type: int
    default: 0
  nvidia_smi:
    description:
      - The C(nvidia-smi) program on the target that lists its GPUs for O(gpus), a name looked up in C(PATH) and
        C(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin), or an absolute path. The supervisor asks the
        same one for O(gpu_idle_timeout).
    type: str
    default: nvidia-smi
  wait:
    description:
      - After a start (O(state=started) that started the job, or O(state=restarted)), prove it in the same task, waiting
        as M(trainops.pct_launch.wait_for_log) does, with these of its options, for this session and its log (from the
        log's start). A job that dies first fails the task at once with its exit status and the log's last lines,
        the message of M(trainops.pct_launch.wait_for_log); RV(wait) is that wait's result.
      - The first chunk of the wait (up to 10 seconds) runs in the launch's own module run, so a job that proves its
        start within it costs one module run (one C(pct exec) on a container) for the launch and the proof. When it
        has no verdict yet, the action plugin goes on in chunks, as M(trainops.pct_launch.wait_for_log) does.
      - A job found running is not waited for (the task changed nothing; its RV(proven) says whether its start was
        proven); check mode starts and waits for nothing. The options are checked before anything starts.
      - A fleet-wide wait (O(trainops.pct_launch.wait_for_log#module:fleet_id)) is M(trainops.pct_launch.wait_for_log)'s alone.
      - When not set, the task does not wait.
    type: dict
    suboptions:
      pattern:
        description:
          - Python regular expression meaning that the job started (O(trainops.pct_launch.wait_for_log#module:pattern));
            when not set, the first log line after the header is enough.
        type: str
      fail_pattern:
        description:
          - Python regular expression meaning that the job failed (O(trainops.pct_launch.wait_for_log#module:fail_pattern)).
        type: str
      timeout:
        description:
          - Seconds to wait in total for the verdict, the first chunk included (O(trainops.pct_launch.wait_for_log#module:timeout)).
        type: float
        default: 600
      sleep:
        description:
          - Poll interval on the target in seconds, more than V(0) and at most V(1) (O(trainops.pct_launch.wait_for_log#module:sleep)).
        type: float
        default: 0.5
      tail_lines:
        description:
          - How many last lines of the log the wait's result returns (O(trainops.pct_launch.wait_for_log#module:tail_lines)).
        type: int
        default: 40
      wait_until:
        description:
          - V(started) ends the wait once the start is proven; V(finished) waits on until the job ends and succeeds only
            with exit status V(0) (O(trainops.pct_launch.wait_for_log#module:wait_until)).
        type: str
        choices: [started, finished]
        default: started
      show_lines:
        description:
          - Print the log's new lines as they come (O(trainops.pct_launch.wait_for_log#module:show_lines)).
          - When not set, V(true) with O(wait.wait_until=finished), V(false) with O(wait.wait_until=started).
        type: bool
attributes:
  action:
    details:
      - The action plugin refuses O(env) when the task is not pipelined, then runs the module.
  check_mode:
    support: full
    details:
      - The preflight checks run in check mode too; nothing is written or started.
  diff_mode:
    support: full
  idempotent:
    support: full
    details:
      - Except for O(state=restarted), which always restarts the job.
notes:
  - A restart of the target (a container restart) ends all tmux sessions in it; the log then lacks its trailer and C(LOG.exit) is missing.
  - The job's parent writes the exit record twice, to C(/run/trainops/NAME/exit) (always writable, lost at a reboot) and
    to C(LOG.exit) (kept); when the log's file system is full only the first exists, and the exit status is read from it.
seealso:
  - module: trainops.pct_launch.tmux_session_info
  - module: trainops.pct_launch.wait_for_log
"""

EXAMPLES = r"""
# The tasks run on the host they start the job on: here a container reached with
# ansible_connection: trainops.pct_launch.pct (host vars pct_vmid: 201), pipelined (env needs it).
- name: Start training in CT 201 (changed only when it was not running)
  trainops.pct_launch.tmux_session:
    session_name: train-resnet
    argv: [python, train.py, --epochs, "90"]
    chdir: /srv/train
    venv: /srv/train/.venv
    user: trainer
    env:  # secret: hidden in the result
      WANDB_API_KEY: "{{ wandb_api_key }}"
    public_env:  # not secret: shown as it is
      CUDA_VISIBLE_DEVICES: "0"
      OMP_NUM_THREADS: "8"
    log_path: /srv/train/logs/train-resnet.log

- name: Start a shell pipeline, appending to the same log at every run
  trainops.pct_launch.tmux_session:
    session_name: prep
    command: ./prepare.sh --all 2>&1 | tee -a prep-detail.txt
    chdir: /srv/train
    log_path: /var/log/prep.log
    log_mode: append

- name: Restart with a new spec
  trainops.pct_launch.tmux_session:
    session_name: train-resnet
    state: restarted
    argv: [python, train.py, --epochs, "120"]
    chdir: /srv/train
    log_path: /srv/train/logs/train-resnet.log

- name: Stop it (SIGINT, then SIGKILL after 60 s)
  trainops.pct_launch.tmux_session:
    session_name: train-resnet
    state: stopped
    stop_signal: INT
    stop_timeout: 60

- name: Train with restarts from the last checkpoint, a 12 h limit, a stall watchdog and a webhook
  trainops.pct_launch.tmux_session:
    session_name: train
    command: python train.py --resume-from-latest
    chdir: /workspace
    log_path: /workspace/train.log
    restart: on_failure
    restart_limit: 3
    time_limit: 43200
    time_limit_signal: USR2
    stall_timeout: 900
    stall_pattern: 'step \d+'
    stall_action: restart
    notify_url: "{{ vault_webhook_url }}"

- name: Restart only what a restart may fix, and stop a crash loop (a 4th failure within an hour), not a job failing once a day
  trainops.pct_launch.tmux_session:
    session_name: train
    command: torchrun --nproc-per-node 4 train.py --resume-from-latest
    chdir: /workspace
    log_path: /workspace/train.log
    restart: on_failure
    restart_on: [nccl, oom_kill, signal, torchelastic]
    restart_limit: 3
    restart_limit_window: 3600

- name: Start training and prove it in the same task (one pct exec when the first step comes within 10 s)
  trainops.pct_launch.tmux_session:
    session_name: train
    argv: [python3, train.py]
    chdir: /workspace
    log_path: /workspace/train.log
    wait:
      pattern: 'step \d+ loss'
      fail_pattern: 'Traceback|CUDA out of memory'
      timeout: 300
  register: train_launch

- name: Train on two free GPUs of the container (CUDA_VISIBLE_DEVICES is set to their UUIDs)
  trainops.pct_launch.tmux_session:
    session_name: train-gpu
    argv: [python3, train.py]
    chdir: /workspace
    log_path: /workspace/train.log
    gpus: 2
"""

RETURN = r"""
session_name:
  description: The tmux session name.
  returned: always
  type: str
  sample: train-resnet
log_path:
  description: The job's log on the target.
  returned: always
  type: str
  sample: /srv/train/logs/train-resnet.log
rotated_log:
  description: Where the previous log went when this task rotated it, else null.
  returned: always
  type: str
  sample: /srv/train/logs/train-resnet.log.1
pane_pid:
  description: PID (on the target) of the process in the session's pane, the job's parent; null when none runs.
  returned: always
  type: int
  sample: 4242
started_at:
  description: When the running job was started, ISO 8601 UTC; null when none runs.
  returned: always
  type: str
  sample: "2025-01-31T12:00:00Z"
tmux_version:
  description: Version of tmux on the target, null when it is not installed.
  returned: always
  type: str
  sample: 3.3a
state:
  description:
    - State of the session after the task (predicted in check mode).
    - V(running) (the job runs), V(finished) (it ended, C(LOG.exit) exists; after a restart of its container the boot unit
      writes it for a job the restart cut off, C(end_state=lost)), V(vanished) (the log exists without C(LOG.exit), for
      example after a container restart without the boot unit) or V(absent).
    - With O(wait), the state when the job was started; RV(wait) tells how the wait for it ended.
  returned: always
  type: str
  sample: running
exit_status:
  description:
    - Exit status of the job (128+N when killed by signal N), from its exit record.
    - Also for a job that had already finished when O(state=stopped) found it; without O(log_path) the log
      is the one the last launch of O(session_name) recorded.
  returned: when the job ended during the task, or had already finished
  type: int
  sample: 143
proven:
  description:
    - For a running job, whether its start was proven, that is whether M(trainops.pct_launch.wait_for_log) reached the
      verdict V(started) for this session (it records that on the session, tmux user option C(@trainops_proven)).
    - V(false) for a job this task started (V(true) when O(wait) proved its start), and for a running job whose start was never proven (for example when the
      controller or the node was lost during the wait); C(playbooks/launch.yml) then proves it.
    - Null when no job runs after the task, and in check mode.
  returned: always
  type: bool
  sample: true
log_size:
  description:
    - For a job found running (O(state=started), nothing changed), the size of its log in bytes when the task read it.
    - Pass it as O(trainops.pct_launch.wait_for_log#module:offset) to wait for the job's end from where its log ended
      then, without its earlier lines (C(playbooks/launch.yml) does so with C(job_wait_until=finished)).
  returned: when O(state=started) found the job running and its log readable
  type: int
  sample: 52133
gpus:
  description:
    - UUIDs of the GPUs the job was given (O(gpus)), in the order of C(CUDA_VISIBLE_DEVICES); in check mode, the ones it would get.
  returned: when O(gpus) gave the running or finished job GPUs
  type: list
  elements: str
  sample: ["GPU-4b1d6e0a-6c8b-4a57-9f1e-3f8a5c2d7e10"]
error:
  description:
    - Why the task failed on the target, a code such as V(tmux_missing), V(chdir_missing), V(venv_missing),
      V(script_missing), V(log_dir_missing), V(log_exists), V(gpu_unavailable) or V(invalid_option) (an option the
      checks after the argument spec refuse, such as a bad O(session_name) or a bad regex in O(wait)); nothing was started.
  returned: when the task failed on the target before the job started
  type: str
  sample: tmux_missing
wait:
  description:
    - With O(wait), the result of the wait for the start, as M(trainops.pct_launch.wait_for_log) returns it
      (RV(trainops.pct_launch.wait_for_log#module:verdict), RV(trainops.pct_launch.wait_for_log#module:matched_line),
      RV(trainops.pct_launch.wait_for_log#module:exit_status), RV(trainops.pct_launch.wait_for_log#module:log_tail), ...).
    - Its C(pct_calls) counts the calls after the launch's own, in which the first chunk ran (V(0) when the job proved
      its start at once).
  returned: when O(wait) is set and the task started the job (not in check mode)
  type: dict
  sample: {"verdict": "started", "matched_line": "step 1 loss 2.31", "elapsed": 0.41, "pct_calls": 0}
killed:
  description: True when stopping needed C(SIGKILL) after O(stop_timeout).
  returned: when stopping needed SIGKILL
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_run import ARGUMENT_SPEC, RULES, run


def main() -> None:
    """Run the module: validate the options, then launch, stop or restart on this host."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **RULES)
    outcome = run(module.params, module.check_mode, module._diff)
    if outcome.pop("failed", False):
        module.fail_json(**outcome)
    module.exit_json(**outcome)


if __name__ == "__main__":
    main()
