"""`submit.py [--profile P] [--job J]`: the second half of the one path every submission takes (a
new run, or `--resume`): plan -> check -> dry-run or send -> report.

`execute` runs the same check (launcher.request.plan: local, then the live SLURM preflight, which
`--dry-run` may skip where the cluster cannot be asked) and the same sending for both kinds, so they
cannot drift apart. A new run's `--dry-run` does not come here (plan.preview), so it never loads the
sending and waiting code.
"""

from __future__ import annotations

import argparse
from typing import Any

from launcher.cluster import jobids
from launcher.commands.console import EXIT_OK, emit, relative
from launcher.request.plan import Plan, array_chunk, dry_run, new_run
from launcher.rundir import layout


class NewRun(Plan):
    """A new run's plan: after sending, wait for it (a waiting profile) or say where it went."""

    def report(self, jobs: list[Any], as_json: bool) -> int:
        from launcher.request import waiting

        sub = self.sub
        if sub.profile.waits:
            if sub.is_array:
                return waiting.wait_for_sweep(sub.run_dir, jobs, as_json)
            return waiting.wait_for_run(sub, jobs[0], as_json)
        job_ids = [str(j.job_id) for j in jobs]
        where = relative(sub.run_dir)
        logs = [relative(layout.job_log_dir(sub.run_dir, b)) for b in jobids.distinct_bases(job_ids)]
        human = (f"submitted job {jobids.summary(job_ids)} ({len(sub.tasks)} task(s), {sub.profile.world_size} "
                 f"rank(s) each)\nrun folder: {where}\nlogs: {', '.join(logs)}\n"
                 f"follow with: python submit.py status {where}")
        emit(human, {"job_id": jobids.base_id(job_ids[0]), "job_ids": job_ids, "run_dir": str(sub.run_dir),
                     "log_dir": str(sub.log_dir), "tasks": len(sub.tasks)}, as_json)
        return EXIT_OK


def execute(plan: Plan, args: argparse.Namespace) -> int:
    # Here, not at the top: a submission over SSH (remote.submit) sends and waits on the cluster
    # side, and these imports (submitit among them) cost it 0.2 s on the laptop.
    from launcher.request import send

    chunk = array_chunk(plan, args.dry_run)
    if args.dry_run:
        return dry_run(plan, args.json, chunk)
    plan.prepare()
    sub = plan.sub  # (prepare may have moved it to a free run folder name)
    jobs = send.send(sub, chunk, on_queued=plan.record)
    try:
        return plan.report(jobs, args.json)
    finally:
        if sub.executor != "slurm":
            layout.drop_log_template(sub.run_dir)


def submit(args: argparse.Namespace, argv: list[str]) -> int:
    sub, source = new_run(args)
    if sub.profile.login:  # over SSH: the cluster side queues it (launcher.remote.transport)
        from launcher.remote import transport as remote
        from launcher.config.resolve import job_data

        return remote.submit(sub, args, job_data(args.job, args.sets), source)
    return execute(NewRun(sub, source, argv), args)
