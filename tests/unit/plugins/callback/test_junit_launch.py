# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The junit_launch callback: a real ansible-playbook run on localhost, and its JUnit XML report."""

from __future__ import annotations

import os
import pathlib
import subprocess
import textwrap
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.trainops.pct_launch.plugins.callback import junit_launch

SECRET = "s3cr3t-value-never-in-the-report"

PLAYBOOK = textwrap.dedent(
    f"""\
    ---
    - name: Exercise the report
      hosts: all
      gather_facts: false
      tasks:
        - name: Say hello
          ansible.builtin.debug:
            msg: hello from {{{{ inventory_hostname }}}}
        - name: Change something
          ansible.builtin.command: /bin/true
          changed_when: true
          notify: Handle it
        - name: Skip this
          ansible.builtin.debug:
            msg: never
          when: false
        - name: Fail but ignored
          ansible.builtin.fail:
            msg: ignored failure
          ignore_errors: true
        - name: Keep a secret
          ansible.builtin.debug:
            msg: "{SECRET}"
          no_log: true
        - name: Flush
          ansible.builtin.meta: flush_handlers
        - name: "Fail for real with a <tag> & a control character \\x01"
          ansible.builtin.fail:
            msg: "boom <b> & \\x01 {{{{ inventory_hostname }}}}"
          when: inventory_hostname == 'local'
        - name: Fail without a message with a secret
          ansible.builtin.command:
            argv: [/bin/sh, -c, 'echo "{SECRET}"; exit 3']
          no_log: true
          when: inventory_hostname == 'local2'
      handlers:
        - name: Handle it
          ansible.builtin.debug:
            msg: handled
    """
)

INVENTORY = textwrap.dedent(
    """\
    all:
      hosts:
        local: {ansible_connection: local}
        local2: {ansible_connection: local}
        gone: {ansible_connection: ssh, ansible_host: 127.0.0.1, ansible_port: 9, ansible_ssh_common_args: '-o ConnectTimeout=5'}
      vars:
        ansible_python_interpreter: "{{ ansible_playbook_python }}"
    """
)


def _run(tmp_path: pathlib.Path, playbook: str = PLAYBOOK, inventory: str = INVENTORY,
         **env: str) -> tuple[subprocess.CompletedProcess[str], pathlib.Path]:
    (tmp_path / "site.yml").write_text(playbook, encoding="utf-8")
    (tmp_path / "inventory.yml").write_text(inventory, encoding="utf-8")
    out = tmp_path / "junit" / "nested"
    run_env = dict(os.environ)
    for key in ("ANSIBLE_CONFIG", "ANSIBLE_STDOUT_CALLBACK", "JUNIT_OUTPUT_DIR", "JUNIT_LAUNCH_OUTPUT_DIR"):
        run_env.pop(key, None)
    run_env.update(
        ANSIBLE_CALLBACKS_ENABLED="trainops.pct_launch.junit_launch",
        JUNIT_OUTPUT_DIR=str(out),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="false",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_SSH_RETRIES="0",
    )
    run_env.update(env)
    result = subprocess.run(["ansible-playbook", "-i", "inventory.yml", "site.yml"], cwd=tmp_path, env=run_env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180, check=False)
    return result, out


@pytest.fixture(scope="module", name="report")
def fixture_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], ET.Element, str]:
    tmp_path = tmp_path_factory.mktemp("junit")
    result, out = _run(tmp_path)
    files = sorted(out.glob("*.xml"))
    assert len(files) == 1, (files, result.stdout, result.stderr)
    assert files[0].name.startswith("site-")
    assert not list(out.glob(".junit-*")), "a partial report was left behind"
    text = files[0].read_text(encoding="utf-8")
    assert f"JUnit report: {files[0]}" in result.stdout
    return result, ET.fromstring(text.encode("utf-8")), text


def _cases(root: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in root.iter("testcase")}


def test_exit_status_is_ansible_playbooks(report: tuple[subprocess.CompletedProcess[str], ET.Element, str]) -> None:
    result, _root, _text = report
    # failures and an unreachable host: ansible-playbook exits non-zero, the report changes nothing about that
    assert result.returncode in (2, 4), result.stdout + result.stderr


