#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# Run `ansible-test sanity` on the collection without Ansible Galaxy or the
# ansible-test download host.  Only PyPI is needed (ansible-test installs the
# pinned requirements of each sanity test into its own virtual environment).
#
# ansible-test wants the collection at .../ansible_collections/NS/NAME, so the
# files git would commit (tracked, plus untracked ones that are not ignored)
# are copied to
#   ${TMPDIR:-/tmp}/trainops-sanity/ansible_collections/trainops/pct_launch
# and a fresh git repository is made there.  No tests/sanity/ignore-*.txt is
# used: every finding fails the run.
#
# Usage: tools/sanity.sh [ansible-test sanity options...]
#   e.g. tools/sanity.sh --test pylint
# Environment: SANITY_PYTHON (default 3.11)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/env.sh
. "$root/tools/env.sh"

python_version="${SANITY_PYTHON:-3.11}"
workdir="${TMPDIR:-/tmp}/trainops-sanity"
dest="$workdir/ansible_collections/trainops/pct_launch"
started=$SECONDS

log() { printf 'sanity: %s\n' "$*" >&2; }

if ! command -v ansible-test >/dev/null 2>&1; then
    log "ansible-test not found: run tools/bootstrap.sh first"
    exit 1
fi

if [ -n "$(find "$root/tests/sanity" -name 'ignore-*.txt' 2>/dev/null)" ]; then
    log "tests/sanity/ignore-*.txt must not exist: fix the findings instead"
    exit 1
fi

# ansible-test keeps its per-test virtual environments and caches in
# ~/.ansible/test, shared by every run on this machine whatever TMPDIR says:
# two runs at once corrupt them (pip uninstalling under the other's feet).
# Serialize runs of this script.
lock="$HOME/.ansible/test/.trainops-sanity.lock"
mkdir -p "$(dirname "$lock")"
exec 9>"$lock"
if ! flock --nonblock 9; then
    log "another tools/sanity.sh is running: waiting for it"
    flock 9
fi

# 1. Copy the collection.
rm -rf "$dest"
mkdir -p "$dest"
(
    cd "$root"
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do
            # skip files deleted from the work tree but still in the index
            if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
        done |
        tar --null --no-recursion --files-from=- -cf - |
        tar -C "$dest" -xf -
)
# Tracked files get the mode git records: a test run may have chmod'ed a file in
# the work tree, but what ships (and what sanity must judge) is the committed mode.
(
    cd "$root"
    git ls-files -s -z | while IFS= read -r -d '' entry; do
        mode="${entry%% *}"
        path="${entry#*$'\t'}"
        case "$mode" in
            100755) [ -f "$dest/$path" ] && chmod 0755 "$dest/$path" ;;
            100644) [ -f "$dest/$path" ] && chmod 0644 "$dest/$path" ;;
        esac
    done
)
git -C "$dest" init --quiet
git -C "$dest" add --all
log "copied $(git -C "$dest" ls-files | wc -l) files to $dest"

# 2. Seed ansible-test's pip bootstrap cache.  ansible-test fetches
#    get-pip-<version>.py from its download host and keeps it as
#    ~/.ansible/test/cache/get_pip_<version with _>.py; the stand-in below uses
#    the interpreter's ensurepip and then pip installs what it is asked for
#    (pip==<version>) from the package index.
ansible_test_lib="$(python -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')"
mapfile -t pip_versions < <(
    grep -hoE "pip='[0-9][0-9.]*'" "$ansible_test_lib/_internal/python_requirements.py" |
        grep -oE "[0-9][0-9.]*" | sort -u
)
if [ "${#pip_versions[@]}" -eq 0 ]; then
    log "could not find the pip version ansible-test bootstraps"
    exit 1
fi
cache="$HOME/.ansible/test/cache"
mkdir -p "$cache"
for version in "${pip_versions[@]}"; do
    seed="$cache/get_pip_${version//./_}.py"
    if [ -e "$seed" ] && ! grep -q 'trainops offline get-pip stand-in' "$seed"; then
        continue  # a real get-pip.py, downloaded earlier: keep it
    fi
    cat >"$seed.tmp" <<'PY'
"""trainops offline get-pip stand-in for ansible-test (see tools/sanity.sh)."""
from __future__ import annotations

import subprocess
import sys


def main() -> int:
    """Install pip with ensurepip, then pip install --upgrade what was asked for."""
    args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
    subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"],
                   check=True, stdout=subprocess.DEVNULL)
    status = subprocess.run([sys.executable, "-m", "pip", "install", "--upgrade", *args],
                            check=False).returncode
    if status == 0 and "--no-setuptools" in sys.argv[1:]:
        # ensurepip of Python < 3.12 also installs setuptools; get-pip would not
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", "setuptools"],
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return status


if __name__ == "__main__":
    sys.exit(main())
PY
    mv -f "$seed.tmp" "$seed"
done

# 3. Run the sanity tests.
log "ansible-test sanity --python $python_version $*"
status=0
(
    cd "$dest"
    ansible-test sanity --requirements --python "$python_version" --color no "$@"
) || status=$?
log "finished with exit status $status in $((SECONDS - started)) s"
exit "$status"
