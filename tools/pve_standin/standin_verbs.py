# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The verbs of the ``pct`` stand-in, each as pve-container's ``pct`` behaves."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from standin_core import RELEASES, Call, Node, PctError, clean_environ, parse_args, run_checked, state_from_env
from standin_image import clone_container, destroy_container, prepare_start, release_from

PUSH_SCRIPT = 'cat > "$1" && chown "$2:$3" "$1" && chmod "$4" "$1"'


def verb_exec(node: Node, call: Call) -> int:
    """``pct exec VMID [--keep-env 0|1] -- CMD...``: lxc-attach, stdin passed through, CMD's status."""
    vmid = call.args[0]
    if not call.extra:
        raise PctError("missing command")
    node.require_running(vmid)
    keep = call.opts.get("keep-env", "1") == "1"
    argv = node.lxc("attach", vmid, "--keep-env" if keep else "--clear-env", "--", *call.extra)
    env = clean_environ(node.environ)
    if node.knobs.pty:
        return run_with_pty(argv, env)
    os.execvpe(argv[0], argv, env)
    return 127  # not reached: exec replaced this process


def _take_terminal() -> None:
    """In the child: lead a new session with the pty on fd 0 as controlling terminal (as sshd does)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def run_with_pty(argv: Sequence[str], env: dict[str, str]) -> int:
    """Run argv with a pty as its stdin, stdout and stderr, as ``ssh -t`` or a terminal would."""
    master, slave = pty.openpty()
    # pylint: disable-next=subprocess-popen-preexec-fn
    proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, env=env,
                            preexec_fn=_take_terminal, close_fds=True)
    os.close(slave)
    stdin_open = True
    while True:
        watch = [master, 0] if stdin_open else [master]
        ready = select.select(watch, [], [], 0.2)[0]
        if master in ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                data = b""
            if not data:
                break
            os.write(1, data)
        if stdin_open and 0 in ready:
            data = os.read(0, 65536)
            os.write(master, data or b"\x04")
            stdin_open = bool(data)
    os.close(master)
    code = proc.wait()
    return 128 - code if code < 0 else code


def verb_status(node: Node, call: Call) -> int:
    """``pct status VMID [--verbose]``."""
    vmid = call.args[0]
    conf = node.read_conf(vmid)
    state = "running" if node.is_running(vmid) else "stopped"
    if call.opts.get("verbose") == "1":
        info = {"status": state, "name": conf.get("hostname", ""), "vmid": vmid, "type": "lxc",
                "cpus": conf.get("cores", "1"), "maxmem": str(int(conf.get("memory", "512")) * 1024 * 1024)}
        sys.stdout.write("".join(f"{k}: {info[k]}\n" for k in sorted(info)))
    else:
        sys.stdout.write(f"status: {state}\n")
    return 0


def verb_list(node: Node, call: Call) -> int:
    """``pct list``: nothing at all when there are no containers."""
    del call
    rows = []
    for vmid in node.vmids():
        conf = node.read_conf(vmid)
        state = "running" if node.is_running(vmid) else "stopped"
        rows.append((vmid, state, conf.get("lock", ""), conf.get("hostname", "")))
    if rows:
        rows.insert(0, ("VMID", "Status", "Lock", "Name"))
        sys.stdout.write("".join(f"{r[0]:<10} {r[1]:<10} {r[2]:<12} {r[3]:<20}\n" for r in rows))
    return 0


def verb_start(node: Node, call: Call) -> int:
    """``pct start VMID``."""
    vmid = call.args[0]
    with node.lock(f"ct-{vmid}"):
        conf = node.read_conf(vmid)
        if node.is_running(vmid):
            raise PctError(f"CT {vmid} already running")
        prepare_start(node, vmid, conf.get("hostname", f"CT{vmid}"))
        run_checked(node.lxc("start", vmid, "-d"), f"starting CT {vmid}")
        run_checked(node.lxc("wait", vmid, "-s", "RUNNING", "-t", "30"), f"waiting for CT {vmid} to run")
        wait_for_boot(node, vmid)
    return 0


def wait_for_boot(node: Node, vmid: str, timeout: float = 30) -> None:
    """Wait until systemd inside has booted, so its clean-up of /tmp cannot race the first exec.

    Real pct start returns once init runs; the stand-in waits a little longer to keep tests deterministic.
    """
    argv = node.lxc("attach", vmid, "--clear-env", "--", "systemctl", "is-system-running")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        if state.stdout.strip() in ("running", "degraded"):
            return
        time.sleep(0.1)
    sys.stderr.write(f"warning: CT {vmid} did not finish booting within {timeout:.0f}s\n")


def verb_stop(node: Node, call: Call) -> int:
    """``pct stop VMID``: an immediate stop, as Proxmox's stop (not shutdown) is."""
    vmid = call.args[0]
    with node.lock(f"ct-{vmid}"):
        node.read_conf(vmid)
        if not node.is_running(vmid):
            raise PctError(f"CT {vmid} not running")
        run_checked(node.lxc("stop", vmid, "-k"), f"stopping CT {vmid}")
    return 0


def verb_reboot(node: Node, call: Call) -> int:
    """``pct reboot VMID``: stop and start again; every process inside ends."""
    vmid = call.args[0]
    node.require_running(vmid, f"CT {vmid} not running")
    verb_stop(node, call)
    return verb_start(node, call)


