# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Hostile input through the whole launch path, property-based, on a real container (CT 500).

Each example runs the modules' ``main()`` in this process (``patch_module_args``, about 0.1 s a call
instead of 2 s through ansible-playbook) with the real stand-in ``pct``: tmux_session -> one
``pct exec`` -> the sh program -> tmux -> the wrapper -> the job. The job reports what it received
(argv, environment, working directory) as hex into a file, read back with ``pct exec``: it must be
byte-exact. Values carry quotes, spaces, newlines, ``$()``, backticks, globs, leading dashes,
backslashes, ``%``, tmux's ``#()`` and ``#{}``, non-ASCII and non-UTF-8 bytes (surrogate-escaped
text, as Ansible hands such bytes to a module) and injections that would ``touch /tmp/pwned-h500-*``:
no such file may appear, in the container or on the node.

Each property prints how many examples it tried (``pytest -s`` or ``-rP`` shows it).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import typing as t
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils._pct import detail, run_in_container
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import build_program, display_command, parse_output, spec_from_params
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_outcome import failure, result
from ansible_collections.trainops.pct_launch.plugins.modules import tmux_session, tmux_session_info, wait_for_log

from ..module_main import run_main as invoke
from .conftest import StandinNode

pytestmark = pytest.mark.integration

CT = 500
CANARY = "/tmp/pwned-h500"
BASE = "/h"
SETTINGS = settings(max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "30")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                    phases=[Phase.explicit, Phase.reuse, Phase.generate] + ([] if os.environ.get("HOSTILE_NO_SHRINK") else [Phase.shrink]))

# Pieces that break naive quoting; the injections try to create CANARY-*.
FRAGMENTS = [
    "'", '"', " ", "  ", "\t", "$(touch " + CANARY + "-a)", "`touch " + CANARY + "-b`", "$(", ")", "`", "*", "?", "[a-z]",
    "~", "~root", "{a,b}", "-", "--", "-rf", "--help", "\\", "\\\\", "\\n", "%", "%s", "%n", "%%", "%0A", "%25",
    "#(touch " + CANARY + "-c)", "#{pane_pid}", "#[fg=red]", "##", ";", ";;", "&&", "|", ">", "<", "&", "$HOME", "${PATH}", "$1",
    "$$", "$", "!", "ü", "✓", "日本語", "\u202e", "\x7f", "\x01", "\x1b[31m", "; touch " + CANARY + "-d;",
    "'; touch " + CANARY + "-e; '", '"; touch ' + CANARY + '-f; "', "EOF", "TRAINOPS_EOF_0", "trainops:error=x",
    "\\'", "\\\"", "=", "a=b", "\udcff", "\udc80", "\udcc3\udca9", "\udced\udca0\udc80",
]
NEWLINES = ["\n", "\r", "\r\n", "\n\n", "\ntouch " + CANARY + "-g\n"]
# Any Unicode text except NUL and the surrogates that are not surrogate-escaped bytes.
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6)


def hostile(extra: t.Sequence[str] = (), max_parts: int = 6) -> st.SearchStrategy[str]:
    """Text made of hostile fragments and random characters."""
    return st.lists(st.one_of(st.sampled_from(FRAGMENTS + list(extra)), TEXT), max_size=max_parts).map("".join)


def _component_ok(value: str) -> bool:
    raw = value.encode("utf-8", "surrogateescape")
    return value not in ("", ".", "..") and len(raw) <= 100


# One path component: no '/', no NUL; newlines allowed in chdir only (a log_path must not hold one).
DIR_COMPONENT = hostile(NEWLINES, 4).map(lambda s: s.replace("/", "_")).filter(_component_ok)
LOG_COMPONENT = hostile(max_parts=4).map(lambda s: s.replace("/", "_").replace("\n", "_")).filter(_component_ok)
VALUE = hostile(NEWLINES)
ENV_KEY = st.from_regex(r"[A-Za-z0-9_]{0,12}", fullmatch=True).map(lambda s: "H_" + s)

# The job: writes what it got as hex (atomically), prints a line, then waits to be stopped.
DUMP = r"""
import json, os, sys, time
out = sys.argv[1]
data = {"argv": [os.fsencode(a).hex() for a in sys.argv[2:]], "env": {k.hex(): v.hex() for k, v in os.environb.items()},
        "cwd": os.getcwdb().hex()}
with open(out + ".tmp", "w") as handle:
    json.dump(data, handle)
os.rename(out + ".tmp", out)
print("dumped", flush=True)
time.sleep(float(os.environ.get("H_SLEEP_FOR", "0")))
"""

