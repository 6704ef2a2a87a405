# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Unit tests for wait_for_log's shared code: options, the poll program (run locally), results, messages.

The poll program runs on this machine with ``sh -c`` standing in for the container, once with python3
(the normal engine) and once with python3 hidden (the sh + grep -E fallback). Sessions use a private
tmux server and are skipped without tmux.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils._log_wait import (
    ARGUMENT_SPEC,
    build_poll_program,
    check_options,
    ere_from_python,
    message,
    parse_poll_output,
    program_failure,
    reason,
    result_from_facts,
)

HEADER = b"### trainops.pct_launch: session=train started_at=2025-01-01T00:00:00Z host=ct command=python train.py --fail Traceback\n"
TOOLS = ("sh", "awk", "tail", "head", "cut", "wc", "tr", "cat", "grep", "sed", "sleep", "date", "ps", "kill", "basename")


def private_tmux(program: str) -> str:
    """The program with tmux talking to the test's private server (TMUX_TMPDIR) instead of root's default one."""
    patched = (program.replace('tm() { env -i PATH="$PATH" HOME=/root tmux -u "$@"; }', 'tm() { tmux -u "$@"; }')
               .replace('TMUX_ENV = {"PATH": PATH, "HOME": "/root"}', 'TMUX_ENV = None'))
    assert 'env -i PATH="$PATH" HOME=/root tmux' not in patched and '"HOME": "/root"}' not in patched
    return patched


def params(**kwargs: object) -> dict[str, object]:
    """Module options with their defaults."""
    values = {name: spec.get("default") for name, spec in ARGUMENT_SPEC.items()}
    values["vmid"] = 250
    values.update(kwargs)
    return values


def tools_path(tmp_path: Path, engine: str) -> str:
    """PATH for the program: this machine's, or (engine sh) only the tools the sh fallback uses."""
    if engine == "python3":
        return os.environ.get("PATH", "/usr/bin:/bin")
    bin_dir = tmp_path / "bin-sh-only"
    if not bin_dir.exists():
        bin_dir.mkdir()
        for name in (*TOOLS, "tmux"):
            found = shutil.which(name)
            if found:
                (bin_dir / name).symlink_to(found)
    return str(bin_dir)


def poll(tmp_path: Path, engine: str, duration: float = 2.0, offset: int = 0, **kwargs: object) -> dict[str, object]:
    """Run one chunk locally and return the parsed facts (with the raw output under ``_out``)."""
    program = private_tmux(build_poll_program(params(**kwargs), duration, offset))
    env = {"PATH": tools_path(tmp_path, engine), "LANG": "C.UTF-8", "TMUX_TMPDIR": str(tmp_path)}
    proc = subprocess.run(["/bin/sh", "-c", program], capture_output=True, encoding="utf-8", errors="surrogateescape",
                          env=env, stdin=subprocess.DEVNULL, timeout=60, check=False)
    facts = parse_poll_output(proc.stdout)
    facts["_out"] = proc.stdout + proc.stderr
    facts["_rc"] = proc.returncode
    return facts


ENGINES = pytest.mark.parametrize("engine", ["python3", "sh"])


@pytest.mark.parametrize("kwargs, fragment", [
    ({"pattern": "Epoch ("}, "Cannot use option pattern 'Epoch ('"),
    ({"fail_pattern": "[Trace"}, "Cannot use option fail_pattern '[Trace'"),
    ({"sleep": 1.5}, "Cannot use option sleep 1.5"),
    ({"sleep": 0}, "Cannot use option sleep 0"),
    ({"timeout": 0}, "Cannot use option timeout 0"),
    ({"tail_lines": -1}, "Cannot use option tail_lines -1"),
    ({"offset": -1}, "Cannot use option offset -1"),
    ({"vmid": 5}, "Cannot use option vmid 5"),
    ({"session_name": "a:b"}, "Cannot use option session_name 'a:b'"),
    ({"log_path": "train.log"}, "Cannot use option log_path 'train.log'"),
])
def test_check_options(kwargs: dict[str, object], fragment: str) -> None:
    errors = check_options(params(**{"session_name": "train", "log_path": "/w/t.log", **kwargs}))
    assert len(errors) == 1 and errors[0].startswith(fragment)


def test_check_options_regex_message_names_cause_and_fix() -> None:
    error = check_options(params(session_name="t", pattern="a)"))[0]
    assert "not a valid Python regular expression (unbalanced parenthesis at position 1)" in error and "fix the expression" in error


