# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The faults the pct stand-in imitates (tools/pve_standin/standin_faults.py): older pve-container, pve-cluster down,
container locks, the exit status of a die. No LXC needed: everything here is answered before a container is touched."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[3] / "tools" / "pve_standin"
sys.path.insert(0, str(STANDIN))

# pylint: disable=wrong-import-position
import standin_verbs  # noqa: E402
from standin_core import Call, Knobs, Node, PctError  # noqa: E402
from standin_faults import TaskFailed, check_lock, exec_help, exit_status, knows_keep_env, version_tuple  # noqa: E402

OLD_REFUSAL = "Unknown option: keep-env\n400 unable to parse option\npct exec <vmid> [<extra-args>]\n"
CLUSTER_DOWN = ("ipcc_send_rec[1] failed: Connection refused\nipcc_send_rec[2] failed: Connection refused\n"
                "ipcc_send_rec[3] failed: Connection refused\nUnable to load access control list: Connection refused\n")


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A node of its own, knobs from the environment only."""
    (tmp_path / "node").write_text("testnode\n", encoding="utf-8")
    monkeypatch.setenv("PVE_STANDIN_ROOT", str(tmp_path))
    for var in ("PVE_STANDIN_PVE_CONTAINER", "PVE_STANDIN_CLUSTER", "PVE_STANDIN_DIE_STATUS", "PVE_STANDIN_CALL_LOG", "PVE_STANDIN_DELAY"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = standin_verbs.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_knob_defaults_and_sources(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    knobs = Knobs.load(root, {})
    assert (knobs.pve_container, knobs.cluster, knobs.die_status) == ("6.1.10", "up", None) and knows_keep_env(knobs)
    (root / "knobs.conf").write_text("pve_container=5.0.8\ncluster=down\ndie_status=9\n", encoding="utf-8")
    knobs = Knobs.load(root, {})
    assert (knobs.pve_container, knobs.cluster, knobs.die_status) == ("5.0.8", "down", 9) and not knows_keep_env(knobs)
    knobs = Knobs.load(root, {"PVE_STANDIN_PVE_CONTAINER": "5.0.9", "PVE_STANDIN_CLUSTER": "up"})  # the environment wins
    assert (knobs.pve_container, knobs.cluster) == ("5.0.9", "up") and knows_keep_env(knobs)
    assert version_tuple("4.4-3") < (5, 0, 9) <= version_tuple("5.0.9") < version_tuple("6.1.10")


@pytest.mark.parametrize(("env", "message"), [
    ({"PVE_STANDIN_PVE_CONTAINER": "eight"}, "invalid stand-in knob PVE_STANDIN_PVE_CONTAINER: 'eight' is not a pve-container version"),
    ({"PVE_STANDIN_CLUSTER": "sideways"}, "invalid stand-in knob PVE_STANDIN_CLUSTER: 'sideways' is not one of up, down"),
    ({"PVE_STANDIN_DIE_STATUS": "0"}, "invalid stand-in knob PVE_STANDIN_DIE_STATUS: '0' is not an exit status from 1 to 255"),
    ({"PVE_STANDIN_DIE_STATUS": "256"}, "invalid stand-in knob PVE_STANDIN_DIE_STATUS: '256' is not an exit status from 1 to 255"),
])
def test_bad_knobs_fail_every_call(root: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(PctError) as err:
        Knobs.load(root, env)
    assert err.value.message.startswith(message) and err.value.code == 255


@pytest.mark.parametrize("argv", [
    ["exec", "200", "--keep-env", "1", "--", "true"],
    ["exec", "200", "--keep-env=1", "--", "true"],
    ["exec", "200", "--keep-env", "0", "--", "true"],
])
def test_old_pve_container_refuses_keep_env(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                            argv: list[str]) -> None:
    """pve-container 5.0.8: Getopt::Long's warning, get_options' 400 die and exec's short usage; a Perl die's status."""
    monkeypatch.setenv("PVE_STANDIN_PVE_CONTAINER", "5.0.8")
    status, out, err = run(argv, capsys)
    assert (out, err) == ("", OLD_REFUSAL)
    assert status not in (0, 1, 126, 127)  # 25 as chosen (ENOTTY); tests of the collection depend on no number
    monkeypatch.setenv("PVE_STANDIN_DIE_STATUS", "3")
    assert run(argv, capsys)[0] == 3


def test_old_pve_container_refuses_any_option_and_names_each(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PVE_STANDIN_PVE_CONTAINER", "4.4-3")
    status, dummy, err = run(["exec", "200", "--keep-env", "1", "-x", "--", "cmd", "--keep-env"], capsys)
    assert status != 0 and err == "Unknown option: keep-env\nUnknown option: x\n400 unable to parse option\npct exec <vmid> [<extra-args>]\n"


def test_old_exec_without_the_option_runs_lxc_attach_keeping_the_environment(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old exec: ``lxc-attach -n VMID -- CMD`` (LXC keeps the environment); new exec: ``--keep-env`` or ``--clear-env``."""
    seen: list[list[str]] = []
    monkeypatch.setattr(Node, "require_running", lambda self, vmid, message=None: None)
    monkeypatch.setattr(standin_verbs.os, "execvpe", lambda path, argv, env: seen.append(list(argv)))
    for version, opts, policy in (("5.0.8", {}, []), ("6.1.10", {}, ["--keep-env"]), ("6.1.10", {"keep-env": "0"}, ["--clear-env"])):
        monkeypatch.setenv("PVE_STANDIN_PVE_CONTAINER", version)
        node = standin_verbs.state_from_env(dict(standin_verbs.os.environ))
        standin_verbs.verb_exec(node, Call("exec", ["200"], opts, ["env"]))
        assert seen[-1] == ["lxc-attach", "-P", str(root / "lxc"), "-n", "200", *policy, "--", "env"]


