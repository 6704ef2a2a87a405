#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# The packaging checks (docs/packaging.md), the last step of tools/lint.sh.
# Nothing but PyPI is needed: no Ansible Galaxy, no container runtime.
#
#   venv       .venv-packaging from requirements-packaging.txt (tools/bootstrap.sh:
#              nothing is installed when it is up to date)
#   build      ansible-galaxy collection build into a temporary folder
#   contents   the tarball holds no development-only file (benchmarks/, molecule/,
#              .ci, tools/pve_standin, tests/.hypothesis, .venv*, __pycache__, *.pyc,
#              ...), nothing outside the list of docs/packaging.md, and what must ship
#   docs       antsibull-docs lint-collection-docs --plugin-docs over the tarball
#              installed offline (ansible-galaxy collection install --offline -p)
#   importer   galaxy-importer over the tarball (its ansible-doc and ansible-lint runs,
#              not its container-based ansible-test): any WARNING or ERROR fails
#   ee         examples/ee with the tarball: `ansible-builder create` (the schema, the
#              build context), the build's galaxy step run from that context (installs
#              the collection from requirements.yml, offline), `ansible-builder
#              introspect --sanitize` of that install (must list meta/ee-bindep.txt's
#              lines and nothing in python), and bindep parsing meta/ee-bindep.txt
#
# Every check runs even when an earlier one failed (but build: without a tarball
# nothing else can run); the exit status is 1 when any failed.
#
# Usage: tools/packaging.sh
# Environment:
#   PACKAGING_KEEP=1   keep the temporary folder (its path is printed)
#   PYTHON             interpreter of .venv-packaging (default: python3)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-packaging"
requirements="$root/requirements-packaging.txt"
started=$SECONDS

log() { printf 'packaging: %s\n' "$*" >&2; }

# 1. The venv (its own: galaxy-importer pins ansible-core and ansible-lint).
t0=$SECONDS
bash "$root/tools/bootstrap.sh" --requirements "$requirements" --venv "$venv"
venv_seconds=$((SECONDS - t0))
log "venv ready in $venv_seconds s"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/trainops-packaging.XXXXXX")"
if [ "${PACKAGING_KEEP:-0}" = 1 ]; then
    log "keeping $tmp"
else
    trap 'rm -rf "$tmp"' EXIT
fi

# Only this venv's tools, only this run's collections, and a Galaxy server that is a
# closed port on loopback: anything that tried to download would fail, not go online.
export PATH="$venv/bin:$PATH"
export VIRTUAL_ENV="$venv"
unset PYTHONPATH TRAINOPS_COLLECTIONS
export ANSIBLE_COLLECTIONS_PATH="$tmp/collections"
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
export ANSIBLE_GALAXY_SERVER="http://127.0.0.1:9/"
export ANSIBLE_GALAXY_SERVER_TIMEOUT=5
export ANSIBLE_GALAXY_CACHE_DIR="$tmp/galaxy-cache"
export ANSIBLE_LOCAL_TEMP="$tmp/ansible-tmp"
export ANSIBLE_LINT_SKIP_SCHEMA_UPDATE=1
export ANSIBLE_NOCOLOR=1 NO_COLOR=1
mkdir -p "$tmp/collections" "$tmp/ansible-tmp"

failed=()
timings=("venv ${venv_seconds}s")
# check NAME COMMAND...: run one check, note its time and whether it failed.
check() {
    local name="$1" t rc=0
    shift
    printf '\n-- packaging: %s\n' "$name"
    t=$SECONDS
    "$@" || rc=$?
    timings+=("$name $((SECONDS - t))s")
    if [ "$rc" -ne 0 ]; then
        failed+=("$name")
        log "$name: FAILED (exit status $rc)"
    else
        log "$name: ok"
    fi
}

version="$(python -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1], encoding="utf-8"))["version"])' "$root/galaxy.yml")"
tarball="$tmp/dist/trainops-pct_launch-$version.tar.gz"

# 2. Build.
build() {
    ansible-galaxy collection build "$root" --output-path "$tmp/dist" && [ -f "$tarball" ]
}
check build build
if [ "${#failed[@]}" -ne 0 ]; then
    log "no tarball: nothing else can be checked"
    exit 1
fi

