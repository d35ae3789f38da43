#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine, as root: install the Python and Debian packages,
# start the SLURM dev cluster (4 cpu nodes + 2 gpu-GRES nodes), run every test, stop the cluster.
# Extra arguments go to pytest (e.g. `bash tests/run_all.sh -k local`).
set -euo pipefail
cd "$(dirname "$0")/.."
# Tests kill ranks on purpose; their core dumps would fill the disk.
ulimit -c 0
python3 -m pip install --quiet --disable-pip-version-check torch==2.14.1 torchvision==0.29.1 -e '.[test]'
python3 -m launcher.devcluster install
python3 -m launcher.devcluster up --nodes 4
trap 'python3 -m launcher.devcluster down' EXIT
python3 -m pytest "$@"
