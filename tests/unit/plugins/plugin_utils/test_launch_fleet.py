# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What launch.yml decides about its fleet from the results its containers registered (plugin_utils/_launch_fleet.py)."""

from __future__ import annotations

import typing as t

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._launch_fleet import Launch, first_line, fleet, launch_outcome

SKIPPED = {"skipped": True, "changed": False}
STARTED = {"changed": True, "state": "running", "pane_pid": 41, "log_path": "/w/train.log", "proven": True,
           "wait": {"verdict": "started"}}
RUNNING = {"changed": False, "state": "running", "pane_pid": 7, "log_path": "/w/train.log", "proven": True}


def host(vmid: int | None = None, **registered: t.Any) -> dict[str, t.Any]:
    """A host's variables: its container and what it registered."""
    return ({"pct_vmid": vmid} if vmid is not None else {}) | registered


def test_a_start_and_a_job_found_running() -> None:
    hostvars = {"a": host(200, job_launch=STARTED), "b": host(201, job_launch=RUNNING, job_reproof=SKIPPED)}
    found = fleet(["a", "b"], hostvars, Launch("train"))
    assert found["results"] == {"a": {"status": "started", "reason": ""}, "b": {"status": "already running", "reason": ""}}
    assert found["failures"] == {} and found["culprits"] == [] and found["undo"] is False and found["to_stop"] == []
    assert found["summary"] == ["train: 2 of 2 containers run", "a (CT 200 on localhost): started", "b (CT 201 on localhost): already running"]
    assert found["report"] == {"a": "train in CT 200: started, pane_pid 41, log /w/train.log",
                               "b": "train in CT 201: already running, pane_pid 7, log /w/train.log"}


def test_check_mode_predicts_a_start() -> None:
    found = fleet(["a"], {"a": host(200, job_launch={"changed": True, "error": "tmux_missing", "msg": "tmux is missing"})},
                  Launch("train", check_mode=True))
    assert found["results"]["a"]["status"] == "would start"
    assert found["summary"][0] == "train: 1 of 1 containers would run"
    assert "(check mode: not checked before prepare.yml has run: tmux is missing)" in found["report"]["a"]


def test_a_job_found_running_whose_start_is_proven_now_or_that_finished() -> None:
    unproven = dict(RUNNING, proven=False)
    assert launch_outcome({"job_launch": unproven, "job_reproof": {"verdict": "started"}}, False) == {
        "status": "already running", "reason": "start proven now"}
    assert launch_outcome({"job_launch": RUNNING, "job_reproof": {"verdict": "finished"}}, False)["reason"] == "finished (exit status 0)"
    assert launch_outcome({"job_launch": dict(STARTED, wait={"verdict": "finished"})}, False)["reason"] == "finished (exit status 0)"
    report = fleet(["a"], {"a": host(None, job_launch=unproven, job_reproof={"verdict": "started"})}, Launch("t", log_path="/l"))["report"]
    assert report == {"a": "t in host a: already running, start proven now, pane_pid 7, log /w/train.log"}


def test_a_failed_launch_names_its_first_line_and_fails_its_host_only() -> None:
    failed = {"failed": True, "changed": False, "reason": "exit status 3 before the pattern\nlog tail...", "msg": "long"}
    hostvars = {"a": host(200, job_launch=STARTED), "b": host(201, job_launch=failed, job_launch_failure=failed)}
    found = fleet(["a", "b"], hostvars, Launch("train"))
    assert found["results"]["b"] == {"status": "failed", "reason": "exit status 3 before the pattern"}
    assert found["culprits"] == ["b"] and found["launch_failed"] == ["b"] and found["undo"] is False
    assert found["failures"] == {"b": "train in CT 201: failed: exit status 3 before the pattern"}
    assert found["summary"][0] == "train: 1 of 2 containers run, failed: b"
    assert "b" not in found["report"]


def test_a_failed_proof_in_the_handler_and_an_unforeseen_failure() -> None:
    proof = {"failed": True, "msg": "no line matched within 5 s"}
    assert launch_outcome({"job_launch": STARTED, "job_wait": proof, "job_launch_failure": {}}, False) == {
        "status": "failed", "reason": "no line matched within 5 s"}
    assert launch_outcome({"job_launch": STARTED, "job_launch_failure": {"msg": "template error"}}, False)["reason"] == "template error"
    assert launch_outcome({"job_launch": STARTED, "job_launch_failure": {}}, False)["reason"] == "see its error above"


def test_a_host_lost_during_the_launch_and_hosts_lost_before_it() -> None:
    hostvars = {"a": host(200), "b": host(201, job_prepared={"prepared": False}), "c": host(202), "d": host(203, job_launch=STARTED)}
    found = fleet(["a", "b", "c", "d"], hostvars, Launch("train", lost=("a", "b")))
    assert found["results"]["a"]["reason"] == "preflight.yml failed on it before the launch (its error is shown above)"
    assert found["results"]["b"]["reason"] == "prepare.yml failed on it before the launch (its error is shown above)"
    assert found["results"]["c"] == {"status": "failed", "reason": "lost during the launch (unreachable?): see above"}
    assert found["results"]["d"]["status"] == "started" and found["culprits"] == ["a", "b", "c"]
    assert sorted(found["failures"]) == ["a", "b", "c"]


def test_all_or_nothing_refuses_after_a_loss_before_the_launch() -> None:
    hostvars = {"a": host(200), "b": host(201, job_launch=SKIPPED)}
    found = fleet(["a", "b"], hostvars, Launch("train", lost=("a",), all_or_nothing=True))
    assert found["refused"] is True and found["undo"] is True and found["to_stop"] == []
    assert found["results"]["b"] == {"status": "not started", "reason": "job_all_or_nothing, and a failed before the launch"}
    assert found["failures"]["b"] == "train in CT 201: not started: job_all_or_nothing, and a failed before the launch"


