#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# The collection's changelog, with antsibull-changelog, without releasing.
#
# Usage: tools/changelog.sh lint
#          lint the fragments (changelogs/fragments/*.yml) and
#          changelogs/changelog.yaml, then make a preview (below), check
#          that it is valid reStructuredText and that CHANGELOG.rst is that
#          preview (else: run `tools/changelog.sh update`).  Part of tools/lint.sh.
#        tools/changelog.sh update
#          write the preview to CHANGELOG.rst (commit it with the fragment).
#        tools/changelog.sh preview [--version VERSION] [--output FILE]
#          what `antsibull-changelog release` would write for the next
#          release: the release is made in a copy of the collection in a
#          temporary folder, so the checkout's fragments and changelog.yaml
#          are left as they are.  Prints CHANGELOG.rst, or copies it to FILE.
#          VERSION defaults to galaxy.yml's version.
#
# Releasing (`antsibull-changelog release` in the checkout, which consumes the
# fragments and records the version and date) is a maintainer's step at
# release time, committed with the version bump; CI never does it.
set -euo pipefail
# a failing release preview inside $(preview ...) must fail the script, not print a stale path
shopt -s inherit_errexit

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/env.sh
. "$root/tools/env.sh"

log() { printf 'changelog: %s\n' "$*" >&2; }
usage() { sed -n '7,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

if ! command -v antsibull-changelog >/dev/null 2>&1; then
    log "antsibull-changelog not found: run tools/bootstrap.sh first"
    exit 1
fi

# preview VERSION DIR: release VERSION in a copy of the collection under DIR;
# prints the path of the CHANGELOG.rst it wrote.
preview() {
    local version="$1" dir="$2"
    local dest="$dir/ansible_collections/trainops/pct_launch"
    mkdir -p "$dest"
    # The files git would commit: tracked, and untracked ones that are not ignored.
    (
        cd "$root"
        git ls-files -z --cached --others --exclude-standard |
            while IFS= read -r -d '' f; do
                if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
            done |
            tar --null --no-recursion --files-from=- -cf - |
            tar -C "$dest" -xf -
    )
    # A release has a summary, which the maintainer writes at release time.
    if ! grep -qs '^release_summary:' "$dest"/changelogs/fragments/*; then
        printf '%s\n' '---' \
            "release_summary: Preview of the changelog of the next release, made by tools/changelog.sh; not a release." \
            >"$dest/changelogs/fragments/zz-preview-release-summary.yml"
    fi
    # antsibull-changelog finds the new plugins with ansible-doc: it must see
    # this copy, and nothing else, as trainops.pct_launch.
    (
        cd "$dest"
        ANSIBLE_COLLECTIONS_PATH="$dir" ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false \
            antsibull-changelog release --version "$version" --date "$(date -u +%Y-%m-%d)" >&2
    )
    printf '%s\n' "$dest/CHANGELOG.rst"
}

# check_rst FILE: fail on any docutils warning or error.
check_rst() {
    python - "$1" <<'PY'
import sys

import docutils.core
import docutils.utils

path = sys.argv[1]
with open(path, encoding="utf-8") as handle:
    text = handle.read()
try:
    docutils.core.publish_doctree(text, source_path=path, settings_overrides={"halt_level": 2, "report_level": 2})
except docutils.utils.SystemMessage as error:
    print(f"changelog: {path} is not valid reStructuredText: {error}", file=sys.stderr)
    sys.exit(1)
PY
}

galaxy_version() {
    python -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1], encoding="utf-8"))["version"])' "$root/galaxy.yml"
}

command="${1:-}"
[ "$#" -gt 0 ] && shift
case "$command" in
    lint)
        [ "$#" -eq 0 ] || { usage >&2; exit 2; }
        cd "$root"
        started=$SECONDS
        antsibull-changelog lint
        antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml
        workdir="$(mktemp -d "${TMPDIR:-/tmp}/trainops-changelog.XXXXXX")"
        trap 'rm -rf "$workdir"' EXIT
        rst="$(preview "$(galaxy_version)" "$workdir")"
        check_rst "$rst"
        grep -q '^New Modules' "$rst" || { log "the preview lists no new modules: $rst"; exit 1; }
        if ! cmp -s "$rst" "$root/CHANGELOG.rst"; then
            diff -u "$root/CHANGELOG.rst" "$rst" | head -n 40 >&2 || true
            log "CHANGELOG.rst is not the preview of the fragments: run tools/changelog.sh update and commit it"
            exit 1
        fi
        log "fragments, changelog.yaml and the release preview are fine ($((SECONDS - started)) s)"
        ;;
    preview)
        version="" output=""
        while [ "$#" -gt 0 ]; do
            case "$1" in
                --version) [ "$#" -ge 2 ] || { usage >&2; exit 2; }; version="$2"; shift ;;
                --output) [ "$#" -ge 2 ] || { usage >&2; exit 2; }; output="$(realpath -m "$2")"; shift ;;
                *) usage >&2; exit 2 ;;
            esac
            shift
        done
        workdir="$(mktemp -d "${TMPDIR:-/tmp}/trainops-changelog.XXXXXX")"
        trap 'rm -rf "$workdir"' EXIT
        rst="$(preview "${version:-$(galaxy_version)}" "$workdir")"
        check_rst "$rst"
        if [ -n "$output" ]; then
            cp "$rst" "$output"
            log "wrote $output"
        else
            cat "$rst"
        fi
        ;;
    update)
        [ "$#" -eq 0 ] || { usage >&2; exit 2; }
        workdir="$(mktemp -d "${TMPDIR:-/tmp}/trainops-changelog.XXXXXX")"
        trap 'rm -rf "$workdir"' EXIT
        rst="$(preview "$(galaxy_version)" "$workdir")"
        check_rst "$rst"
        cp "$rst" "$root/CHANGELOG.rst"
        log "wrote $root/CHANGELOG.rst"
        ;;
    -h | --help) usage ;;
    *) usage >&2; exit 2 ;;
esac
