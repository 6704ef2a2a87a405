# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Values of ``env`` never leak, on a real container (CT 501).

A secret (with quotes, a newline, ``$()``, backticks, ``%`` and a random token) is given in ``env`` to
launches, restarts, a spec conflict, check mode, a short and a long job. It must never appear:

(a) on the node's process list (``ps -eo args`` and /proc/*/cmdline polled in a thread; every
    ``execve`` of the launches, the tmux server, the wrapper and the job recorded with strace when
    the node has it); and in no process's environment but the job's;
(b) in Ansible's output, at verbosity 0 and -vvvv, with and without task-level ``no_log``, with --diff;
(c) in the log header or the log; (d) in any file of the container (``env`` is deleted once the job
started, /run/trainops is 0700); (e) in tmux's environment or options; (f) in ``LOG.exit``.

Secrets are looked for by two random hex tokens inside them, which survive any quoting, and by the
hex encoding of those tokens.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.trainops.pct_launch.plugins.module_utils._pct import resolve_pct
from ansible_collections.trainops.pct_launch.plugins.modules import tmux_session, tmux_session_info, wait_for_log

from ..module_main import run_main as invoke
from .conftest import StandinNode

pytestmark = pytest.mark.integration

CT = 501
PYTHON = sys.executable
CANARY = "/tmp/pwned-s501"


class Secret:
    """A hostile secret value with two random tokens to look for."""

    def __init__(self, label: str, non_utf8: bool = False) -> None:
        self.tokens = [f"{label}{secrets.token_hex(8)}", secrets.token_hex(8)]
        tail = " \udcff\udcfe" if non_utf8 else ""
        # No '{{' or '{%': Ansible templates variables.
        self.value = (f"{self.tokens[0]} it's \"$(touch {CANARY}-a)\" `touch {CANARY}-b` *?[x]\n-n %s %n %% \\ \\n ü ✓"
                      f"\r\t{self.tokens[1]}{tail}")

    def needles(self) -> list[bytes]:
        """What must not be found: the tokens and their hex encodings."""
        raw = [token.encode() for token in self.tokens]
        return raw + [token.hex().encode() for token in raw]

    def found_in(self, data: bytes | str) -> list[bytes]:
        """The needles found in ``data``."""
        blob = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        return [needle for needle in self.needles() if needle in blob]


class Watcher:
    """Polls the node's process list (ps -eo args, and /proc/*/cmdline directly) in a thread."""

    def __init__(self, secrets_: list[Secret]) -> None:
        self.secrets = secrets_
        self.hits: list[str] = []
        self.snapshots = 0
        self.ps_runs = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _check(self, where: str, data: bytes) -> None:
        for secret in self.secrets:
            if secret.found_in(data):
                self.hits.append(f"{where}: {data[:300]!r}")

    def _run(self) -> None:
        while not self.done.is_set():
            # /proc/*/cmdline directly (what ps shows, faster), and ps itself every third round
            for name in os.listdir("/proc"):
                if name.isdigit():
                    with contextlib.suppress(OSError), open(f"/proc/{name}/cmdline", "rb") as handle:
                        self._check(f"/proc/{name}/cmdline", handle.read())
            if self.snapshots % 3 == 0:
                self._check("ps -eo args", subprocess.run(["ps", "-eo", "args"], capture_output=True, check=False).stdout)
                self.ps_runs += 1
            self.snapshots += 1

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


