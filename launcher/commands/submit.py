"""`submit.py [--profile P] [--job J] [--dry-run] [--wait] [--rerun]`: a new run, planned and checked here, then
shown (`--dry-run`, `--when`), sent on the one path of every submission (launcher.commands.sending), or answered
with the identical run the runs folder already has (launcher.commands.reuse). A profile with `login:` is planned
here as the cluster side will queue it (launcher.request.over_ssh): that is the one place a submission goes there
instead of here, and the cluster side looks for an identical run where the runs live.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from launcher.commands.sending import NewRun, execute
from launcher.request.plan import Plan, new_run

if TYPE_CHECKING:
    from launcher.request.over_ssh import SshPlan


def submit_new_run(args: argparse.Namespace, argv: list[str]) -> int:
    """A new run (and its `--dry-run`): planned and checked here, then sent from here or over SSH."""
    checked = new_run(args)
    plan: Plan | SshPlan
    if checked.profile.login:  # (the SSH modules are loaded only for such a profile)
        from launcher.request.over_ssh import SshPlan

        plan = SshPlan(checked, argv, say=lambda line: print(line, flush=True))
    else:
        plan = NewRun(checked.submission(), checked.source, argv)
        plan.verbose = args.verbose
    if args.when:
        from launcher.commands.when import estimate  # (SLURM's estimates: only when asked)

        return estimate(plan, args.json)
    if args.dry_run or checked.profile.login or plan.sub.executor == "debug":  # (debug: a new run, where pdb stops)
        return execute(plan, args.dry_run, args.json)
    from launcher.commands.reuse import send_once  # (it queues, or answers with what exists)

    assert isinstance(plan, NewRun)
    return send_once(plan, args, argv)  # (over SSH the cluster side does the same: launcher.commands.receive)
