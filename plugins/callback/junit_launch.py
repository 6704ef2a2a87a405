# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: junit_launch
type: aggregate
short_description: Write a JUnit XML report of a playbook run, for CI test reports
version_added: 0.1.0
author:
  - trainops contributors (!UNKNOWN)
description:
  - Writes one JUnit XML file per C(ansible-playbook) run, with a test suite per playbook and a test case per task
    and host, for the test report of a CI system (GitHub Actions, GitLab CI, Jenkins).
  - Failed tasks are failures, with the task's message and its result (for example the last log lines that
    M(trainops.pct_launch.wait_for_log) returns when a job did not start); unreachable hosts are errors; skipped
    tasks are skipped; failures ignored with C(ignore_errors) pass. Handlers are test cases too.
  - A task that runs on many containers is a test case per container, each with that container's own result, so a
    launch on a fleet shows which containers failed and why.
  - A task that fails in a block is a failure even when the block's C(rescue) section handles it (the recap counts it
    as rescued), so the report shows what failed also when the play went on.
  - The result never includes the module's arguments (C(invocation)) nor diffs, and values hidden with C(no_log)
    stay hidden.
  - The report only records what happened; whether the pipeline fails is decided by the exit status of
    C(ansible-playbook), which is not zero when a task failed or a host was unreachable.
  - Enable it in C(ansible.cfg) (C(callbacks_enabled = trainops.pct_launch.junit_launch)) or with
    C(ANSIBLE_CALLBACKS_ENABLED=trainops.pct_launch.junit_launch). It needs no other collection.
options:
  output_dir:
    description:
      - Folder the report is written to, created when missing.
      - The file is named after the first playbook, the time and the process, for example
        C(launch-20250131T120000Z-4242.xml).
      - E(JUNIT_OUTPUT_DIR) is the variable the JUnit callback of community.general reads too.
    type: path
    default: ~/.ansible/junit
    env:
      - name: JUNIT_OUTPUT_DIR
      - name: JUNIT_LAUNCH_OUTPUT_DIR
    ini:
      - section: callback_junit_launch
        key: output_dir
  max_result_chars:
    description:
      - The result of a failed task is cut to its last this many characters in the report.
    type: integer
    default: 20000
    env:
      - name: JUNIT_LAUNCH_MAX_RESULT_CHARS
    ini:
      - section: callback_junit_launch
        key: max_result_chars
notes:
  - The report is written when the run ends normally, also when tasks failed. An C(ansible-playbook) that is killed
    or stops on a syntax error writes none.
seealso:
  - name: JUnit XML format of the Jenkins JUnit plugin
    description: The schema that GitHub Actions, GitLab CI and Jenkins read.
    link: https://github.com/jenkinsci/junit-plugin/blob/master/src/main/resources/hudson/tasks/junit/types/junit-10.xsd
