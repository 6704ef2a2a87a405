#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# README's first command: from a fresh Debian machine (as root), set up the
# development venv and the local Proxmox VE stand-in (container 200), then run
# the collection's main job against it. Safe to run again.
#
# Environment:
#   QUICKSTART_PLAYBOOK  the playbook to run (default: playbooks/launch.yml when
#                        it exists, else playbooks/prepare.yml)
#   QUICKSTART_JOB       the job description (default examples/standin/job.yml)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "$(id -u)" -ne 0 ]; then
  echo "quickstart: run as root: LXC containers behind the stand-in need it" >&2
  exit 1
fi

tools/bootstrap.sh
tools/pve_standin/setup.sh
# shellcheck source=tools/env.sh
. tools/env.sh

playbook="${QUICKSTART_PLAYBOOK:-}"
if [ -z "$playbook" ]; then
  playbook=playbooks/prepare.yml
  [ -f playbooks/launch.yml ] && playbook=playbooks/launch.yml
fi
job="${QUICKSTART_JOB:-examples/standin/job.yml}"

ansible-playbook -i examples/standin/inventory.yml "$playbook" -e "@$job"
if [ -f playbooks/status.yml ]; then
  ansible-playbook -i examples/standin/inventory.yml playbooks/status.yml -e "@$job"
fi
