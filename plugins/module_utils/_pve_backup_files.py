# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What a Proxmox VE node holds about its backup jobs, read on the node itself; the controller judges it
(``plugins/plugin_utils/_pve_backup.py``).

It runs in two places: on the node of a container of the ``trainops.pct_launch.pct`` connection, sent on the standard
input of ``python3 -`` by ``backup_window_info``'s action (``main`` prints ``read_node`` as one JSON line), and as the
module ``backup_window_info`` on a host that is itself a Proxmox VE node. Standard library only, Python 3.7+ (a node
of Proxmox VE 7.4 has Debian 11's python3.9).

It reads, as they are, the cluster's backup jobs (``PVE_DIR/jobs.cfg``, pve-manager's ``PVE::Jobs``, and the
``PVE_DIR/vzdump.cron`` of nodes from before Proxmox VE 7.1, pve-guest-common's ``PVE::VZDump::Common``
``parse_vzdump_cron_config``), the ``pool:`` lines of ``PVE_DIR/user.cfg`` (pve-access-control's
``parse_user_config``; nothing else of that file leaves the node) and the ``mode:`` line of the node's own
``/etc/vzdump.conf`` (pve-manager's ``PVE::VZDump::read_vzdump_defaults``, the default mode of a job without one);
which node holds the container (``PVE_DIR/nodes/NODE/lxc/VMID.conf``); the time and the node's time zone, in whose
local time ``pvescheduler`` evaluates the schedules. pmxcfs gives its files mode 0640, owner root, group www-data
(pve-cluster ``src/pmxcfs/pmxcfs.c`` ``cfs_fuse_getattr``), so a login that is neither root nor in www-data reads
none of them: each file that could not be read is named in ``errors`` with the reason.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import re
import sys
import time
import typing as t

PVE_DIR = "/etc/pve"
VZDUMP_CONF = "/etc/vzdump.conf"
FILES = ("jobs.cfg", "vzdump.cron", "user.cfg")
LIMIT = 1 << 20  # bytes read of a file at most
_POOL = re.compile(r"^\s*pool\s*:", re.MULTILINE)
_MODE = re.compile(r"^\s*mode\s*:.*$", re.MULTILINE)


def _read(path: str) -> tuple[str | None, str | None]:
    """(text, None), (None, None) when the file does not exist, or (None, the reason it could not be read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(LIMIT).decode("utf-8", "replace"), None
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, exc.strerror or str(exc)


def _zone_name() -> str | None:
    """The node's time zone (``/etc/localtime``'s target under ``zoneinfo/``, else ``/etc/timezone``); None unknown."""
    target = os.path.realpath("/etc/localtime")
    if "/zoneinfo/" in target:
        return target.split("/zoneinfo/", 1)[1]
    text, _error = _read("/etc/timezone")
    return text.strip() or None if text else None


def _container_node(pve_dir: str, vmid: t.Any) -> str | None:
    """The node whose ``lxc/VMID.conf`` it is (the directories of pmxcfs are open to every login)."""
    if vmid is None:
        return None
    found = sorted(glob.glob(os.path.join(glob.escape(pve_dir), "nodes", "*", "lxc", f"{int(vmid)}.conf")))
    return found[0].split(os.sep)[-3] if found else None


def _login() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def read_node(pve_dir: str = PVE_DIR, vmid: t.Any = None, vzdump_conf: str = VZDUMP_CONF) -> dict[str, t.Any]:
    """The node's backup configuration for container ``vmid`` as the controller needs it (see the module docstring)."""
    now = int(time.time())
    report: dict[str, t.Any] = {
        "pve_dir": pve_dir, "is_pve": os.path.isdir(pve_dir), "now": now, "utc_offset": time.strftime("%z", time.localtime(now)),
        "timezone": _zone_name(), "nodename": os.uname()[1].split(".")[0], "login": _login(),
        "node": _container_node(pve_dir, vmid) if os.path.isdir(pve_dir) else None, "files": {}, "errors": {}}
    if not report["is_pve"]:
        return report
    for name in FILES:
        text, error = _read(os.path.join(pve_dir, name))
        if name == "user.cfg" and text is not None:
            text = "".join(line + "\n" for line in text.splitlines() if _POOL.match(line))
        report["files"][name] = text
        if error:
            report["errors"][name] = error
    text, error = _read(vzdump_conf)
    report["files"]["vzdump.conf"] = "\n".join(_MODE.findall(text)) if text else text
    if error:
        report["errors"]["vzdump.conf"] = error
    return report


def main(argv: t.Sequence[str]) -> int:
    """``python3 - [--pve-dir DIR] [--vmid VMID]``: ``read_node`` as one JSON line."""
    options = dict(zip(argv[::2], argv[1::2]))
    vmid = options.get("--vmid")
    sys.stdout.write(json.dumps(read_node(options.get("--pve-dir", PVE_DIR), int(vmid) if vmid else None), sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    main(sys.argv[1:])
