# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: parse what ``pct list`` and ``pct config VMID`` print (the ``pct_containers`` inventory).

The argv lists that produce this output are built in ``_pct_command``.
"""

from __future__ import annotations

import dataclasses
import re
import typing as t
import urllib.parse

# `pct list`: printf("%-10s %-10s %-12s %-20s\n", VMID, Status, Lock, Name); nothing at all without containers.
_LOCK_COLUMN = 22
_NAME_COLUMN = 35
_VMID = re.compile(r"[0-9]+")
_CONFIG_LINE = re.compile(r"([A-Za-z0-9_.-]+):\s*(.*)")
_SECTION = re.compile(r"\[[^\]]*\]\s*")
_NET_KEY = re.compile(r"net([0-9]+)")
_TAG_SPLIT = re.compile(r"[;,\s]+")
_TOKEN = re.compile(r"\S+")
_STATUS = re.compile(r"[a-z][a-z-]*")


class PctInventoryError(ValueError):
    """Output that cannot be parsed, or an unusable option value."""


@dataclasses.dataclass(frozen=True)
class ListedContainer:
    """One row of ``pct list``."""

    vmid: int
    status: str
    lock: str
    name: str


@dataclasses.dataclass(frozen=True)
class PctConfig:
    """``pct config VMID``: options (description decoded), raw ``lxc.*`` lines in order."""

    options: dict[str, str]
    lxc: tuple[tuple[str, str], ...] = ()


# --- pct list -------------------------------------------------------------------------------------


def _list_row(line: str) -> ListedContainer:
    """One data row; a single token after the status is the lock or the name, told apart by its column."""
    tokens = list(_TOKEN.finditer(line))
    fields = [token.group(0) for token in tokens]
    if not 2 <= len(fields) <= 4 or not _VMID.fullmatch(fields[0]) or not _STATUS.fullmatch(fields[1]):
        raise PctInventoryError(f"unexpected line in the output of pct list: {line!r}")
    lock, name = "", ""
    if len(fields) == 4:
        lock, name = fields[2], fields[3]
    elif len(fields) == 3:
        if _LOCK_COLUMN <= tokens[2].start() < _NAME_COLUMN:
            lock = fields[2]
        else:
            name = fields[2]
    return ListedContainer(vmid=int(fields[0]), status=fields[1], lock=lock, name=name)


def parse_pct_list(text: str) -> list[ListedContainer]:
    """Rows of ``pct list`` (empty output: no containers), sorted by VMID."""
    rows: list[ListedContainer] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.split()[0] == "VMID":
            continue
        rows.append(_list_row(line))
    return sorted(rows, key=lambda row: row.vmid)


# --- pct config -----------------------------------------------------------------------------------


def decode_text(value: str) -> str:
    """Undo Proxmox's ``encode_text`` (control characters and ``:`` as ``%XX``)."""
    return urllib.parse.unquote(value, errors="replace")


def parse_pct_config(text: str) -> PctConfig:
    """Parse ``pct config`` output, or a container's config file.

    ``#`` lines are the description (config file form), ``lxc.*`` keys are raw LXC lines kept in order
    (they may repeat), the first ``[section]`` (a snapshot, pending changes) ends the current config.
    """
    options: dict[str, str] = {}
    lxc: list[tuple[str, str]] = []
    comments: list[str] = []
    for line in text.splitlines():
        if _SECTION.fullmatch(line):
            break
        if line.startswith("#"):
            comments.append(decode_text(line[1:]))
            continue
        match = _CONFIG_LINE.fullmatch(line.strip())
        if not line.strip() or match is None:
            continue
        key, value = match.group(1), match.group(2).strip()
        if key.startswith("lxc."):
            lxc.append((key, value))
        elif key == "description":
            options[key] = decode_text(value)
        else:
            options[key] = value
    if comments and "description" not in options:
        options["description"] = "\n".join(comments)
    return PctConfig(options=options, lxc=tuple(lxc))


def parse_property_string(value: str) -> dict[str, str]:
    """``name=eth0,bridge=vmbr0,ip=10.0.0.5/24`` as a dict; items without ``=`` are ignored."""
    result: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if sep and key.strip():
            result[key.strip()] = val.strip()
    return result


def networks(options: t.Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The ``netN`` options, parsed, in numeric order."""
    keys = sorted((key for key in options if _NET_KEY.fullmatch(key)), key=lambda key: int(key[3:]))
    return {key: parse_property_string(options[key]) for key in keys}


def static_address(value: str | None) -> str | None:
    """``10.0.0.5/24`` → ``10.0.0.5``; ``dhcp``, ``auto``, ``manual`` and nothing → None."""
    if not value or value in ("dhcp", "auto", "manual"):
        return None
    return value.split("/", 1)[0] or None


def first_addresses(nets: t.Mapping[str, t.Mapping[str, str]]) -> tuple[str | None, str | None]:
    """The first static IPv4 and IPv6 address over ``net0``, ``net1``, ..."""
    ip4 = next((addr for net in nets.values() if (addr := static_address(net.get("ip")))), None)
    ip6 = next((addr for net in nets.values() if (addr := static_address(net.get("ip6")))), None)
    return ip4, ip6


def parse_tags(value: str | None) -> list[str]:
    """Proxmox tags (``;`` separated; ``,`` and spaces accepted too), in order, without duplicates."""
    tags: list[str] = []
    for tag in _TAG_SPLIT.split(value or ""):
        if tag and tag not in tags:
            tags.append(tag)
    return tags


# --- batched pct config ---------------------------------------------------------------------------


def split_config_batch(text: str, marker: str, vmids: t.Sequence[int]) -> tuple[dict[int, str], dict[int, str]]:
    """Split the output of ``config_batch_argv``: (config text per VMID, failure cause per VMID).

    A VMID without its own section (the script was cut short) is a failure too.
    """
    sections: dict[int, list[str]] = {}
    failures: dict[int, str] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        fields = line[len(marker) + 1:].split(" ") if line.startswith(marker + " ") else None
        if fields and len(fields) == 1 and _VMID.fullmatch(fields[0]):
            current = sections.setdefault(int(fields[0]), [])
        elif fields and len(fields) == 3 and fields[1] == "failed" and _VMID.fullmatch(fields[0]):
            failures[int(fields[0])] = f"pct config {fields[0]} exited with status {fields[2]}"
            current = None
        elif current is not None:
            current.append(line)
    configs = {vmid: "\n".join(lines) + "\n" for vmid, lines in sections.items() if vmid not in failures}
    for vmid in vmids:
        if vmid not in configs and vmid not in failures:
            failures[vmid] = f"no output of pct config {vmid}"
    return configs, failures
