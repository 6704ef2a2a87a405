# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A probe of a design the collection does not ship yet: one task per node for the launch and its proof.

For each node, one ssh session (through the node's shared connection) runs benchmarks/node_batch_probe_node.py
with the node's Python, which runs tmux_session's direct-run program (plugin_utils/_direct_run.py, entry
_tmux_run, with ``wait``: the launch and its proof in one ``pct exec``) in all of that node's containers at once.
The nodes are reached side by side. No Ansible process: what the design would add on top is Ansible's start-up
and one worker per node. benchmarks/run.py measures it next to the parallel launcher.

Usage: node_batch_probe.py -F SSH_CONFIG -S CONTROL_PATH [-t SECONDS] SESSION LOG PATTERN CHDIR NODE:VMID... -- COMMAND
  PATTERN is a Python regular expression (wait_for_log's). Exit status 0 when every container's result says
  the start was proven (``wait.verdict`` started), else 1, each failure named on standard error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import typing as t
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE_SIDE = HERE / "node_batch_probe_node.py"


def program(args: argparse.Namespace) -> bytes:
    """tmux_session's direct-run program for the job, its options validated with the module's spec."""
    sys.path.insert(0, os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep)[0])
    # pylint: disable-next=import-outside-toplevel  # the collection, found through ANSIBLE_COLLECTIONS_PATH (tools/env.sh)
    from ansible_collections.trainops.pct_launch.plugins.action.tmux_session import ARGUMENT_SPEC, RULES
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.trainops.pct_launch.plugins.plugin_utils import _direct_run
    options = {"session_name": args.session, "argv": list(args.command), "chdir": args.chdir, "log_path": args.log,
               "state": "started", "wait": {"pattern": args.pattern, "timeout": args.timeout}}
    params, _secrets, message = _direct_run.validate("tmux_session", ARGUMENT_SPEC, options, RULES)
    if message is not None:
        raise SystemExit(f"node_batch_probe: {message}")
    return _direct_run.program("_tmux_run", params, False)


def on_node(args: argparse.Namespace, node: str, vmids: list[int], code: bytes, results: dict[str, t.Any]) -> None:
    """One ssh session to ``node``: the node side runs ``code`` in its containers; their results into ``results``."""
    source = NODE_SIDE.read_text(encoding="utf-8") + f"\nmain({code!r}, {vmids!r})\n"
    argv = ["ssh", "-T", "-F", args.ssh_config, "-o", "ControlMaster=auto", "-o", "ControlPersist=60s", "-o", f"ControlPath={args.control_path}",
            node, "python3", "-"]
    proc = subprocess.run(argv, input=source.encode("utf-8"), capture_output=True, timeout=args.timeout + 60, check=False)
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        vmid, _space, text = line.partition(" ")
        try:
            results[f"{node}:{vmid}"] = json.loads(text)
        except ValueError:
            results[f"{node}:{vmid}"] = {"failed": True, "msg": text}
    if proc.returncode != 0:
        results[node] = {"failed": True, "msg": f"ssh exit status {proc.returncode}: {proc.stderr.decode('utf-8', 'replace')[-500:]}"}


def main(argv: list[str]) -> int:
    """Launch and prove the job in every container, a node at a time side by side; 0 when all were proven."""
    parser = argparse.ArgumentParser(prog="node_batch_probe.py")
    parser.add_argument("-F", dest="ssh_config", required=True)
    parser.add_argument("-S", dest="control_path", required=True)
    parser.add_argument("-t", dest="timeout", type=int, default=60)
    parser.add_argument("session")
    parser.add_argument("log")
    parser.add_argument("pattern")
    parser.add_argument("chdir")
    parser.add_argument("targets", nargs="+")
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.command = argv[split + 1:]
    if not args.command:
        parser.error("no COMMAND after --")
    by_node: dict[str, list[int]] = {}
    for target in args.targets:
        node, _colon, vmid = target.rpartition(":")
        by_node.setdefault(node, []).append(int(vmid))
    code, results = program(args), {}
    threads = [threading.Thread(target=on_node, args=(args, node, vmids, code, results)) for node, vmids in by_node.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [target for target in args.targets if (results.get(target) or {}).get("wait", {}).get("verdict") != "started"]
    for target in failed:
        print(f"node_batch_probe: {target}: {json.dumps(results.get(target))[:300]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
