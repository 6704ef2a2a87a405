# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: a module's direct run, its code on the target without AnsiballZ (``module_utils/_direct_boot.py``).

An action plugin calls ``attempt`` before ``_execute_module``. When the task is pipelined, not async, not delegated,
and the target's Python is known (``ansible_python_interpreter``, or the interpreter Ansible discovered there), the
options are validated here with the module's argument spec, as ``AnsibleModule`` would (the same messages), and one
command runs the boot program with the sources the entry imports: the same one ``pct exec`` as a pipelined module,
without ``ansible.module_utils.basic``. Otherwise ``attempt`` returns None and the module runs as usual.
``run_module`` is that choice; ``DirectRunAction`` is the action plugin of a module whose whole work is that run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import typing as t
from pathlib import Path

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase

from ansible_collections.trainops.pct_launch.plugins.module_utils._direct_boot import PACKAGE

MODULE_UTILS = Path(__file__).resolve().parents[1] / "module_utils"
BOOT = "_direct_boot"
_IMPORT = re.compile(r"^[ \t]*from ansible_collections\.trainops\.pct_launch\.plugins\.module_utils(?:\.(\w+))? import "
                     r"(?:\(([^)]*)\)|([^#\n]*))", re.M)
_AUTO = ("auto", "auto_legacy", "auto_silent", "auto_legacy_silent")


def sources(entry: str) -> dict[str, str]:
    """The source of module_utils file ``entry`` and of every one it imports (lazy imports too), by full name."""
    found: dict[str, str] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found[name] = (MODULE_UTILS / f"{name}.py").read_text(encoding="utf-8")
        for module, grouped, listed in _IMPORT.findall(found[name]):
            names = [module] if module else [item.split()[0] for item in (grouped or listed).split(",") if item.strip()]
            todo.extend(names)
    return {f"{PACKAGE}.{name}": text for name, text in sorted(found.items())}


def plain(value: t.Any) -> t.Any:
    """``value`` as JSON data, what a module's arguments become on their way: vaulted values and dates as their text."""
    return json.loads(json.dumps(value, default=str))


@functools.lru_cache(maxsize=None)
def _code(entry: str) -> tuple[dict[str, str], dict[str, str], str]:
    """(the sources of ``entry``, their SHA-256 digests, the boot program), read once per controller process."""
    texts = sources(entry)
    digests = {name: hashlib.sha256(text.encode("utf-8")).hexdigest() for name, text in texts.items()}
    return texts, digests, (MODULE_UTILS / f"{BOOT}.py").read_text(encoding="utf-8")


def program(entry: str, params: t.Mapping[str, t.Any], check_mode: bool, diff: bool = False) -> bytes:
    """The boot program's source and the line that calls it with the payload: what the target's Python reads.

    The payload holds each source's SHA-256 digest, by which the target keeps its compiled code (``_direct_boot.CodeCache``).
    """
    texts, digests, boot = _code(entry)
    payload = json.dumps({"sources": texts, "digests": digests, "entry": entry, "params": plain(dict(params)),
                          "check_mode": check_mode, "diff": diff})
    return f"{boot}\nmain({payload!r})\n".encode("utf-8")


def validate(name: str, spec: t.Mapping[str, t.Any], args: t.Mapping[str, t.Any],
             rules: t.Mapping[str, t.Any]) -> tuple[dict[str, t.Any], set[str], str | None]:
    """(validated options, their no_log values, AnsibleModule's message when they are wrong)."""
    result = ArgumentSpecValidator(dict(spec), **rules).validate(dict(args))
    message = None
    if result.error_messages:
        message = result.errors.msg
        if isinstance(result.errors[0], UnsupportedError):
            message = f"Unsupported parameters for ({name}) module: {message}"
    return result.validated_parameters, set(result._no_log_values), message  # pylint: disable=protected-access


def interpreter(action: t.Any, task_vars: t.Mapping[str, t.Any]) -> str | None:
    """The target's Python as Ansible would run a module with it; None when only a discovery could tell."""
    value = C.config.get_config_value("INTERPRETER_PYTHON", variables=dict(task_vars))
    if not isinstance(value, str):
        return None
    value = str(action._templar.template(value)).strip()  # pylint: disable=protected-access  # (a str method drops 2.19's trust)
    if value in _AUTO:
        value = str(task_vars.get("ansible_facts", {}).get("discovered_interpreter_python") or "")
    return value if re.fullmatch(r"/[^\s{}'\"\\]+", value) else None  # a plain path: "/usr/bin/env python3" runs as usual