def verb_config(node: Node, call: Call) -> int:
    """``pct config VMID``: sorted ``key: value`` lines."""
    conf = node.read_conf(call.args[0])
    sys.stdout.write("".join(f"{key}: {conf[key]}\n" for key in sorted(conf)))
    return 0


def _octal(value: str) -> str:
    if not re.fullmatch(r"0?[0-7]{3,4}", value):
        raise PctError(f"400 Parameter verification failed.\nperms: value '{value}' is not an octal mode")
    return value


def verb_push(node: Node, call: Call) -> int:
    """``pct push VMID FILE DEST``: copy a node file into the CT (like pct, 0 even when the copy failed inside)."""
    vmid, src, dest = call.args
    node.require_running(vmid, "can only push files to a running CT")
    perms = _octal(call.opts.get("perms", "0644"))
    user = call.opts.get("user", "0")
    group = call.opts.get("group", user)
    try:
        source = open(src, "rb")  # pylint: disable=consider-using-with
    except OSError as err:
        raise PctError(f"unable to open file '{src}' - {err.strerror}") from err
    with source:
        data = source.read()
    # Through a pipe, never the file itself: lxc-attach changes the owner and mode of the files it gets as
    # stdio (LXC's fix_stdio_permissions), and real pct push leaves the node's file alone.
    argv = node.lxc("attach", vmid, "--clear-env", "--", "/bin/sh", "-c", PUSH_SCRIPT, "sh", dest, user, group, perms)
    result = subprocess.run(argv, input=data, capture_output=True, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr.decode("utf-8", "replace"))
    return 0


def verb_pull(node: Node, call: Call) -> int:
    """``pct pull VMID PATH DEST``: copy a CT file to the node (like pct, 0 even when the copy failed)."""
    vmid, src, dest = call.args
    node.require_running(vmid, "can only pull files from a running VM")
    target = Path(dest)
    tmp = target.with_name(f".{target.name}.pct-pull-{os.getpid()}")
    with open(tmp, "wb") as out:
        result = subprocess.run(node.lxc("attach", vmid, "--clear-env", "--", "cat", src),
                                stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        sys.stderr.write(result.stderr.decode("utf-8", "replace"))
        return 0
    if "perms" in call.opts:
        os.chmod(tmp, int(_octal(call.opts["perms"]), 8))
    tmp.replace(target)
    return 0


def _memory_mb(value: str) -> int:
    """``--memory`` as pve-container's schema takes it: an integer of at least 16 (MB)."""
    if not re.fullmatch(r"[0-9]+", value):
        raise PctError(f"400 Parameter verification failed.\nmemory: type check ('integer') failed - got '{value}'")
    if int(value) < 16:
        raise PctError("400 Parameter verification failed.\nmemory: value must have a minimum value of 16")
    return int(value)


def verb_create(node: Node, call: Call) -> int:
    """``pct create VMID [OSTEMPLATE] [--release R] [--hostname H] [--memory MB] [--start 1]`` (stand-in: Debian only).

    Only an explicit ``--memory`` limits the container (to that memory, no swap); without it the
    container is unlimited, whatever ``pct config`` says (512).
    """
    vmid = call.args[0]
    release = release_from(call.opts.get("release"), call.args[1] if len(call.args) > 1 else None)
    hostname = call.opts.get("hostname", f"CT{vmid}")
    memory = _memory_mb(call.opts["memory"]) if "memory" in call.opts else None
    with node.lock(f"ct-{vmid}"):
        if node.conf_path(vmid).is_file():
            raise PctError(f"unable to create CT {vmid} - CT {vmid} already exists on node '{node.name}'")
        clone_container(node, vmid, release, hostname, memory)
        node.write_conf(vmid, {
            "arch": "amd64", "cores": call.opts.get("cores", "1"), "hostname": hostname,
            "memory": str(memory or 512), "ostype": "debian",
            "rootfs": f"standin:subvol-{vmid}-disk-0,size=8G", "swap": "512" if memory is None else "0", "unprivileged": "0",
            "description": f"stand-in Debian {RELEASES[release]} ({release})",
        })
    if call.opts.get("start") == "1":
        return verb_start(node, Call("start", [vmid], {}, []))
    return 0


def verb_destroy(node: Node, call: Call) -> int:
    """``pct destroy VMID [--force 1]``."""
    vmid = call.args[0]
    node.read_conf(vmid)
    if node.is_running(vmid):
        if call.opts.get("force") != "1":
            raise PctError(f"unable to destroy CT {vmid} - container is running")
        verb_stop(node, call)
    with node.lock(f"ct-{vmid}"):
        destroy_container(node, vmid)
    return 0


VERBS: dict[str, Callable[[Node, Call], int]] = {
    "exec": verb_exec, "status": verb_status, "list": verb_list, "start": verb_start, "stop": verb_stop,
    "reboot": verb_reboot, "config": verb_config, "push": verb_push, "pull": verb_pull,
    "create": verb_create, "destroy": verb_destroy,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pct`` stand-in."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        node = state_from_env(dict(os.environ))
        node.record(["pct", *args])
        call = parse_args(args)
        return VERBS[call.verb](node, call)
    except PctError as err:
        sys.stderr.write(err.message.rstrip("\n") + "\n")
        return err.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