def ct_sh(node: StandinNode, script: str, *args: str, input_data: bytes | None = None) -> bytes:
    """Output of a sh script inside the container (values as arguments or on stdin, never secrets in argv)."""
    result = node.pct("exec", CT, "--", "sh", "-c", script, "sh", *args, input=input_data, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


# Reads the needles (hex, one a line) on stdin; reports every regular file holding one, on / and the
# usual separate file systems, each walked without crossing into others (/proc and /sys are skipped).
SCAN = r"""
import json, os, stat, sys
needles = [bytes.fromhex(line) for line in sys.stdin.read().split()]
seen, hits, scanned = set(), [], 0
for root in ("/", "/run", "/tmp", "/dev/shm", "/var/tmp", "/root", "/home"):
    try:
        dev = os.lstat(root).st_dev
    except OSError:
        continue
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))
                   and os.lstat(os.path.join(folder, d)).st_dev == dev]
        for name in files:
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            scanned += 1
            if any(needle in data for needle in needles):
                hits.append([path, "%o" % stat.S_IMODE(info.st_mode)])
print(json.dumps({"scanned": scanned, "hits": hits}))
"""
# Modes of /run/trainops and its session folders, and the files in each.
LAYOUT = r"""
import json, os, stat
out, root = {"dirs": {}}, "/run/trainops"
out[root] = "%o" % stat.S_IMODE(os.lstat(root).st_mode)
for name in sorted(os.listdir(root)):
    path = os.path.join(root, name)
    out[path] = "%o" % stat.S_IMODE(os.lstat(path).st_mode)
    out["dirs"][path] = {f: "%o" % stat.S_IMODE(os.lstat(os.path.join(path, f)).st_mode) for f in sorted(os.listdir(path))}
print(json.dumps(out))
"""
TMUX_STATE = """
t() { env -i PATH=/usr/bin:/bin HOME=/root tmux -u "$@" 2>&1; }
t show-environment -g; t show-options -g; t show-options -s; t show-options -w -g
for s in $(t list-sessions -F '#{session_name}'); do
  echo "== $s"; t show-environment -t "=$s"; t show-options -t "=$s:"; t show-options -w -t "=$s:"; t show-options -p -t "=$s:"
  t display-message -p -t "=$s:" '#{pane_start_command} #{pane_current_command} #{pane_title}'
done
"""


def assert_no_leak_in_container(node: StandinNode, all_secrets: list[Secret]) -> None:
    """(c) to (f): files of the container, /run/trainops, tmux state, LOG.exit, environments of processes."""
    needles = b"\n".join(needle.hex().encode() for secret in all_secrets for needle in secret.needles())
    report = json.loads(ct_sh(node, 'exec python3 -c "$1"', SCAN, input_data=needles))
    assert report["scanned"] > 1000 and report["hits"] == [], report["hits"]
    layout = json.loads(ct_sh(node, 'exec python3 -c "$1"', LAYOUT))
    assert layout["/run/trainops"] == "700", layout
    for folder, files in layout["dirs"].items():
        assert layout[folder] == "700" and "env" not in files, (folder, layout)
    tmux_state = ct_sh(node, TMUX_STATE)
    exit_files = ct_sh(node, "cat /s/*.exit")
    assert b"exit_status=" in exit_files
    for secret in all_secrets:
        assert not secret.found_in(tmux_state), "a secret is in tmux's environment or options"
        assert not secret.found_in(exit_files), "a secret is in a LOG.exit"
    assert glob.glob(CANARY + "*") == [] and ct_sh(node, f"ls {CANARY}* 2>/dev/null || true") == b""


def environ_holders(all_secrets: list[Secret], mark: bytes) -> tuple[list[str], int]:
    """Processes on the node whose environment holds a secret but not ``mark`` (the job's), and how many hold both."""
    strangers, jobs = [], 0
    for path in glob.glob("/proc/[0-9]*/environ"):
        with contextlib.suppress(OSError):
            environ = Path(path).read_bytes()
            if any(secret.found_in(environ) for secret in all_secrets):
                if mark in environ:
                    jobs += 1
                else:
                    cmdline = Path(path).with_name("cmdline").read_bytes().replace(b"\0", b" ")
                    strangers.append(f"{path}: {cmdline[:200]!r}")
    return strangers, jobs


@pytest.fixture(scope="module")
def node(standin: StandinNode) -> StandinNode:
    """CT 501 with tmux and /s for the logs."""
    standin.create(CT)
    standin.apt_install(CT, "tmux")
    ct_sh(standin, "mkdir -p /s")
    return standin


def run_playbook(tmp_path: Path, tasks: list[dict[str, t.Any]], variables: dict[str, t.Any], verbosity: list[str]) -> subprocess.CompletedProcess[str]:
    """ansible-playbook on this node (the Proxmox node) with --diff; the variables come from a file, not argv."""
    varfile = tmp_path / f"vars-{secrets.token_hex(4)}.json"
    varfile.write_text(json.dumps(variables), encoding="utf-8")
    varfile.chmod(0o600)
    play = tmp_path / f"play-{secrets.token_hex(4)}.yml"
    play.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]), encoding="utf-8")
    argv = [str(Path(PYTHON).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={PYTHON}",
            "-e", f"@{varfile}", "--diff", *verbosity, str(play)]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL, check=False)