# Runs inside the container: make the directories (hex argv), or wait for a file and report files.
HELPER = r"""
import glob, json, os, sys, time
what, args = sys.argv[1], [bytes.fromhex(a) for a in sys.argv[2:]]
if what == "mkdir":
    for path in args:
        os.makedirs(path, exist_ok=True)
        if path.endswith(b"/bin") and not os.path.lexists(path + b"/python"):
            os.symlink(b"/usr/bin/python3", path + b"/python")
    print(json.dumps({"ok": True}))
    sys.exit(0)
report = {"pwned": glob.glob(sys.argv[2] and bytes.fromhex(sys.argv[2]).decode() + "*")}
deadline = time.monotonic() + 15
files = {}
for path in args[1:]:
    while what == "wait" and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with open(path, "rb") as handle:
            files[path.hex()] = handle.read().hex()
    except OSError:
        files[path.hex()] = None
report["files"] = files
print(json.dumps(report))
"""

COUNTS: dict[str, int] = {}


def count(name: str) -> int:
    """Count one example of property ``name``; return its number (unique per test session)."""
    COUNTS[name] = COUNTS.get(name, 0) + 1
    return sum(COUNTS.values())


def report_count(name: str) -> None:
    """Print the number of examples a property tried."""
    print(f"\nhostile-input property {name}: {COUNTS.get(name, 0)} examples")


def raw(text: str) -> bytes:
    """The bytes a value stands for (surrogate-escaped text)."""
    return text.encode("utf-8", "surrogateescape")


def as_text(value: str) -> str:
    """What a module reports for a value: JSON text, so non-UTF-8 bytes become U+FFFD."""
    return raw(value).decode("utf-8", "replace")


def has_undecodable(value: t.Any) -> bool:
    """Whether a text value stands for bytes that are not UTF-8."""
    return isinstance(value, str) and raw(value) != value.encode("utf-8", "replace")


def launch(args: dict[str, t.Any]) -> dict[str, t.Any]:
    """tmux_session with these options, in this process.

    AnsibleModule itself cannot take non-UTF-8 bytes in a str option (its invocation log encodes the
    value with strict UTF-8 and raises), so those launches run what main() runs after AnsibleModule:
    spec_from_params, build_program, run_in_container with the real pct, parse_output, result.
    """
    if not any(has_undecodable(args.get(key)) for key in ("command", "chdir", "venv", "log_path")):
        return invoke(tmux_session, args)
    count("launches_without_AnsibleModule")
    params = dict({key: spec.get("default") for key, spec in tmux_session.ARGUMENT_SPEC.items()}, **args)
    spec = spec_from_params(params)
    rc, out, err = run_in_container(None, spec.vmid, build_program(spec), pct_path=params["pct_path"],
                                    timeout=params["timeout"] + 2 * spec.stop_timeout)
    facts = parse_output(out)
    if rc != 0:
        return {"failed": True, "msg": str(failure(spec, rc, facts, err, detail(err))), "rc": rc}
    outcome = result(spec, facts, False)
    outcome.pop("diff")
    return outcome


class Container:
    """CT 500 with tmux, python3 and the helper programs."""

    def __init__(self, node: StandinNode, vmid: int) -> None:
        self.node = node
        self.vmid = vmid

    def helper(self, what: str, *paths: bytes) -> dict[str, t.Any]:
        """Run HELPER inside the container (paths as hex arguments)."""
        result = self.node.pct("exec", self.vmid, "--", "python3", "-c", HELPER, what, *(p.hex() for p in paths), timeout=60)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def mkdirs(self, *paths: str) -> None:
        """Make these directories (surrogate-escaped text) inside the container; a .../bin gets a python link (a venv)."""
        self.helper("mkdir", *(raw(p) for p in paths))

    def files(self, *paths: str, wait: bool = False) -> tuple[list[str], dict[bytes, bytes | None]]:
        """The canary files in the container and the contents of these files (waiting for them when asked)."""
        report = self.helper("wait" if wait else "read", CANARY.encode(), *(raw(p) for p in paths))
        files = {bytes.fromhex(k): (None if v is None else bytes.fromhex(v)) for k, v in report["files"].items()}
        return report["pwned"], files


def assert_no_canary(pwned: list[str]) -> None:
    """No injection ran: no canary file in the container (``pwned``) nor on this node."""
    assert pwned == [], f"an injected command ran inside the container: {pwned}"
    assert glob.glob(CANARY + "*") == [], "an injected command ran on the node"


@pytest.fixture(scope="module")
def ct(standin: StandinNode) -> Iterator[Container]:
    """CT 500 with tmux; removed with the stand-in fixture at the end of the session."""
    standin.create(CT)
    standin.apt_install(CT, "tmux")
    container = Container(standin, CT)
    container.mkdirs(BASE + "/out")
    yield container
    for name, number in sorted(COUNTS.items()):
        print(f"hostile-input examples {name}: {number}")


