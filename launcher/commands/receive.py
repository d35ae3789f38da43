"""`receive SUBMISSION.json`: the cluster side of a submission over SSH (docs/remote.md), started
there by the laptop (launcher.remote.transport: `PYTHONPATH=REMOTE_DIR/code/<hash> python3 -c ...`,
the submission on standard input kept as REMOTE_DIR/submissions/<run>.json). Not a command for users.

The laptop planned the submission once, with this side's folders (launcher.request.over_ssh); this
side reads that object back (launcher.request.wire: every field checked again as it enters), checks
what only it can see (its data folder, the entrypoint's import from the synced project, the trackers'
libraries, the runs folder, a function handed over from Python by value, carried inside the object:
launcher.config.by_value, and the live cluster's limits: the plan's SLURM preflight), and sends exactly
that object on the one path of every submission (launcher.commands.sending.execute), in the synced copy
of the directory it was submitted from; the run folder it makes holds that function (0600), as a local
submission's does. Its last line is the JSON the laptop reads: the result, or what was refused
(`{"refused": {"error": ..., "details": ...}}`; the error line goes to standard error as everywhere).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from launcher.commands.console import ArgumentParser
from launcher.commands.reuse import send_once
from launcher.commands.sending import NewRun
from launcher.config import checks
from launcher.request import wire
from trainer.config.schema import ConfigError


def receive_parser() -> ArgumentParser:
    p = ArgumentParser(prog="submit.py receive", description=__doc__.split("\n\n")[0])
    p.add_argument("submission", metavar="SUBMISSION.json", help="a submission as the laptop sent it")
    return p


def receive(args: argparse.Namespace) -> int:
    try:
        return received(Path(args.submission))
    except ConfigError as err:  # as data for the laptop (launcher.request.over_ssh); main prints the error line
        said = {"error": str(err), "details": str(getattr(err, "details", "") or "")}
        print(json.dumps({"refused": said}), flush=True)
        raise


def received(path: Path) -> int:
    """The submission at `path` checked here, then sent."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the submission ({err})") from None
    sub, laptop_argv, source = wire.loads(text, str(path.resolve()))
    os.chdir(sub.submit_dir)  # where the ranks start: the checks import and read from there too
    checks.check_writable_folder(sub.run_dir.parent, "profile.runs_dir", "the run folder")
    jobs = [(task.job, f"{path} (task {task.task})") for task in sub.tasks]
    for job, where in jobs:
        checks.check_where_it_runs(sub.profile, job, source, where)
    if sub.function is not None or any(job.function for job, _ in jobs):
        from launcher.config import by_value  # a function handed over from Python by value: only then

        by_value.planned(sub.profile, source, jobs, sub.run_dir, sub.function)
    from launcher.commands.main import submit_parser

    args = submit_parser().parse_args(laptop_argv)  # (the laptop's words: --rerun, --wait)
    # As data for the laptop; `--after` named the laptop's records, which the submission already holds as job ids.
    args.json, args.after = True, None
    return send_once(NewRun(sub, source, laptop_argv), args, laptop_argv)