def playbook_tasks(tag: str, mark: str, full: bool) -> list[dict[str, t.Any]]:
    """Launch, restart (no_log), conflict, debug of a result; when full also unchanged, check mode, a short job, wait,
    stop and launch again."""
    long_job = {"vmid": CT, "session_name": f"pb-long-{tag}", "command": "echo started; exec sleep 600",
                "env": {"API_TOKEN": "{{ secret }}", "JOB_MARK": mark}, "log_path": f"/s/pb-long-{tag}.log"}
    short_job = {"vmid": CT, "session_name": f"pb-short-{tag}", "command": 'test -n "$API_TOKEN"; echo "done $?"',
                 "env": {"API_TOKEN": "{{ secret }}", "JOB_MARK": mark}, "log_path": f"/s/pb-short-{tag}.log"}
    module = "trainops.pct_launch.tmux_session"
    tasks = [
        {"name": "Launch", module: long_job, "register": "launched"},
        {"name": "Restart with no_log", module: dict(long_job, state="restarted"), "no_log": True},
        {"name": "Conflict", module: dict(long_job, env={"API_TOKEN": "{{ secret }}-2", "JOB_MARK": mark}), "ignore_errors": True},
        {"name": "Show a result", "ansible.builtin.debug": {"var": "launched"}},
    ]
    return tasks if not full else tasks + [
        {"name": "Unchanged", module: long_job},
        {"name": "Check mode", module: dict(long_job, session_name=f"pb-check-{tag}", log_path=f"/s/pb-check-{tag}.log"), "check_mode": True},
        {"name": "Short job", module: short_job},
        {"name": "Wait", "trainops.pct_launch.wait_for_log": {"vmid": CT, "session_name": f"pb-short-{tag}", "pattern": "^done 0$",
                                                              "timeout": 30}},
        {"name": "Stop", module: {"vmid": CT, "session_name": f"pb-long-{tag}", "state": "stopped"}},
        {"name": "Launch again", module: long_job},
    ]


def test_secret_not_in_ansible_output_nor_on_the_process_list(node: StandinNode, tmp_path: Path) -> None:
    """(a) and (b) through ansible-playbook, at verbosity 0 and -vvvv; then (c) to (f) in the container."""
    used: list[Secret] = []
    mark = "mark-" + secrets.token_hex(6)
    for tag, verbosity in (("v0", []), ("v4", ["-vvvv"])):
        secret = Secret(f"pb{tag}")
        used.append(secret)
        with Watcher([secret]) as watcher:
            proc = run_playbook(tmp_path, playbook_tasks(tag, mark, full=bool(verbosity)), {"secret": secret.value}, verbosity)
        output = proc.stdout + proc.stderr
        assert "failed=0" in proc.stdout and "ignored=1" in proc.stdout, output[-3000:]
        assert "is already running with a different spec" in output and "values not shown" in output
        assert not secret.found_in(output), f"secret in ansible-playbook {' '.join(verbosity)} output"
        assert watcher.snapshots > 20 and watcher.ps_runs > 5 and watcher.hits == [], watcher.hits
        print(f"ansible-playbook {' '.join(verbosity) or '(verbosity 0)'}: {len(output)} characters of output, "
              f"{watcher.snapshots} process-list snapshots ({watcher.ps_runs} with ps), no secret")
    assert_no_leak_in_container(node, used)
    strangers, jobs = environ_holders(used, mark.encode())
    assert strangers == [] and jobs >= 1, (strangers, jobs)


TRACER = """#!/bin/sh
# pct that records every execve of this call and of what it starts (the tmux server too) with strace
strace -f -qq -s 65536 -e trace=execve,execveat -o "{trace}/trace.$$" -p $$ </dev/null >/dev/null 2>&1 &
echo $! >> "{trace}/strace.pids"
i=0
while ! grep -q '^TracerPid:[[:space:]]*[1-9]' /proc/$$/status && [ "$i" -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
exec {pct} "$@"
"""


