"""Waiting for submitted jobs, turning what the ranks returned into one result (or a failure), and
reporting it: a single run (`wait_for_run`) or a sweep's tasks as they end (`wait_for_sweep`).

The failure shown first is the root cause (see launcher.rundir.outcomes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.cluster.local import LocalFailFast
from launcher.cluster.slurm import accounting, srun
from launcher.commands import relay as relay_settings
from launcher.commands.console import EXIT_FAILED, EXIT_OK, emit, overrides_text, relative
from launcher.commands.relay import for_local_run as relay_logs
from launcher.request.submission import Submission
from launcher.rundir import failures, layout, plots, record, restarts, results, retries
from launcher.rundir.outcomes import RANK_NODES, Failure, error_text, failed_rank, root_cause_first
from launcher.rundir.states import ACTIVE, task_states
from trainer.runners.envelope import PLACE_KEYS


@dataclass
class Outcome:
    """How a waited-for run ended: its result, or the ranks that failed."""

    result: dict[str, Any] | None
    # (rank, short error, traceback text) for every rank that failed, the root cause first.
    failures: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and self.result is not None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _missing_result(rank: int, task: Any, state: str, reported: dict[int, str]) -> Failure:
    """The failure of a rank that left no result: srun's line for it, and the end of its log."""
    short = reported.get(rank) or f"rank {rank} ended without a result (job state {state})"
    tail = "\n".join(_read(Path(task.paths.stderr)).rstrip().splitlines()[-25:])
    text = (f"rank {rank} ended without a result (job state {state}); "
            f"{reported.get(rank, 'no srun report')}\n--- end of {task.paths.stderr} ---\n{tail}")
    return rank, short, text


def _is_local(job: Any) -> bool:
    from submitit.local.local import LocalJob  # submitit only once a job is being waited for

    return isinstance(job, LocalJob) and str(job.job_id).isdigit()


def _is_scheduled(job: Any) -> bool:
    """SLURM and local jobs run elsewhere and leave result files; debug jobs run when asked."""
    from submitit.local.debug import DebugJob  # submitit only once a job is being waited for

    return not isinstance(job, DebugJob)


def _ended(job: Any, force: bool) -> str:
    """The job's final state once it has ended ("" while it runs, is pending or requeued)."""
    from submitit.local.local import LocalJob  # submitit only once a job is being waited for

    if isinstance(job, LocalJob):
        return "FINISHED" if job.done() else ""  # the controller has exited (all its tasks have)
    if not force or not job.watcher.is_done(job.job_id, mode="force"):
        return ""
    state = str(job.watcher.get_state(job.job_id, mode="cache"))
    if state in accounting.REQUEUED_AFTER:  # that life ended, but SLURM requeues the job (ours are --requeue)
        now = accounting.controller_state(str(job.job_id), dict(os.environ))
        return "" if accounting.STATES.get(now) in ACTIVE else (now or state)
    return state


def backoff(first: float, most: float) -> Iterator[float]:
    """Poll delays: quick at first, so that a short run is reported moments after its last result file
    appears, not up to a whole `most` later (a 1 s poll cost every short local run 0.5 s on average),
    then growing by half each time up to `most`."""
    delay = first
    while True:
        yield delay
        delay = min(most, delay * 1.5)


def _settled(tasks: list[Any], retries: bool) -> bool:
    """Every rank left a result file and, where a failed attempt may come back by itself (`retries`:
    launcher.heal requeues it), none is an error: the scheduler says when those are the end."""
    if not all(Path(t.paths.result_pickle).exists() for t in tasks):
        return False
    return not retries or all(failures.succeeded(Path(t.paths.result_pickle)) for t in tasks)


