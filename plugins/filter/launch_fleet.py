# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of launch.yml's play: what it decides about its fleet (``launch_fleet``), how many GPUs a job gets (``job_gpu_count``).

Their documentation is in ``launch_fleet.yml`` and ``job_gpu_count.yml`` beside this file; the logic of
``launch_fleet`` is in ``plugin_utils/_launch_fleet.py``.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._launch_fleet import Launch, fleet


def launch_fleet(hosts: t.Sequence[str], hostvars: t.Mapping[str, t.Mapping[str, t.Any]], session_name: str, lost: t.Sequence[str] = (),
                 all_or_nothing: bool = False, check_mode: bool = False, log_path: str = "", multinode: bool = False,
                 master_port: t.Any = 29500) -> dict[str, t.Any]:
    """Each container's status and reason, the culprits, the stops and failures, the summary and the report."""
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, t.Sequence):
        raise AnsibleFilterError(f"launch_fleet: its input must be the list of the play's hosts (ansible_play_hosts_all), not {hosts!r}")
    try:
        port = int(master_port)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"launch_fleet: master_port must be a port number, not {master_port!r}") from exc
    launch = Launch(session_name=str(session_name), lost=tuple(str(host) for host in lost or ()), all_or_nothing=bool(all_or_nothing),
                    check_mode=bool(check_mode), log_path=str(log_path or ""), multinode=bool(multinode), master_port=port)
    return fleet([str(host) for host in hosts], hostvars, launch)


def job_gpu_count(gpus: t.Any, openable: t.Sequence[t.Any] = ()) -> int:
    """How many GPUs ``job_gpus`` gives: ``all`` the ones the container can open, a count, or the length of a list."""
    if gpus is None:
        return 1
    text = str(gpus).strip()
    if text.lower() == "all":
        return len(openable or ())
    if text.isdigit():
        return int(text)
    if isinstance(gpus, str):
        return len([item for item in gpus.split(",") if item.strip()])
    if isinstance(gpus, t.Sequence):
        return len(gpus)
    raise AnsibleFilterError(f"job_gpu_count: job_gpus must be all, a count or a list of GPU indices or UUIDs, not {gpus!r}")


class FilterModule:  # pylint: disable=too-few-public-methods
    """The filters of launch.yml."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        """Name to function."""
        return {"launch_fleet": launch_fleet, "job_gpu_count": job_gpu_count}
