# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""ansible-doc renders every plugin of the collection, with examples and return values.

Runs with the ansible-core on PATH: the development venv's in the integration
stage, the oldest supported one in the compat stage of tests/run.sh.  The
plugins are found on disk (plugins/<type>/*.py), so a new plugin is checked
without editing this file; ansible-doc must list exactly those.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import typing as t

import pytest
import yaml

pytestmark = pytest.mark.integration

COLLECTION = "trainops.pct_launch"
ROOT = pathlib.Path(__file__).resolve().parents[2]

# plugins/ folder -> ansible-doc plugin type, for the types with one plugin per file.
DOC_TYPES = {
    "modules": "module",
    "become": "become",
    "cache": "cache",
    "callback": "callback",
    "cliconf": "cliconf",
    "connection": "connection",
    "httpapi": "httpapi",
    "inventory": "inventory",
    "lookup": "lookup",
    "netconf": "netconf",
    "shell": "shell",
    "strategy": "strategy",
    "vars": "vars",
}
# Plugin types whose use returns a value that RETURN must describe.
RETURNS_VALUES = {"module", "lookup"}


def _plugins_on_disk() -> list[tuple[str, str]]:
    """(ansible-doc type, FQCN) of every documentable plugin file of the checkout."""
    found = []
    for folder, doc_type in sorted(DOC_TYPES.items()):
        for path in sorted((ROOT / "plugins" / folder).glob("*.py")):
            if not path.name.startswith("_") and path.name != "__init__.py":
                found.append((doc_type, f"{COLLECTION}.{path.stem}"))
    return found


PLUGINS = _plugins_on_disk()


def _ansible_doc(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("ansible-doc") is None:
        pytest.fail("ansible-doc is not on PATH: source tools/env.sh")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="true", COLUMNS="160")
    result = subprocess.run(["ansible-doc", *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, f"ansible-doc {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    # A plugin whose documentation does not parse is skipped with a warning, and exit status 0.
    assert "[WARNING]" not in result.stderr, result.stderr
    assert "[ERROR]" not in result.stderr, result.stderr
    return result


@pytest.fixture(scope="module", name="doc_json")
def fixture_doc_json() -> dict[str, dict[str, t.Any]]:
    """ansible-doc --json of every plugin, one call per plugin type."""
    docs: dict[str, dict[str, t.Any]] = {}
    for doc_type in sorted({doc_type for doc_type, _fqcn in PLUGINS}):
        names = [fqcn for plugin_type, fqcn in PLUGINS if plugin_type == doc_type]
        docs.update({f"{doc_type}:{name}": value for name, value in json.loads(_ansible_doc("--json", "-t", doc_type, *names).stdout).items()})
    return docs


def test_plugins_found() -> None:
    """The collection's known plugins are all here (the list is built from the files)."""
    assert ("connection", f"{COLLECTION}.pct") in PLUGINS
    for name in ("tmux_session", "tmux_session_info", "wait_for_log"):
        assert ("module", f"{COLLECTION}.{name}") in PLUGINS


@pytest.mark.parametrize("doc_type", sorted({doc_type for doc_type, _fqcn in PLUGINS}))
def test_ansible_doc_lists_every_plugin(doc_type: str) -> None:
    listed = json.loads(_ansible_doc("--list", "--json", "-t", doc_type, COLLECTION).stdout)
    on_disk = {fqcn for plugin_type, fqcn in PLUGINS if plugin_type == doc_type}
    assert set(listed) == on_disk


def test_action_plugins_are_documented_by_their_module() -> None:
    """An action plugin is documented by the module of the same name (ansible-doc -t module)."""
    for path in sorted((ROOT / "plugins" / "action").glob("*.py")):
        if path.name.startswith("_"):
            continue
        assert ("module", f"{COLLECTION}.{path.stem}") in PLUGINS, f"action {path.stem} has no module of that name to document it"


@pytest.mark.parametrize(("doc_type", "fqcn"), PLUGINS, ids=[f"{doc_type}:{fqcn}" for doc_type, fqcn in PLUGINS])
def test_doc_json(doc_json: dict[str, dict[str, t.Any]], doc_type: str, fqcn: str) -> None:
    entry = doc_json[f"{doc_type}:{fqcn}"]
    doc = entry["doc"]
    assert doc["short_description"].strip()
    assert doc.get("description"), "no description"
    assert doc.get("author"), "no author"
    for option, spec in (doc.get("options") or {}).items():
        assert spec.get("description"), f"option {option} has no description"

    examples = (entry.get("examples") or "").strip()
    assert examples, f"{fqcn} has no EXAMPLES"
    # Examples are YAML, maybe several documents (commented-out ansible.cfg snippets are YAML comments).
    list(yaml.safe_load_all(examples))

    if doc_type in RETURNS_VALUES:
        returned = entry.get("return") or {}
        assert returned, f"{fqcn} has no RETURN"
        for key, spec in returned.items():
            assert spec.get("description"), f"return value {key} has no description"
            assert spec.get("returned"), f"return value {key} does not say when it is returned"


@pytest.mark.parametrize(("doc_type", "fqcn"), PLUGINS, ids=[f"{doc_type}:{fqcn}" for doc_type, fqcn in PLUGINS])
def test_doc_text(doc_type: str, fqcn: str) -> None:
    """The text a user reads with `ansible-doc -t TYPE NAME` renders, with its examples and return values."""
    text = _ansible_doc("-t", doc_type, fqcn).stdout
    assert fqcn in text.splitlines()[0]
    assert "\nEXAMPLES:" in text
    if doc_type in RETURNS_VALUES:
        assert "\nRETURN VALUES:" in text


def test_module_defaults_reach_every_module_through_the_action_group(tmp_path: pathlib.Path) -> None:
    """meta/runtime.yml's action group pct_launch: one module_defaults entry sets session_name for all three modules.

    Runs on localhost (the modules run on their target): a session of that name does not exist, so the report
    says absent, the stop has nothing to do and the wait fails naming the session.
    """
    modules = sorted(name for doc_type, name in PLUGINS if doc_type == "module")
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    # the group is the session modules (session_name, log_path); backup_window_info, gpu_info and prepare_info take
    # neither, and a default a module does not take fails it, so they stay out
    session_modules = [f"{COLLECTION}.{name}" for name in ("tmux_session", "tmux_session_info", "wait_for_log")]
    assert sorted(f"{COLLECTION}.{name}" for name in runtime["action_groups"]["pct_launch"]) == session_modules
    assert sorted(set(modules) - set(session_modules)) == [f"{COLLECTION}.{name}" for name in ("backup_window_info", "gpu_info", "prepare_info")], modules
    name = f"defaults-{os.getpid()}"
    tasks = [{"name": f"{COLLECTION}.{module}", f"{COLLECTION}.{module}": args, "register": module, "ignore_errors": True}
             for module, args in (("tmux_session_info", {}), ("tmux_session", {"state": "stopped"}), ("wait_for_log", {"timeout": 1}))]
    play = [{"hosts": "localhost", "gather_facts": False, "module_defaults": {f"group/{COLLECTION}.pct_launch": {"session_name": name}},
             "tasks": tasks + [{"name": "Write the results", "ansible.builtin.copy": {
                 "content": "{{ [tmux_session_info, tmux_session, wait_for_log] | to_json }}",
                 "dest": str(tmp_path / "results.json"), "mode": "0600"}}]}]
    playbook = tmp_path / "defaults.yml"
    playbook.write_text(yaml.safe_dump(play), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                           str(playbook)], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)
    assert (tmp_path / "results.json").is_file(), proc.stdout + proc.stderr
    info, stop, wait = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert info["session"]["name"] == name and info["session"]["state"] == "absent", info
    assert stop["session_name"] == name and not stop["changed"] and stop["state"] == "absent", stop
    assert wait["failed"] and f"session {name}" in wait["msg"], wait


@pytest.mark.parametrize("name", sorted(path.stem for path in (ROOT / "plugins" / "filter").glob("*.yml")))
def test_every_filter_has_its_page(name: str) -> None:
    """Each filter's documentation (plugins/filter/NAME.yml) is an ansible-doc page, and names a filter the file exports."""
    page = _ansible_doc("-t", "filter", f"{COLLECTION}.{name}")
    assert f"{COLLECTION}.{name}" in page.stdout and "EXAMPLES" in page.stdout.upper(), page.stdout[:500]
    exported = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "plugins" / "filter").glob("*.py"))
    assert f'"{name}":' in exported, f"no filter {name} in plugins/filter"


def test_every_filter_is_documented() -> None:
    """Each filter a plugins/filter/*.py exports has its page (NAME.yml)."""
    documented = {path.stem for path in (ROOT / "plugins" / "filter").glob("*.yml")}
    exported: set[str] = set()
    for path in (ROOT / "plugins" / "filter").glob("*.py"):
        module = importlib.import_module(f"ansible_collections.trainops.pct_launch.plugins.filter.{path.stem}")
        exported.update(module.FilterModule().filters())
    assert exported and exported == documented, (exported, documented)
