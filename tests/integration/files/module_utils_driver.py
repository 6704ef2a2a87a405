# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""What ``tmux_session``'s main() runs on its target after AnsibleModule, for option values Ansible cannot carry.

Test helper of tests/integration/test_hostile_input.py. A test copies it into a container next to a
copy of the collection's ``plugins/module_utils`` (this file's folder holds
``ansible_collections/trainops/pct_launch/plugins/module_utils``) and runs it there with the
container's python3; it imports nothing of Ansible. Non-UTF-8 bytes in an option (a path, a command)
cannot travel as module arguments: Ansible's variables and module arguments are UTF-8 text.

``python3 module_utils_driver.py`` reads the module's parameters (every option, the defaults filled
in by the test) as ASCII JSON on standard input, where non-UTF-8 bytes are surrogate escapes
(``\\udcff`` for the byte 0xff), runs spec_from_params, launch and result as main() does, and prints
the result as ASCII JSON too, so every byte comes back. A launch error is printed as
``{"failed": true, "error": CODE, "msg": ...}``.
"""

from __future__ import annotations

import json
import sys
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import run_root
from ansible_collections.trainops.pct_launch.plugins.module_utils._job_target import JobError
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_job import launch
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_launch import SpecError, spec_from_params
from ansible_collections.trainops.pct_launch.plugins.module_utils._tmux_outcome import result


def tmux_session(params: dict[str, t.Any]) -> dict[str, t.Any]:
    """The result tmux_session's main() would return on this host (check mode off, no diff)."""
    try:
        spec = spec_from_params(params)
    except SpecError as exc:
        return {"failed": True, "error": "spec", "msg": str(exc)}
    spec = spec._replace(run_root=run_root())
    try:
        facts = launch(spec, check_mode=False)
    except JobError as exc:
        return {"failed": True, "error": exc.code, "msg": str(exc)}
    outcome = result(spec, facts, False)
    outcome.pop("diff")
    return outcome


if __name__ == "__main__":
    print(json.dumps(tmux_session(json.loads(sys.stdin.read())), ensure_ascii=True))
