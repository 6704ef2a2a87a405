# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Run a POSIX sh program inside a Proxmox VE container with ``pct exec`` on the node.

Shared by the collection's modules (``tmux_session``, ``tmux_session_info``, ``wait_for_log``).
This is the only place where the ``pct`` argv is built. Public API (kept small and stable):

``run_in_container(module_or_runner, vmid, program, stdin_data=b"", pct_path="pct", timeout=None)``
    Runs ``program`` (text) with a non-interactive POSIX sh in container ``vmid`` through
    ``pct exec VMID -- /bin/sh -s`` and returns ``(rc, stdout, stderr)`` as text (undecodable bytes
    kept with ``surrogateescape``). ``rc`` is the program's exit status. Raises a ``PctError``
    subclass when the program never ran (pct missing, unknown or stopped container, ``/bin/sh``
    missing) or ``timeout`` seconds passed.
    The program travels on standard input (see ``bootstrap``); nothing but
    ``pct exec VMID -- /bin/sh -s`` is on the node's process list, so put values (secrets included)
    into the program text, quoted with ``shlex.quote``. The program's standard input is
    ``stdin_data`` (empty by default), never the program itself.
    Under a terminal (if something forces one on pct) stdout may hold ``\r`` and echoed input:
    match ``trainops:`` at the start of a line.
    ``module_or_runner`` is an ``AnsibleModule`` (or anything else not callable: the default
    runner is used) or a callable ``runner(argv, stdin_bytes, timeout, env) -> (rc, out_bytes, err_bytes)``
    for tests.

``container_status(module_or_runner, vmid, pct_path="pct")``
    ``running`` or ``stopped`` from ``pct status VMID``, None when unknown.

``pct_exec_argv(pct_path, vmid)``
    The argv: ``[pct_path, "exec", "VMID", "--", "/bin/sh", "-s"]``.

Errors (all ``PctError``, with ``vmid``, ``cause``, ``rc``, ``stderr`` and ``message(what)``):
``PctNotFound``, ``ContainerNotFound``, ``ContainerNotRunning``, ``ContainerShellError``, ``PctTimeout``.
``str(error)`` reads ``Cannot run a program in container VMID: <cause>``;
``error.message("Cannot start session x in")`` reads ``Cannot start session x in container VMID: <cause>``.

Never a pty: standard input is always a pipe, standard output and error are pipes, and the
``pct`` process gets a new session, so ``lxc-attach`` never sees a terminal.
"""

from __future__ import annotations

import hashlib
import os
import re
import selectors
import shutil
import subprocess
import time
import typing as t

VMID_MIN = 100
VMID_MAX = 999_999_999
CONTAINER_SHELL = "/bin/sh"
# Searched for a bare pct_path after PATH. pct exec keeps its environment for the program by default
# (--keep-env 1) except PATH: programs must not rely on that environment and set what they need.
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_NOT_EXIST = re.compile(r"Configuration file 'nodes/([^'/]*)/lxc/(\d+)\.conf' does not exist")
_NOT_RUNNING = re.compile(r"container '(\d+)' not running!?")
_EXEC_FAILED = re.compile(r'Failed to exec "([^"]*)"')
_NO_INIT_PID = "Failed to get init pid"
_MAX_DETAIL = 400
# The first line sent; the shell's answer (READY) differs from the line, which a terminal may echo. Under a
# terminal it also turns echo and the interactive shell's prompts off before the program is sent: else the
# echo of the program's last lines, flushed late, and the prompts could land inside its first output lines.
PROBE = b"PS1= PS2=; [ -t 0 ] && stty -echo 2>/dev/null; echo trainops-ready-$((40+2))\n"
READY = b"trainops-ready-42"
_PROBE_INTERVAL = 0.25
_LITERAL = frozenset(range(0x20, 0x7F)) - frozenset(b"\\'%")
_CHUNK = 160
# Reads the program up to the marker line ($1) with the read builtin, then runs it; stdin stays on the data.
_EVAL = r'n=$(printf "\nx"); n=${n%x}; p=; while IFS= read -r l; do [ "$l" = "$1" ] && break; p=$p$l$n; done; eval "$p"'

Runner = t.Callable[[t.List[str], bytes, t.Optional[float], t.Dict[str, str]], t.Tuple[int, bytes, bytes]]


class PctError(Exception):
    """The program never ran in the container (or did not finish): pct or the container failed."""

    def __init__(self, vmid: int, cause: str, rc: int | None = None, stderr: str = "") -> None:
        self.vmid = vmid
        self.cause = cause
        self.rc = rc
        self.stderr = stderr
        super().__init__(self.message())

    def message(self, what: str = "Cannot run a program in") -> str:
        """``<what> container VMID: <cause>``."""
        return f"{what} container {self.vmid}: {self.cause}"


class PctNotFound(PctError):
    """``pct`` is not on this host."""


class ContainerNotFound(PctError):
    """No container with this VMID on this node."""


class ContainerNotRunning(PctError):
    """The container exists but is stopped."""


class ContainerShellError(PctError):
    """``/bin/sh`` cannot be run inside the container."""


class PctTimeout(PctError):
    """``pct exec`` did not finish in time."""


def _printf_format(chunk: bytes) -> str:
    """``chunk`` as a printf format of printable ASCII: other bytes, ``\\``, ``'`` and ``%`` as octal escapes."""
    return "".join(chr(byte) if byte in _LITERAL else ("\\n" if byte == 10 else "\\" + format(byte, "03o")) for byte in chunk)