@pytest.mark.parametrize("argv", [["list"], ["status", "200"], ["exec", "200", "--", "true"], ["help", "exec"], ["config", "200"]])
def test_cluster_down_fails_every_call_as_pmxcfs_down(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                      argv: list[str]) -> None:
    monkeypatch.setenv("PVE_STANDIN_CLUSTER", "down")
    assert run(argv, capsys) == (111, "", CLUSTER_DOWN)  # Perl's die with $! = ECONNREFUSED
    monkeypatch.setenv("PVE_STANDIN_DIE_STATUS", "255")
    assert run(argv, capsys)[0] == 255


def test_help_exec_names_keep_env_only_from_5_0_9(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, dummy = run(["help", "exec"], capsys)
    assert status == 0 and out.startswith("USAGE: pct exec <vmid> [<extra-args>] [OPTIONS]\n\n  Launch a command inside the specified container.\n")
    assert "\n  --keep-env <boolean>   (default=1)\n" in out
    monkeypatch.setenv("PVE_STANDIN_PVE_CONTAINER", "5.0.8")
    status, out, dummy = run(["help", "exec"], capsys)
    assert status == 0 and out.startswith("USAGE: pct exec <vmid> [<extra-args>]\n") and "keep-env" not in out
    assert exec_help(Knobs(pve_container="5.0.8")) == out
    assert run(["help", "frobnicate"], capsys)[0] == 255


@pytest.mark.parametrize(("lock", "skiplock", "mounted_ok", "refused"), [
    ("backup", False, True, True),
    ("snapshot", False, True, True),
    ("backup", True, True, False),  # --skiplock (root only)
    ("mounted", False, True, False),  # start and stop go on with pct mount's lock
    ("mounted", False, False, True),  # shutdown does not
    ("", False, False, False),
])
def test_check_lock(root: Path, lock: str, skiplock: bool, mounted_ok: bool, refused: bool) -> None:
    node = standin_verbs.state_from_env({"PVE_STANDIN_ROOT": str(root)})
    conf = {"hostname": "ct", **({"lock": lock} if lock else {})}
    if not refused:
        check_lock(node, "200", conf, skiplock, mounted_ok)
        return
    with pytest.raises(TaskFailed) as err:
        check_lock(node, "200", conf, skiplock, mounted_ok)
    assert err.value.message == f"CT is locked ({lock})"  # pve-guest-common AbstractConfig::check_lock
    assert exit_status(err.value, Knobs(die_status=7)) == 255  # a worker's error: exit(-1), not a die


def test_locked_start_and_stop_refuse_before_touching_lxc(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    conf = root / "nodes" / "testnode" / "lxc" / "930.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("hostname: ct930\nlock: backup\n", encoding="utf-8")
    for verb, running in (("start", False), ("stop", True)):
        monkeypatch.setattr(Node, "is_running", lambda self, vmid, running=running: running)
        assert run([verb, "930"], capsys) == (255, "", "CT is locked (backup)\n")


def test_exit_status_of_a_die() -> None:
    die = PctError("container '200' not running!")
    assert exit_status(die, None) == 255 and exit_status(die, Knobs()) == 255 and exit_status(die, Knobs(die_status=2)) == 2