"""

EXAMPLES = r"""
# In a CI job (see docs/ci/ in the collection):
#   export ANSIBLE_CALLBACKS_ENABLED=trainops.pct_launch.junit_launch
#   export JUNIT_OUTPUT_DIR="$PWD/junit"
#   ansible-playbook -i inventory.yml trainops.pct_launch.launch -e @job.yml
# and publish junit/*.xml as the job's test report.
#
# Or in ansible.cfg:
# [defaults]
# callbacks_enabled = trainops.pct_launch.junit_launch
#
# [callback_junit_launch]
# output_dir = ./junit
"""

import datetime
import json
import os
import platform
import re
import tempfile
import time
import typing as t
import xml.etree.ElementTree as ET

from ansible import __version__ as ansible_version
from ansible.plugins.callback import CallbackBase

# Characters XML 1.0 cannot carry, not even escaped.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(value: t.Any) -> str:
    return _XML_INVALID.sub("\N{REPLACEMENT CHARACTER}", str(value))


def _attr(result: t.Any, name: str) -> t.Any:
    """An attribute of a task result: public since ansible-core 2.19 (host, task, result), private before."""
    try:
        return getattr(result, name)
    except AttributeError:
        return getattr(result, f"_{name}")


class _Case:
    """One test case: a task on a host."""

    def __init__(self, classname: str, name: str, seconds: float) -> None:
        self.classname = classname
        self.name = name
        self.seconds = seconds
        self.outcome = "passed"  # passed, failure, error or skipped
        self.message = ""
        self.details = ""
        self.output = ""


class _Suite:
    """One test suite: a playbook."""

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        self.path = path
        self.started = time.time()
        self.timestamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        self.cases: list[_Case] = []

    def count(self, outcome: str) -> int:
        return sum(1 for case in self.cases if case.outcome == outcome)


class CallbackModule(CallbackBase):
    """Write a JUnit XML report of the run."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "trainops.pct_launch.junit_launch"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display: t.Any = None) -> None:
        super().__init__(display=display)
        self._suites: list[_Suite] = []
        self._play_name = ""
        self._task_started: dict[str, float] = {}
        self._host_started: dict[tuple[str, str], float] = {}

    # Playbook, play and task boundaries.

    def v2_playbook_on_start(self, playbook: t.Any) -> None:
        path = str(getattr(playbook, "_file_name", "") or "playbook")
        name = os.path.splitext(os.path.basename(path))[0] or "playbook"
        self._suites.append(_Suite(name, path))

    def v2_playbook_on_play_start(self, play: t.Any) -> None:
        self._play_name = play.get_name().strip() or "play"

    def v2_playbook_on_task_start(self, task: t.Any, is_conditional: bool) -> None:
        self._task_started[task._uuid] = time.time()  # pylint: disable=protected-access

    def v2_playbook_on_handler_task_start(self, task: t.Any) -> None:
        self._task_started[task._uuid] = time.time()  # pylint: disable=protected-access

    def v2_runner_on_start(self, host: t.Any, task: t.Any) -> None:
        self._host_started[(task._uuid, host.get_name())] = time.time()  # pylint: disable=protected-access

    # Results of a task on a host.

    def v2_runner_on_ok(self, result: t.Any) -> None:
        case = self._case(result)
        case.output = self._message(_attr(result, "result"))

    def v2_runner_on_failed(self, result: t.Any, ignore_errors: bool = False) -> None:
        case = self._case(result)
        data = _attr(result, "result")
        if ignore_errors:
            case.output = "failed, ignored (ignore_errors): " + self._message(data)
            return
        case.outcome = "failure"
        case.message = self._message(data) or "failed"
        case.details = self._details(data)

    def v2_runner_on_unreachable(self, result: t.Any) -> None:
        case = self._case(result)
        data = _attr(result, "result")
        case.outcome = "error"
        case.message = self._message(data) or "unreachable"
        case.details = self._details(data)

    def v2_runner_on_skipped(self, result: t.Any) -> None:
        case = self._case(result)
        case.outcome = "skipped"
        data = _attr(result, "result")
        case.message = str(data.get("skip_reason") or data.get("skipped_reason") or "skipped")

    def v2_playbook_on_stats(self, stats: t.Any) -> None:
        if self._suites:
            self._write()

    # Helpers.

    def _case(self, result: t.Any) -> _Case:
        """A new test case of the result's task on its host."""
        task = _attr(result, "task")
        host = _attr(result, "host").get_name()
        uuid = task._uuid  # pylint: disable=protected-access
        started = self._host_started.pop((uuid, host), None) or self._task_started.get(uuid) or time.time()
        name = task.get_name().strip() or task.action
        case = _Case(f"{self._suite().name}.{self._play_name}", f"[{host}] {name}", time.time() - started)
        self._suite().cases.append(case)
        return case

    def _suite(self) -> _Suite:
        if not self._suites:
            self._suites.append(_Suite("playbook", ""))
        return self._suites[-1]

    @staticmethod
    def _message(data: t.Mapping[str, t.Any]) -> str:
        message = data.get("msg", "")
        if isinstance(message, (list, tuple)):
            return "\n".join(str(line) for line in message)
        return str(message) if message is not None else ""

    def _details(self, data: t.Mapping[str, t.Any]) -> str:
        """The task's result without its arguments and diff, as JSON, cut to max_result_chars."""
        abridged = self._dump_results(data, serialize=False)
        for key in ("invocation", "diff", "msg"):
            abridged.pop(key, None)
        try:
            text = json.dumps(abridged, indent=2, sort_keys=True, default=str, ensure_ascii=False)
        except (TypeError, ValueError):
            text = str(abridged)
        limit = max(int(self.get_option("max_result_chars")), 0)
        if len(text) > limit:
            text = f"[... first {len(text) - limit} characters cut ...]\n" + text[len(text) - limit:]
        return text

    def _write(self) -> None:
        suites = ET.Element("testsuites", name="ansible-playbook")
        totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
        elapsed = 0.0
        for suite in self._suites:
            seconds = time.time() - suite.started
            elapsed = max(elapsed, seconds)
            counts = {
                "tests": len(suite.cases),
                "failures": suite.count("failure"),
                "errors": suite.count("error"),
                "skipped": suite.count("skipped"),
            }
            for key, value in counts.items():
                totals[key] += value
            node = ET.SubElement(suites, "testsuite", name=_xml_text(suite.name), timestamp=suite.timestamp,
                                 hostname=_xml_text(platform.node()), time=f"{seconds:.3f}",
                                 **{key: str(value) for key, value in counts.items()})
            properties = ET.SubElement(node, "properties")
            ET.SubElement(properties, "property", name="playbook", value=_xml_text(suite.path))
            ET.SubElement(properties, "property", name="ansible_core_version", value=ansible_version)
            for case in suite.cases:
                element = ET.SubElement(node, "testcase", classname=_xml_text(case.classname), name=_xml_text(case.name),
                                        time=f"{case.seconds:.3f}")
                if case.outcome in ("failure", "error"):
                    child = ET.SubElement(element, case.outcome, message=_xml_text(case.message.splitlines()[0][:500]),
                                          type="unreachable" if case.outcome == "error" else "failed")
                    child.text = _xml_text(f"{case.message}\n\n{case.details}".strip())
                elif case.outcome == "skipped":
                    ET.SubElement(element, "skipped", message=_xml_text(case.message))
                if case.output:
                    ET.SubElement(element, "system-out").text = _xml_text(case.output)
        for key, value in totals.items():
            suites.set(key, str(value))
        suites.set("time", f"{elapsed:.3f}")

        output_dir = os.path.expanduser(str(self.get_option("output_dir")))
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = os.path.join(output_dir, f"{self._suites[0].name}-{stamp}-{os.getpid()}.xml")
        try:
            os.makedirs(output_dir, exist_ok=True)
            ET.indent(suites)
            descriptor, partial = tempfile.mkstemp(dir=output_dir, prefix=".junit-", suffix=".xml.part")
            with os.fdopen(descriptor, "wb") as handle:
                ET.ElementTree(suites).write(handle, encoding="utf-8", xml_declaration=True)
            os.chmod(partial, 0o644)
            os.replace(partial, path)
        except OSError as error:
            self._display.warning(f"junit_launch: could not write the JUnit report {path}: {error}")
            return
        self._display.display(f"JUnit report: {path}")
