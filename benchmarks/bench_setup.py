# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Set up and tear down what the benchmarks run on: two simulated nodes and 32 overlay-clone containers.

The stand-in's image has no tmux: container 400 gets it with apt (the network is needed once),
and its .deb files, with the benchmark job, are unpacked into every other container with dpkg,
which takes a second instead of an apt-get update per container.
"""
from __future__ import annotations

import io
import shlex
import subprocess
import tarfile
import time
from pathlib import Path

from bench_env import ALL_VMIDS, BENCH, FRESH_VMID, MAIN_NODE, MAIN_VMID, NODE_ADDRESSES, NODE_SH, NODE_STATE_MOUNT, NODE_VMIDS, NODES_BASE, Context, Node

JOB_FILE = BENCH / "files" / "bench_job.py"
APT_TMUX = ("export DEBIAN_FRONTEND=noninteractive; { apt-get update -qq && apt-get install -y -qq --no-install-recommends tmux; }"
            " >/tmp/bench-apt.log 2>&1 || { cat /tmp/bench-apt.log; exit 1; }")
# Run on the node: unpack the payload (debs + job) into each container given as argument, in parallel.
INSTALL_LOOP = r"""
payload="$1"; shift
install='rm -rf /tmp/bench-payload && mkdir -p /tmp/bench-payload /bench && tar -xf - -C /tmp/bench-payload &&
dpkg -i /tmp/bench-payload/*.deb >/tmp/bench-dpkg.log 2>&1 && cp /tmp/bench-payload/bench_job.py /bench/ && tmux -V >/dev/null'
pids=''
for vmid in "$@"; do pct exec "$vmid" -- sh -c "$install" < "$payload" & pids="$pids $!"; done
status=0
for pid in $pids; do wait "$pid" || status=1; done
exit "$status"
"""


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"bench: {message}", flush=True)


def node_sh(*args: str, tries: int = 3) -> None:
    """Run tools/pve_standin/node.sh; retried, because other users of the machine may run it at the same time."""
    for attempt in range(1, tries + 1):
        proc = subprocess.run([str(NODE_SH), *args], capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode == 0:
            return
        if attempt == tries:
            raise RuntimeError(f"node.sh {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        time.sleep(attempt)


def write_ssh_config(ctx: Context) -> None:
    """An ssh_config and known_hosts of our own for both nodes.

    node.sh rewrites its shared client files whenever any node goes up or down; with other users
    of the machine doing that at the same time, our entries could vanish for a moment.
    """
    client = NODES_BASE / "client"
    config, known = [], []
    for name, address in NODE_ADDRESSES.items():
        key = (NODES_BASE / name / "ssh_host_ed25519_key.pub").read_text(encoding="utf-8").split()[:2]
        known.append(f"{name} {' '.join(key)}")
        config += [f"Host {name}", f"  HostName {address}", "  Port 22", "  User root", f"  IdentityFile {client / 'id_ed25519'}",
                   "  IdentitiesOnly yes", f"  UserKnownHostsFile {ctx.workdir / 'known_hosts'}", "  StrictHostKeyChecking yes",
                   f"  HostKeyAlias {name}", "  BatchMode yes", ""]
    (ctx.workdir / "known_hosts").write_text("\n".join(known) + "\n", encoding="utf-8")
    Path(ctx.ssh_config).write_text("\n".join(config), encoding="utf-8")


def bring_up_nodes(ctx: Context) -> None:
    """Start both nodes (safe when they are up) and remove containers an interrupted run left behind."""
    for name, address in NODE_ADDRESSES.items():
        node_sh("up", name, address)
    write_ssh_config(ctx)
    ctx.set_delay(0)
    destroy_containers(ctx)


def destroy_containers(ctx: Context) -> None:
    """Destroy the benchmark's containers on both nodes (one ssh per node, the nodes in parallel)."""
    scripts = {}
    for name, node in ctx.nodes.items():
        vmids = " ".join(map(str, existing_vmids(node)))
        if vmids:
            scripts[name] = f"for v in {vmids}; do pct destroy $v --force || exit 1; done"
    run_on_nodes(ctx, scripts, "destroying the containers")


def existing_vmids(node: Node) -> list[int]:
    """The benchmark's VMIDs that exist on the node."""
    listing = node.ssh("pct list").stdout.decode().splitlines()[1:]
    present = {int(line.split()[0]) for line in listing if line.split() and line.split()[0].isdigit()}
    ours = NODE_VMIDS[node.name] + ([FRESH_VMID] if node.name == MAIN_NODE else [])
    return sorted(present & set(ours))


def run_on_nodes(ctx: Context, scripts: dict[str, str], what: str, timeout: float = 600) -> None:
    """Run one shell command line per node over ssh, the nodes in parallel; raise when one fails.

    Every ssh is waited for, even after a failure: a loop left running on a node would go on
    creating containers after the tear-down.
    """
    procs = {}
    for name, script in scripts.items():
        argv = ["ssh", "-T", "-F", ctx.ssh_config, "-o", "ControlMaster=no", "-o", "ControlPath=none", name, script]
        procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with
    failed = []
    for name, proc in procs.items():
        try:
            out, dummy = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, dummy = proc.communicate()
        if proc.returncode != 0:
            failed.append(f"{name}: exit {proc.returncode}: {out.decode(errors='replace')[-2000:]}")
    if failed:
        raise RuntimeError(f"{what} failed on " + "; ".join(failed))


def create_containers(ctx: Context) -> None:
    """Create and start the 32 containers (16 per node, the nodes in parallel)."""
    scripts = {}
    for name, vmids in NODE_VMIDS.items():
        loop = " ".join(map(str, vmids))
        scripts[name] = f"for v in {loop}; do pct create $v --hostname bench$v --unprivileged 1 --start 1 || exit 1; done"
    run_on_nodes(ctx, scripts, "creating the containers")


def build_payload(ctx: Context) -> Path:
    """Install tmux in the main container with apt; pack its .deb files and the job into a tar file."""
    node = ctx.main
    node.ssh(f"pct exec {MAIN_VMID} -- sh -c {shlex.quote(APT_TMUX)}", timeout=600)
    debs = node.ssh(f"pct exec {MAIN_VMID} -- sh -c 'cd /var/cache/apt/archives && tar -cf - *.deb'").stdout
    payload = ctx.workdir / "payload.tar"
    with tarfile.open(fileobj=io.BytesIO(debs)) as source, tarfile.open(payload, "w") as dest:
        for member in source.getmembers():
            dest.addfile(member, source.extractfile(member))
        dest.add(JOB_FILE, arcname="bench_job.py")
    return payload


def install_payload(ctx: Context, payload: Path) -> None:
    """Unpack tmux and the job into every container (the payload is read on the node: same host)."""
    scripts = {}
    for name, vmids in NODE_VMIDS.items():
        args = " ".join(map(str, vmids))
        scripts[name] = f"sh -c {shlex.quote(INSTALL_LOOP)} sh {shlex.quote(str(payload))} {args}"
    run_on_nodes(ctx, scripts, "installing tmux and the job")


def set_up(ctx: Context) -> dict[str, float]:
    """Bring everything up; returns the seconds each step took."""
    steps: dict[str, float] = {}
    for name, what, step in (
        ("nodes up", "bringing up nodes pve-g (127.0.0.17) and pve-h (127.0.0.18)", lambda: bring_up_nodes(ctx)),
        ("32 containers created", "creating 32 containers (400-415 on pve-g, 450-465 on pve-h)", lambda: create_containers(ctx)),
        ("tmux and the job installed", "installing tmux in CT 400 with apt, in the others with dpkg", lambda: install_payload(ctx, build_payload(ctx))),
    ):
        log(what)
        started = time.monotonic()
        step()
        steps[name] = time.monotonic() - started
        log(f"{name} in {steps[name]:.1f} s")
    return steps


def tear_down(ctx: Context) -> None:
    """Close shared ssh connections, destroy the containers, stop both nodes."""
    ctx.close_masters()
    try:
        destroy_containers(ctx)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        log(f"destroying the containers: {exc}")
    for name in ctx.nodes:
        try:
            node_sh("down", name)
        except RuntimeError as exc:
            log(str(exc))
    stop_orphans()
    log("containers destroyed, nodes pve-g and pve-h down")


def stop_orphans() -> None:
    """Stop containers of ours that outlived their node (LXC reaches them by name through its command socket)."""
    for vmid in ALL_VMIDS:
        info = subprocess.run(["lxc-info", "-P", NODE_STATE_MOUNT + "/lxc", "-n", str(vmid), "-s"], capture_output=True, text=True, check=False)
        if "RUNNING" in info.stdout:
            log(f"stopping CT {vmid}, left running without its node")
            subprocess.run(["lxc-stop", "-P", NODE_STATE_MOUNT + "/lxc", "-n", str(vmid), "-k"], capture_output=True, check=False, timeout=60)