def decode_dump(data: bytes) -> dict[str, t.Any]:
    """The job's report, hex decoded."""
    dump = json.loads(data)
    return {"argv": [bytes.fromhex(a) for a in dump["argv"]], "env": {bytes.fromhex(k): bytes.fromhex(v) for k, v in dump["env"].items()},
            "cwd": bytes.fromhex(dump["cwd"])}


# Variables the wrapper gives every job, besides env (README: a clean environment).
BASE_ENV = {b"PATH", b"HOME", b"USER", b"LOGNAME", b"LANG", b"PWD", b"OLDPWD", b"SHLVL", b"VIRTUAL_ENV"}


def test_argv_env_chdir_and_log_path_arrive_byte_exact(ct: Container) -> None:
    """argv items, env values, chdir, venv and log_path components: byte-exact to the job, the log, LOG.exit and the reports."""

    @settings(SETTINGS, max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "25")))
    @given(items=st.lists(VALUE, max_size=6), env=st.dictionaries(ENV_KEY, VALUE, max_size=5),
           dir_parts=st.lists(DIR_COMPONENT, min_size=1, max_size=2), log_dir=LOG_COMPONENT, log_name=LOG_COMPONENT,
           venv=st.none() | DIR_COMPONENT)
    def prop(items: list[str], env: dict[str, str], dir_parts: list[str], log_dir: str, log_name: str, venv: str | None) -> None:
        # env is no_log: Ansible masks every occurrence of its values in a task's result (its standard
        # behaviour), so a value that also stands in a path or an argv item would show masked there.
        visible = [*items, *dir_parts, log_dir, log_name, venv or "", BASE, "hx-", "python3", "-c", DUMP, "/out/", ".json"]
        assume(not any(value and any(value in other for other in visible) for value in [*env.values(), "300"]))
        number = count("argv_env_paths")
        name = f"hx-{number}"
        chdir = BASE + "/d/" + "/".join(dir_parts)
        log_path = f"{BASE}/l/{log_dir}/{log_name}"
        out = f"{BASE}/out/{number}.json"
        venv_path = None if venv is None else f"{BASE}/v/{venv}"
        ct.mkdirs(chdir, f"{BASE}/l/{log_dir}", *([] if venv_path is None else [venv_path + "/bin"]))
        job_env = dict(env, H_SLEEP_FOR="300")
        args = {"vmid": ct.vmid, "session_name": name, "argv": ["python3", "-c", DUMP, out, *items], "env": job_env,
                "chdir": chdir, "log_path": log_path}
        if venv_path is not None:
            args["venv"] = venv_path
        started = launch(args)
        assert started.get("changed") is True and started.get("state") == "running", started
        assert started["log_path"] == log_path

        info = invoke(tmux_session_info, {"vmid": ct.vmid, "session_name": name})["session"]
        assert info["state"] == "running" and info["log_path"] == as_text(log_path), info
        assert info["command"] == as_text(display_command(spec_from_params(args))), info
        # The log is found through @trainops_log: no log_path given.
        waited = invoke(wait_for_log, {"vmid": ct.vmid, "session_name": name, "pattern": "^dumped$", "timeout": 15})
        assert waited.get("verdict") == "started" and waited["log_path"] == as_text(log_path), waited
        again = launch(args)
        assert again.get("changed") is False and again.get("failed") is not True, again

        stopped = invoke(tmux_session, {"vmid": ct.vmid, "session_name": name, "state": "stopped", "stop_timeout": 10})
        assert stopped.get("changed") is True and stopped.get("exit_status") == 143, stopped
        assert stopped["log_path"] == as_text(log_path)
        gone = invoke(tmux_session_info, {"vmid": ct.vmid, "session_name": name})["session"]
        assert gone["state"] == "finished" and gone["exit_status"] == 143 and gone["log_path"] == as_text(log_path), gone

        pwned, files = ct.files(out, log_path, log_path + ".exit", wait=True)
        assert_no_canary(pwned)
        dump = decode_dump(files[raw(out)] or b"{}")
        assert dump["argv"] == [raw(item) for item in items]
        assert {k: v for k, v in dump["env"].items() if k not in BASE_ENV} == {raw(k): raw(v) for k, v in job_env.items()}
        assert dump["cwd"] == raw(chdir)
        if venv_path is not None:
            assert dump["env"][b"VIRTUAL_ENV"] == raw(venv_path) and dump["env"][b"PATH"].startswith(raw(venv_path) + b"/bin:")
        else:
            assert b"VIRTUAL_ENV" not in dump["env"]
        log = files[raw(log_path)] or b""
        assert log.startswith(b"### trainops.pct_launch: session=" + name.encode() + b" started_at=")
        assert log.split(b"\n")[1] == b"dumped"
        exit_file = files[raw(log_path + ".exit")] or b""
        assert b"exit_status=143\n" in exit_file and b"stopped_by=trainops\n" in exit_file

    prop()
    report_count("argv_env_paths")


