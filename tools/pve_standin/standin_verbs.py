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

from standin_core import RELEASES, Call, Knobs, Node, PctError, clean_environ, parse_args, run_checked, state_from_env
from standin_faults import before_parse, check_lock, exit_status, knows_keep_env
from standin_devices import DEV_KEY_RE, device_mode_and_rdev, parse_device
from standin_image import CtSpec, clone_container, destroy_container, hotplug_device, prepare_start, release_from
from standin_power import timeout_option, vm_stop

PUSH_SCRIPT = 'cat > "$1" && chown "$2:$3" "$1" && chmod "$4" "$1"'


def verb_exec(node: Node, call: Call) -> int:
    """``pct exec VMID [--keep-env 0|1] -- CMD...``: lxc-attach, stdin passed through, CMD's status.

    pve-container before 5.0.9 (knob ``pve_container``) had no ``--keep-env`` (refused in ``before_parse``) and ran
    ``lxc-attach -n VMID -- CMD``, which keeps the environment (LXC's default).
    """
    vmid = call.args[0]
    if not call.extra:
        raise PctError("missing command")
    node.require_running(vmid)
    policy: list[str] = []
    if knows_keep_env(node.knobs):
        policy = ["--keep-env" if call.opts.get("keep-env", "1") == "1" else "--clear-env"]
    argv = node.lxc("attach", vmid, *policy, "--", *call.extra)
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
        check_lock(node, vmid, conf, call.opts.get("skiplock") == "1")
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
    """``pct stop VMID [--skiplock 1]``: a kill (``lxc-stop --kill``), as Proxmox's stop (not shutdown) is."""
    vmid = call.args[0]
    with node.lock(f"ct-{vmid}"):
        conf = node.read_conf(vmid)
        if not node.is_running(vmid):
            raise PctError(f"CT {vmid} not running")
        check_lock(node, vmid, conf, call.opts.get("skiplock") == "1")
        vm_stop(node, vmid, kill=True)
    return 0


def verb_shutdown(node: Node, call: Call) -> int:
    """``pct shutdown VMID [--timeout 60] [--forceStop 0|1]``: the container's init stops every process (Status.pm
    vm_shutdown); still running after the timeout, it is killed with ``--forceStop 1``, else ``container did not stop``."""
    vmid = call.args[0]
    timeout = timeout_option(call.opts.get("timeout", "60"))
    node.read_conf(vmid)
    if not node.is_running(vmid):
        raise PctError(f"CT {vmid} not running")
    with node.lock(f"ct-{vmid}"):
        check_lock(node, vmid, node.read_conf(vmid), False, mounted_ok=False)
        vm_stop(node, vmid, kill=False, timeout=timeout, kill_after_timeout=call.opts.get("forceStop") == "1")
    return 0


def verb_reboot(node: Node, call: Call) -> int:
    """``pct reboot VMID [--timeout N]``: a shutdown, killed after the timeout (lxc-stop's 60 s without one), then a
    start (LXC.pm vm_reboot); every process inside ends, tmux sessions included."""
    vmid = call.args[0]
    timeout = timeout_option(call.opts.get("timeout"))
    node.require_running(vmid, f"VM {vmid} not running")  # sic: Status.pm's vm_reboot says VM
    with node.lock(f"ct-{vmid}"):
        vm_stop(node, vmid, kill=False, timeout=timeout, kill_after_timeout=True)
    return verb_start(node, Call("start", [vmid], {}, []))


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


def _megabytes(name: str, value: str, minimum: int) -> int:
    """``--memory`` and ``--swap`` as pve-container's schema takes them: integers (MB), at least ``minimum``."""
    if not re.fullmatch(r"[0-9]+", value):
        raise PctError(f"400 Parameter verification failed.\n{name}: type check ('integer') failed - got '{value}'")
    if int(value) < minimum:
        raise PctError(f"400 Parameter verification failed.\n{name}: value must have a minimum value of {minimum}")
    return int(value)


def _device_options(opts: dict[str, str]) -> dict[str, str]:
    """The ``--devN`` options, parsed and their paths checked (Config.pm update_pct_config), as the config stores them."""
    found = {}
    for key in sorted((k for k in opts if DEV_KEY_RE.match(k)), key=lambda k: int(k[3:])):
        device = parse_device(key, opts[key])
        device_mode_and_rdev(device.path)
        found[key] = device.text()
    return found


def _create_conf(call: Call, spec: CtSpec, release: str, swap: int | None) -> dict[str, str]:
    """The Proxmox config of a new CT: what was asked, and Config.pm's defaults (memory 512, swap 512) shown."""
    conf = {
        "arch": "amd64", "cores": call.opts.get("cores", "1"), "hostname": spec.hostname,
        "memory": str(spec.memory or 512), "ostype": "debian", "rootfs": f"standin:subvol-{spec.vmid}-disk-0,size=8G",
        "swap": str(swap if swap is not None else (512 if spec.memory is None else 0)),
        "description": f"stand-in Debian {RELEASES[release]} ({release})", **_device_options(call.opts),
    }
    if spec.unprivileged:  # pve-container writes the key only when it is 1 (src/PVE/API2/LXC.pm create_vm)
        conf["unprivileged"] = "1"
    return conf