def wait(job: Any, poll_s: float = 1.0, force_every_s: float = 5.0, grace_s: float = 3.0,
         retries: bool = False) -> Outcome:
    """Wait for every task of a submitit job; rank 0's result, with all ranks' node names.

    Ends as soon as every rank left a result file (`retries`: a successful one), or the scheduler says
    the job ended (asked every `force_every_s`, not on submitit's backoff of up to 10 minutes); ranks with
    no result then get `grace_s` for their file to appear before they are reported from srun's lines and
    their log.
    """
    num_tasks = getattr(job, "num_tasks", 1)
    tasks = [job] if num_tasks <= 1 else [job.task(k) for k in range(num_tasks)]
    state = ""
    failfast = LocalFailFast(job, tasks) if _is_local(job) else None
    if _is_scheduled(job):
        last_force = 0.0
        delays = backoff(0.05, poll_s)
        while not _settled(tasks, retries):
            if failfast is not None:
                failfast.check()
            now = time.time()
            force = now - last_force >= force_every_s
            last_force = now if force else last_force
            state = _ended(job, force)
            if state:
                deadline = time.time() + grace_s  # results written just before the end may lag on NFS
                while time.time() < deadline and not all(Path(t.paths.result_pickle).exists() for t in tasks):
                    time.sleep(0.5)
                break
            time.sleep(next(delays))
    returned: list[dict[str, Any]] = []
    failures: list[Failure] = []
    srun_lines = srun.task_failures(_read(Path(tasks[0].paths.stderr))) if _is_scheduled(job) else []
    reported = {rank: line for rank, line in reversed(srun_lines)}  # the first report of each rank wins
    for rank, task in enumerate(tasks):
        if _is_scheduled(job) and not Path(task.paths.result_pickle).exists():
            failures.append(_missing_result(rank, task, state or "unknown", reported))
            continue
        try:
            returned.append(task.result())
        except Exception as err:  # noqa: BLE001 - any task failure is reported, not raised
            failures.append((failed_rank(rank, str(err)), *error_text(str(err), type(err).__name__)))
    if failures:
        first_dead = srun_lines[0][0] if srun_lines else (failfast.failed if failfast else None)
        return Outcome(None, root_cause_first(failures, first_dead))
    # torchrun shape: each node task returns one result for all its ranks, with their nodes.
    per_rank = [r.pop(RANK_NODES, None) if isinstance(r, dict) else None for r in returned]
    result = dict(returned[0])
    if all(isinstance(p, dict) for p in per_rank):
        places = {int(rank): node for p in per_rank for rank, node in p.items()}
        result["nodes"] = [places[rank] for rank in sorted(places)]
    else:
        result["nodes"] = [r.get("node", "") for r in returned]
    return Outcome(result)


# Not metrics: where and how each rank ran (trainer.runners.envelope) and how the run went, shown by
# --json only.
NOT_METRICS = (*PLACE_KEYS, "job_id", "state", "nodes", "restarts", "restart_causes", "time")


def metrics_line(result: dict[str, Any]) -> str:
    """The final metrics in one line: the built-in recipe's fixed set, or what a user's function
    logged last and returned."""
    if all(k in result for k in ("test_accuracy", "test_loss", "epochs", "images_per_second")):
        return (f"test_accuracy {result['test_accuracy']:.4f}  test_loss {result['test_loss']:.4f}  "
                f"epochs {result['epochs']}  world_size {result['world_size']}  "
                f"images/s {result['images_per_second']:.0f}")
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()
                     if k not in NOT_METRICS and isinstance(v, (int, float, str)) and not isinstance(v, bool))


def wait_for_run(sub: Submission, job: Any, as_json: bool) -> int:
    """Wait for a single run, write its result (or failure) into the run folder, and report it."""
    if not relay_settings.VERBOSE:  # submitit's INFO lines (the debug executor runs the job in this process)
        logging.getLogger("submitit").setLevel(logging.WARNING)
    print(f"running {sub.tasks[0].job.name} on {sub.executor} ({sub.profile.world_size} rank(s)), "
          f"run folder {relative(sub.run_dir)}", flush=True)
    relay = relay_logs(job) if sub.executor == "local" else None
    with relay or contextlib.nullcontext():
        done = wait(job, retries=sub.profile.failures_allowed > 0)
    counted = restarts.read(sub.run_dir)
    job_id = str(job.job_id)
    if not done.ok:
        rank, short, text = done.failures[0]
        print(f"error: the run failed on rank {rank}: {short}", file=sys.stderr)
        print(text, file=sys.stderr)
        for line in retries.last_words(sub.run_dir):  # where the failure came from; retried or why not
            print(line, file=sys.stderr)
        record.update_record(sub.run_dir, state="FAILED", failed_rank=rank, error=short)
        emit("", {"run_dir": str(sub.run_dir), "job_id": job_id, "state": "FAILED", "failed_rank": rank,
                  "error": short, **counted.as_json()}, as_json)
        return EXIT_FAILED
    result = {**(done.result or {}), "run_dir": str(sub.run_dir), "job_id": job_id, "state": "COMPLETED",
              **counted.as_json()}
    record.write_result(sub.run_dir, result)
    record.update_record(sub.run_dir, state="COMPLETED")
    plots.write_curves(sub.run_dir)
    human = f"run folder: {relative(sub.run_dir)}\n{metrics_line(result)}"
    if counted.count:
        human += f"\n{counted.summary()}"
    emit(human, result, as_json)
    return EXIT_OK


