# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The job spec of ``tmux_session``: its options validated, hashed and summarised (docs/launch-protocol.md).

``spec_from_params`` checks every option before anything runs and raises ``SpecError`` naming the
option; the launch (``_tmux_job``) only ever sees a valid ``LaunchSpec``.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import secrets
import shlex
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._gpu_alloc import GpuError, parse_request
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_names import (  # SpecError: also imported from here
    SpecError,
    absolute as _absolute,
    log_path as _log_path,
    no_nul as _no_nul,
    session_name as _session_name,
)
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import RUN_ROOT
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_policy import SIGNALS, changed_settings, supervise_from_params

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?")
ACTIONS = {"started": "start", "stopped": "stop", "restarted": "restart"}
_SCRIPT_SUFFIX = re.compile(r"\.(py|sh|bash|pl|rb|js|R|jl|lua)$")
_INTERPRETER = re.compile(r"(python[0-9.]*|pypy[0-9.]*|bash|sh|dash|zsh|ksh|perl|ruby|node|Rscript|julia|lua)")
_SHELL_OPERATORS = frozenset(("&&", "||", ";", "|", "&", "(", ")", ";;", "<", ">", ">>"))
_UNSAFE_WORD = re.compile(r"[$`*?\[~{]")


# A NamedTuple (immutable, ``spec._replace(...)`` for a changed copy), not a dataclass: importing
# dataclasses (and the inspect it pulls in) would cost every module run on the target about 9 ms.
class LaunchSpec(t.NamedTuple):
    """The validated options of one ``tmux_session`` task."""

    session_name: str
    state: str = "started"
    command: str | None = None
    argv: tuple[str, ...] | None = None
    chdir: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    venv: str | None = None
    user: str | None = None
    log_path: str | None = None
    log_mode: str = "rotate"
    log_keep: int = 5
    stop_signal: str = "TERM"
    stop_timeout: int = 30
    run_root: str = RUN_ROOT
    # the supervisor's settings (docs/job-life.md), sorted (key, value) pairs: _job_policy.supervise_from_params
    supervise: tuple[tuple[str, t.Any], ...] = ()
    # the GPUs asked for (_gpu_alloc.parse_request), those a count must not take, and the nvidia-smi that lists them
    gpus: tuple[str, t.Any] | None = None
    gpu_exclude: tuple[str, ...] = ()
    nvidia_smi: str = "nvidia-smi"
    # free space the log's filesystem needs before a start, in MiB (0: not checked); not part of the job's spec
    min_free_mb: int = 0

    @property
    def action(self) -> str:
        """start, stop or restart."""
        return ACTIONS[self.state]

    @property
    def run_dir(self) -> str:
        """``RUN_ROOT/NAME`` on the target (``/run/trainops/NAME`` for root)."""
        return posixpath.join(self.run_root, self.session_name)


def _env(value: t.Mapping[str, t.Any] | None) -> tuple[tuple[str, str], ...]:
    items = []
    for key, raw in sorted((value or {}).items()):
        if not isinstance(key, str) or not ENV_KEY.fullmatch(key) or key.lower().startswith("trainops_"):
            raise SpecError(f"Invalid env key {key!r}: use a shell variable name ([A-Za-z_][A-Za-z0-9_]*, not starting with TRAINOPS_)")
        if raw is None or isinstance(raw, (dict, list)):
            raise SpecError(f"Invalid env value for {key}: use a string (quote numbers and booleans in YAML)")
        text = str(raw).lower() if isinstance(raw, bool) else str(raw)
        if "\0" in text:
            raise SpecError(f"Invalid env value for {key}: it contains a NUL character")
        items.append((key, text))
    return tuple(items)


