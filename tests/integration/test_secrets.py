# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Values of ``env`` never leak, on a real container (CT 501) reached with the pct connection.

The modules run in the container, an inventory host of the collection's ``trainops.pct_launch.pct``
connection: with pipelining each task is one ``pct exec`` whose standard input carries the module and
its arguments. A secret (with quotes, a newline, ``$()``, backticks, ``%`` and a random token) is
given in ``env`` to launches, restarts, a spec conflict, check mode, a short and a long job and a job
that crashes. It must never appear:

(a) on the process list (``ps -eo args`` and /proc/*/cmdline polled in a thread on the node, which
    sees the container's processes too; every ``execve`` of the ``pct`` calls and of what they start
    in the container, the tmux server, the job's supervisor and the job, recorded with strace through a
    ``pct_path`` wrapper when the node has strace), and in no process's environment but the job's;
(b) in Ansible's output, at verbosity 0 and -vvvv, with and without task-level ``no_log``, with
    --diff, nor in the task results;
(c) in the log header or the log; (d) in any file of the container (``env`` is deleted once the job
started, /run/trainops is 0700); (e) in tmux's environment or options; (f) in ``LOG.exit``.

A secret with non-UTF-8 bytes cannot travel as a module argument (Ansible's variables are UTF-8
text): it is launched through tests/integration/files/module_utils_driver.py in the container (the
launch code the module runs there), on standard input of a traced ``pct exec``, and checked the same
way. Without pipelining a task with ``env`` is refused before anything is sent to the container.

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
import threading
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import StandinNode
from .driver_in_container import drive, install_driver
from .playbook_results import PlayRun, container_host, exec_calls, run_tasks

pytestmark = pytest.mark.integration

CT = 501
HOST = f"ct{CT}"
CANARY = "/tmp/pwned-s501"
# Where the pct connection looks up a pct_path given as a name.
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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


def assert_no_file_holds(node: StandinNode, all_secrets: list[Secret]) -> None:
    """(c) and (d): no regular file of the container (logs included) holds a secret."""
    needles = b"\n".join(needle.hex().encode() for secret in all_secrets for needle in secret.needles())
    report = json.loads(ct_sh(node, 'exec python3 -c "$1"', SCAN, input_data=needles))
    assert report["scanned"] > 1000 and report["hits"] == [], report["hits"]


def assert_no_leak_in_container(node: StandinNode, all_secrets: list[Secret]) -> None:
    """(c) to (f): files of the container, /run/trainops, tmux state, LOG.exit; no injected command ran."""
    assert_no_file_holds(node, all_secrets)
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
    """CT 501 with tmux, /s for the logs and the driver."""
    standin.create(CT)
    standin.apt_install(CT, "tmux")
    ct_sh(standin, "mkdir -p /s")
    install_driver(standin, CT)
    return standin


def run_play(tmp_path: Path, tasks: list[dict[str, t.Any]], variables: dict[str, t.Any], options: t.Sequence[str] = (),
             **host_vars: t.Any) -> PlayRun:
    """ansible-playbook on the container host (the pct connection, pipelined unless host_vars say otherwise).

    The variables come from a file (mode 0600), never argv.
    """
    varfile = tmp_path / f"vars-{secrets.token_hex(4)}.json"
    varfile.write_text(json.dumps(variables), encoding="utf-8")
    varfile.chmod(0o600)
    return run_tasks(tmp_path, {HOST: container_host(CT, **host_vars)}, tasks, options=["-e", f"@{varfile}", *options])


def output_of(run: PlayRun) -> str:
    """What ansible-playbook printed and the results it recorded (trainops_results callback)."""
    return run.proc.stdout + run.proc.stderr + json.dumps(run.results)


def playbook_tasks(tag: str, mark: str, full: bool) -> list[dict[str, t.Any]]:
    """Launch, restart (no_log), conflict, debug of a result; when full also unchanged, check mode, a short job, wait,
    stop and launch again."""
    long_job = {"session_name": f"pb-long-{tag}", "command": "echo started; exec sleep 600",
                "env": {"API_TOKEN": "{{ secret }}", "JOB_MARK": mark}, "log_path": f"/s/pb-long-{tag}.log"}
    short_job = {"session_name": f"pb-short-{tag}", "command": 'test -n "$API_TOKEN"; echo "done $?"',
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
        {"name": "Wait", "trainops.pct_launch.wait_for_log": {"session_name": f"pb-short-{tag}", "pattern": "^done 0$", "timeout": 30}},
        {"name": "Stop", module: {"session_name": f"pb-long-{tag}", "state": "stopped"}},
        {"name": "Launch again", module: long_job},
    ]


@pytest.mark.both_privileges
def test_secret_not_in_ansible_output_nor_on_the_process_list(node: StandinNode, tmp_path: Path) -> None:
    """(a) and (b) through ansible-playbook, at verbosity 0 and -vvvv; then (c) to (f) in the container."""
    used: list[Secret] = []
    mark = "mark-" + secrets.token_hex(6)
    for tag, verbosity in (("v0", []), ("v4", ["-vvvv"])):
        secret = Secret(f"pb{tag}")
        used.append(secret)
        with Watcher([secret]) as watcher:
            run = run_play(tmp_path, playbook_tasks(tag, mark, full=bool(verbosity)), {"secret": secret.value}, ["--diff", *verbosity])
        output = output_of(run)
        assert "failed=0" in run.proc.stdout and "ignored=1" in run.proc.stdout, output[-3000:]
        assert "is already running with a different spec" in output and "values not shown" in output
        assert run.result("Launch", HOST)["changed"] is True
        if verbosity:
            assert run.result("Wait", HOST)["verdict"] == "started" and run.result("Stop", HOST)["exit_status"] == 143
            assert exec_calls(run.proc.stdout, HOST).get("Launch") == 1, "the launch is not one pipelined pct exec"
        assert not secret.found_in(output), f"secret in ansible-playbook {' '.join(verbosity)} output or results"
        assert watcher.snapshots > 20 and watcher.ps_runs > 5 and watcher.hits == [], watcher.hits
        print(f"ansible-playbook {' '.join(verbosity) or '(verbosity 0)'}: {len(output)} characters of output and results, "
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
    pct = shutil.which("pct", path=NODE_PATH)
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


def launch_tasks(mark: str) -> list[dict[str, t.Any]]:
    """A long job, restarted, a short job and a crash, each followed by a listing of its run folder; a wait and a report."""
    env = {"API_TOKEN": "{{ secret }}", "JOB_MARK": mark}
    launches = [
        ("Launch long", dict(session_name="ip-long", command="echo started; exec sleep 600", env=env, log_path="/s/ip-long.log")),
        ("Restart long", dict(session_name="ip-long", command="echo started; exec sleep 600", env=env, log_path="/s/ip-long.log",
                              state="restarted")),
        ("Launch short", dict(session_name="ip-short", argv=["python3", "-c", "import os; print(len(os.environ['API_TOKEN']) > 20)"],
                              env=env, log_path="/s/ip-short.log")),
        ("Launch crash", dict(session_name="ip-crash", command="echo crashing; exit 3", env=env, log_path="/s/ip-crash.log")),
    ]
    tasks: list[dict[str, t.Any]] = []
    for name, args in launches:
        # the job's parent deletes the env file before the job's first instruction; the launch returns after that
        tasks += [{"name": name, "trainops.pct_launch.tmux_session": args, "ignore_errors": True},
                  {"name": f"List after {name}", "ansible.builtin.command": {"argv": ["ls", "-A", f"/run/trainops/{args['session_name']}"]}}]
    return tasks + [
        {"name": "Wait", "trainops.pct_launch.wait_for_log": {"session_name": "ip-short", "pattern": "^True$", "timeout": 20},
         "ignore_errors": True},
        {"name": "Report", "trainops.pct_launch.tmux_session_info": {}},
    ]


def test_secret_not_in_any_exec_file_tmux_or_exit_file(node: StandinNode, traced_pct: tuple[str, Path], tmp_path: Path) -> None:
    """(a) with every execve recorded, a long job, restarted, a short job, a crash and a secret with non-UTF-8 bytes; then (c) to (f)."""
    pct_path, trace = traced_pct
    ct_sh(node, "env -i PATH=/usr/bin:/bin HOME=/root tmux kill-server 2>/dev/null; true")  # the traced launch starts the server
    secret, raw_secret = Secret("ip"), Secret("ib", non_utf8=True)
    mark = "mark-" + secrets.token_hex(6)
    with Watcher([secret, raw_secret]) as watcher:
        run = run_play(tmp_path, launch_tasks(mark), {"secret": secret.value}, pct_path=pct_path)
        # non-UTF-8 bytes cannot be a module argument: the launch code through the driver, on stdin of a traced pct exec
        raw_launch = drive(node, CT, {"session_name": "ip-bytes", "command": "echo started; exec sleep 600",
                                      "env": {"API_TOKEN": raw_secret.value, "JOB_MARK": mark}, "log_path": "/s/ip-bytes.log"}, pct=pct_path)
        raw_listing = ct_sh(node, 'ls -A "/run/trainops/$1"', "ip-bytes").split()
        strangers, jobs = environ_holders([secret, raw_secret], mark.encode())
        assert_no_leak_in_container(node, [secret, raw_secret])
        stops = run_play(tmp_path, [{"name": f"Stop {name}", "trainops.pct_launch.tmux_session": {"session_name": name, "state": "stopped"}}
                                    for name in ("ip-long", "ip-bytes")], {}, pct_path=pct_path)
    launches = [run.result(name, HOST) for name in ("Launch long", "Restart long", "Launch short", "Launch crash")]
    assert [r.get("changed") for r in launches] == [True, True, True, True], launches
    assert raw_launch.get("changed") is True and raw_launch.get("state") == "running", raw_launch
    for name in ("Launch long", "Restart long", "Launch short", "Launch crash"):
        listing = run.result(f"List after {name}", HOST)["stdout_lines"]
        assert "spec" in listing and "env" not in listing, (name, listing)
    assert "spec" in map(bytes.decode, raw_listing) and b"env" not in raw_listing, raw_listing
    waited, info = run.result("Wait", HOST), run.result("Report", HOST)
    assert waited["verdict"] == "started" and {s["name"] for s in info["sessions"]} >= {"ip-long", "ip-short", "ip-crash"}, (waited, info)
    assert [stops.result(f"Stop {name}", HOST).get("exit_status") for name in ("ip-long", "ip-bytes")] == [143, 143], stops.results
    for one in (secret, raw_secret):
        for what, text in (("ansible-playbook", output_of(run) + output_of(stops)), ("the driver's result", json.dumps(raw_launch))):
            assert not one.found_in(text), f"a secret is in {what}"
    assert strangers == [] and jobs >= 2, (strangers, jobs)
    assert watcher.snapshots > 10 and watcher.hits == [], watcher.hits
    exit_files = ct_sh(node, "cat /s/ip-long.log.exit /s/ip-bytes.log.exit")
    assert exit_files.count(b"exit_status=143") == 2 and not secret.found_in(exit_files) and not raw_secret.found_in(exit_files)
    header = ct_sh(node, "head -q -n 1 /s/ip-long.log /s/ip-crash.log /s/ip-bytes.log")
    assert b"command=echo started; exec sleep 600" in header and b"command=echo crashing; exit 3" in header and header.count(b"\n") == 3
    traces = b"".join(path.read_bytes() for path in trace.glob("trace.*"))
    if shutil.which("strace") is None:
        pytest.skip("no strace on this node: execve records not checked (process list and files were)")
    execs = [line for line in traces.split(b"\n") if b"execve" in line and b"= 0" in line]
    for session in (b"ip-long", b"ip-bytes"):
        assert any(b"/run/trainops/" + session + b"/supervisor.py" in line for line in execs), f"strace did not see the supervisor of {session!r}"
    assert any(b'"sleep", "600"' in line for line in execs), "strace did not see the job"
    assert not secret.found_in(traces) and not raw_secret.found_in(traces), [line for line in execs if secret.found_in(line) or raw_secret.found_in(line)]
    print(f"strace: {len(execs)} execve calls recorded, none with a secret; {watcher.snapshots} process-list snapshots "
          f"({watcher.ps_runs} with ps)")


def test_env_without_pipelining_is_refused(node: StandinNode, tmp_path: Path) -> None:
    """Pipelining off for the container: a launch with env is refused before any pct exec; one without env still runs."""
    secret = Secret("np")
    tasks = [
        {"name": "Launch with env", "ignore_errors": True,
         "trainops.pct_launch.tmux_session": {"session_name": "np-refused", "command": "echo started; exec sleep 600",
                                              "env": {"API_TOKEN": "{{ secret }}"}, "log_path": "/s/np-refused.log"}},
        {"name": "Launch without env",
         "trainops.pct_launch.tmux_session": {"session_name": "np-plain", "command": "echo started; exec sleep 600", "log_path": "/s/np-plain.log"}},
    ]
    with Watcher([secret]) as watcher:
        run = run_play(tmp_path, tasks, {"secret": secret.value}, ["-vvv"], ansible_pipelining=False)
    refused, plain = run.result("Launch with env", HOST), run.result("Launch without env", HOST)
    assert refused["status"] == "failed" and "pipelining is off" in refused["msg"] and "with env" in refused["msg"], refused
    assert plain["status"] == "changed" and plain["state"] == "running", plain
    calls = exec_calls(run.proc.stdout, HOST)
    assert calls.get("Launch with env", 0) == 0 and calls.get("Launch without env", 0) > 1, calls
    assert not secret.found_in(output_of(run)) and watcher.hits == [], watcher.hits
    listing = ct_sh(node, "tmux ls -F '#{session_name}' 2>/dev/null; ls -A /s /run/trainops; true").split()
    assert b"np-plain" in listing and b"np-refused" not in listing and b"np-refused.log" not in listing, listing
    assert_no_file_holds(node, [secret])
    ct_sh(node, "tmux kill-session -t =np-plain")