# 3. What the tarball holds.
contents() {
    python - "$tarball" "$root" <<'PY'
"""The tarball's members against docs/packaging.md: no development file, nothing unlisted, nothing missing."""
from __future__ import annotations

import pathlib
import re
import sys
import tarfile

tarball, root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

# Development-only files: never in the tarball.
FORBIDDEN = [
    (r"^benchmarks(/|$)", "the benchmark suite and its results"),
    (r"^molecule(/|$)|(^|/)\.molecule(/|$)", "molecule scenarios"),
    (r"^\.ci(/|$)", "the CI entry point"),
    (r"^tools/pve_standin(/|$)", "the Proxmox VE stand-in"),
    (r"^tools/.*\.sh$", "development scripts"),
    (r"(^|/)\.hypothesis(/|$)", "hypothesis database"),
    (r"(^|/)\.pytest_cache(/|$)|^tests/output(/|$)", "test caches and output"),
    (r"(^|/)\.venv[^/]*(/|$)", "a virtual environment"),
    (r"(^|/)__pycache__(/|$)|\.py[co]$", "compiled Python"),
    (r"(^|/)\.git(/|$)|^\.gitignore$", "version control"),
    (r"\.tar\.gz$", "a built tarball"),
    (r"^(\.ansible-lint|pytest\.ini|requirements-[^/]*\.txt)$", "development configuration"),
    (r"^tests/(unit|integration|compat)(/|$)|^tests/[^/]*\.(py|sh)$", "the pytest suites"),
    (r"^changelogs/(fragments(/|$)|\.plugin-cache\.yaml$)", "changelog fragments"),
]
# What may ship (docs/packaging.md); anything else is a new file that needs a decision.
ALLOWED = re.compile(
    r"^(MANIFEST\.json|FILES\.json|README\.md|LICENSE|CHANGELOG\.rst"
    r"|changelogs/?|changelogs/(changelog|config)\.yaml"
    r"|(docs|examples|meta|playbooks|plugins|roles)(/.*)?"
    r"|tools/?|tools/gpu_node_check\.py"
    r"|tests/?|tests/config\.yml|tests/sanity(/.*)?)$"
)
REQUIRED = [
    "MANIFEST.json", "FILES.json", "README.md", "LICENSE", "CHANGELOG.rst", "changelogs/changelog.yaml",
    "meta/runtime.yml", "meta/execution-environment.yml", "meta/ee-requirements.txt", "meta/ee-bindep.txt",
    "playbooks/launch.yml", "docs/packaging.md", "docs/awx.md",
    "examples/ee/execution-environment.yml", "examples/ee/requirements.yml", "examples/ee/README.md",
]
# Shipped files that exist in the checkout must be in the tarball when they are there.
REQUIRED_IF_PRESENT = ["tools/gpu_node_check.py"]

with tarfile.open(tarball) as tar:
    names = [member.name.rstrip("/") for member in tar.getmembers()]

problems: list[str] = []
for name in names:
    reasons = [why for pattern, why in FORBIDDEN if re.search(pattern, name)]
    if reasons:
        problems.append(f"{name}: development-only ({reasons[0]}): add it to galaxy.yml's build_ignore")
    elif not ALLOWED.match(name):
        problems.append(f"{name}: not in docs/packaging.md's list of what ships: ship it (list it) or ignore it (build_ignore)")
shipped = set(names)
required = REQUIRED + [path for path in REQUIRED_IF_PRESENT if (root / path).is_file()]
problems += [f"{path}: missing from the tarball" for path in required if path not in shipped]

print(f"{tarball.name}: {len(names)} members, {tarball.stat().st_size // 1024} KiB")
for problem in problems:
    print(f"  {problem}")
sys.exit(1 if problems else 0)
PY
}
check contents contents

# 4. The plugins' documentation, as the docsite build reads it.
docs() {
    ansible-galaxy collection install --offline "$tarball" -p "$tmp/collections" &&
        antsibull-docs lint-collection-docs --plugin-docs "$tmp/collections/ansible_collections/trainops/pct_launch"
}
check docs docs

