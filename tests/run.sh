#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
#
# The collection's test command (README): runs every test stage in order,
# stops at the first failure, and prints a summary.
#
#   setup        tools/pve_standin/setup.sh: LXC, the Proxmox VE stand-in's pct,
#                container 200 (needs root; safe to run again)
#   unit         pytest tests/unit
#   integration  pytest tests/integration -m integration (real containers)
#   compat       the oldest supported ansible-core (.venv-2.17, made by
#                tools/bootstrap.sh --compat): pytest tests/unit/plugins, ansible-doc
#                of every plugin, and the example launch with status and stop
#                on a container of its own (tests/compat)
#   newest       the same with the newest ansible-core on Python 3.12+
#                (.venv-newest, made by tools/bootstrap.sh --newest)
#   molecule     molecule test of each scenario on each Debian release of
#                MOLECULE_MATRIX (scenario:release ...)
#   lint         tools/lint.sh (ansible-lint, profile production; changelog)
#   sanity       tools/sanity.sh (ansible-test sanity, no ignore files)
#
# Usage: tests/run.sh [options] [stage...]
#   With no stage, all stages run.  `integration`, `compat`, `newest` and `molecule`
#   need the stand-in, so `setup` runs before them unless --no-setup is given.
# Options:
#   -k, --keep-going   run the remaining stages after a failure
#   --no-setup         do not run setup implicitly
#   -h, --help         this text
# Environment:
#   RUN_STAGE_TIMEOUT  seconds one stage may take (default 2700)
#   PYTEST_ADDOPTS     extra pytest options (pytest reads it itself)
#   MOLECULE_MATRIX    molecule runs (default: the tmux scenario on Debian 11,
#                      12 and 13, the venv scenario on Debian 12)
#
# The last line is "total: N passed, N failed, N skipped", counting pytest
# test cases, molecule runs, and setup/lint/sanity as one check each.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# What the tests need on a bare Debian 12 machine: the Debian packages of the
# tests (and of the simulated remote nodes, which tests bring up), through the
# same script every entry point uses, then the development venv. As another
# user than root, only a check (the integration stages need root anyway).
prepare() {
    if [ "$(id -u)" -eq 0 ]; then
        "$root/tools/system-packages.sh" tests nodes || return 1
    else
        "$root/tools/system-packages.sh" --check tests nodes || echo "run.sh: continuing without them" >&2
    fi
    "$root/tools/bootstrap.sh"
}
case " $* " in
    *" -h "* | *" --help "*) ;;
    *) prepare || { echo "run.sh: cannot prepare the machine for the tests (see above)" >&2; exit 1; } ;;
esac
# shellcheck source=tools/env.sh
. "$root/tools/env.sh"
cd "$root" || exit 1

all_stages=(setup unit integration compat newest molecule lint sanity)
stage_timeout="${RUN_STAGE_TIMEOUT:-2700}"
keep_going=0
implicit_setup=1
requested=()

usage() { sed -n '5,37s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

while [ "$#" -gt 0 ]; do
    case "$1" in
        -k | --keep-going) keep_going=1 ;;
        --no-setup) implicit_setup=0 ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
        *)
            case " ${all_stages[*]} " in
                *" $1 "*) requested+=("$1") ;;
                *) echo "run.sh: unknown stage '$1' (stages: ${all_stages[*]})" >&2; exit 2 ;;
            esac
            ;;
    esac
    shift
done

# Stages to run, in the canonical order.
want() {
    local s
    [ "${#requested[@]}" -eq 0 ] && return 0
    for s in "${requested[@]}"; do [ "$s" = "$1" ] && return 0; done
    if [ "$1" = setup ] && [ "$implicit_setup" = 1 ]; then
        for s in "${requested[@]}"; do
            case "$s" in integration | compat | newest | molecule) return 0 ;; esac
        done
    fi
    return 1
}
stages=()
for s in "${all_stages[@]}"; do want "$s" && stages+=("$s"); done

# Logs go to files too: no colour codes unless the console is a terminal.
if [ ! -t 1 ]; then
    export NO_COLOR=1 PY_COLORS=0
fi

logdir="$(mktemp -d "${TMPDIR:-/tmp}/trainops-run.XXXXXX")"
total_passed=0
total_failed=0
total_skipped=0
declare -A stage_status=() stage_detail=() stage_seconds=()

banner() { printf '\n===== %s =====\n' "$*"; }

