# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# shellcheck shell=bash
# Source this file to work on the collection from a checkout:
#   . tools/env.sh
# It activates the development venv (made by tools/bootstrap.sh) and points
# Ansible at this checkout as the collection trainops.pct_launch, without
# installing anything from Ansible Galaxy.
_trainops_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export TRAINOPS_ROOT="$_trainops_root"
export TRAINOPS_VENV="${TRAINOPS_VENV:-$_trainops_root/.venv}"
# One collections folder per checkout: two checkouts (a CI clone beside the
# work tree) must not point each other's Ansible at the wrong code.
_trainops_id="$(printf '%s' "$_trainops_root" | cksum | cut -d' ' -f1)"
export TRAINOPS_COLLECTIONS="${TRAINOPS_COLLECTIONS:-${TMPDIR:-/tmp}/trainops-collections-$_trainops_id}"
mkdir -p "$TRAINOPS_COLLECTIONS/ansible_collections/trainops"
ln -sfn "$_trainops_root" "$TRAINOPS_COLLECTIONS/ansible_collections/trainops/pct_launch"
export ANSIBLE_COLLECTIONS_PATH="$TRAINOPS_COLLECTIONS"
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
if [ -x "$TRAINOPS_VENV/bin/python" ]; then
  export PATH="$TRAINOPS_VENV/bin:$PATH"
  export VIRTUAL_ENV="$TRAINOPS_VENV"
fi
unset _trainops_root _trainops_id
