#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# The Debian packages each entry point of the checkout needs, and the one way
# they are installed. Every entry point calls this script for its own groups
# (tools/bootstrap.sh, tools/pve_standin/setup.sh, tools/pve_standin/node.sh,
# tests/run.sh), so a bare Debian 12 machine gets what it lacks, and .ci/run
# installs nothing by any other path.
#
# Usage: tools/system-packages.sh [--list|--check] GROUP...
#   (no option)  install the packages of the groups that are not installed yet,
#                as root, with apt-get (one `apt-get update` first, only when
#                something is missing)
#   --list       print the packages of the groups, one a line, and exit
#   --check      exit 1 naming the missing packages and the command that
#                installs them, install nothing
# Groups:
#   bootstrap    the development venvs (tools/bootstrap.sh): python3, its venv module
#   standin      the Proxmox VE stand-in (tools/pve_standin/setup.sh and pct):
#                LXC, lxc-templates (it ships /usr/share/lxc/config/debian.common.conf,
#                which every stand-in container's LXC config includes; lxc only
#                recommends it), mmdebstrap and ca-certificates for the images,
#                python3 for pct, procps for sysctl
#   nodes        simulated remote nodes (tools/pve_standin/node.sh, benchmarks):
#                the OpenSSH server and client, sudo (pct through sudo: node_become)
#   tests        what tests/run.sh needs beyond the above: git (sanity's copy of
#                the collection), tmux (unit tests of the launch on the host),
#                ShellCheck (sanity), strace (tests/integration/test_system_packages.py),
#                gcc and libc6-dev (the stand-in libcuda of the CUDA probe's tests,
#                tests/integration/fake_libcuda.py: cc and the C library's headers)
set -euo pipefail

group_packages() {
    case "$1" in
        bootstrap) echo python3 python3-venv ;;
        standin) echo lxc lxc-templates mmdebstrap python3 ca-certificates procps ;;
        nodes) echo openssh-server openssh-client sudo ;;
        tests) echo git tmux shellcheck strace gcc libc6-dev ;;
        *) echo "system-packages: unknown group '$1' (groups: bootstrap standin nodes tests)" >&2; return 2 ;;
    esac
}

# The options of every install: no recommended packages (what is needed is
# listed here), wait for another apt or dpkg instead of failing on its lock.
apt_options=(-y -qq --no-install-recommends -o DPkg::Lock::Timeout=300)

mode=install
case "${1:-}" in
    --list) mode=list; shift ;;
    --check) mode=check; shift ;;
    -h | --help) sed -n '11,31s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
esac
[ "$#" -gt 0 ] || { echo "usage: tools/system-packages.sh [--list|--check] GROUP..." >&2; exit 2; }

wanted=()
for group in "$@"; do
    packages="$(group_packages "$group")" || exit 2
    read -r -a listed <<<"$packages"
    wanted+=("${listed[@]}")
done

if [ "$mode" = list ]; then
    printf '%s\n' "${wanted[@]}" | awk '!seen[$0]++'
    exit 0
fi

missing=()
for pkg in "${wanted[@]}"; do
    case " ${missing[*]} " in *" $pkg "*) continue ;; esac
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$mode" = check ] || [ "$(id -u)" -ne 0 ]; then
    echo "system-packages: missing Debian packages for $*: ${missing[*]}; install them as root with:" >&2
    echo "  apt-get update && apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 1
fi

echo "system-packages: installing ${missing[*]} (for $*)" >&2
export DEBIAN_FRONTEND=noninteractive
# One install at a time (two entry points may start together, e.g. node.sh up
# of two nodes); the lock is this script's folder, so no lock file is left.
exec 7<"$(dirname "${BASH_SOURCE[0]}")"
flock 7
for attempt in 1 2 3; do
    apt-get update -qq && break
    [ "$attempt" -eq 3 ] && { echo "system-packages: apt-get update failed 3 times" >&2; exit 1; }
    sleep 10
done
apt-get install "${apt_options[@]}" "${missing[@]}" >/dev/null