# Run a command with a time limit, stdin from /dev/null (never a terminal:
# pct exec must not get a tty), output to the console and to a log file.
# Interactively, timeout stays in the terminal's process group so that ^C
# reaches the tests; otherwise (CI) it kills the stage's whole process group.
timeout_opts=(--kill-after=30)
[ -t 0 ] && timeout_opts+=(--foreground)
run_logged() {
    local log="$1"
    shift
    timeout "${timeout_opts[@]}" "$stage_timeout" "$@" </dev/null 2>&1 | tee "$log"
    return "${PIPESTATUS[0]}"
}

# Sum a pytest JUnit XML report: prints "tests failures errors skipped".
junit_counts() {
    python - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("0 0 0 0")
    raise SystemExit(0)
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
totals = [sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")]
print(*totals)
PY
}

# stage_pytest NAME PYTEST-ARGS...: a pytest stage; "no tests collected"
# (exit 5) is a failure, since every stage here is expected to run tests.
stage_pytest() {
    local name="$1"
    shift
    local xml="$logdir/$name.xml" log="$logdir/$name.log" rc tests failures errors skipped line
    run_logged "$log" python -m pytest "$@" --junitxml="$xml" -o junit_family=xunit2
    rc=$?
    read -r tests failures errors skipped < <(junit_counts "$xml")
    line="$(grep -E '^=+ .* in [0-9.]+s.* =+$' "$log" | tail -n 1 | sed -E 's/^=+ //; s/ =+$//')"
    total_passed=$((total_passed + tests - failures - errors - skipped))
    total_failed=$((total_failed + failures + errors))
    total_skipped=$((total_skipped + skipped))
    stage_detail[$name]="${line:-no pytest summary line}"
    case "$rc" in
        0) return 0 ;;
        5)
            stage_detail[$name]="no tests collected (pytest exit 5): tests were expected here"
            total_failed=$((total_failed + 1))
            return 1
            ;;
        124 | 137) stage_detail[$name]="timed out after ${stage_timeout} s; ${stage_detail[$name]}" ;;
    esac
    # pytest failed without any failed test case (usage/internal error, crash)
    [ $((failures + errors)) -eq 0 ] && total_failed=$((total_failed + 1))
    return "$rc"
}

# A stage that is one check (setup, lint, sanity).
stage_single() {
    local name="$1"
    shift
    local rc
    run_logged "$logdir/$name.log" "$@"
    rc=$?
    case "$rc" in
        0) total_passed=$((total_passed + 1)); stage_detail[$name]="ok" ;;
        124 | 137) total_failed=$((total_failed + 1)); stage_detail[$name]="timed out after ${stage_timeout} s" ;;
        *) total_failed=$((total_failed + 1)); stage_detail[$name]="exit status $rc" ;;
    esac
    return "$rc"
}

stage_setup() {
    local script="$root/tools/pve_standin/setup.sh"
    if [ ! -f "$script" ]; then
        stage_detail[setup]="skipped: $script does not exist"
        total_skipped=$((total_skipped + 1))
        return 0
    fi
    stage_single setup bash "$script"
}

# Debian releases: 11 bullseye, 12 bookworm, 13 trixie.  The tmux role takes
# about 1 min per release, the venv role about 2 min (apt, then pip).
molecule_matrix="${MOLECULE_MATRIX:-tmux:bullseye tmux:bookworm tmux:trixie venv:bookworm}"

stage_molecule() {
    local runs=() run name release rc=0 ok=0 bad=0 failed_names=() t0 timings=()
    read -r -a runs <<<"$molecule_matrix"
    if [ "${#runs[@]}" -eq 0 ]; then
        stage_detail[molecule]="MOLECULE_MATRIX is empty: molecule runs were expected"
        total_failed=$((total_failed + 1))
        return 1
    fi
    for run in "${runs[@]}"; do
        name="${run%%:*}"
        release="${run#*:}"
        [ "$release" = "$run" ] && release=bookworm
        if [ ! -f "$root/molecule/$name/molecule.yml" ]; then
            stage_detail[molecule]="no scenario molecule/$name (MOLECULE_MATRIX entry $run)"
            total_failed=$((total_failed + 1))
            return 1
        fi
    done
    export MOLECULE_GLOB="molecule/*/molecule.yml"
    for run in "${runs[@]}"; do
        name="${run%%:*}"
        release="${run#*:}"
        [ "$release" = "$run" ] && release=bookworm
        banner "molecule scenario $name on Debian $release"
        t0=$SECONDS
        # Molecule's default working directory is keyed by the checkout's
        # base name only (~/.cache/molecule or ~/.ansible/tmp/molecule.<hash
        # of "main">.<scenario>): give each run its own.
        if MOLECULE_PCT_RELEASE="$release" MOLECULE_EPHEMERAL_DIRECTORY="$logdir/molecule/$name-$release" \
            run_logged "$logdir/molecule-$name-$release.log" molecule test --scenario-name "$name"; then
            ok=$((ok + 1))
        else
            rc=$?
            bad=$((bad + 1))
            failed_names+=("$name:$release")
        fi
        timings+=("$name:$release $((SECONDS - t0))s")
        [ "$bad" -gt 0 ] && [ "$keep_going" = 0 ] && break
    done
    total_passed=$((total_passed + ok))
    total_failed=$((total_failed + bad))
    stage_detail[molecule]="$ok of ${#runs[@]} runs passed (${timings[*]})"
    [ "$bad" -gt 0 ] && stage_detail[molecule]+="; failed: ${failed_names[*]}"
    return "$rc"
}

