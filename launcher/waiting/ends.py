"""Waiting for what `send` queued: a single run's job until every rank left its result, turned into
one result or its failures, the root cause first (`wait`); a sweep's tasks as they end
(`sweep_endings`). It returns data; the verbs report it (launcher.commands.sending). While slurmctld
does not answer, a SLURM wait goes on (the ranks' results are read from the run folder; sacct's
slurmdbd stays up) and says so once on stderr (launcher.cluster.slurm.controller).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.reports.root_cause import Failure, root_cause_first
from launcher.cluster.local import LocalFailFast
from launcher.cluster.slurm import accounting, srun
from launcher.cluster.slurm.allocation import step_state
from launcher.cluster.slurm.controller import Outage, Unreachable
from launcher.rundir import record, results
from launcher.reports.rank_notes import rank_failures, rank_notes
from launcher.rundir.outcomes import error_text, nodes_of, raised_by_ranks, succeeded
from launcher.rundir.record import RecordedRun
from launcher.rundir.states import ACTIVE, TaskState, task_states


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


def _ended(job: Any, force: bool, outage: Outage, pending: Callable[[], None] | None = None) -> str:
    """The job's final state once it has ended ("" while it runs, is pending or requeued, or while the
    controller that would say whether SLURM requeued it does not answer); `pending`: see `wait`."""
    from submitit.local.local import LocalJob  # submitit only once a job is being waited for

    if isinstance(job, LocalJob):
        return "FINISHED" if job.done() else ""  # the controller has exited (all its tasks have)
    if hasattr(job, "process"):  # a job step of the allocation held here: its bash stands for the job
        return step_state(job.process)
    if not force:
        return ""
    now = _controller_says(str(job.job_id), outage)
    if now is None:
        return ""  # sacct, below, answers meanwhile, but only the controller knows of a requeue
    if now == "PENDING" and pending is not None:
        pending()  # (waiting for its next start, after a requeue: launcher.waiting.pending)
    if not job.watcher.is_done(job.job_id, mode="force"):
        return ""
    state = str(job.watcher.get_state(job.job_id, mode="cache"))
    if state in accounting.REQUEUED_AFTER:  # that life ended, but SLURM requeues the job (ours are --requeue)
        try:
            now = accounting.controller_state(str(job.job_id), dict(os.environ))
        except Unreachable as err:
            outage.heard(str(err))
            return ""
        return "" if accounting.STATES.get(now) in ACTIVE else (now or state)
    return state


def _controller_says(job_id: str, outage: Outage) -> str | None:
    """The job's state in slurmctld ("" where it no longer holds it), None where slurmctld does not answer
    (asked each round the scheduler is: the one sign of an outage, since sacct's slurmdbd answers
    meanwhile); the user is told when that changes."""
    try:
        state = accounting.controller_state(job_id, dict(os.environ))
    except Unreachable as err:
        outage.heard(str(err))
        return None
    outage.heard("")
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
    return not retries or all(succeeded(Path(t.paths.result_pickle)) for t in tasks)


def wait(job: Any, poll_s: float = 1.0, force_every_s: float = 5.0, grace_s: float = 3.0,
         retries: bool = False, pending: Callable[[], None] | None = None, run_dir: Path | None = None) -> Outcome:
    """Wait for every task of a submitit job; rank 0's result, with all ranks' node names.

    Ends as soon as every rank left a result file (`retries`: a successful one), or the scheduler says
    the job ended (asked every `force_every_s`, not on submitit's backoff of up to 10 minutes); ranks with
    no result then get `grace_s` for their file to appear before they are reported from srun's lines and
    their log. `pending`: called each such round the controller says the job is pending
    (launcher.waiting.pending: a requeued job leaves a lost node out before it starts). `run_dir`: where
    the ranks record what they raised (launcher.rundir.outcomes.raised_by_ranks).
    """
    num_tasks = getattr(job, "num_tasks", 1)
    tasks = [job] if num_tasks <= 1 else [job.task(k) for k in range(num_tasks)]
    state = ""
    failfast = LocalFailFast(job, tasks) if _is_local(job) else None
    if _is_scheduled(job):
        last_force = 0.0
        delays = backoff(0.05, poll_s)
        outage = Outage("--wait keeps waiting for the run (its results are read from the run folder)")
        while not _settled(tasks, retries):
            if failfast is not None:
                failfast.check()
            now = time.time()
            force = now - last_force >= force_every_s
            last_force = now if force else last_force
            state = _ended(job, force, outage, pending)
            if state:
                deadline = time.time() + grace_s  # results written just before the end may lag on NFS
                while time.time() < deadline and not all(Path(t.paths.result_pickle).exists() for t in tasks):
                    time.sleep(0.5)
                break
            time.sleep(next(delays))
        if outage.since is not None and not _is_local(job):  # the results came before the next question: ask
            _controller_says(str(job.job_id), outage)  # once more, so the user is told whether it is back
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
            failures.append((rank, *error_text(str(err), type(err).__name__)))
    if failures:
        # The torchrun shape: the ranks under the node tasks that failed, as their notes name them.
        named, times = rank_failures(rank_notes(tasks[0].paths.folder)) if _is_scheduled(job) else ([], {})
        if named:
            return Outcome(None, root_cause_first(named, times=times))
        first_dead = srun_lines[0][0] if srun_lines else (failfast.failed if failfast else None)
        if run_dir is not None:
            failures, times = raised_by_ranks(failures, run_dir, set(range(len(tasks))) - {f[0] for f in failures})
        return Outcome(None, root_cause_first(failures, first_dead, times=times))
    nodes = nodes_of(returned)
    return Outcome({**returned[0], "nodes": nodes})


def sweep_tasks(info: RecordedRun, jobs: list[Any]) -> list[int]:
    """The tasks of the run that `jobs` (just queued) run: a pool's, the points its workers were given."""
    mine = {str(j.job_id) for j in jobs}
    if info.is_pool:
        resumed = [r for r in info.record.get("resumes") or [] if mine & {str(j) for j in r.get("job_ids", [])}]
        return list(resumed[-1].get("tasks") or []) if resumed else [t for t in range(info.num_tasks)
                                                                         if t not in info.reused]
    return [t for t, ids in enumerate(info.task_jobs) if ids and ids[-1] in mine]


def sweep_endings(info: RecordedRun, jobs: list[Any], poll_s: float = 2.0
                  ) -> Iterator[tuple[list[TaskState], list[TaskState]]]:
    """The array tasks of `jobs` as they end: each round that ends some, (those, every task's state),
    the summary rebuilt, until all have. A debug run's tasks run here first, one by one."""
    tasks = sweep_tasks(info, jobs)
    if info.executor == "debug":
        _run_debug_jobs(info, jobs, tasks)
    reported: set[int] = set()
    task_of = {ids[-1]: t for t, ids in enumerate(info.task_jobs) if ids} if not info.is_pool else {}
    # Each local task is its own controller: one whose rank died before the process group formed
    # would wait init_timeout_s, as a single run would without LocalFailFast. (A pool's worker whose rank
    # died is stopped whole: the point it held is taken back by another.)
    failfast = {task_of.get(str(j.job_id), -1 - n): LocalFailFast(j, [j.task(k) for k in range(j.num_tasks)])
                for n, j in enumerate(jobs) if _is_local(j) and getattr(j, "num_tasks", 1) > 1
                and (info.is_pool or str(j.job_id) in task_of)}
    delays = backoff(0.2, poll_s)
    while len(reported) < len(tasks):
        began = time.monotonic()
        for job in jobs:
            if info.executor == "local":
                job.done()  # reaps finished controllers, so they are not seen as running zombies
        for task, ff in failfast.items():
            if ff.failed is None and task not in reported and ff.check() and task >= 0:
                gone = not Path(ff.tasks[ff.failed].paths.result_pickle).exists()  # else its traceback tells
                record.write_failure(info.task_dir(task), ff.failed, f"rank {ff.failed} " + (
                    "ended without a result (its process is gone)" if gone else "failed") + "; its peers were stopped")
        states = task_states(info)
        ended = [states[t] for t in tasks if t not in reported and states[t].state not in ACTIVE]
        reported.update(ts.task for ts in ended)
        if ended:
            results.collect(info.run_dir, states, max_curves=None)
            yield ended, states
        if len(reported) < len(tasks):
            # A round over a large sweep's tasks takes a while itself (1,000 tasks: seconds): wait at least as long.
            time.sleep(max(next(delays), time.monotonic() - began))


def _run_debug_jobs(info: RecordedRun, jobs: list[Any], tasks: list[int]) -> None:
    """The debug executor runs each task in this process when its result is asked for; record the
    outcome in the task's folder since it leaves no result pickles."""
    for task, job in zip(tasks, jobs):
        done = wait(job)
        if done.ok and done.result is not None:
            record.write_result(info.task_dir(task), done.result, job_id=str(job.job_id), task=task)
        else:
            rank, short, _ = done.failures[0]
            record.write_failure(info.task_dir(task), rank, short)