def wait_for_sweep(run_dir: Path, jobs: list[Any], as_json: bool, poll_s: float = 2.0) -> int:
    """Wait for the array tasks in `jobs`, printing each as it ends and rebuilding the summary;
    0 if every task of the run completed, 1 otherwise (the failed rows say why)."""
    info = record.load_run(run_dir)
    mine = {str(j.job_id) for j in jobs}
    tasks = [t for t, ids in enumerate(info.task_jobs) if ids and ids[-1] in mine]
    print(f"running sweep {info.job.get('name', '')}: {len(tasks)} task(s) on {info.executor}, "
          f"run folder {relative(run_dir)}", flush=True)
    if info.executor == "debug":
        _run_debug_jobs(info, jobs, tasks)
    reported: set[int] = set()
    metric, _ = info.target
    task_of = {ids[-1]: t for t, ids in enumerate(info.task_jobs) if ids}
    # Each local task is its own controller: one whose rank died before the process group formed
    # would wait init_timeout_s, as a single run would without LocalFailFast.
    failfast = {task_of[str(j.job_id)]: LocalFailFast(j, [j.task(k) for k in range(j.num_tasks)])
                for j in jobs if _is_local(j) and getattr(j, "num_tasks", 1) > 1 and str(j.job_id) in task_of}
    delays = backoff(0.2, poll_s)
    while True:
        began = time.monotonic()
        for job in jobs:
            if info.executor == "local":
                job.done()  # reaps finished controllers, so they are not seen as running zombies
        for task, ff in failfast.items():
            if ff.failed is None and task not in reported and ff.check():
                gone = not Path(ff.tasks[ff.failed].paths.result_pickle).exists()  # else its traceback tells
                record.write_failure(info.task_dir(task), ff.failed, f"rank {ff.failed} " + (
                    "ended without a result (its process is gone)" if gone else "failed") + "; its peers were stopped")
        states = task_states(info)
        ended = [states[t] for t in tasks if t not in reported and states[t].state not in ACTIVE]
        for ts in ended:
            reported.add(ts.task)
            value = (ts.result or {}).get(metric)
            detail = f"{metric} {value:.4f}" if isinstance(value, (int, float)) else ts.error
            print(f"task {ts.task} {ts.state}: {overrides_text(ts.overrides)}  {detail}", flush=True)
        if ended:
            results.collect(run_dir, states, max_curves=None)
        if len(reported) == len(tasks):
            break
        # A round over a large sweep's tasks takes a while itself (1,000 tasks: seconds): wait at least as long.
        time.sleep(max(next(delays), time.monotonic() - began))
    summary = results.collect(run_dir, states, max_curves=None)
    if info.is_sweep:
        print((run_dir / layout.SUMMARY_MD).read_text().rstrip(), flush=True)
    failed = [s for s in states if s.state != "completed"]
    payload = {"run_dir": str(run_dir), "state": summary["state"].upper(), "tasks": len(states),
               "counts": summary["counts"], "target_metric": metric, "best": summary["best"],
               "summary_csv": summary.get("summary_csv"), "job_ids": [s.job_id for s in states]}
    if failed:
        print(f"{len(failed)} task(s) did not complete; resubmit them with: "
              f"python submit.py --resume {relative(run_dir)}", file=sys.stderr)
    if as_json:
        print(json.dumps(payload, default=str), flush=True)
    return EXIT_FAILED if failed else EXIT_OK


def _run_debug_jobs(info: record.RunInfo, jobs: list[Any], tasks: list[int]) -> None:
    """The debug executor runs each task in this process when its result is asked for; record the
    outcome in the task's folder since it leaves no result pickles."""
    for task, job in zip(tasks, jobs):
        done = wait(job)
        if done.ok and done.result is not None:
            record.write_result(info.task_dir(task), done.result, job_id=str(job.job_id), task=task)
        else:
            rank, short, _ = done.failures[0]
            record.write_failure(info.task_dir(task), rank, short)
