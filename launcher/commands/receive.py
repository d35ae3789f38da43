"""`receive SUBMISSION.json`: the cluster side of a submission over SSH (docs/remote.md), started
there by the laptop (launcher.remote.transport: `PYTHONPATH=REMOTE_DIR/code/<hash> python3 -c ...`,
the submission on standard input kept as REMOTE_DIR/submissions/<run>.json). Not a command for users.

The laptop planned the submission once, with this side's folders (launcher.request.over_ssh); this
side reads that object back (launcher.request.wire: every field checked again as it enters), checks
what only it can see (its data folder, the entrypoint's import from the synced project, the trackers'
libraries, the runs folder, and the live cluster's limits: the plan's SLURM preflight), and sends
exactly that object on the one path of every submission (launcher.commands.submit.execute), in the
synced copy of the directory it was submitted from. Its last line is the JSON the laptop reads.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from launcher.commands.console import ArgumentParser
from launcher.commands.submit import NewRun, execute
from launcher.config import checks
from launcher.request import wire
from trainer.config.schema import ConfigError


def receive_parser() -> ArgumentParser:
    p = ArgumentParser(prog="submit.py receive", description=__doc__.split("\n\n")[0])
    p.add_argument("submission", metavar="SUBMISSION.json", help="a submission as the laptop sent it")
    return p


def receive(args: argparse.Namespace) -> int:
    path = Path(args.submission)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the submission ({err})") from None
    sub, laptop_argv, source = wire.loads(text, str(path.resolve()))
    os.chdir(sub.submit_dir)  # where the ranks start: the checks import and read from there too
    checks.check_writable_folder(sub.run_dir.parent, "profile.runs_dir", "the run folder")
    for task in sub.tasks:
        checks.check_where_it_runs(sub.profile, task.job, source, f"{path} (task {task.task})")
    return execute(NewRun(sub, source, laptop_argv), dry=False, as_json=True)
