#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# Bring the local Proxmox VE stand-in up from nothing, on a Debian host, as root:
# install LXC, lxc-templates and mmdebstrap (tools/system-packages.sh standin),
# put the stand-in's `pct` on PATH, build the Debian image once (cached),
# create container 200 (unprivileged, as the Proxmox VE web UI makes them) and
# start it. Safe to run again: it only does what is missing, and re-creates a
# privileged CT 200 that an older stand-in made.
#
# Usage: tools/pve_standin/setup.sh [--no-container]
#   --no-container   only the packages and `pct` on PATH (for the benchmarks,
#                    which create containers of their own; the image is built
#                    by the first `pct create`)
#
# Environment:
#   PVE_STANDIN_ROOT    the node's state (default /var/lib/pve-standin)
#   PVE_STANDIN_CACHE   cached root file systems (default /var/cache/pve-standin)
#   STANDIN_VMID        the container to bring up (default 200)
#   STANDIN_RELEASE     its Debian release: bullseye, bookworm (default) or trixie
#   STANDIN_HOSTNAME    its host name (default train<VMID>)
set -euo pipefail

here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
vmid="${STANDIN_VMID:-200}"
release="${STANDIN_RELEASE:-bookworm}"
hostname="${STANDIN_HOSTNAME:-train${vmid}}"
container=1
case "${1:-}" in
  "") ;;
  --no-container) container=0 ;;
  *) echo "usage: tools/pve_standin/setup.sh [--no-container]" >&2; exit 2 ;;
esac

say() { printf 'pve-standin: %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "pve-standin: run as root (LXC containers need it)" >&2
  exit 1
fi

"$here/../system-packages.sh" standin

# systemd in every container takes inotify instances from root's budget: the
# default 128 runs out at about 25 running containers, and new ones never boot.
if [ "$(cat /proc/sys/fs/inotify/max_user_instances)" -lt 1024 ]; then
  sysctl -q -w fs.inotify.max_user_instances=1024
fi

ln -sfn "$here/pct" /usr/local/sbin/pct
say "pct is $(readlink -f /usr/local/sbin/pct)"
[ "$container" = 1 ] || exit 0

exists=0
if config="$(pct config "$vmid" 2>/dev/null)"; then
  exists=1
  # The stand-in's own quickstart CT: one an older stand-in made privileged is made again, unprivileged.
  if ! grep -qx 'unprivileged: 1' <<<"$config" && grep -q '^description: stand-in ' <<<"$config"; then
    say "CT $vmid is privileged (an older stand-in made it): re-creating it unprivileged"
    pct destroy "$vmid" --force 1
    exists=0
  fi
fi
if [ "$exists" = 0 ]; then
  say "creating CT $vmid (Debian $release, unprivileged; the first build of an image takes about 30 s)"
  pct create "$vmid" --release "$release" --hostname "$hostname" --unprivileged 1
fi
if [ "$(pct status "$vmid")" != "status: running" ]; then
  say "starting CT $vmid"
  pct start "$vmid"
fi
pct list