# stage_venv NAME BOOTSTRAP-OPTION VENV REQUIREMENTS: the plugins' unit tests,
# ansible-doc of every plugin and the example launch (tests/compat) with the
# ansible-core of another venv (cached like .venv: its stamp holds the hash of
# the requirements file and of the interpreter), first on PATH.
stage_venv() {
    local name="$1" option="$2" venv="$3" requirements="$4" version rc
    run_logged "$logdir/$name-bootstrap.log" bash "$root/tools/bootstrap.sh" "$option"
    rc=$?
    if [ "$rc" -eq 3 ] && [ -z "${CI:-}" ]; then
        # No Python for that ansible-core here (Debian 12 ships 3.11): said, counted, not hidden.
        stage_detail[$name]="skipped: no Python 3.12 or newer on this machine for ansible-core's newest (install one, e.g. with pyenv, or set PYTHON)"
        total_skipped=$((total_skipped + 1))
        return 0
    fi
    if [ "$rc" -ne 0 ]; then
        stage_detail[$name]="tools/bootstrap.sh $option failed (exit status $rc)"
        total_failed=$((total_failed + 1))
        return 1
    fi
    version="$(sed -n 's/^ansible-core==\([0-9.]*\).*/\1/p' "$requirements")"
    # -p tests.compat.ansible_polyfill: what the unit tests use from newer ansible-core
    PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" TRAINOPS_EXPECT_ANSIBLE_CORE="$version" \
        stage_pytest "$name" -p tests.compat.ansible_polyfill -m "not molecule" \
        tests/unit/plugins tests/integration/test_plugin_docs.py tests/compat
    rc=$?
    stage_detail[$name]="ansible-core $version ($("$venv/bin/python" -V 2>&1)): ${stage_detail[$name]}"
    return "$rc"
}

run_stage() {
    case "$1" in
        setup) stage_setup ;;
        unit) stage_pytest unit tests/unit -m "not integration and not molecule" ;;
        integration) stage_pytest integration tests/integration -m integration ;;
        compat) stage_venv compat --compat "$root/.venv-2.17" "$root/requirements-compat-2.17.txt" ;;
        newest) stage_venv newest --newest "$root/.venv-newest" "$root/requirements-newest.txt" ;;
        molecule) stage_molecule ;;
        lint) stage_single lint bash "$root/tools/lint.sh" ;;
        sanity) stage_single sanity bash "$root/tools/sanity.sh" ;;
    esac
}

banner "trainops.pct_launch tests: ${stages[*]}"
echo "checkout: $root"
echo "python: $(python --version 2>&1) ($(command -v python))"
echo "ansible: $(ansible --version 2>/dev/null | head -n 1)"
echo "logs: $logdir"

started=$SECONDS
overall=0
for s in "${stages[@]}"; do
    if [ "$overall" -ne 0 ] && [ "$keep_going" = 0 ]; then
        stage_status[$s]="not run"
        continue
    fi
    banner "stage $s"
    t0=$SECONDS
    if run_stage "$s"; then
        stage_status[$s]="passed"
    else
        stage_status[$s]="FAILED"
        overall=1
    fi
    stage_seconds[$s]=$((SECONDS - t0))
done

banner "summary ($((SECONDS - started)) s)"
for s in "${stages[@]}"; do
    printf '%-12s %-8s %6s  %s\n' "$s" "${stage_status[$s]}" \
        "${stage_seconds[$s]:+${stage_seconds[$s]} s}" "${stage_detail[$s]:-}"
done
echo "logs: $logdir"
printf 'total: %d passed, %d failed, %d skipped\n' "$total_passed" "$total_failed" "$total_skipped"
exit "$overall"