@pytest.fixture()
def traced_pct(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A pct_path whose calls (and the tmux server they start) are traced by strace; the strace processes end with the test."""
    pct = resolve_pct("pct")
    assert pct is not None
    trace = tmp_path / "trace"
    trace.mkdir()
    if shutil.which("strace") is None:
        yield pct, trace
        return
    script = tmp_path / "pct-traced"
    script.write_text(TRACER.format(trace=trace, pct=pct), encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    yield str(script), trace
    pids = trace / "strace.pids"
    for line in pids.read_text(encoding="utf-8").split() if pids.exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line), signal.SIGTERM)


def test_secret_not_in_any_exec_file_tmux_or_exit_file(node: StandinNode, traced_pct: tuple[str, Path]) -> None:
    """(a) with every execve recorded, a long job, restarted, a short job and a crash; then (c) to (f)."""
    pct_path, trace = traced_pct
    ct_sh(node, "env -i PATH=/usr/bin:/bin HOME=/root tmux kill-server 2>/dev/null; true")  # the traced launch starts the server
    secret = Secret("ip", non_utf8=True)
    mark = "mark-" + secrets.token_hex(6)
    env = {"API_TOKEN": secret.value, "JOB_MARK": mark}
    base = {"vmid": CT, "pct_path": pct_path}
    launches = [
        dict(base, session_name="ip-long", command="echo started; exec sleep 600", env=env, log_path="/s/ip-long.log"),
        dict(base, session_name="ip-long", command="echo started; exec sleep 600", env=env, log_path="/s/ip-long.log", state="restarted"),
        dict(base, session_name="ip-short", argv=["python3", "-c", "import os; print(len(os.environ['API_TOKEN']) > 20)"], env=env,
             log_path="/s/ip-short.log"),
        dict(base, session_name="ip-crash", command="echo crashing; exit 3", env=env, log_path="/s/ip-crash.log"),
    ]
    results = []
    with Watcher([secret]) as watcher:
        for args in launches:
            results.append(invoke(tmux_session, args))
            # the wrapper deletes the env file before the job's first instruction; the launch returns after that
            listing = ct_sh(node, 'ls -A "/run/trainops/$1"', args["session_name"]).split()
            assert b"env" not in listing, listing
        waited = invoke(wait_for_log, dict(base, session_name="ip-short", pattern="^True$", timeout=20))
        info = invoke(tmux_session_info, dict(base))
        strangers, jobs = environ_holders([secret], mark.encode())
        assert_no_leak_in_container(node, [secret])
        stopped = invoke(tmux_session, dict(base, session_name="ip-long", state="stopped"))
        time.sleep(0.3)
    assert [r.get("changed") for r in results] == [True, True, True, True], results
    assert waited["verdict"] == "started" and stopped["exit_status"] == 143, (waited, stopped)
    for outcome in [*results, waited, info, stopped]:
        assert not secret.found_in(json.dumps(outcome)), outcome
    assert strangers == [] and jobs >= 1, (strangers, jobs)
    assert watcher.snapshots > 10 and watcher.hits == [], watcher.hits
    exit_file = ct_sh(node, "cat /s/ip-long.log.exit")
    assert b"exit_status=143" in exit_file and not secret.found_in(exit_file)
    header = ct_sh(node, "head -n 1 /s/ip-long.log /s/ip-crash.log")
    assert b"command=echo started; exec sleep 600" in header and b"command=echo crashing; exit 3" in header
    traces = b"".join(path.read_bytes() for path in trace.glob("trace.*"))
    if shutil.which("strace") is None:
        pytest.skip("no strace on this node: execve records not checked (process list and files were)")
    execs = [line for line in traces.split(b"\n") if b"execve" in line and b"= 0" in line]
    assert any(b"/run/trainops/ip-long/run.sh" in line for line in execs) and any(b'"sleep", "600"' in line for line in execs), \
        "strace did not see the wrapper and the job"
    assert not secret.found_in(traces), [line for line in execs if secret.found_in(line)]
    print(f"strace: {len(execs)} execve calls recorded, none with the secret; {watcher.snapshots} process-list snapshots "
          f"({watcher.ps_runs} with ps)")