def test_check_options_ok() -> None:
    assert not check_options(params(session_name="train", log_path="/w/t.log", pattern=r"Epoch \d+/", fail_pattern="Traceback", sleep=1))


def test_ere_from_python() -> None:
    assert ere_from_python(r"Epoch \d+ \D") == "Epoch [0-9]+ [^0-9]"


def test_program_carries_values_without_shell_interpretation() -> None:
    hostile = "it's $(touch x) `y` \"q\"\n"
    program = build_poll_program(params(log_path="/w/" + hostile.strip(), pattern=hostile), 3, 7)
    hex_value = program.split('bytes.fromhex("', 1)[1].split('"', 1)[0]
    carried = json.loads(bytes.fromhex(hex_value))
    assert carried["pattern"] == hostile and carried["offset"] == 7 and carried["duration"] == 3.0
    assert "PATTERN='it'\"'\"'s $(touch x)" in program


@ENGINES
def test_started_with_pattern(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"loading\nEpoch 1/10 loss=3\nEpoch 2/10\n")
    facts = poll(tmp_path, engine, log_path=str(log), pattern=r"Epoch \d+/10")
    assert facts["engine"] == engine and facts["verdict"] == "started", facts["_out"]
    assert facts["matched_line"] == "Epoch 1/10 loss=3"
    assert facts["offset"] == str(log.stat().st_size) and facts["log_size"] == str(log.stat().st_size)
    assert facts["tail"] == [HEADER.decode().rstrip("\n"), "loading", "Epoch 1/10 loss=3", "Epoch 2/10"]


@ENGINES
def test_header_alone_is_not_enough_without_pattern(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER)
    facts = poll(tmp_path, engine, duration=1, log_path=str(log))
    assert facts["verdict"] == "pending" and facts["log_exists"] == "1", facts["_out"]
    log.write_bytes(HEADER + b"hello\n")
    facts = poll(tmp_path, engine, duration=1, log_path=str(log), offset=int(facts["offset"]))
    assert facts["verdict"] == "started" and facts["matched_line"] == "hello", facts["_out"]


@ENGINES
def test_protocol_lines_never_match(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"### trainops.pct_launch: session=train exit_status=0 ended_at=x\n")
    facts = poll(tmp_path, engine, duration=1, log_path=str(log), pattern="Traceback|train", fail_pattern="Traceback")
    assert facts["verdict"] == "pending", facts["_out"]


