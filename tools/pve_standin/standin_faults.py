# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Faults of a real Proxmox VE node that the ``pct`` stand-in imitates on request (knobs, see README.md).

Each one is read from the sources of the Proxmox VE version that behaves so:

* ``pve_container=VERSION``: pct as that pve-container version. ``--keep-env`` of ``pct exec`` arrived in
  5.0.9 (pve-container debian/changelog: "pct: add keep-env option to the 'enter' and 'exec' command",
  15 Mar 2024, Proxmox VE 8.2). Before, exec's schema (src/PVE/CLI/pct.pm of 5.0.8) has only ``vmid`` and
  ``extra-args`` with ``additionalProperties => 0``, so pve-common's JSONSchema::get_options hands the
  option to Getopt::Long, which warns ``Unknown option: keep-env``, and get_options dies with
  ``raise("unable to parse option\\n", code => 400)``; RESTHandler::cli_handler adds the short usage of the
  command to that parameter exception (``pct exec <vmid> [<extra-args>]``: no ``[OPTIONS]``, exec had none),
  and PVE::Exception::stringify prints ``400 unable to parse option`` then the usage, no blank line between.
  The old exec ran ``lxc-attach -n VMID -- CMD``, which keeps the environment (LXC's default).
* ``cluster=down``: pve-cluster (pmxcfs) is not running, /etc/pve is not mounted. Every pct call dies in
  PVE::RPCEnvironment::init_request (pve-access-control), before its arguments are parsed: PVE::Cluster::cfs_update
  (pve-cluster) warns ``ipcc_send_rec[1] failed: Connection refused`` for CFS_IPC_GET_FS_VERSION, [2] for
  GET_CLUSTER_INFO, [3] for GET_GUEST_LIST; then reading user.cfg dies with ``$!`` and init_request with
  ``Unable to load access control list: Connection refused``. Perl's die exits with ``$!``: ECONNREFUSED, 111.
* a config lock (``lock: backup`` in nodes/NODE/lxc/VMID.conf): pve-guest-common's AbstractConfig::check_lock
  dies ``CT is locked (backup)`` (guest_type "CT") inside the start and stop workers (pve-container
  src/PVE/API2/LXC/Status.pm: unless ``--skiplock`` or the lock is ``mounted``) and the shutdown worker
  (always); the CLI prints the worker's error on stderr and exits -1 (255, not a die). exec, status, config,
  list, push and pull do not check the lock.
* ``die_status=N``: the exit status of every error pct reports with a Perl ``die``. Perl's die exits with
  ``$!`` when it is not 0, else ``$? >> 8``, else 255 (perlfunc die): the number depends on the last failed
  system call and is not fixed on a real node, so the collection must not depend on it.
"""
from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Sequence

from standin_core import USAGE, Knobs, Node, PctError

KEEP_ENV_SINCE = (5, 0, 9)
OLD_EXEC_USAGE = "pct exec <vmid> [<extra-args>]"
ECONNREFUSED = 111
# The die of "unable to parse option" exits with $!, the errno of the last failed system call: chosen here, ENOTTY
# (25), what the isatty() check of PerlIO leaves when the warning before it is written to a stderr that is a pipe
# (as under Ansible and ssh). A real node may give another number (2, ENOENT, is seen too): depend on none.
UNPARSED_OPTION_STATUS = 25
CLUSTER_DOWN = ("ipcc_send_rec[1] failed: Connection refused\n"
                "ipcc_send_rec[2] failed: Connection refused\n"
                "ipcc_send_rec[3] failed: Connection refused\n"
                "Unable to load access control list: Connection refused")
EXEC_DESCRIPTION = "Launch a command inside the specified container."
KEEP_ENV_HELP = ("Keep the current environment. This option will disabled by default with PVE 9. "
                 "If you rely on a preserved environment, please use this option to be future-proof.")


class TaskFailed(PctError):
    """A worker's ``TASK ERROR``: the CLI prints it on stderr and exits -1 (255), whatever ``die_status`` says."""


def version_tuple(version: str) -> tuple[int, ...]:
    """``5.0.8`` (or Debian's older ``4.4-3``) as a tuple of integers, for comparisons."""
    return tuple(int(part) for part in re.findall(r"[0-9]+", version))


def knows_keep_env(knobs: Knobs) -> bool:
    """Whether this pve-container's ``pct exec`` has ``--keep-env`` (5.0.9 and newer)."""
    return version_tuple(knobs.pve_container) >= KEEP_ENV_SINCE


def exit_status(err: PctError, knobs: Knobs | None) -> int:
    """The exit status of an error: a die's is ``die_status`` when that knob is set, else its own."""
    if knobs is not None and knobs.die_status is not None and not isinstance(err, TaskFailed):
        return knobs.die_status
    return err.code


def check_lock(node: Node, vmid: str, conf: dict[str, str], skiplock: bool, mounted_ok: bool = True) -> None:
    """Refuse as a start, stop or shutdown worker does when the container's config has a ``lock``.

    start and stop (Status.pm vm_start, vm_stop): ``skiplock`` True and ``mounted_ok`` True (the ``mounted``
    lock of ``pct mount`` does not stop them). shutdown (vm_shutdown): ``skiplock`` False, ``mounted_ok`` False.
    reboot checks no lock itself; the start that follows its stop does (the prestart hook), as start does.
    """
    del node, vmid  # the message names neither: pve-guest-common's is "CT is locked (LOCK)"
    lock = conf.get("lock", "")
    if not lock or skiplock or (mounted_ok and lock == "mounted"):
        return
    raise TaskFailed(f"CT is locked ({lock})")


def _unknown_exec_options(args: Sequence[str]) -> list[str]:
    """Options before ``--`` that pre-5.0.9 exec does not know (all: it had none), as Getopt::Long names them."""
    names = []
    for item in args:
        if item == "--":
            break
        if item.startswith("-") and item != "-":
            names.append(item.lstrip("-").split("=", 1)[0])
    return names


def refuse_old_exec_options(node: Node, args: Sequence[str]) -> None:
    """``pct exec`` of pve-container before 5.0.9 given an option (``--keep-env 1``): refused before it runs."""
    if knows_keep_env(node.knobs) or not args or args[0] != "exec":
        return
    unknown = _unknown_exec_options(args[1:])
    if unknown:
        warnings = "".join(f"Unknown option: {name}\n" for name in unknown)
        raise PctError(f"{warnings}400 unable to parse option\n{OLD_EXEC_USAGE}", UNPARSED_OPTION_STATUS)


def _described(name: str, type_text: str, description: str, default: str = "") -> str:
    """One argument or option of ``pct help``, as RESTHandler's get_property_description writes it (format full)."""
    head = f"  {name:<10} {type_text}" + (f"   (default={default})" if default else "")
    indent = " " * 13
    return head + "\n" + textwrap.fill(description, width=75, initial_indent=indent, subsequent_indent=indent) + "\n\n"


def exec_help(knobs: Knobs) -> str:
    """``pct help exec`` of this pve-container version (CLIHandler's help: verbose usage of the command)."""
    new = version_tuple(knobs.pve_container) >= KEEP_ENV_SINCE
    text = f"USAGE: {OLD_EXEC_USAGE}{' [OPTIONS]' if new else ''}\n\n  {EXEC_DESCRIPTION}\n\n"
    text += _described("<vmid>", "<integer> (100 - 999999999)", "The (unique) ID of the VM.")
    text += _described("<extra-args>", "<array>", "Extra arguments as array")
    if new:
        text += _described("--keep-env", "<boolean>", KEEP_ENV_HELP, "1")
    return text + "\n"


def verb_help(node: Node, args: Sequence[str]) -> int:
    """``pct help [VERB]``: the verb's usage (exec in full, with or without ``--keep-env``), or every verb's."""
    if not args:
        sys.stdout.write("USAGE: pct <COMMAND> [ARGS] [OPTIONS]\n\n" + "".join(f"       {u}\n" for u in USAGE.values()))
    elif args[0] == "exec":
        sys.stdout.write(exec_help(node.knobs))
    elif args[0] in USAGE:
        sys.stdout.write(f"USAGE: {USAGE[args[0]]}\n\n")
    else:
        raise PctError(f"ERROR: unknown command 'pct {args[0]}'\nUSAGE: pct <COMMAND> [ARGS] [OPTIONS]")
    return 0


def before_parse(node: Node, args: Sequence[str]) -> int | None:
    """What real pct does before it parses a verb's arguments: the cluster file system, ``help``, old exec options.

    Returns the exit status when the call is answered here (``help``), None when the verb should run.
    """
    if node.knobs.cluster == "down":
        raise PctError(CLUSTER_DOWN, ECONNREFUSED)
    if args and args[0] == "help":
        return verb_help(node, args[1:])
    refuse_old_exec_options(node, args)
    return None
