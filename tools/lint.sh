#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# Run ansible-lint (profile production, configuration in .ansible-lint) over
# the collection, offline: no Ansible Galaxy installs, no schema refresh; then
# lint the changelog fragments and preview the next release's changelog
# (tools/changelog.sh lint); last, the packaging checks (tools/packaging.sh:
# the tarball's contents, antsibull-docs, galaxy-importer, ansible-builder, in
# .venv-packaging, which it makes when missing). Every step runs; the exit
# status is the last failing step's.
#
# Usage: tools/lint.sh [ansible-lint options or paths...]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/env.sh
. "$root/tools/env.sh"

if ! command -v ansible-lint >/dev/null 2>&1; then
    echo "lint: ansible-lint not found: run tools/bootstrap.sh first" >&2
    exit 1
fi

# Never reach out to the network for schemas or collection dependencies.
export ANSIBLE_LINT_SKIP_SCHEMA_UPDATE=1
export NO_COLOR="${NO_COLOR:-1}"

cd "$root"
started=$SECONDS
status=0
ansible-lint --offline --profile production --config-file "$root/.ansible-lint" "$@" || status=$?
bash "$root/tools/changelog.sh" lint || status=$?
echo "== packaging (tools/packaging.sh)"
bash "$root/tools/packaging.sh" || status=$?
echo "lint: finished with exit status $status in $((SECONDS - started)) s" >&2
exit "$status"
