"""The command line: ``python -m launcher.devcluster install|up|status|down|env``."""

from __future__ import annotations

import argparse
import sys

from launcher.devcluster.commands import down, install, print_env, status, up
from launcher.devcluster.paths import COMMAND, DEFAULT_MAX_ARRAY_SIZE, MAX_NODES, ClusterError

DESCRIPTION = (
    "A real multi-node SLURM 22.05 cluster on this machine (munged, slurmdbd on MariaDB, "
    "slurmctld, one slurmd per node), for trying profiles and for the tests. Run as root."
)


def _print_error(err: ClusterError) -> None:
    print(f"error: {err}", file=sys.stderr)
    for log in err.logs:
        if log.exists() and log.stat().st_size:
            tail = log.read_text(errors="replace").splitlines()[-30:]
            print(f"--- last lines of {log}:", *tail, sep="\n", file=sys.stderr)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=COMMAND, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="apt-get install slurm/munge/mariadb if missing")
    up_p = sub.add_parser("up", help="start the cluster (idempotent) and wait for its nodes")
    up_p.add_argument("--nodes", type=int, choices=range(1, MAX_NODES + 1),
                      help="cpu nodes (default: as last time, else 2)")
    up_p.add_argument("--max-array-size", type=int,
                      help=f"MaxArraySize (default: as last time, else {DEFAULT_MAX_ARRAY_SIZE})")
    sub.add_parser("status", help="show daemons and sinfo; exit 0 if up")
    sub.add_parser("down", help="cancel jobs and stop every daemon started by up")
    sub.add_parser("env", help="print export lines for the SLURM client commands")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "install":
            install()
        elif args.command == "up":
            up(args.nodes, args.max_array_size)
        elif args.command == "status":
            return 0 if status() else 1
        elif args.command == "down":
            down()
        elif args.command == "env":
            print_env()
    except ClusterError as err:
        _print_error(err)
        return 1
    return 0