def verb_create(node: Node, call: Call) -> int:
    """``pct create VMID [OSTEMPLATE] [--release R] [--hostname H] [--memory MB] [--swap MB] [--unprivileged 0|1]
    [--devN SPEC] [--start 1]`` (stand-in: Debian only).

    ``--unprivileged`` defaults to 1 as pve-container's create API does since 6.0.6 (src/PVE/API2/LXC.pm create_vm:
    "$unprivileged = 1 if !defined($unprivileged)", commit "api: create: default to unprivileged containers",
    Proxmox VE 9.0; the config schema's default stays 0: a config without the key is privileged). Only an explicit
    ``--memory`` limits the container, to that memory plus ``--swap`` (default 0, as update_lxc_config reads
    ``$conf->{swap} // 0``); without it the container is unlimited, whatever ``pct config`` says (512, 512).
    """
    vmid = call.args[0]
    release = release_from(call.opts.get("release"), call.args[1] if len(call.args) > 1 else None)
    memory = _megabytes("memory", call.opts["memory"], 16) if "memory" in call.opts else None
    swap = _megabytes("swap", call.opts["swap"], 0) if "swap" in call.opts else None
    spec = CtSpec(vmid, call.opts.get("hostname", f"CT{vmid}"), node.lxcpath / vmid, Path(),
                  call.opts.get("unprivileged", "1") == "1", memory, swap or 0)
    conf = _create_conf(call, spec, release, swap)
    with node.lock(f"ct-{vmid}"):
        if node.conf_path(vmid).is_file():
            raise PctError(f"unable to create CT {vmid} - CT {vmid} already exists on node '{node.name}'")
        clone_container(node, spec, release)
        node.write_conf(vmid, conf)
    if call.opts.get("start") == "1":
        return verb_start(node, Call("start", [vmid], {}, []))
    return 0


def _set_deletes(call: Call, conf: dict[str, str], changes: dict[str, str]) -> list[str]:
    """The keys of ``--delete`` that can go (API2/LXC/Config.pm update_vm, Config.pm update_pct_config)."""
    deletes = [key for key in re.split(r"[\s,;]+", call.opts.get("delete", "")) if key]
    for key in deletes:
        if key in changes:
            raise PctError(f"400 Parameter verification failed.\ndelete: you can't use '-{key}' and -delete {key}' "
                           "at the same time")
        if key in ("memory", "rootfs", "ostype"):
            raise PctError(f"unable to delete required option '{key}'")
        if key == "unprivileged":
            raise PctError(f"unable to delete read-only option: '{key}'")
    missing = [key for key in deletes if key not in conf]
    for key in missing:
        sys.stderr.write(f"cannot delete '{key}' - not set in current configuration!\n")
    return [key for key in deletes if key not in missing]


def verb_set(node: Node, call: Call) -> int:
    """``pct set VMID [--devN SPEC] [--delete KEYS]``: device passthrough only, in the stand-in.

    As pve-container's update_pct_config and vmconfig_hotplug_pending (src/PVE/LXC/Config.pm): a devN the running
    CT did not have is hot-plugged at once (LXC.pm device_passthrough_hotplug); a changed or deleted devN takes
    effect at the next start (real pct keeps it in the config's [pending] section until then, and ``pct config``
    shows the pending value: the stand-in writes it at once). A failed hot-plug leaves the config unchanged.
    """
    vmid = call.args[0]
    if "unprivileged" in call.opts:
        raise PctError("unable to modify read-only option: 'unprivileged'")
    if not call.opts:
        raise PctError("no options specified")
    changes = _device_options(call.opts)
    with node.lock(f"ct-{vmid}"):
        conf = node.read_conf(vmid)
        if conf.get("lock"):  # pve-guest-common AbstractConfig::check_lock
            raise PctError(f"CT is locked ({conf['lock']})")
        deletes = _set_deletes(call, conf, changes)
        running = node.is_running(vmid)
        errors = []
        for key in (k for k in changes if running and k not in conf):
            try:
                hotplug_device(node, vmid, parse_device(key, changes[key]))
            except PctError as err:
                errors.append(f"{key}: unable to hotplug {key}: {err.message}")
        if errors:
            raise PctError("400 Parameter verification failed.\n" + "\n".join(errors))
        node.write_conf(vmid, {**{k: v for k, v in conf.items() if k not in deletes}, **changes})
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
    "shutdown": verb_shutdown, "reboot": verb_reboot, "config": verb_config, "push": verb_push, "pull": verb_pull,
    "create": verb_create, "set": verb_set, "destroy": verb_destroy,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pct`` stand-in."""
    args = list(sys.argv[1:] if argv is None else argv)
    knobs: Knobs | None = None
    try:
        node = state_from_env(dict(os.environ))
        knobs = node.knobs
        node.record(["pct", *args])
        answered = before_parse(node, args)
        if answered is not None:
            return answered
        call = parse_args(args)
        return VERBS[call.verb](node, call)
    except PctError as err:
        sys.stderr.write(err.message.rstrip("\n") + "\n")
        return exit_status(err, knobs)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