def _joined_env(params: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """``env`` and ``public_env``: one environment for the job (and its spec hash), each name given once."""
    secret, public = params.get("env") or {}, params.get("public_env") or {}
    both = sorted(set(secret) & set(public), key=str)
    if both:
        raise SpecError(f"Invalid public_env: {', '.join(map(str, both))} also in env; give each variable in one of them")
    return dict(secret, **public)


def _job(params: t.Mapping[str, t.Any]) -> tuple[str | None, tuple[str, ...] | None]:
    command, argv = params.get("command"), params.get("argv")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise SpecError("Invalid command: it is empty; give the shell command line to run")
    if argv is not None:
        if not argv or not all(isinstance(a, str) for a in argv) or argv[0] == "":
            raise SpecError("Invalid argv: give a non-empty list of strings whose first item is the program")
        argv = tuple(_no_nul("argv", a) for a in argv)
    return (_no_nul("command", command) if command is not None else None), argv


def _user(value: str | None) -> str | None:
    """None runs the job as root (as does V(root))."""
    if value in (None, "", "root"):
        return None
    if not USER_NAME.fullmatch(value):
        raise SpecError(f"Invalid user {value!r}: use a user name of the container (letters, digits, '_', '.', '-')")
    return value


def _numbers(params: t.Mapping[str, t.Any]) -> tuple[int, str, int]:
    keep = params.get("log_keep", 5)
    if not 1 <= keep <= 1000:
        raise SpecError(f"Invalid log_keep {keep}: keep from 1 to 1000 rotated logs")
    signal = str(params.get("stop_signal") or "TERM").upper()
    signal = signal[3:] if signal.startswith("SIG") else signal
    if signal not in SIGNALS:
        raise SpecError(f"Invalid stop_signal {params.get('stop_signal')!r}: use one of {', '.join(SIGNALS)}")
    stop_timeout = params.get("stop_timeout", 30)
    if not 0 <= stop_timeout <= 86400:
        raise SpecError(f"Invalid stop_timeout {stop_timeout}: use 0 to 86400 seconds")
    if not 0 <= (params.get("min_free_mb") or 0) <= 1 << 30:
        raise SpecError(f"Invalid min_free_mb {params.get('min_free_mb')}: use 0 (no check) or the MiB the log's filesystem needs free")
    return keep, signal, stop_timeout


def _gpus(params: t.Mapping[str, t.Any], env: tuple[tuple[str, str], ...]) -> tuple[str, t.Any] | None:
    try:
        request = parse_request(params.get("gpus"))
    except GpuError as exc:
        raise SpecError(str(exc)) from None
    if request is not None and "CUDA_VISIBLE_DEVICES" in dict(env):
        raise SpecError("Invalid env key CUDA_VISIBLE_DEVICES together with gpus: gpus sets it to the GPUs it chooses; drop one of them")
    for item in params.get("gpu_exclude") or ():
        if not isinstance(item, str) or not item.strip() or "\0" in item:
            raise SpecError(f"Invalid gpu_exclude item {item!r}: use GPU indices or UUIDs")
    return request


def spec_from_params(params: t.Mapping[str, t.Any]) -> LaunchSpec:
    """Validate the module options (before any pct call); raise SpecError naming the option."""
    state = params.get("state") or "started"
    command, argv = _job(params)
    starting = state != "stopped"
    if starting and (command is None) == (argv is None):
        raise SpecError(f"Missing command or argv: state={state} needs exactly one of them")
    keep, signal, stop_timeout = _numbers(params)
    try:
        supervise = supervise_from_params(params) if starting else ()
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    if starting and params.get("env") and dict(supervise).get("restart_on_boot"):
        raise SpecError(f"Invalid env ({', '.join(sorted(map(str, params['env'])))}) together with restart_on_boot: the values of env are "
                        "secrets, deleted from the container before the job starts, so a start at the container's boot would not "
                        "have them; give the values that are not secret in public_env, or drop restart_on_boot")
    env = _env(_joined_env(params))
    gpus = _gpus(params, env) if starting else None
    return LaunchSpec(
        session_name=_session_name(params.get("session_name")), state=state,
        command=command, argv=argv, chdir=_absolute("chdir", params.get("chdir")), env=env,
        venv=_absolute("venv", params.get("venv")), user=_user(params.get("user")),
        log_path=_log_path(params.get("log_path"), required=starting),
        log_mode=params.get("log_mode") or "rotate", log_keep=keep, stop_signal=signal, stop_timeout=stop_timeout,
        supervise=supervise, gpus=gpus, gpu_exclude=tuple(str(i).strip() for i in params.get("gpu_exclude") or ()),
        nvidia_smi=params.get("nvidia_smi") or "nvidia-smi", min_free_mb=params.get("min_free_mb") or 0)


def _canonical(data: t.Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogateescape")


def spec_hash(spec: LaunchSpec) -> str:
    """sha256 of the canonical JSON of the job spec, env keys and values included."""
    data = {"command": spec.command, "argv": list(spec.argv) if spec.argv else None, "chdir": spec.chdir,
            "env": dict(spec.env), "venv": spec.venv, "user": spec.user, "log_path": spec.log_path}
    supervise = changed_settings(spec.supervise)
    if supervise:  # only when set: the hash of a job without them is what it was before the supervisor had them
        data["supervise"] = supervise
    if spec.gpus is not None:  # the request, not the GPUs chosen: a re-run asking the same is the same job
        data["gpus"] = [spec.gpus[0], list(spec.gpus[1]) if isinstance(spec.gpus[1], tuple) else spec.gpus[1]]
    return hashlib.sha256(_canonical(data)).hexdigest()


def _env_digest(salt: str, key: str, value: str) -> str:
    return hashlib.sha256(_canonical([salt, key, value])).hexdigest()[:16]


def spec_summary(spec: LaunchSpec, salt: str | None = None) -> dict[str, t.Any]:
    """The spec without env values (salted per-key digests only), stored next to the session."""
    salt = salt or secrets.token_hex(8)
    summary = {"command": spec.command, "argv": list(spec.argv) if spec.argv else None, "chdir": spec.chdir,
               "venv": spec.venv, "user": spec.user, "log_path": spec.log_path, "env_salt": salt,
               "env": {key: _env_digest(salt, key, value) for key, value in spec.env},
               "supervise": {key: ("(set)" if key == "notify_url" else value) for key, value in changed_settings(spec.supervise).items()}}
    if spec.gpus is not None:
        summary["gpus"] = gpus_text(spec)
    return summary


def gpus_text(spec: LaunchSpec) -> str | None:
    """The GPU request as a user wrote it: all, 2, or 0,2; None without one."""
    if spec.gpus is None:
        return None
    kind, value = spec.gpus
    return "all" if kind == "all" else str(value) if kind == "count" else ",".join(value)


def display_command(spec: LaunchSpec) -> str:
    """The command for the log header and ``@trainops_command``: one line, no env values."""
    text = spec.command if spec.command is not None else " ".join(shlex.quote(word) for word in spec.argv or ())
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif ord(char) < 32 or ord(char) == 127:
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(char, "\\x" + format(ord(char), "02x")))
        else:
            out.append(char)
    return "".join(out)


def job_argv(spec: LaunchSpec) -> list[str]:
    """The job's argv inside the container: ``sh -c COMMAND`` or argv as given."""
    if spec.command is not None:
        return ["sh", "-c", spec.command]
    return list(spec.argv or ())


def _words(spec: LaunchSpec) -> list[str]:
    if spec.argv is not None:
        return list(spec.argv)
    try:
        lexer = shlex.shlex(spec.command or "", posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return []
    for index, word in enumerate(words):
        if word in _SHELL_OPERATORS:
            return words[:index]
    return words


def script_to_check(spec: LaunchSpec) -> tuple[str | None, bool]:
    """The script file the job starts, when its first word (or an interpreter's script argument) names one.

    Returns (path, must_be_executable); (None, False) when nothing can be checked safely.
    """
    words = _words(spec)
    while words and spec.command is not None and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    if not words or _UNSAFE_WORD.search(words[0]):
        return None, False
    if "/" in words[0]:
        return words[0], True
    if not _INTERPRETER.fullmatch(posixpath.basename(words[0])):
        return None, False
    for word in words[1:]:
        if word in ("-m", "-c", "-e", "--eval", "-"):
            return None, False
        if not word.startswith("-") and _SCRIPT_SUFFIX.search(word) and not _UNSAFE_WORD.search(word):
            return word, False
    return None, False