def test_totals(report: tuple[subprocess.CompletedProcess[str], ET.Element, str]) -> None:
    _result, root, _text = report
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "site"
    cases = list(suite.iter("testcase"))
    assert suite.get("tests") == str(len(cases))
    assert suite.get("failures") == "2"
    assert suite.get("errors") == "1"
    assert root.get("failures") == "2" and root.get("errors") == "1"
    props = {prop.get("name"): prop.get("value") for prop in suite.iter("property")}
    assert props["playbook"].endswith("site.yml")
    assert props["ansible_core_version"]


def test_cases(report: tuple[subprocess.CompletedProcess[str], ET.Element, str]) -> None:
    _result, root, _text = report
    cases = _cases(root)
    hello = cases["[local] Say hello"]
    assert hello.get("classname") == "site.Exercise the report"
    assert list(hello) and hello[0].tag == "system-out" and hello[0].text == "hello from local"
    assert float(hello.get("time", "-1")) >= 0

    assert not cases["[local] Change something"].findall("failure")
    assert cases["[local] Handle it"] is not None, "handlers are test cases"
    assert cases["[local] Skip this"].find("skipped") is not None

    ignored = cases["[local] Fail but ignored"]
    assert ignored.find("failure") is None
    assert "ignored failure" in (ignored.findtext("system-out") or "")

    failed = cases["[local] Fail for real with a <tag> & a control character \N{REPLACEMENT CHARACTER}"]
    failure = failed.find("failure")
    assert failure is not None
    assert failure.get("message") == "boom <b> & \N{REPLACEMENT CHARACTER} local"
    assert failure.get("type") == "failed"

    # debug runs on the controller: the first task that reaches the host is the command
    unreachable = cases["[gone] Change something"].find("error")
    assert unreachable is not None and unreachable.get("type") == "unreachable"
    assert "Connection refused" in (unreachable.text or "")
    assert "[gone] Fail but ignored" not in cases, "an unreachable host runs no more tasks"


def test_a_case_per_host(report: tuple[subprocess.CompletedProcess[str], ET.Element, str]) -> None:
    _result, root, _text = report
    names = [case.get("name", "") for case in root.iter("testcase")]
    assert len(names) == len(set(names)), "one test case per task and host"
    # a task on many hosts is a test case per host, each with that host's own result
    for host in ("local", "local2", "gone"):
        assert _cases(root)[f"[{host}] Say hello"].findtext("system-out") == f"hello from {host}"
    assert _cases(root)["[local2] Change something"].find("failure") is None
    assert _cases(root)["[local2] Fail without a message with a secret"].find("failure") is not None
    skipped = _cases(root)["[local2] Fail for real with a <tag> & a control character \N{REPLACEMENT CHARACTER}"]
    assert skipped.find("skipped") is not None, "a host where the task was skipped has its own case"


def test_no_log_and_arguments_stay_out(report: tuple[subprocess.CompletedProcess[str], ET.Element, str]) -> None:
    _result, root, text = report
    assert SECRET not in text
    failure = _cases(root)["[local2] Fail without a message with a secret"].find("failure")
    assert failure is not None
    assert "no_log" in (failure.text or "")
    assert '"invocation"' not in text


def test_unwritable_output_dir_warns(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    playbook = "- name: One task\n  hosts: all\n  gather_facts: false\n  tasks:\n    - name: Hi\n      ansible.builtin.debug:\n"
    inventory = "all:\n  hosts:\n    local: {ansible_connection: local}\n"
    result, _out = _run(tmp_path, playbook, inventory, JUNIT_OUTPUT_DIR=str(blocker / "junit"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "could not write the JUnit report" in result.stderr + result.stdout


def test_xml_text() -> None:
    # pylint: disable-next=protected-access
    assert junit_launch._xml_text("a\x00b\x1bc\td\ne") == "a\ufffdb\ufffdc\td\ne"
