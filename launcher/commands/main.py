"""Command line: parse, build, run, clean up. The work itself lives in the other modules."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainer.schema import ConfigError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class ArgumentParser(argparse.ArgumentParser):
    """argparse exits with 2 on bad arguments already; keep its message to one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see {self.prog} --help)\n")


def submit_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="submit.py",
        description="Run a training job on a cluster profile: locally with N processes, in-process for "
                    "debugging, or on SLURM (single runs and job-array sweeps).",
        epilog="Other commands: submit.py status [RUN] | logs RUN | cancel RUN | list  (each has --help).",
    )
    parser.add_argument("--profile", default="local", help="cluster profile: NAME in cluster_profiles/ or a path "
                        "(default: local)")
    parser.add_argument("--job", default="digits", help="job or sweep: NAME in jobs/ or a path (default: digits)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field, e.g. job.epochs=3 or profile.tasks_per_node=4 (YAML scalar)")
    parser.add_argument("--dry-run", action="store_true", help="show what would be submitted; submit nothing")
    parser.add_argument("--json", action="store_true", help="end standard output with one JSON object")
    parser.add_argument("--wait", action="store_true", help="wait for a SLURM run to finish and print its result")
    parser.add_argument("--after", metavar="RUN", help="start only after RUN finished successfully (SLURM)")
    parser.add_argument("--resume", metavar="RUN", help="resubmit the tasks of RUN that did not complete")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in OPERATIONS:
            return OPERATIONS[argv[0]](argv[1:])
        return submit_command(argv)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def submit_command(argv: list[str]) -> int:
    args = submit_parser().parse_args(argv)
    from launcher import submitting

    return submitting.submit(args, argv)


def _operation(name: str):  # noqa: ANN202 - a lazily imported command
    def call(argv: list[str]) -> int:
        from launcher import operations

        return getattr(operations, name)(argv)

    return call


OPERATIONS = {name: _operation(name) for name in ("status", "logs", "cancel", "list")}


def emit(human: str, payload: dict[str, Any], as_json: bool) -> None:
    """Print the human summary; with --json the last line is the JSON object."""
    if human:
        print(human, flush=True)
    if as_json:
        print(json.dumps(payload, default=str), flush=True)


def relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