HEREDOC_END = "EOF_H500"


def test_command_arrives_byte_exact(ct: Container) -> None:
    """A shell command line reaches sh -c byte-exact: a here-document in it and its quoted words are kept."""

    @SETTINGS
    @given(text=VALUE.filter(lambda s: HEREDOC_END not in s.split("\n")), words=st.lists(VALUE, max_size=5))
    def prop(text: str, words: list[str]) -> None:
        number = count("command")
        text_out = f"{BASE}/out/{number}.txt"
        out = f"{BASE}/out/{number}.json"
        command = (f"cat > {text_out} <<'{HEREDOC_END}'\n{text}\n{HEREDOC_END}\n"
                   f"exec python3 -c {shlex.quote(DUMP)} {out} " + " ".join(shlex.quote(w) for w in words))
        args = {"vmid": ct.vmid, "session_name": f"hc-{number}", "command": command, "log_path": f"{BASE}/out/{number}.log"}
        started = launch(args)
        assert started.get("changed") is True, started
        pwned, files = ct.files(text_out, out, wait=True)
        assert_no_canary(pwned)
        assert files[raw(text_out)] == raw(text) + b"\n"
        assert decode_dump(files[raw(out)] or b"{}")["argv"] == [raw(w) for w in words]

    prop()
    report_count("command")


# Log lines the job prints: valid text (patterns are matched on decoded lines), one line each.
LINE = hostile(max_parts=5).map(lambda s: raw(s).decode("utf-8", "replace").replace("\n", " ").replace("\r", " ")).filter(
    lambda s: not s.startswith("### trainops.pct_launch: "))
PRINT = "import sys; sys.stdout.write(''.join(a + '\\n' for a in sys.argv[1:])); sys.stdout.flush()"


def expected_verdict(lines: list[str], pattern: str, fail: str | None) -> tuple[str | None, str | None]:
    """The verdict wait_for_log must reach: the first line matching fail (wins) or pattern, in log order."""
    for line in lines:
        if fail is not None and re.search(fail, line):
            return "fail_pattern", line
        if re.search(pattern, line):
            return "started", line
    return None, None


@st.composite
def wait_cases(draw: st.DrawFn) -> tuple[list[str], str, str | None]:
    """Log lines, a pattern (one line escaped, maybe anchored) and maybe a fail_pattern (a line, or one never printed)."""
    lines = draw(st.lists(LINE, min_size=1, max_size=6))
    target = draw(st.sampled_from(lines))
    pattern = re.escape(target)
    if draw(st.booleans()):
        pattern = "^" + pattern + "$"
    fail = None
    if draw(st.booleans()):
        fail = re.escape(draw(st.sampled_from(lines + ["never-printed-h500"])))
    return lines, pattern, fail


# Any valid session name (leading dashes, digits only, ...); a "-N" suffix keeps each example's own.
SESSION_HEAD = st.from_regex(r"[A-Za-z0-9_-]{1,56}", fullmatch=True)


def test_wait_patterns_match_hostile_lines(ct: Container) -> None:
    """pattern and fail_pattern with hostile text reach the in-container matcher byte-exact and match the right line.

    Session names are any valid ones (a leading dash, digits only, '--').
    """

    @SETTINGS
    @given(case=wait_cases(), log_name=LOG_COMPONENT, name_head=SESSION_HEAD)
    def prop(case: tuple[list[str], str, str | None], log_name: str, name_head: str) -> None:
        lines, pattern, fail = case
        number = count("wait_patterns")
        name = f"{name_head}-{number}"
        log_path = f"{BASE}/out/{number}-{log_name}"
        started = launch({"vmid": ct.vmid, "session_name": name, "argv": ["python3", "-c", PRINT, *lines], "log_path": log_path})
        assert started.get("changed") is True, started
        args = {"vmid": ct.vmid, "session_name": name, "pattern": pattern, "timeout": 15}
        if not has_undecodable(log_path):
            args["log_path"] = log_path
        if fail is not None:
            args["fail_pattern"] = fail
        waited = invoke(wait_for_log, args)
        verdict, line = expected_verdict(lines, pattern, fail)
        assert verdict is not None
        assert waited.get("verdict") == verdict and waited.get("matched_line") == line, (waited, verdict, line)
        assert_no_canary(ct.files()[0])

    prop()
    report_count("wait_patterns")
