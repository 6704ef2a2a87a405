#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# Simulated remote Proxmox VE nodes on this machine, each reached over SSH:
# its own sshd on its own loopback address, and its own stand-in state (its
# own node name and container set), because sshd runs in a mount namespace
# where the node's folder is bind-mounted on /var/lib/pve-standin. Whatever
# runs through that sshd (pct, Ansible modules) sees only that node.
#
#   node.sh up NAME ADDRESS [PORT]   start node NAME on ADDRESS (127.0.0.0/8), port 22; on a node that
#                                    is up already, only starts its sshd again when it is not running
#                                    (its containers and their jobs are left alone)
#   node.sh down NAME                stop its containers, its sshd and every process left in
#                                    its mount namespace (sessions, their children), remove its state
#   node.sh ssh-config               print the ssh_config file that reaches every node
#   node.sh list                     the nodes that are up
#
# The client side lives in $PVE_STANDIN_NODES/client: a key, known_hosts with
# each node's host key (host key checking stays on), and an ssh_config with a
# `Host NAME` entry per node. Use it with `ssh -F <that file> NAME`, or in
# Ansible: pct_ssh_args="-F <file>" for the pct connection and
# ansible_ssh_common_args="-F <file>" for tasks delegated to the node.
#
# Several `up` and `down` may run at the same time (of different nodes): the
# client files are shared, so they are updated under a lock on the client
# folder (flock) and replaced atomically (written to a temporary file, then
# renamed), and a reader never sees a half-written ssh_config or known_hosts.
#
# Environment: PVE_STANDIN_NODES (default /var/lib/pve-standin-nodes).
set -euo pipefail

base="${PVE_STANDIN_NODES:-/var/lib/pve-standin-nodes}"
client="$base/client"
mountpoint=/var/lib/pve-standin

here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"

die() { echo "node.sh: $*" >&2; exit 1; }

valid_name() { [[ "$1" =~ ^[a-z][a-z0-9-]{0,30}$ ]] || die "invalid node name '$1': use [a-z][a-z0-9-]*"; }