# 5. Ansible Galaxy's import checks, without the ansible-test sanity run it does in a
#    container (tools/sanity.sh runs ansible-test sanity).
importer() {
    local dir="$tmp/importer" rc=0
    mkdir -p "$dir/ansible-tmp"
    cat >"$dir/galaxy-importer.cfg" <<EOF
[galaxy-importer]
RUN_ANSIBLE_TEST = False
RUN_ANSIBLE_DOC = True
RUN_ANSIBLE_LINT = True
OFFLINE_ANSIBLE_LINT = True
CHECK_CHANGELOG = True
ANSIBLE_LOCAL_TMP = $dir/ansible-tmp
TMP_ROOT_DIR = $dir
LOG_LEVEL_MAIN = INFO
EOF
    # the result JSON goes to the working directory
    (cd "$dir" && GALAXY_IMPORTER_CONFIG="$dir/galaxy-importer.cfg" python -m galaxy_importer.main "$tarball") \
        >"$dir/import.log" 2>&1 || rc=$?
    grep -v '^Loading ' "$dir/import.log" || true
    if [ "$rc" -ne 0 ]; then
        return "$rc"
    fi
    if grep -qE '^(WARNING|ERROR|CRITICAL): ' "$dir/import.log"; then
        echo "galaxy-importer reported $(grep -cE '^(WARNING|ERROR|CRITICAL): ' "$dir/import.log") warning(s) or error(s) (above)"
        return 1
    fi
    grep -q '^Importer processing completed successfully' "$dir/import.log"
}
check importer importer

# 6. The execution environment: the collection's metadata and the example.
ee() {
    local dir="$tmp/ee" context="$tmp/ee-context" expected
    expected="collections/$(basename "$tarball")"
    if ! grep -qF "name: $expected" "$root/examples/ee/requirements.yml"; then
        echo "examples/ee/requirements.yml does not name $expected (galaxy.yml's version is $version): change it"
        return 1
    fi
    mkdir -p "$dir"
    cp "$root/examples/ee/execution-environment.yml" "$root/examples/ee/requirements.yml" "$tarball" "$dir/"
    ansible-builder create -f "$dir/execution-environment.yml" -c "$context" --output-filename Containerfile -v 2 || return 1
    for f in Containerfile _build/requirements.yml "_build/$expected"; do
        [ -f "$context/$f" ] || { echo "ansible-builder create wrote no $f"; return 1; }
    done
    # The build's galaxy stage (Containerfile: WORKDIR /build, these two commands), into a
    # collections path of its own, as /usr/share/ansible/collections is in the EE.
    (
        export ANSIBLE_COLLECTIONS_PATH="$tmp/ee-share/collections"
        cd "$context/_build" &&
            ansible-galaxy role install -r requirements.yml --roles-path "$tmp/ee-share/roles" &&
            ANSIBLE_GALAXY_DISABLE_GPG_VERIFY=1 ansible-galaxy collection install -r requirements.yml \
                --collections-path "$tmp/ee-share/collections"
    ) || return 1
    ansible-builder introspect --sanitize "$tmp/ee-share/collections" >"$tmp/introspect.yml" || return 1
    cat "$tmp/introspect.yml"
    python - "$tmp/introspect.yml" "$root/meta/ee-bindep.txt" "$root/meta/ee-requirements.txt" <<'PY' || return 1
"""introspect's output lists exactly the collection's bindep lines and Python requirements."""
from __future__ import annotations

import sys

import yaml


def entries(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        lines = (line.split("#", 1)[0].strip() for line in handle)
        return [line for line in lines if line]


with open(sys.argv[1], encoding="utf-8") as handle:
    data = yaml.safe_load(handle)
found = {
    "system": sorted(line.split("#", 1)[0].strip() for line in data.get("system") or []),
    "python": sorted(line.split("#", 1)[0].strip() for line in data.get("python") or []),
}
want = {"system": sorted(entries(sys.argv[2])), "python": sorted(entries(sys.argv[3]))}
if found != want:
    print(f"ansible-builder introspect found {found}, the collection's files say {want}")
    sys.exit(1)
if not want["system"]:
    print("meta/ee-bindep.txt lists nothing")
    sys.exit(1)
PY
    # bindep itself parses the file (introspect only reads its lines)
    bindep --file "$root/meta/ee-bindep.txt" --list_all newline >/dev/null
}
check ee ee

printf '\n'
log "total $((SECONDS - started)) s (${timings[*]})"
if [ "${#failed[@]}" -ne 0 ]; then
    log "FAILED: ${failed[*]}"
    exit 1
fi
log "all checks passed"
