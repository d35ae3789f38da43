"""`python submit.py cancel RUN`: cancel a run's tasks that are still pending or running (scancel on SLURM,
the local processes otherwise; a pool's workers, each of which gives back the point it holds,
checkpointed). `cancel RUN/task-NNNN`: that sweep task alone (a pool's point: its claim, and its worker
stops it at its next step boundary and goes on with the next; an array task: its job). Nothing here
imports torch.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from launcher.cluster import local
from launcher.cluster.slurm import allocation
from launcher.cluster.slurm.accounting import scancel, scancel_ids
from launcher.cluster.slurm.env import slurm_env
from launcher.commands.console import EXIT_FAILED, EXIT_OK, ArgumentParser, relative
from launcher.commands.operate import add_run_arguments, find
from launcher.rundir import record
from launcher.rundir.record import RecordedRun, load_run
from launcher.rundir.states import ACTIVE, TaskState, task_states
from trainer.config.schema import ConfigError


def cancel_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="submit.py cancel", description="Cancel a run's tasks that are still pending "
                            "or running (scancel on SLURM; the local processes otherwise); RUN/task-NNNN cancels "
                            "that sweep task alone (a pool's worker stops it at its next step boundary and goes on).")
    add_run_arguments(parser, required=True)
    return parser


def cancel(args: argparse.Namespace) -> int:
    task = _task_of(args.run)
    if task is not None:
        args.run = str(Path(args.run).parent)
    run_dir = find(args)
    info = load_run(run_dir)
    states = task_states(info)
    if task is not None:
        return _cancel_task(info, states, task)
    active = [ts for ts in states if ts.state in ACTIVE]
    if not active:
        print(f"nothing to cancel: no task of {relative(run_dir)} is pending or running", flush=True)
        return EXIT_OK
    if info.is_pool:  # the pool's workers: each gives back the point it holds, checkpointed
        from launcher.rundir.pool_states import active_workers

        ids = active_workers(info)
    else:
        ids = [ts.job_id for ts in active]
    if info.step:  # a job step of an allocation: that step, never the allocation (the user's own)
        ids = allocation.steps_named(str(info.step["job_id"]), allocation.step_name(run_dir.name),
                                     slurm_env(info.slurm_conf, cluster=info.cluster))
    elif info.executor == "slurm":
        ids = scancel_ids(ids, ids if info.is_pool else [ts.job_id for ts in states])
    if not ids:
        print(f"nothing to cancel: the job step of {relative(run_dir)} has ended", flush=True)
        return EXIT_OK
    if info.executor == "slurm":
        failed = scancel(ids, slurm_env(info.slurm_conf, cluster=info.cluster))
        if failed:
            print(f"error: scancel failed: {failed}", file=sys.stderr)
            return EXIT_FAILED
        what = f"scancel {' '.join(ids)}"
    else:
        for job_id in ids:
            local.stop(int(job_id))
        what = "stopped local process(es) " + ", ".join(ids)
    record.update_record(run_dir, cancelled_at=time.time())
    print(f"cancelled {len(active)} task(s) of {relative(run_dir)}: {what}", flush=True)
    return EXIT_OK


def _task_of(run: str) -> int | None:
    """The sweep task a RUN/task-NNNN argument names (None: RUN names a run). RUN is a folder or a run's
    name under the runs folder, as for a whole run (find() resolves it): run folders are never named task-N."""
    path = Path(run)
    if path.name.startswith("task-") and path.name[5:].isdigit() and path.parent != Path("."):
        return int(path.name[5:])
    return None


def _cancel_task(info: RecordedRun, states: list[TaskState], task: int) -> int:
    """`cancel RUN/task-NNNN`: that task alone (a pool's point: its claim; an array task: its job)."""
    if not 0 <= task < len(states):
        raise ConfigError(f"task-{task:04d}: this run has tasks 0..{len(states) - 1}")
    where = relative(info.task_dir(task))
    ts = states[task]
    if ts.reused:  # (another run computed it: nothing of this run runs it, and its pool must not be told otherwise)
        print(f"nothing to cancel: {where} is {ts.state}, reused from {ts.reused}", flush=True)
        return EXIT_OK
    if info.is_pool:
        from launcher.reports import pool_claims

        if pool_claims.cancel(info.run_dir, task) is None:
            print(f"nothing to cancel: {where} has ended ({ts.state})", flush=True)
            return EXIT_OK
        print(f"cancelled {where}" + (f": its worker {ts.job_id} stops it at its next step boundary"
                                      if ts.state == "running" else ": no worker will take it"), flush=True)
        return EXIT_OK
    if ts.state not in ACTIVE:
        print(f"nothing to cancel: {where} is {ts.state}", flush=True)
        return EXIT_OK
    if info.executor == "slurm":
        failed = scancel([ts.job_id], slurm_env(info.slurm_conf, cluster=info.cluster))
        if failed:
            print(f"error: scancel failed: {failed}", file=sys.stderr)
            return EXIT_FAILED
    else:
        local.stop(int(ts.job_id))
    print(f"cancelled {where}: job {ts.job_id}", flush=True)
    return EXIT_OK