ensure_client() {
  mkdir -p "$client"
  chmod 700 "$client"
  [ -f "$client/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C pve-standin-client -f "$client/id_ed25519"
  touch "$client/known_hosts" "$client/ssh_config"
}

# Run "$@" holding the lock of the client folder (which it creates first): every change of the
# shared client files and of the node folders they are made from happens under it.
with_client_lock() {
  mkdir -p "$client"
  chmod 700 "$client"
  (
    flock -w 120 9 || die "cannot lock $client/.lock within 120 s: another node.sh seems stuck (see: fuser -v $client/.lock)"
    "$@"
  ) 9>"$client/.lock"
}

# Replace file $1 with the standard input, atomically (temporary file in the same folder, then rename).
write_atomic() {
  local target="$1" tmp
  tmp="$(mktemp "$target.XXXXXX")"
  if ! cat > "$tmp"; then rm -f "$tmp"; die "cannot write $target"; fi
  chmod 600 "$tmp"
  mv -f "$tmp" "$target"
}

write_sshd_config() {
  local dir="$1" address="$2" port="$3"
  cat > "$dir/sshd_config" <<EOF
# sshd of simulated Proxmox VE node $(basename "$dir") (tools/pve_standin/node.sh)
ListenAddress $address
Port $port
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 200:30:400
MaxSessions 200
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
EOF
}

ssh_config_entry() {
  local name="$1" address="$2" port="$3"
  cat <<EOF
Host $name
  HostName $address
  Port $port
  User root
  IdentityFile $client/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $client/known_hosts
  StrictHostKeyChecking yes
  HostKeyAlias $name
  BatchMode yes

EOF
}

# Whether node folder $1 is complete enough for the client files (address and host key).
listed() { [ -f "$1/address" ] && [ -f "$1/ssh_host_ed25519_key.pub" ]; }

# Rebuild ssh_config and known_hosts from the node folders; call it under with_client_lock.
rewrite_client_config() {
  local dir name address port
  {
    for dir in "$base"/*/; do
      listed "$dir" || continue
      read -r address port < "$dir/address"
      ssh_config_entry "$(basename "$dir")" "$address" "$port"
    done
  } | write_atomic "$client/ssh_config"
  {
    for dir in "$base"/*/; do
      listed "$dir" || continue
      name="$(basename "$dir")"
      printf '%s %s\n' "$name" "$(cut -d' ' -f1,2 "$dir/ssh_host_ed25519_key.pub")"
    done
  } | write_atomic "$client/known_hosts"
}

sshd_running() { [ -f "$1/sshd.pid" ] && kill -0 "$(cat "$1/sshd.pid")" 2>/dev/null; }

# The node's folder, keys, sshd_config and client entries; call it under with_client_lock.
# The address is written last: rewrite_client_config lists the folders that have one.
prepare_node() {
  local name="$1" address="$2" port="$3" dir="$base/$1"
  ensure_client
  mkdir -p "$dir/root" /run/sshd
  chmod 700 "$dir"
  echo "$name" > "$dir/root/node"
  [ -f "$dir/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$dir/ssh_host_ed25519_key"
  cp "$client/id_ed25519.pub" "$dir/authorized_keys"
  write_sshd_config "$dir" "$address" "$port"
  echo "$address $port" | write_atomic "$dir/address"
  rewrite_client_config
}

up() {
  local name="$1" address="$2" port="${3:-22}" dir
  valid_name "$name"
  [[ "$address" =~ ^127\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "address $address is not a loopback address (127.0.0.0/8)"
  dir="$base/$name"
  with_client_lock prepare_node "$name" "$address" "$port"
  if sshd_running "$dir"; then
    echo "node $name: sshd already up on $address:$port"
    return 0
  fi
  mkdir -p "$mountpoint"
  # shellcheck disable=SC2016  # $1, $2 and $3 are expanded by the inner sh
  unshare --mount --propagation private -- sh -c \
    'mount --bind "$1" "$2" && exec /usr/sbin/sshd -f "$3"' sh "$dir/root" "$mountpoint" "$dir/sshd_config"
  for _try in $(seq 50); do sshd_running "$dir" && break; sleep 0.1; done
  sshd_running "$dir" || die "sshd of node $name did not start (see: /usr/sbin/sshd -t -f $dir/sshd_config)"
  echo "node $name: sshd up on $address:$port, state in $dir/root"
}

# The processes of the node in folder $1: those that see its state folder as /var/lib/pve-standin,
# that is its sshd and everything started in that sshd's mount namespace (sessions, pct, their
# children, daemons they left behind), whatever their process group or session.
node_pids() {
  local want procs
  want="$(stat -c %d:%i "$1/root")" || return 0
  procs=(/proc/[0-9]*)
  { stat -c '%d:%i %n' "${procs[@]/%//root$mountpoint}" 2>/dev/null || true; } |
    awk -v want="$want" '$1 == want { split($2, part, "/"); print part[3] }'
}

# End every process of the node in folder $1: sshd first (no new sessions), then TERM, then KILL.
end_node_processes() {
  local dir="$1" pids _try signal
  if [ -f "$dir/sshd.pid" ]; then kill "$(cat "$dir/sshd.pid")" 2>/dev/null || true; fi
  for signal in TERM KILL; do
    pids="$(node_pids "$dir")"
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086  # one pid per word
    kill -s "$signal" $pids 2>/dev/null || true
    for _try in $(seq 50); do
      [ -n "$(node_pids "$dir")" ] || return 0
      sleep 0.1
    done
  done
  echo "node.sh: processes of node $(basename "$dir") did not end after KILL: $(node_pids "$dir" | tr '\n' ' ')" >&2
  return 1
}

remove_node() { rm -rf "$1"; rewrite_client_config; }

down() {
  local name="$1" dir vmid
  valid_name "$name"
  dir="$base/$name"
  [ -d "$dir" ] || { echo "node $name: not up"; return 0; }
  if sshd_running "$dir"; then
    for vmid in $(ssh -F "$client/ssh_config" "$name" pct list 2>/dev/null | awk 'NR > 1 { print $1 }'); do
      ssh -F "$client/ssh_config" "$name" pct destroy "$vmid" --force || true
    done
  fi
  end_node_processes "$dir" || die "cannot end the processes of node $name: see above; its state stays in $dir"
  with_client_lock remove_node "$dir"
  echo "node $name: down"
}

case "${1:-}" in
  up)
    [ "$#" -ge 3 ] || die "usage: node.sh up NAME ADDRESS [PORT]"
    # The OpenSSH server and client (tools/system-packages.sh nodes), installed when missing.
    "$here/../system-packages.sh" nodes || die "cannot install the OpenSSH server and client (see above)"
    up "$2" "$3" "${4:-22}" ;;
  down) [ "$#" -eq 2 ] || die "usage: node.sh down NAME"; down "$2" ;;
  ssh-config) "$here/../system-packages.sh" nodes || die "cannot install the OpenSSH client (see above)"; ensure_client; echo "$client/ssh_config" ;;
  list) for d in "$base"/*/; do [ -f "$d/address" ] && sshd_running "$d" && echo "$(basename "$d") $(cat "$d/address")"; done; true ;;
  *) die "usage: node.sh up NAME ADDRESS [PORT] | down NAME | ssh-config | list" ;;
esac
