# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The boot recorder: at the container's boot, the end of each job its last stop cut off (docs/job-life.md,
"A container that goes away").

The unit ``trainops-boot.service`` (role ``trainops.pct_launch.boot_recorder``) runs ``BOOT_DIR/python -I
BOOT_DIR/boot.py`` once at each boot, as root, and ``boot.py`` (``_boot_entry``) runs ``main``. A live record
(``_job_live``) of another boot whose launch has no exit record is a job that was running when the container went
away (``pct stop``, a crash or power loss of the node, a kill after a shutdown's timeout). For each, ``settle``:

- marks it in the log (``### trainops.pct_launch: session=NAME attempt=N lost=container_restart boot_at=T``);
- with ``restart_on_boot``: starts it again as the next attempt of the same launch (``_job_resume.again``);
- otherwise, or when it is not started again, writes its end (``_job_lost.write_end``): ``end_state=lost``,
  ``cause=container_restart``, an empty ``exit_status`` (nobody saw the end) and the reason naming the restart,
  ``lost: the container restarted at T; the job was running (attempt 2), its last log line at T2: ...``;
- sends the ``lost`` event through the job's notifiers: ``notify_command``, and ``notify_url`` only when the launch
  kept it (``notify_url_keep``); without it the event is a line in ``RUN_DIR/notify.log``, nobody is called.

A clean shutdown leaves the exit record its supervisor wrote: the record only goes, or, with ``restart_on_boot``, the
job is started again (``_job_resume.after_shutdown``). Records of this boot are left alone (the unit ran again).
Standard library only, Python 3.7 or later; staged by each launch as root (``_boot_stage``).
"""

from __future__ import annotations

import sys
import time
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_end, _job_live, _job_lost, _job_notify, _job_resume
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import LIVE_DIR
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_lost import CAUSE, attempt_of, launch_of, reason
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_process import now, read_exit_record
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_restart import policy_of

NOTIFY_WAIT = 25.0  # s for all the lost events at the end (a webhook: 10 s, 2 s, 10 s)
# s a job started again waits for its lost event, which then comes before the job's own (restarted)
ANNOUNCE_WAIT = 5.0


def event(record: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The ``lost`` event, as the supervisor's (its ``reason`` and ``end_state`` filled in when it is sent)."""
    attempt = attempt_of(record)
    lines = int(policy_of(record.get("job") or {})["notify_lines"])
    return {"event": "lost", **launch_of(record), "attempt": attempt, "attempts": attempt, "time": now(), "exit_status": None,
            "end_state": None, "cause": CAUSE, "reason": None, "log_tail": _job_end.last_lines(str(record.get("log_path") or ""), lines)}


class Announcer:
    """The ``lost`` event of one job, through its notifiers: its ``notify_command``, and its ``notify_url`` when the
    launch kept it. Sent before a start at boot (waited for ``ANNOUNCE_WAIT`` s, so that it comes before the job's own
    ``restarted``), and with the end when the job is not started again."""

    def __init__(self, path: str, record: t.Mapping[str, t.Any], head: str) -> None:
        self.record, self.head, self.lost = record, head, event(record)  # the log's tail before the boot's mark
        self.url = _job_live.kept_url(path) if record.get("notify_url_kept") else None
        self.senders: list[_job_notify.Notifier] = []

    def __call__(self, tail: str, ended: bool) -> None:
        self.lost.update(reason=reason(self.head, tail), end_state="lost" if ended else None, time=now())
        sys.stdout.write(f"session {self.record['session_name']}: {self.lost['reason']}\n")
        settings = dict(policy_of(self.record.get("job") or {}), notify_url=self.url)
        sender = _job_notify.Notifier(settings, str(self.record["run_dir"]))
        if self.record.get("notify_url_set") and self.url is None and "lost" in sender.states and not self.senders:
            sender.note("notify_url", "lost", "not sent: the launch did not keep the URL (notify_url_keep)")
        sender.send(dict(self.lost))
        if not ended:
            sender.close(ANNOUNCE_WAIT)
        self.senders.append(sender)


def ended_cleanly(path: str, record: t.Mapping[str, t.Any], recorded: t.Mapping[str, str], boot: str, boot_at: str) -> None:
    """Its supervisor recorded the end (a clean shutdown): the record goes, or ``restart_on_boot`` starts the job again."""
    if not (record.get("restart_on_boot") and recorded.get("cause") == "shutdown"
            and _job_resume.after_shutdown(path, record, recorded, boot, boot_at)):
        _job_live.remove(path, record.get("started_at"))


def settle(path: str, record: t.Mapping[str, t.Any], boot: str, boot_at: str) -> list[_job_notify.Notifier]:
    """Record (or start again) the job of a live record of another boot; the notifiers sending its ``lost`` event."""
    log = str(record.get("log_path") or "")
    recorded = read_exit_record(log, None) if log else None
    if recorded is not None and recorded.get("started_at") == record.get("started_at"):
        ended_cleanly(path, record, recorded, boot, boot_at)
        return []
    head, sign = _job_lost.lost_words(record, boot_at), _job_lost.last_sign(path, record)  # before the log's mark
    announce = Announcer(path, record, head)
    log_from = _job_lost.mark_log(record, f"lost={CAUSE} boot_at={boot_at}")
    _job_lost.run_dir_again(record)  # for notify.log
    tail, runs = ("", False)
    if record.get("restart_on_boot"):
        tail, runs = _job_resume.again(path, record, head, boot, time.time() if sign is None else sign, announce.url, log_from,
                                       before=lambda words: announce(words, False))
    if not runs:
        _job_lost.write_end(record, None, _job_live.iso(sign) if sign is not None else boot_at,
                            {"attempts": attempt_of(record), "end_state": "lost", "cause": CAUSE, "reason": reason(head, tail)})
        _job_live.remove(path, record.get("started_at"))
        announce(tail, True)
    return announce.senders


def main(live_dir: str = LIVE_DIR, proc_root: str = "/proc") -> int:
    """Settle every live record of another boot; 0, or 1 when one of them could not be settled."""
    boot, boot_at = _job_live.boot_key(proc_root), _job_live.boot_time(proc_root)
    senders: list[_job_notify.Notifier] = []
    failed = 0
    for path, record in _job_live.records(live_dir):
        if record.get("boot") == boot:
            continue
        try:
            senders += settle(path, record, boot, boot_at)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # one job's record never keeps the others'
            failed += 1
            sys.stderr.write(f"session {record.get('session_name')}: not recorded: {type(exc).__name__}: {exc}\n")
    deadline = time.monotonic() + NOTIFY_WAIT
    for sender in senders:
        sender.close(max(0.0, deadline - time.monotonic()))
    sys.stdout.flush()
    return 1 if failed else 0
