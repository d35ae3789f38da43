#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine, as root: install the Python and Debian packages, start
# the SLURM dev cluster (4 cpu nodes + 2 gpu-GRES nodes) on Debian 13's SLURM 24.11 and run every test,
# then start it on Debian 12's 22.05 and run the SLURM-facing core again; stop the cluster.
# Extra arguments go to pytest (e.g. `bash tests/run_all.sh -k local`), except a first
# `--record-durations`: the 24.11 passes then merge their seconds per test file into tests/durations.json,
# which orders the suite (tests/schedule.py).
#
# Why 24.11 gets the whole suite: it is the release users' sites run (23.02 to 25.11 today), and 22.05 the
# oldest we support (Debian 12's own): the core proves the floor, the whole suite what users meet.
set -euo pipefail
cd "$(dirname "$0")/.."
record=()
if [ "${1:-}" = "--record-durations" ]; then record=(--record-durations); shift; fi
# Tests kill ranks on purpose; their core dumps would fill the disk.
ulimit -c 0
# The Python: an active virtual environment as it is; else the project's .venv (the README's first command
# makes it); else python3, unless it is externally managed (PEP 668: Debian's own, which takes no packages),
# which gets that .venv here.
if [ -z "${VIRTUAL_ENV:-}" ]; then
    if [ ! -x .venv/bin/python3 ] && python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
        python3 -m venv --clear .venv 2>/dev/null || {
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
            python3 -m venv --clear .venv; }
    fi
    if [ -x .venv/bin/python3 ]; then
        # shellcheck disable=SC1091
        . .venv/bin/activate
    fi
fi
echo "tests/run_all.sh: Python $(python3 -c 'import sys; print(sys.executable)')"
python3 -m pip install --quiet --disable-pip-version-check torch==2.14.1 torchvision==0.29.1 -e '.[test]'
python3 -m launcher.devcluster install
python3 -m launcher.devcluster install --slurm 24.11
# Submitting over SSH (docs/remote.md): a real sshd on 127.0.0.1 for tests/test_remote.py, rsync, and
# setfacl (the cluster-side test account may need to reach an interpreter under a private home); tmux:
# the real terminal `watch` is followed in (tests/terminal.py).
if ! [ -x /usr/sbin/sshd ] || ! command -v rsync >/dev/null || ! command -v setfacl >/dev/null \
        || ! command -v tmux >/dev/null; then
    # policy-rc.d: the package must not start a system-wide sshd on port 22; the tests run their own.
    [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; own_policy=1; }
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssh-server openssh-client rsync acl tmux
    [ -z "${own_policy:-}" ] || rm -f /usr/sbin/policy-rc.d
fi
trap 'python3 -m launcher.devcluster down' EXIT
took() { echo "tests/run_all.sh: $1 took $(( SECONDS - $2 )) s"; }
# Exit status 5 is "no test selected" (e.g. `-k local` leaves no controller_outage test): not a failure.
passed() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }

# 1. The whole suite, on 24.11.
python3 -m launcher.devcluster up --nodes 4 --slurm 24.11 --cred-expire 10 --clusters 2  # (second: tests/test_clusters.py)
start=$SECONDS
# Two workers, one test file each at a time (--dist loadgroup: tests/schedule.py makes each file a group,
# which keeps its module fixtures and its runs on one worker, and the files that mostly wait on SLURM
# one group, so that one worker's waits are the other's CPU time). DDP_TEST_WORKERS=0 runs serially.
# --no-loadscope-reorder: the groups run in the order tests/schedule.py gives them (tests/durations.json's
# slowest first).
main=0
python3 -m pytest -n "${DDP_TEST_WORKERS:-2}" --dist loadgroup --no-loadscope-reorder \
    -m "not controller_outage and not beside_outage" "${record[@]}" "$@" || main=$?
took "the main pass (SLURM 24.11)" "$start"
# The controller_outage tests stop the shared slurmctld for a minute: after every other SLURM test,
# serially. Beside them, in a pytest of its own (its report printed after theirs), the files that never
# reach SLURM (tests/schedule.py's BESIDE_OUTAGE), so that the minute without a controller is not a
# minute of an idle machine.
start=$SECONDS
beside_log=$(mktemp)
python3 -m pytest -p no:cacheprovider -m beside_outage "${record[@]}" "$@" > "$beside_log" 2>&1 &
beside_pid=$!
outage=0
python3 -m pytest -m controller_outage "${record[@]}" "$@" || outage=$?
beside=0
wait "$beside_pid" || beside=$?
cat "$beside_log"
rm -f "$beside_log"
took "the controller outage and the files beside it" "$start"

# 2. The SLURM-facing core (tests/conftest.py's SLURM_CORE), on 22.05 (never recorded: a part of some files).
start=$SECONDS
python3 -m launcher.devcluster up --nodes 4 --slurm 22.05 --cred-expire 10 --clusters 1
core=0
python3 -m pytest -n "${DDP_TEST_WORKERS:-2}" --dist loadgroup --no-loadscope-reorder -p no:cacheprovider \
    -m "slurm_core and not controller_outage" "$@" || core=$?
took "the SLURM-facing core on SLURM 22.05 (its cluster's start included)" "$start"
passed "$main" || exit "$main"
passed "$outage" || exit "$outage"
passed "$beside" || exit "$beside"
passed "$core" || exit "$core"
