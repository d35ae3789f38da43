"""The command line: ``python -m launcher.devcluster install|up|status|down|env``."""

from __future__ import annotations

import argparse
import sys

from launcher.devcluster.commands import down, install, print_env, status, up
from launcher.devcluster.paths import COMMAND, CRED_EXPIRE_S, DEFAULT_MAX_ARRAY_SIZE, MAX_NODES, ClusterError
from launcher.devcluster.releases import DEFAULT_RELEASE, RELEASES

DESCRIPTION = (
    "A real multi-node SLURM cluster on this machine (munged, slurmdbd on MariaDB, slurmctld, one slurmd "
    "per node): Debian 12's SLURM 22.05 by default, or Debian 13's 24.11 (--slurm 24.11), for trying "
    "profiles and for the tests. Run as root."
)


def _print_error(err: ClusterError) -> None:
    print(f"error: {err}", file=sys.stderr)
    for log in err.logs:
        if log.exists() and log.stat().st_size:
            tail = log.read_text(errors="replace").splitlines()[-30:]
            print(f"--- last lines of {log}:", *tail, sep="\n", file=sys.stderr)


def _seconds(text: str) -> int:
    """--cred-expire: whole seconds, at least 5 (SLURM 22.05 replaces a smaller value by 120, silently)."""
    if not text.isdigit() or int(text) < 5:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds >= 5")
    return int(text)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=COMMAND, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    install_p = sub.add_parser("install", help="apt-get install slurm/munge/mariadb if missing; "
                               "--slurm 24.11: unpack Debian 13's SLURM beside this machine's")
    up_p = sub.add_parser("up", help="start the cluster (idempotent) and wait for its nodes")
    for p in (install_p, up_p):
        p.add_argument("--slurm", choices=sorted(RELEASES),
                       help=f"the SLURM release (default: as last time, else {DEFAULT_RELEASE})"
                       if p is up_p else f"the SLURM release to install (default {DEFAULT_RELEASE})")
    up_p.add_argument("--nodes", type=int, choices=range(1, MAX_NODES + 1),
                      help="cpu nodes (default: as last time, else 2)")
    up_p.add_argument("--max-array-size", type=int,
                      help=f"MaxArraySize (default: as last time, else {DEFAULT_MAX_ARRAY_SIZE})")
    up_p.add_argument("--cred-expire", type=_seconds, metavar="SECONDS",
                      help=f"AuthInfo cred_expire, how long a requeued job waits before it may start again "
                           f"(default: as last time, else {CRED_EXPIRE_S}; SLURM's own default: 120)")
    up_p.add_argument("--clusters", type=int, choices=(1, 2),
                      help="2: also cluster 'second' (nodes sec1, sec2) in the same slurmdbd, for -M "
                           "(default: as last time, else 1)")
    sub.add_parser("status", help="show daemons and sinfo; exit 0 if up")
    sub.add_parser("down", help="cancel jobs and stop every daemon started by up")
    sub.add_parser("env", help="print export lines for the SLURM client commands")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "install":
            install(args.slurm)
        elif args.command == "up":
            up(args.nodes, args.max_array_size, args.slurm, args.cred_expire, args.clusters)
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
