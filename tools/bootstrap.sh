#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# Create (or refresh) a virtual environment of the checkout and install a
# requirements file into it.  Idempotent: when the venv already holds exactly
# what the requirements file asks for (a stamp file records the hash of the
# requirements and of the interpreter), nothing is installed.  Two bootstraps
# at once (of any venv of this checkout) wait for each other.
#
# Usage: tools/bootstrap.sh [--compat|--newest] [--requirements FILE] [--venv DIR]
#   (no option)           .venv from requirements-dev.txt: the development venv
#   --compat              .venv-2.17 from requirements-compat-2.17.txt: the
#                         oldest supported ansible-core (tests/run.sh compat)
#   --newest              .venv-newest from requirements-newest.txt with the
#                         newest Python 3.12+ found: the newest ansible-core
#                         (tests/run.sh newest)
#   --requirements FILE   another requirements file
#   --venv DIR            another venv directory (options win over TRAINOPS_VENV)
#
# Environment:
#   PYTHON          interpreter that creates the venv (default: python3)
#   TRAINOPS_VENV   venv directory without --venv/--compat (default: <checkout>/.venv)
#   BOOTSTRAP_FORCE set to 1 to reinstall even when the stamp matches
# Exit status: 0 ready, 3 with --newest when no Python 3.12 or newer is found,
# 1 on any other failure.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TRAINOPS_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
requirements="$root/requirements-dev.txt"

usage() { sed -n '10,19s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

# The newest Python 3.12 or later on this machine (ansible-core 2.20 and newer
# need it on the controller): on PATH, else pyenv's, else /usr/local/bin's.
newest_python() {
    local candidate found=()
    found=("${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3 /usr/local/bin/python3.1[2-9])
    # newest first: the globs sort ascending
    for candidate in python3.14 python3.13 python3.12 $(printf '%s\n' "${found[@]}" | sort -rV); do
        if "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
            command -v "$candidate" || echo "$candidate"
            return 0
        fi
    done
    echo "bootstrap: no Python 3.12 or newer found (python3.13, python3.12, pyenv): install one or set PYTHON" >&2
    return 1
}

while [ "$#" -gt 0 ]; do
    case "$1" in
        --compat)
            venv="$root/.venv-2.17"
            requirements="$root/requirements-compat-2.17.txt"
            ;;
        --newest)
            venv="$root/.venv-newest"
            requirements="$root/requirements-newest.txt"
            # exit status 3: no such Python here (tests/run.sh newest then skips)
            [ -n "${PYTHON:-}" ] || python="$(newest_python)" || exit 3
            ;;
        --requirements)
            [ "$#" -ge 2 ] || { usage >&2; exit 2; }
            requirements="$(realpath "$2")"
            shift
            ;;
        --venv)
            [ "$#" -ge 2 ] || { usage >&2; exit 2; }
            venv="$(realpath -m "$2")"
            shift
            ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bootstrap: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
stamp="$venv/.trainops-bootstrap.stamp"

log() { printf 'bootstrap: %s\n' "$*" >&2; }

# Python and its venv module: Debian's python3 and python3-venv
# (tools/system-packages.sh bootstrap) when they are missing.
if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    if [ "$python" = python3 ] || [ "$(command -v "$python" || true)" = /usr/bin/python3 ]; then
        "$root/tools/system-packages.sh" bootstrap || exit 1
    fi
    if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        log "$python cannot make a venv (no such program, or no venv/ensurepip module): install python3 and python3-venv (tools/system-packages.sh bootstrap), or set PYTHON"
        exit 1
    fi
fi
if [ ! -f "$requirements" ]; then
    log "no requirements file $requirements"
    exit 1
fi

# One bootstrap at a time per checkout (e.g. the compat stage and
# tests/integration/test_release.py both asking for .venv-2.17): the lock is
# the checkout's directory itself, so no lock file is left behind.
exec 8<"$root"
if ! flock --nonblock 8; then
    log "another tools/bootstrap.sh is running in $root: waiting for it"
    flock 8
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