@ENGINES
def test_partial_line_is_not_matched_until_complete(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1/1")
    facts = poll(tmp_path, engine, duration=1, log_path=str(log), pattern="Epoch 1/10$")
    assert facts["verdict"] == "pending" and facts["offset"] == str(len(HEADER)), facts["_out"]
    with log.open("ab") as out:
        out.write(b"0\n")
    facts = poll(tmp_path, engine, duration=1, log_path=str(log), pattern="Epoch 1/10$", offset=int(facts["offset"]))
    assert facts["verdict"] == "started" and facts["matched_line"] == "Epoch 1/10", facts["_out"]


@ENGINES
def test_offset_skips_lines_already_read(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"Epoch 1\n")
    facts = poll(tmp_path, engine, duration=1, log_path=str(log), pattern="Epoch", offset=log.stat().st_size)
    assert facts["verdict"] == "pending", facts["_out"]


@ENGINES
def test_fail_pattern_first_in_log_order(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"x\nTraceback (most recent call last):\nEpoch 1\n")
    facts = poll(tmp_path, engine, log_path=str(log), pattern="Epoch", fail_pattern="Traceback")
    assert facts["verdict"] == "fail_pattern" and facts["matched_line"].startswith("Traceback"), facts["_out"]
    log.write_bytes(HEADER + b"Epoch 1\nTraceback\n")
    facts = poll(tmp_path, engine, log_path=str(log), pattern="Epoch", fail_pattern="Traceback")
    assert facts["verdict"] == "started", facts["_out"]


@ENGINES
def test_exit_file_means_died(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"boom\n### trainops.pct_launch: session=train exit_status=3 ended_at=x\n")
    (tmp_path / "t.log.exit").write_text("session_name=train\nexit_status=3\nended_at=2025-01-01T00:00:01Z\n")
    facts = poll(tmp_path, engine, duration=30, log_path=str(log), pattern="Epoch", tail_lines=2)
    assert facts["verdict"] == "died" and facts["exit"]["exit_status"] == "3", facts["_out"]
    assert facts["tail"] == ["boom", "### trainops.pct_launch: session=train exit_status=3 ended_at=x"]
    assert float(facts.get("chunk_elapsed", 0)) < 5


@ENGINES
def test_missing_log(tmp_path: Path, engine: str) -> None:
    facts = poll(tmp_path, engine, duration=1, log_path=str(tmp_path / "none.log"))
    assert facts["verdict"] == "pending" and facts["log_exists"] == "0" and facts["session"] == "none", facts["_out"]


@ENGINES
def test_log_appears_during_the_chunk(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "late.log"
    timer = threading.Timer(0.8, lambda: log.write_bytes(HEADER + b"ready\n"))
    timer.start()
    try:
        facts = poll(tmp_path, engine, duration=10, log_path=str(log), pattern="ready")
    finally:
        timer.cancel()
    assert facts["verdict"] == "started", facts["_out"]


@ENGINES
def test_long_and_odd_lines(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "t.log"
    log.write_bytes(HEADER + b"pct % \x1b[1m\xff\r\n" + b"y" * 300000 + b"\nEpoch %1\n")
    facts = poll(tmp_path, engine, log_path=str(log), pattern="Epoch %1", tail_lines=3)
    assert facts["verdict"] == "started" and facts["matched_line"] == "Epoch %1", facts["_out"]
    assert facts["tail"][0].startswith("pct % \x1b[1m\ufffd") and facts["tail"][2] == "Epoch %1"
    assert 1000 <= len(facts["tail"][1]) <= 4000


def test_unknown_log_path(tmp_path: Path) -> None:
    facts = poll(tmp_path, "python3", session_name="nosuch")
    assert facts["verdict"] == "died" and facts["session"] in ("absent", "tmux_missing") and facts["log_path"] == ""


@pytest.fixture()
def tmux_env(tmp_path: Path):
    """A private tmux server for one test; killed at the end."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMUX_TMPDIR": str(tmp_path), "LANG": "C.UTF-8"}
    yield env
    subprocess.run(["tmux", "kill-server"], env=env, capture_output=True, check=False)


def launch(env: dict[str, str], name: str, log: Path, script: str) -> None:
    """Start a job the way the launch protocol does: header, job, LOG.exit (tmp + mv)."""
    wrapper = (f"printf '%s' '{HEADER.decode()}' > {log}; ( {script} ) >> {log} 2>&1; s=$?; "
               f"printf 'session_name={name}\\nexit_status=%s\\n' $s > {log}.exit.tmp; mv {log}.exit.tmp {log}.exit")
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "sh", "-c", wrapper], env=env, check=True, stdin=subprocess.DEVNULL)
    subprocess.run(["tmux", "set-option", "-t", f"={name}:", "@trainops_log", str(log)], env=env, check=True)


@ENGINES
def test_session_dies_fails_fast(tmp_path: Path, tmux_env: dict[str, str], engine: str) -> None:
    log = tmp_path / "crash.log"
    launch(tmux_env, "crash", log, "echo starting; sleep 1; echo oops; exit 7")
    began = time.monotonic()
    facts = poll(tmp_path, engine, duration=30, session_name="crash", pattern="Epoch")
    assert facts["verdict"] == "died" and facts["exit"]["exit_status"] == "7", facts["_out"]
    assert facts["log_path"] == str(log) and "oops" in facts["tail"]
    assert time.monotonic() - began < 15


@ENGINES
def test_session_killed_without_exit_file(tmp_path: Path, tmux_env: dict[str, str], engine: str) -> None:
    log = tmp_path / "k.log"
    launch(tmux_env, "k", log, "echo hi; sleep 60")
    subprocess.run(["tmux", "kill-session", "-t", "=k"], env=tmux_env, check=True)
    facts = poll(tmp_path, engine, duration=30, session_name="k", log_path=str(log), pattern="Epoch")
    assert facts["verdict"] == "died" and facts["session"] == "absent" and not facts["exit"], facts["_out"]
    assert result_from_facts(facts, 0.5)["session_state"] == "vanished"


@ENGINES
def test_timeout_reports_process_tree(tmp_path: Path, tmux_env: dict[str, str], engine: str) -> None:
    log = tmp_path / "slow.log"
    launch(tmux_env, "slow", log, "echo warming up; sleep 61")
    time.sleep(0.3)
    facts = poll(tmp_path, engine, duration=1, session_name="slow", pattern="Epoch")
    assert facts["verdict"] == "pending" and facts["session"] == "alive" and int(facts["pane_pid"]) > 1, facts["_out"]
    assert any("sleep 61" in line for line in facts["ps"]), facts["ps"]


def test_result_and_messages() -> None:
    opts = params(session_name="train", log_path="/w/t.log", pattern="Epoch", fail_pattern="Traceback", timeout=30)
    base = {"engine": "python3", "log_path": "/w/t.log", "log_exists": "1", "log_size": "99", "offset": "99",
            "tail": ["a\r", "b"], "ps": [], "exit": {}}
    started = result_from_facts(dict(base, verdict="started", session="alive", pane_pid="5", matched_line="Epoch 1"), 1.25)
    assert started["verdict"] == "started" and started["session_alive"] and started["log_tail"] == ["a", "b"]
    assert message(started, opts) == "Job started in session train in container 250: pattern 'Epoch' matched after 1.2 s: 'Epoch 1'"
    died = result_from_facts(dict(base, verdict="died", session="ended", exit={"exit_status": "7"}), 0.8)
    assert died["session_state"] == "finished" and died["exit_status"] == 7 and not died["session_alive"]
    assert message(died, opts).startswith("Job did not start in session train in container 250: the job ended with exit status 7 after 0.8 s")
    failed = result_from_facts(dict(base, verdict="fail_pattern", session="alive", matched_line="Traceback (x)"), 2)
    assert "a log line matches fail_pattern 'Traceback'" in message(failed, opts)
    pending = dict(base, verdict="pending", session="alive", pane_pid="5", ps=["PID PPID", "5 1 S python   train.py"])
    timeout = result_from_facts(pending, 30)
    assert timeout["verdict"] == "timeout"
    text = message(timeout, opts)
    assert text.startswith("Timed out after 30 s waiting for a log line matching 'Epoch' in session train in container 250")
    assert "log /w/t.log exists (99 bytes)" in text and "alive (pane_pid 5, 1 processes: 5 1 S python train.py)" in text
    gone = result_from_facts(dict(base, verdict="died", session="absent", log_exists="0", tail=[]), 0.1)
    assert gone["session_state"] == "absent" and message(gone, opts).startswith("Cannot find session train in container 250")


def test_reason_is_the_message_without_the_log_lines() -> None:
    """launch.yml's summary reads ``reason``: the cause and the fix, never the job's log lines (no message parsing)."""
    opts = params(session_name="train", log_path="/w/t.log", pattern="Epoch", fail_pattern="Traceback", timeout=30)
    base = {"engine": "python3", "log_path": "/w/t.log", "log_exists": "1", "log_size": "99", "offset": "99",
            "tail": ["loading data; last log lines: fake", "CUDA error"], "ps": [], "exit": {"exit_status": "3"}}
    for facts in (dict(base, verdict="died", session="ended"), dict(base, verdict="fail_pattern", session="alive", matched_line="Traceback"),
                  dict(base, verdict="pending", session="alive", pane_pid="5")):
        result = result_from_facts(facts, 1.0)
        full, short = message(result, opts), reason(result, opts)
        assert "last log lines: loading data" in full and "CUDA error" in full, full
        assert "CUDA error" not in short and "loading data" not in short, short
        assert short.split(";")[0] == full.split(";")[0] and short.endswith(full.rsplit("; ", 1)[1]), (short, full)


def test_program_failure() -> None:
    opts = params(session_name="t")
    assert program_failure(0, "trainops:verdict=started\n", "", opts) is None
    text = program_failure(3, "trainops:error=pattern_invalid\ntrainops:message=bad%20one\n", "", opts)
    assert text == "Cannot wait for session t in container 250: the poll program in the container failed (exit status 3): bad one"
    assert "exit status 2): sh: 1: syntax error" in program_failure(2, "", "sh: 1: syntax error\n", opts)


# ---- the start proof (@trainops_proven) and the exit record in /run/trainops/NAME/exit (proof-and-exit) ----

def run_root_at(tmp_path: Path, program: str) -> str:
    """The program with /run/trainops/ moved into the test's directory."""
    return program.replace("/run/trainops/", f"{tmp_path}/run/")


def poll_with_run(tmp_path: Path, engine: str, duration: float = 2.0, **kwargs: object) -> dict[str, object]:
    """``poll`` with the run directory in tmp_path."""
    program = run_root_at(tmp_path, private_tmux(build_poll_program(params(**kwargs), duration, 0)))
    env = {"PATH": tools_path(tmp_path, engine), "LANG": "C.UTF-8", "TMUX_TMPDIR": str(tmp_path)}
    proc = subprocess.run(["/bin/sh", "-c", program], capture_output=True, encoding="utf-8", errors="surrogateescape",
                          env=env, stdin=subprocess.DEVNULL, timeout=60, check=False)
    facts = parse_poll_output(proc.stdout)
    facts["_out"] = proc.stdout + proc.stderr
    return facts


def show_proven(env: dict[str, str], name: str) -> str:
    out = subprocess.run(["tmux", "show-options", "-v", "-t", f"={name}:", "@trainops_proven"], env=env,
                         capture_output=True, text=True, check=False)
    return out.stdout.strip()


@ENGINES
def test_started_is_recorded_on_the_session(tmp_path: Path, tmux_env: dict[str, str], engine: str) -> None:
    log = tmp_path / "p.log"
    launch(tmux_env, "p", log, "echo Epoch 1; sleep 60")
    assert show_proven(tmux_env, "p") == ""
    facts = poll(tmp_path, engine, duration=20, session_name="p", pattern="Epoch")
    assert facts["verdict"] == "started" and facts["proof_recorded"] == "1", facts["_out"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", show_proven(tmux_env, "p"))
    assert result_from_facts(facts, 0.5)["proof_recorded"] is True


@ENGINES
def test_no_proof_without_a_started_verdict_or_a_session(tmp_path: Path, tmux_env: dict[str, str], engine: str) -> None:
    log = tmp_path / "q.log"
    launch(tmux_env, "q", log, "echo warming up; sleep 60")
    facts = poll(tmp_path, engine, duration=1, session_name="q", pattern="Epoch")
    assert facts["verdict"] == "pending" and "proof_recorded" not in facts, facts["_out"]
    facts = poll(tmp_path, engine, duration=5, log_path=str(log), pattern="warming")
    assert facts["verdict"] == "started" and "proof_recorded" not in facts, facts["_out"]
    assert show_proven(tmux_env, "q") == "" and result_from_facts(facts, 0.5)["proof_recorded"] is False


@ENGINES
@pytest.mark.parametrize("exit_file", [None, b""])
def test_died_reads_the_exit_record_in_run(tmp_path: Path, engine: str, exit_file: bytes | None) -> None:
    log = tmp_path / "full.log"
    log.write_bytes(HEADER + b"filling\n")
    if exit_file is not None:
        Path(f"{log}.exit").write_bytes(exit_file)
    run = tmp_path / "run" / "full"
    run.mkdir(parents=True)
    (run / "log_path").write_text(str(log))
    (run / "exit").write_text("session_name=full\nexit_status=3\nstarted_at=S\nended_at=E\n")
    facts = poll_with_run(tmp_path, engine, duration=5, session_name="full", pattern="Epoch")
    assert facts["verdict"] == "died" and facts["exit"]["exit_status"] == "3", facts["_out"]
    assert result_from_facts(facts, 0.5)["session_state"] == "finished"
    (run / "log_path").write_text(str(tmp_path / "another.log"))  # the record belongs to another launch
    facts = poll_with_run(tmp_path, engine, duration=5, session_name="full", log_path=str(log), pattern="Epoch")
    assert facts["verdict"] == "died" and facts["exit"].get("exit_status") is None, facts["_out"]


@ENGINES
def test_log_exit_stays_the_primary_record(tmp_path: Path, engine: str) -> None:
    log = tmp_path / "both.log"
    log.write_bytes(HEADER)
    Path(f"{log}.exit").write_text("session_name=both\nexit_status=0\n")
    run = tmp_path / "run" / "both"
    run.mkdir(parents=True)
    (run / "log_path").write_text(str(log))
    (run / "exit").write_text("session_name=both\nexit_status=9\n")
    facts = poll_with_run(tmp_path, engine, duration=5, session_name="both", pattern="Epoch")
    assert facts["verdict"] == "died" and facts["exit"]["exit_status"] == "0", facts["_out"]