def _printf_lines(data: bytes) -> list[str]:
    """printf commands writing ``data``; a format never starts with '-' (printf would take it for an option)."""
    lines = []
    for start in range(0, len(data), _CHUNK):
        fmt = _printf_format(data[start:start + _CHUNK])
        if fmt.startswith("-"):
            fmt = "\\055" + fmt[1:]
        lines.append("printf '" + fmt + "'")
    return lines


def bootstrap(program: bytes, stdin_data: bytes = b"") -> bytes:
    """The text sent to ``/bin/sh -s``: it rebuilds ``program`` with builtin printf and evals it.

    Every line is short printable ASCII, so the text survives a terminal in cooked mode (when pct
    gives the shell a pty) unchanged. The program is read by a non-interactive ``sh -c`` with the
    ``read`` builtin (which never reads past the end marker) and run with ``eval``; its standard
    input is then ``stdin_data`` and nothing else, and it never appears on a command line.
    """
    marker = "trainops-end-of-program-" + hashlib.sha256(program).hexdigest()[:16]
    body = program if program.endswith(b"\n") else program + b"\n"
    lines = ["[ -t 0 ] && stty -echo 2>/dev/null", "{"]
    lines += _printf_lines(body + marker.encode("ascii") + b"\n" + stdin_data)
    lines.append("} | " + CONTAINER_SHELL + " -c " + "'" + _EVAL + "' sh " + marker)
    lines.append('exit "$?"')
    return ("\n".join(lines) + "\n").encode("ascii")


def pct_exec_argv(pct_path: str, vmid: int) -> list[str]:
    """The one argv of every call: ``pct exec VMID -- /bin/sh -s`` (the program comes on stdin)."""
    return [pct_path, "exec", str(int(vmid)), "--", CONTAINER_SHELL, "-s"]


def resolve_pct(pct_path: str) -> str | None:
    """Absolute path of ``pct`` (a bare name is searched in PATH and the usual sbin folders), or None."""
    if os.sep in pct_path:
        return pct_path if os.path.isfile(pct_path) and os.access(pct_path, os.X_OK) else None
    return shutil.which(pct_path, path=_search_path())


def _search_path() -> str:
    return os.pathsep.join(p for p in (os.environ.get("PATH", ""), SBIN_PATH) if p)


def pct_environment() -> dict[str, str]:
    """Environment for pct: this process's, with the sbin folders added to PATH."""
    env = dict(os.environ)
    env["PATH"] = _search_path()
    return env