def _usable(action: t.Any) -> bool:
    task, connection = action._task, action._connection  # pylint: disable=protected-access
    if task.async_val or task.delegate_to or getattr(connection, "_remote_is_local", False):
        return False
    return bool(action._is_pipelining_enabled("new", False))  # pylint: disable=protected-access


def _inject_invocation(task_vars: t.Mapping[str, t.Any]) -> bool:
    """Whether a module's result would hold ``invocation`` (ansible-core 2.21 asks INJECT_INVOCATION; before, always)."""
    try:
        return bool(C.config.get_config_value("INJECT_INVOCATION", variables=dict(task_vars)))
    except AnsibleError:
        return True


def parse(res: t.Mapping[str, t.Any], python: str) -> dict[str, t.Any]:
    """The result line the boot program printed; a module failure (stdout, stderr, rc) when there is none."""
    stdout, stderr = str(res.get("stdout") or ""), str(res.get("stderr") or "")
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                answer = json.loads(line)
            except ValueError:
                break
            if isinstance(answer, dict):
                return answer
    message = "MODULE FAILURE: see stdout/stderr for the exact error"
    if re.search(rf"{re.escape(python)}: (?:No such file or directory|not found|command not found)", stderr + stdout):
        message = f"The module interpreter {python!r} was not found. Consider overriding the configured interpreter path for this host."
    return {"failed": True, "msg": message, "rc": res.get("rc"), "module_stdout": stdout, "module_stderr": stderr}


def attempt(action: t.Any, entry: str, spec: t.Mapping[str, t.Any], args: t.Mapping[str, t.Any],
            task_vars: t.Mapping[str, t.Any], **rules: t.Any) -> dict[str, t.Any] | None:
    """The result of the module's direct run of ``entry``; None when the task must run the module as usual."""
    python = interpreter(action, task_vars) if _usable(action) else None
    if python is None:
        return None
    task = action._task  # pylint: disable=protected-access
    name = str(task.action)
    params, secrets, message = validate(name, spec, plain(args), rules)
    if message is not None:
        return t.cast(dict, remove_values({"failed": True, "msg": message}, secrets))
    shell = action._connection._shell  # pylint: disable=protected-access
    command = shell.build_module_command(action._compute_environment_string(), f"#!{python}", "")  # pylint: disable=protected-access
    res = action._low_level_execute_command(command, sudoable=True,  # pylint: disable=protected-access
                                            in_data=program(entry, params, bool(task.check_mode), bool(task.diff)))
    result = parse(res, python)
    if _inject_invocation(task_vars):
        result.setdefault("invocation", {"module_args": params})
    return t.cast(dict, remove_values(result, secrets))


def run_module(action: t.Any, module_name: str, entry: str, spec: t.Mapping[str, t.Any], args: t.Mapping[str, t.Any],
               task_vars: t.Mapping[str, t.Any], **rules: t.Any) -> dict[str, t.Any]:
    """The module's result: its direct run of ``entry`` where it can (``attempt``), else the module through AnsiballZ."""
    direct = attempt(action, entry, spec, args, task_vars, **rules)
    if direct is not None:
        return direct
    # as ansible.builtin's normal action runs a module: an async task through async_wrapper, whose files stay for it
    wrap_async = bool(action._task.async_val) and not action._connection.has_native_async  # pylint: disable=protected-access
    result = dict(action._execute_module(module_name=module_name, module_args=dict(args), task_vars=task_vars,  # pylint: disable=protected-access
                                         wrap_async=wrap_async))
    if not wrap_async:
        action._remove_tmp_path(action._connection._shell.tmpdir)  # pylint: disable=protected-access
    return result


class DirectRunAction(ActionBase):
    """The action plugin of a module that runs as a direct run where it can: ``run_module`` with the class's module."""

    TRANSFERS_FILES = False
    _supports_async = True  # an async task runs the module (run_module)
    MODULE_NAME = ""
    ENTRY = ""
    ARGUMENT_SPEC: t.Mapping[str, t.Any] = {}
    RULES: t.Mapping[str, t.Any] = {}

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        """The module's result."""
        result = super().run(tmp, task_vars)
        del tmp
        args = self.module_args(dict(self._task.args))
        result.update(run_module(self, self.MODULE_NAME, self.ENTRY, self.ARGUMENT_SPEC, args, task_vars or {}, **self.RULES))
        return result

    def module_args(self, args: dict[str, t.Any]) -> dict[str, t.Any]:
        """The module's options from the task's: what the controller adds (nothing here)."""
        return args
