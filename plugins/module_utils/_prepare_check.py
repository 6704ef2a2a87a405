# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Whether a host is prepared for a job already, found in one module run (``prepare_info``).

``playbooks/prepare.yml`` runs the roles and tasks only for what this finds missing, so a re-launch into a
prepared container costs one ``pct exec`` for the whole prepare step. Each check answers ``ok`` only when it
is sure, from the state itself (the installed tmux, the venv's installed distributions, the files' SHA-1
checksums): anything it cannot judge (a requirement with a marker, a URL or a pre-release, an option line
of a requirements file) is not ok, and the role that knows runs, as it always did. The boot unit
(``boot_unit_state``) is ok when ``/etc/systemd/system/trainops-boot.service`` has the checksum of the
collection's file (the action plugin sends it) and is enabled; where systemd is not the init, nothing is
installed and the result says that such a container is not covered.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import typing as t

from ansible_collections.trainops.pct_launch.plugins.module_utils._job_layout import BOOT_UNIT, BOOT_UNIT_WANTS, SYSTEMD_UNIT_DIR

SYSTEMD_RUNNING = "/run/systemd/system"  # sd_booted(): systemd is the init of this system
NOT_COVERED = ("the init of this container is not systemd (PID 1 is {init}): a job running when the container goes away is not "
               "recorded at its next boot (docs/job-life.md, \"A container that goes away\"); boot_unit: false (job_boot_unit) "
               "leaves this unchecked")
_REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)")
_SPECIFIER = re.compile(r"(==|>=|<=|!=|~=|>|<)\s*([0-9]+(?:\.[0-9]+)*)(\.\*)?")
_RELEASE = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_TMUX_VERSION = re.compile(r"([0-9]+)\.([0-9]+)([a-z]?)")

ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = dict(
    tmux_min_version=dict(type="str", default="3.0"),
    venv_path=dict(type="str"),
    venv_requirements=dict(type="list", elements="str", default=[]),
    venv_requirements_file=dict(type="path"),
    venv_requirements_text=dict(type="str"),
    venv_site_packages=dict(type="bool", default=False),
    workdir=dict(type="str"),
    files=dict(type="list", elements="dict", default=[]),
    boot_unit=dict(type="bool", default=True),
    boot_unit_checksum=dict(type="str"),
)


