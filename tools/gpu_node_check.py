# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Run the collection's GPU checks on a real Proxmox VE node with NVIDIA GPUs, and print what they found.

    python3 tools/gpu_node_check.py                 # the node: GPUs, compute processes and their containers
    python3 tools/gpu_node_check.py 200 201         # and, inside these running containers, what a GPU job needs
    python3 tools/gpu_node_check.py --json 200      # the same as JSON

Run it as root on the node (pct needs root). It uses the very code the collection's preflight uses
(plugins/module_utils/_gpu_smi.py, plugins/plugin_utils/_gpu_verdict.py and _pct_command.py), loaded from the
files next to this one, so it works from a clone or an installed collection, without Ansible. It only reads:
nvidia-smi queries and /proc on the node, and in each container one ``pct exec`` of python3 reading
_gpu_smi.py from its standard input. Exit status: 0 nothing found, 1 findings, 2 it could not run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
import typing as t

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMI_FILE = os.path.join(ROOT, "plugins", "module_utils", "_gpu_smi.py")


def _load(name: str, *parts: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "plugins", *parts))
    if spec is None or spec.loader is None:
        raise SystemExit(f"gpu_node_check: cannot load {os.path.join(*parts)} from {ROOT}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


SMI = _load("trainops_gpu_smi", "module_utils", "_gpu_smi.py")
VERDICT = _load("trainops_gpu_verdict", "plugin_utils", "_gpu_verdict.py")
PCT = _load("trainops_pct_command", "plugin_utils", "_pct_command.py")


def container_report(vmid: int) -> dict[str, t.Any]:
    """``_gpu_smi.host_report`` inside the container, through one ``pct exec``."""
    argv = PCT.pct_exec_argv(PCT.PctTarget(vmid=vmid), ["python3", "-", "--host"])
    with open(SMI_FILE, "rb") as handle:
        proc = subprocess.run(argv, input=handle.read(), capture_output=True, check=False, timeout=120)
    if proc.returncode != 0:
        return {"error": f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace').strip()}"}
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def _node_lines(node: t.Mapping[str, t.Any]) -> list[str]:
    lines = [f"node: nvidia-smi {node.get('nvidia_smi') or 'not found'}, driver {node.get('driver_version') or '?'}"]
    if node.get("error"):
        lines.append(f"  error: {node['error']}")
    for gpu in node.get("gpus") or []:
        lines.append(f"  GPU {gpu['index']} {gpu['uuid']} {gpu.get('name')}: {gpu.get('utilization')} %, "
                     f"{gpu.get('memory_used')} / {gpu.get('memory_total')} MiB")
        for app in (a for a in node.get("processes") or [] if a.get("gpu_uuid") == gpu["uuid"]):
            lines.append(f"    PID {app['pid']} {app.get('process_name')} {app.get('used_memory')} MiB in {VERDICT.where(app.get('vmid'), None)}")
    return lines


def main(argv: list[str]) -> int:
    """Check the node, then each container named on the command line."""
    as_json = "--json" in argv
    vmids = [int(arg) for arg in argv if arg.isdigit()]
    node = SMI.node_report()
    report: dict[str, t.Any] = {"node": node, "containers": {}}
    findings = bool(node.get("error"))
    for vmid in vmids:
        host = container_report(vmid)
        entry = {"report": host, "busy": VERDICT.busy(node, host, vmid) if not host.get("error") else [],
                 "problems": VERDICT.problems(node, host, ("all", None)) if not host.get("error") else [host["error"]]}
        findings = findings or bool(entry["busy"] or entry["problems"])
        report["containers"][str(vmid)] = entry
    if as_json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print("\n".join(_node_lines(node)))
        for vmid, entry in report["containers"].items():
            print(f"CT {vmid}: {len(entry['report'].get('gpus') or [])} GPUs visible")
            for line in [f["message"] for f in entry["busy"]] + entry["problems"]:
                print(f"  - {line}")
        print("findings: " + ("yes" if findings else "none"))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