def _default_runner(argv: list[str], stdin: bytes, timeout: float | None, env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """Run argv without a terminal (pipes, new session); raise subprocess.TimeoutExpired on timeout.

    ``stdin`` is sent only once the shell in the container answered PROBE: when something between
    pct and the shell allocates a terminal anyway, input sent before the terminal is set up is
    discarded (lxc-attach flushes it), so the probe is repeated until the answer arrives.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env, cwd="/", start_new_session=True, close_fds=True) as proc:
        try:
            out, err = _Conversation(proc, stdin, deadline).run()
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return proc.wait(), out, err


class _Conversation:
    """Probe the shell, then send the program; collect stdout and stderr until both are closed."""

    def __init__(self, proc: subprocess.Popen, payload: bytes, deadline: float | None) -> None:
        self.proc = proc
        self.deadline = deadline
        self.out = bytearray()
        self.err = bytearray()
        self.todo = bytearray(PROBE)
        self.payload: bytes | None = payload
        self.next_probe = time.monotonic() + _PROBE_INTERVAL
        self.sel = selectors.DefaultSelector()
        self.readers = 0
        for stream, buf in ((proc.stdout, self.out), (proc.stderr, self.err)):
            os.set_blocking(stream.fileno(), False)
            self.sel.register(stream, selectors.EVENT_READ, buf)
            self.readers += 1
        os.set_blocking(proc.stdin.fileno(), False)
        self.writing = False

    def run(self) -> tuple[bytes, bytes]:
        """Talk until stdout and stderr are closed; raise subprocess.TimeoutExpired at the deadline."""
        while self.readers:
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline:
                raise subprocess.TimeoutExpired(self.proc.args, 0, bytes(self.out), bytes(self.err))
            self._want_write(bool(self.todo) and not self.proc.stdin.closed)
            wait = _PROBE_INTERVAL if self.deadline is None else min(_PROBE_INTERVAL, self.deadline - now)
            for key, _events in self.sel.select(wait):
                if key.data is None:
                    self._write()
                else:
                    self._read(key)
            self._advance()
        return bytes(self.out), bytes(self.err)

    def _want_write(self, want: bool) -> None:
        if want and not self.writing:
            self.sel.register(self.proc.stdin, selectors.EVENT_WRITE, None)
        elif self.writing and not want:
            self.sel.unregister(self.proc.stdin)
        self.writing = want

    def _write(self) -> None:
        try:
            written = os.write(self.proc.stdin.fileno(), self.todo)
        except BlockingIOError:
            return
        except BrokenPipeError:
            self.todo.clear()
            self.payload = None
            return
        del self.todo[:written]

    def _read(self, key: selectors.SelectorKey) -> None:
        try:
            chunk = os.read(key.fd, 65536)
        except BlockingIOError:
            return
        if chunk:
            key.data.extend(chunk)
        else:
            self.sel.unregister(key.fileobj)
            self.readers -= 1

    def _advance(self) -> None:
        """After the answer: queue the program, then close stdin once written; before: probe again."""
        if self.proc.stdin.closed:
            return
        if self.payload is not None and READY in self.out:
            self.todo.extend(self.payload)
            self.payload = None
        if self.payload is None and not self.todo:
            self._want_write(False)
            self.proc.stdin.close()
        elif self.payload is not None and not self.todo and time.monotonic() >= self.next_probe:
            self.todo.extend(PROBE)
            self.next_probe = time.monotonic() + _PROBE_INTERVAL


def _detail(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    detail = " | ".join(lines[-3:])
    return detail if len(detail) <= _MAX_DETAIL else "..." + detail[-_MAX_DETAIL:]


def _names(pattern: t.Pattern[str], text: str, vmid: int) -> str | None:
    for match in pattern.finditer(text):
        if int(match.group(pattern.groups)) == vmid:
            return match.group(0)
    return None


def classify(vmid: int, rc: int, stderr: str) -> PctError | None:
    """The error when pct / lxc-attach failed before the program ran, else None (whatever rc is)."""
    if rc == 0:
        return None
    line = _names(_NOT_EXIST, stderr, vmid)
    if line:
        match = _NOT_EXIST.search(line)
        node = f", {match.group(1)}" if match and match.group(1) else ""
        return ContainerNotFound(vmid, f"no such container on this node{node} ({line}); check vmid and that the task runs on the node "
                                 "that hosts it (delegate_to: the container's pct_node)", rc, stderr)
    line = _names(_NOT_RUNNING, stderr, vmid)
    if line or (rc == 1 and _NO_INIT_PID in stderr):
        return ContainerNotRunning(vmid, f"the container is not running ({line or _NO_INIT_PID}); start it with 'pct start {vmid}'", rc, stderr)
    match = _EXEC_FAILED.search(stderr)
    if rc in (126, 127) and match:
        return ContainerShellError(vmid, f"{match.group(1)} cannot be run inside the container (exit status {rc}); the container needs a POSIX sh", rc, stderr)
    return None


def _runner_of(module_or_runner: t.Any) -> Runner:
    return module_or_runner if callable(module_or_runner) else _default_runner


def run_in_container(module_or_runner: t.Any, vmid: int, program: str, stdin_data: bytes = b"",
                     pct_path: str = "pct", timeout: float | None = None) -> tuple[int, str, str]:
    """Run ``program`` with ``/bin/sh -s`` in container ``vmid``; see the module docstring."""
    runner = _runner_of(module_or_runner)
    exe = pct_path if callable(module_or_runner) else resolve_pct(pct_path)
    if exe is None:
        where = "at that path" if os.sep in pct_path else "in PATH"
        raise PctNotFound(vmid, f"{pct_path} was not found {where} on this host; not a Proxmox node? set pct_path")
    payload = bootstrap(program.encode("utf-8", "surrogateescape"), stdin_data)
    try:
        rc, out_b, err_b = runner(pct_exec_argv(exe, vmid), payload, timeout, pct_environment())
    except subprocess.TimeoutExpired as exc:
        raise PctTimeout(vmid, f"pct exec did not finish within {timeout} seconds; raise timeout or check the node's load") from exc
    except OSError as exc:
        raise PctNotFound(vmid, f"cannot run {exe} ({exc.strerror or exc}); not a Proxmox node? set pct_path") from exc
    out = out_b.decode("utf-8", "surrogateescape")
    err = err_b.decode("utf-8", "surrogateescape")
    error = classify(vmid, rc, err)
    if error is not None:
        raise error
    return rc, out, err


def container_status(module_or_runner: t.Any, vmid: int, pct_path: str = "pct", timeout: float = 60) -> str | None:
    """``running`` or ``stopped`` as ``pct status VMID`` says, or None when that cannot be told.

    For a message after a program died in the container: a container stopped under it kills it
    with no word on stderr (``lxc-attach`` just exits 137).
    """
    runner = _runner_of(module_or_runner)
    exe = pct_path if callable(module_or_runner) else resolve_pct(pct_path)
    if exe is None:
        return None
    try:
        rc, out, _err = runner([exe, "status", str(int(vmid))], b"", timeout, pct_environment())
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"^status: (\w+)", out.decode("utf-8", "replace"), re.MULTILINE)
    return match.group(1) if rc == 0 and match else None


def detail(stderr: str) -> str:
    """The last non-empty lines of ``stderr``, shortened, for an error message."""
    return _detail(stderr)