def test_all_or_nothing_stops_what_this_run_started_and_leaves_what_ran_before() -> None:
    failed = {"failed": True, "changed": True, "msg": "died: exit status 1"}
    cut = {"verdict": "fleet_failed", "fleet_failure": {"host": "c"}, "failed": True}
    hostvars = {"a": host(200, job_launch=dict(STARTED, wait=None), job_wait=cut, job_launch_failure={}),
                "b": host(201, job_launch=RUNNING, job_reproof=cut, job_launch_failure={}),
                "c": host(202, job_launch=dict(STARTED, wait=None), job_wait=dict(failed), job_launch_failure={})}
    launch = Launch("train", all_or_nothing=True)
    before = fleet(["a", "b", "c"], hostvars, launch)
    assert before["results"]["a"] == {"status": "cut short", "reason": "its proof was cut short when c failed first"}
    assert before["culprits"] == ["c"] and before["undo"] is True and before["to_stop"] == ["a", "c"]
    hostvars["a"]["job_fleet_stop"] = {"changed": True}
    hostvars["c"]["job_fleet_stop"] = {"changed": True}
    after = fleet(["a", "b", "c"], hostvars, launch)
    assert after["results"]["a"] == {"status": "stopped", "reason": "started, then stopped by job_all_or_nothing because c failed"}
    assert after["results"]["b"]["status"] == "already running" and after["results"]["b"]["reason"].startswith("left running although c failed")
    assert after["results"]["c"]["status"] == "failed"  # its own failure stays
    assert after["failures"]["b"].endswith("(job_all_or_nothing: c failed)") and set(after["failures"]) == {"a", "b", "c"}


def test_a_stop_that_failed_is_a_failure() -> None:
    hostvars = {"a": host(200, job_launch=STARTED, job_fleet_stop={"error": "tmux_failed", "msg": "no server"}),
                "b": host(201, job_launch={"failed": True, "msg": "bad"}, job_launch_failure={})}
    found = fleet(["a", "b"], hostvars, Launch("train", all_or_nothing=True))
    assert found["results"]["a"] == {"status": "failed", "reason": "started, then NOT stopped (no server) by job_all_or_nothing because b failed"}
    assert found["culprits"] == ["b"]  # computed before the stops: the failed stop is no culprit of its own


def test_the_first_failure_of_a_fleet_wide_wait_comes_first() -> None:
    failed = {"failed": True, "msg": "x"}
    hostvars = {"a": host(200, job_launch=STARTED, job_wait=dict(failed), job_launch_failure={}),
                "b": host(201, job_launch=STARTED, job_wait=dict(failed, fleet_failure={"host": "b"}), job_launch_failure={})}
    assert fleet(["a", "b"], hostvars, Launch("t", all_or_nothing=True))["culprits"] == ["b", "a"]


def test_check_mode_stops_nothing() -> None:
    hostvars = {"a": host(200, job_launch=STARTED), "b": host(201, job_launch={"failed": True, "msg": "bad"}, job_launch_failure={})}
    assert fleet(["a", "b"], hostvars, Launch("t", all_or_nothing=True, check_mode=True))["to_stop"] == []


def test_the_report_of_a_multinode_job_and_gpus() -> None:
    hostvars = {"a": host(200, job_launch=dict(STARTED, gpus=["GPU-1", "GPU-2"], rotated_log="/w/train.log.1"), job_fleet_master_addr="10.0.0.5"),
                "b": host(201, job_launch=STARTED, job_fleet_master_addr="10.0.0.5")}
    report = fleet(["a", "b"], hostvars, Launch("t", multinode=True, master_port=29600))["report"]
    assert report["a"] == ("t in CT 200: started, pane_pid 41, log /w/train.log (earlier log kept as /w/train.log.1) on GPUs GPU-1,GPU-2 "
                           "(NODE_RANK 0 of 2, MASTER_ADDR 10.0.0.5:29600)")
    assert report["b"].endswith("(NODE_RANK 1 of 2, MASTER_ADDR 10.0.0.5:29600)")


def test_first_line() -> None:
    assert first_line("  one\ntwo") == "one" and first_line(None) == "" and first_line("x" * 500) == "x" * 397 + "..."


def test_the_report_names_the_backups_ahead() -> None:
    """preflight.yml's backup_window_info result: each window's summary in the report of a container where the job runs."""
    window = {"summary": "backup job backup-1 stops it at Sun 2026-12-06 01:00 +0100 (in 5 h, mode stop, schedule 'sun 01:00')",
              "message": "Backup job backup-1 stops CT 200 in 5 h: ..."}
    hostvars = {"a": host(200, job_launch=STARTED, preflight_backup={"windows": [window], "problems": []}),
                "b": host(201, job_launch=STARTED, preflight_backup={"windows": [], "problems": ["Cannot read ..."]}),
                "c": host(202, job_launch={"failed": True, "msg": "bad"}, job_launch_failure={},
                          preflight_backup={"windows": [window]}),
                "d": host(203, job_launch=STARTED, preflight_backup={"skipped": True, "windows": [window]})}
    decided = fleet(["a", "b", "c", "d"], hostvars, Launch("t"))
    assert decided["report"]["a"] == ("t in CT 200: started, pane_pid 41, log /w/train.log (backup ahead: backup job backup-1 "
                                      "stops it at Sun 2026-12-06 01:00 +0100 (in 5 h, mode stop, schedule 'sun 01:00'))")
    assert "backup ahead" not in decided["report"]["b"] and "c" not in decided["report"] and "backup" not in decided["report"]["d"]
    assert decided["backup_windows"] == {"a": [window["summary"]], "c": [window["summary"]]}