def _key(version: str) -> tuple[int, ...]:
    parts = [int(part) for part in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _satisfies(installed: str, operator: str, wanted: str, prefix: bool) -> bool:
    have, want = _key(installed), _key(wanted)
    if prefix:  # ==1.2.* / !=1.2.*
        same = tuple(int(p) for p in installed.split("."))[:len(wanted.split("."))] == tuple(int(p) for p in wanted.split("."))
        return same if operator == "==" else not same
    compare = {"==": have == want, "!=": have != want, ">=": have >= want, "<=": have <= want, ">": have > want, "<": have < want}
    if operator == "~=":
        upper = tuple(int(p) for p in wanted.split("."))[:-1]
        return have >= want and tuple(int(p) for p in installed.split("."))[:len(upper)] == upper
    return compare[operator]


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_met(line: str, installed: t.Mapping[str, str]) -> bool | None:
    """True when ``installed`` (name -> version) meets the requirement, False when not, None when unsure."""
    text = line.split(" #", 1)[0].strip()
    if not text or text.startswith("#"):
        return True
    match = _REQUIREMENT.fullmatch(text)
    if text.startswith("-") or ";" in text or "@" in text or "://" in text or match is None:
        return None
    name, _extras, rest = match.groups()
    version = installed.get(normalize(name))
    if version is None:
        return False
    if not _RELEASE.fullmatch(version):
        return None
    for clause in (part.strip() for part in rest.split(",") if part.strip()):
        spec = _SPECIFIER.fullmatch(clause)
        if spec is None:
            return None
        if not _satisfies(version, spec.group(1), spec.group(2), bool(spec.group(3))):
            return False
    return True


def installed_distributions(venv: str) -> dict[str, str]:
    """name -> version of what is installed in the venv itself (its site-packages' metadata)."""
    found: dict[str, str] = {}
    pattern = os.path.join(venv, "lib", "python*", "site-packages", "*")
    for folder in glob.glob(pattern):
        meta = os.path.join(folder, "METADATA" if folder.endswith(".dist-info") else "PKG-INFO")
        if not folder.endswith((".dist-info", ".egg-info")) or not os.path.isfile(meta):
            continue
        headers: dict[str, str] = {}
        with open(meta, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break
                key, _sep, value = line.partition(":")
                headers.setdefault(key.strip().lower(), value.strip())
        if headers.get("name") and headers.get("version"):
            found[normalize(headers["name"])] = headers["version"]
    return found


def tmux_state(min_version: str) -> dict[str, t.Any]:
    """Whether a tmux of ``min_version`` or newer is installed."""
    program = shutil.which("tmux", path=os.environ.get("PATH", "") + ":/usr/local/bin:/usr/bin:/bin")
    if program is None:
        return {"ok": False, "version": None, "reason": "tmux is not installed"}
    try:
        out = subprocess.run([program, "-V"], stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False).stdout.decode()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "version": None, "reason": f"tmux -V failed: {exc}"}
    have, want = _TMUX_VERSION.search(out), _TMUX_VERSION.fullmatch(min_version)
    if have is None or want is None:
        return {"ok": False, "version": None, "reason": f"cannot read a version from {out.strip()!r}"}

    def key(found: t.Match[str]) -> tuple[int, int, str]:
        return int(found.group(1)), int(found.group(2)), found.group(3)

    ok = key(have) >= key(want)
    return {"ok": ok, "version": have.group(0), "reason": "" if ok else f"tmux {have.group(0)} is older than {min_version}"}


def venv_state(path: str, requirements: t.Sequence[str], requirements_text: str | None, site_packages: bool) -> dict[str, t.Any]:
    """Whether the venv exists, sees the system's site-packages as asked, and meets every requirement."""
    if not os.access(os.path.join(path, "bin", "python"), os.X_OK) or not os.path.isfile(os.path.join(path, "bin", "activate")):
        return {"ok": False, "reason": f"no venv at {path}"}
    config = ""
    if os.path.isfile(os.path.join(path, "pyvenv.cfg")):
        with open(os.path.join(path, "pyvenv.cfg"), encoding="utf-8", errors="replace") as handle:
            config = handle.read()
    if f"include-system-site-packages = {str(site_packages).lower()}" not in config:
        return {"ok": False, "reason": f"{path}/pyvenv.cfg does not say include-system-site-packages = {str(site_packages).lower()}"}
    installed = installed_distributions(path)
    for line in list(requirements) + (requirements_text or "").splitlines():
        met = requirement_met(line, installed)
        if not met:
            return {"ok": False, "reason": f"requirement {line.strip()!r} " + ("is not met" if met is False else "cannot be judged here")}
    return {"ok": True, "reason": ""}


def directory_state(path: str, mode: int = 0o755) -> dict[str, t.Any]:
    """Whether ``path`` is a directory of that mode."""
    try:
        info = os.stat(path)
    except OSError:
        return {"ok": False, "reason": f"{path} does not exist"}
    ok = os.path.isdir(path) and (info.st_mode & 0o7777) == mode
    return {"ok": ok, "reason": "" if ok else f"{path} is no directory of mode {mode:04o}"}


def file_differs(dest: str, checksum: str | None, mode: str | None) -> bool:
    """Whether ``dest`` must be copied again: missing, another SHA-1 checksum, another octal mode (or unsure)."""
    if not checksum or not os.path.isfile(dest) or (mode is not None and not re.fullmatch(r"0?[0-7]{3,4}", str(mode))):
        return True
    digest = hashlib.sha1()  # nosec - the checksum ansible.builtin.copy compares with
    with open(dest, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != checksum:
        return True
    return mode is not None and (os.stat(dest).st_mode & 0o7777) != int(str(mode), 8)


def boot_unit_state(checksum: str | None, unit_dir: str = SYSTEMD_UNIT_DIR, systemd: str = SYSTEMD_RUNNING,
                    proc_root: str = "/proc") -> dict[str, t.Any]:
    """Whether the boot unit (role ``trainops.pct_launch.boot_recorder``) is installed with the SHA-1 ``checksum`` of the
    collection's file and enabled; where systemd is not the init there is nothing to install (``covered`` false)."""
    if not os.path.isdir(systemd):
        init = (read_small(os.path.join(proc_root, "1", "comm")) or "unknown").strip()
        return {"ok": True, "covered": False, "reason": "", "warning": NOT_COVERED.format(init=init)}
    unit = os.path.join(unit_dir, BOOT_UNIT)
    if file_differs(unit, checksum, "0644"):
        return {"ok": False, "covered": True, "reason": f"the boot unit {unit} is missing or differs"}
    link = os.path.join(unit_dir, BOOT_UNIT_WANTS, BOOT_UNIT)
    if not os.path.islink(link) or os.readlink(link) != unit:
        return {"ok": False, "covered": True, "reason": f"the boot unit {BOOT_UNIT} is not enabled ({link})"}
    return {"ok": True, "covered": True, "reason": ""}


def read_small(path: str) -> str | None:
    """A small file's text, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(4096)
    except OSError:
        return None


def report(params: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What the host lacks for the job of ``params`` (the module's validated options): the module's result."""
    ok = {"ok": True, "reason": ""}
    result: dict[str, t.Any] = {
        "tmux": tmux_state(params["tmux_min_version"]),
        "venv": venv_state(params["venv_path"], params["venv_requirements"], params["venv_requirements_text"],
                           params["venv_site_packages"]) if params["venv_path"] else ok,
        "workdir": directory_state(params["workdir"]) if params["workdir"] else ok,
        "files_to_copy": [str(item.get("dest")) for item in params["files"]
                          if file_differs(str(item.get("dest")), item.get("checksum"), str(item.get("mode") or "0644"))],
    }
    result["boot_unit"] = boot_unit_state(params.get("boot_unit_checksum")) if params.get("boot_unit", True) else ok
    needs = [result[key]["reason"] for key in ("tmux", "venv", "workdir", "boot_unit") if not result[key]["ok"]]
    needs += [f"copy {dest}" for dest in result["files_to_copy"]]
    return dict(changed=False, prepared=not needs, needs=needs, **result)
