#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# Create (or refresh) the development virtual environment .venv and install
# requirements-dev.txt into it.  Idempotent: when .venv already holds exactly
# what requirements-dev.txt asks for (a stamp file records the hash of the
# requirements and of the interpreter), nothing is installed.
#
# Environment:
#   PYTHON          interpreter that creates the venv (default: python3)
#   TRAINOPS_VENV   venv directory (default: <checkout>/.venv)
#   BOOTSTRAP_FORCE set to 1 to reinstall even when the stamp matches
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TRAINOPS_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
requirements="$root/requirements-dev.txt"
stamp="$venv/.trainops-bootstrap.stamp"

log() { printf 'bootstrap: %s\n' "$*" >&2; }

if ! command -v "$python" >/dev/null 2>&1; then
    log "no $python on PATH (install python3 and python3-venv)"
    exit 1
fi

# A venv whose interpreter no longer runs (e.g. the base Python went away) is
# rebuilt from scratch.
if [ -e "$venv" ] && ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    log "$venv is broken: recreating it"
    rm -rf "$venv"
fi

if [ ! -x "$venv/bin/python" ]; then
    log "creating $venv with $("$python" --version 2>&1)"
    "$python" -m venv "$venv"
fi

want="$({
    sha256sum "$requirements" | cut -d' ' -f1
    "$venv/bin/python" -c 'import sys; print(sys.version)'
} | sha256sum | cut -d' ' -f1)"

if [ "${BOOTSTRAP_FORCE:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    log "$venv is up to date"
    exit 0
fi

started=$SECONDS
log "installing $(basename "$requirements") into $venv"
rm -f "$stamp"
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet \
    --requirement "$requirements"
"$venv/bin/python" -m pip check >&2 || log "warning: pip check reported conflicts"
printf '%s\n' "$want" >"$stamp"
log "done in $((SECONDS - started)) s"
