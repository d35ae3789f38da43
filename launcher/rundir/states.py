"""What each task of a run is doing now: from the scheduler and the run folder.

A run folder records which job id ran each task (`run.json`: `job_ids`, and `task_jobs` once a task
was resubmitted by `--resume`). The state of a task comes from, in order:

1. `sacct` (accounting on): the job's record, with requeues counted from its duplicate records;
2. `squeue` (always asked when sacct does not know the job; the only scheduler source when
   accounting is off), which also knows the restart count of jobs still in the queue, and why a
   pending job waits;
3. the run folder: submitit's result pickles (success or the rank's traceback), the records a
   waiting submitter wrote, and the trainer's `events.jsonl` (restarts).

Where the controller does not answer (slurmctld restarting), squeue's silence is not "the job is gone":
the states come from sacct and the folder, each SLURM task carries the controller's complaint
(`controller`), and a task neither of them settles is `unknown`, still counted as active.

Local runs (submitit's LocalExecutor) have the controller's pid as job id; they are read from the
run folder and `/proc`. Nothing here imports torch.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

from launcher.cluster import local
from launcher.cluster.slurm import allocation
from launcher.cluster.slurm.accounting import REQUEUED_AFTER, SchedulerRecord, sacct_records, squeue_records
from launcher.cluster.slurm.controller import Unreachable
from launcher.cluster.slurm.env import slurm_env
from launcher.rundir import pool_states, record_types as shapes, restarts
from launcher.rundir.layout import FAILURE_FILE, RESULT_FILE, TORCHRUN_DIR, job_files, job_log_dir, log_name
from launcher.rundir.outcomes import failure_of, read_outcomes
from launcher.rundir.record import RecordedRun, read_optional
from launcher.rundir.reused import state_of as reused_state
from launcher.rundir.task_state import ACTIVE, FINAL, TaskState, raised
from trainer.rank import events

_LOG_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def log_times(run_dir: Path, job_id: str,
              files: dict[str, os.DirEntry[str]] | None = None) -> tuple[float | None, float | None]:
    """Start (first submitit log line) and end (last log write) of a job, without a scheduler
    (`files`: the job folder's listing, layout.job_files, if the caller has it)."""
    files = job_files(run_dir, job_id) if files is None else files
    start = None
    for stream in ("err", "out"):  # the attempt's banner and submitit's first lines go to stderr
        entry = files.get(log_name(job_id, 0, stream))
        if entry is not None:
            with open(entry.path, encoding="utf-8", errors="replace") as fh:
                match = _LOG_TIME.search(fh.read(4096))
            if match:
                start = datetime.datetime.fromisoformat(match.group(1)).timestamp()
                break
    end = max((entry.stat().st_mtime for entry in files.values() if entry.is_file()), default=None)
    return start, end


def finished_record(task_dir: Path, job_id: str) -> dict[str, Any] | None:
    """A task's result.json when it records that `job_id` completed (with its wall time), else None."""
    try:  # (no exists() first: one system call fewer per task, 10,000 of them in a large sweep)
        with open(os.path.join(task_dir, RESULT_FILE), "rb") as fh:
            result = json.loads(fh.read())
        shapes.check(Path(task_dir) / RESULT_FILE, result, shapes.RESULT) if isinstance(result, dict) else None
    except (OSError, ValueError, RecursionError):  # (a ConfigError too: `status` names a misshapen one from read_optional)
        return None
    if isinstance(result, dict) and result.get("job_id") == job_id and result.get("state") == "COMPLETED" and "wall_time_s" in result:
        return result
    return None


def _submitted_at(info: RecordedRun, job_id: str) -> float:
    """When `job_id` was queued: the run's creation, or the --resume that queued it."""
    for entry in info.record.get("resumes") or []:
        if job_id in entry.get("job_ids", []):
            return float(entry.get("time") or 0)
    return float(info.record.get("created") or 0)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None


def _recorded_outcome(info: RecordedRun, task_dir: Path) -> tuple[str, dict[str, Any] | None, str, Any] | None:
    """(state, result, error, failed rank) from result.json / failure.json / run.json, where a submitter
    wrote them."""
    result = read_optional(task_dir / RESULT_FILE)
    if result is not None:
        return "completed", result, "", None
    failure = read_optional(task_dir / FAILURE_FILE)
    if failure is not None:
        return "failed", None, str(failure.get("error", "failed")), failure.get("rank")
    if not info.is_sweep and str(info.record.get("state", "")).upper() == "FAILED":
        return "failed", None, str(info.record.get("error") or "failed"), info.record.get("failed_rank")
    return None


def task_states(info: RecordedRun, use_scheduler: bool = True) -> list[TaskState]:
    """The state of every task of the run (one for a single run; a pool's points: launcher.rundir.pool_states;
    a sweep's points that other runs computed: launcher.rundir.reused)."""
    states = pool_states.task_states(info, use_scheduler) if info.is_pool else _array_states(info, use_scheduler)
    reused = info.reused
    if reused:  # (queued for none of them: the scheduler says nothing of them here)
        states = [reused_state(info, ts.task, ts.overrides) if ts.task in reused else ts for ts in states]
    return states


def _array_states(info: RecordedRun, use_scheduler: bool) -> list[TaskState]:
    task_jobs = info.task_jobs
    current = [ids[-1] if ids else "" for ids in task_jobs]
    sacct: dict[str, SchedulerRecord] | None = None
    squeue: dict[str, SchedulerRecord] | None = None
    silent = ""  # the controller's complaint, where it was asked and did not answer
    if info.executor == "slurm" and use_scheduler and not info.step:  # (a step's allocation runs on after it)
        env = slurm_env(info.slurm_conf, cluster=info.cluster)
        sacct = sacct_records([j for j in current if j], env, info.record.get("created"))
        if sacct is None or any(j and (j not in sacct or sacct[j].state in ACTIVE
                                       or sacct[j].slurm_state in REQUEUED_AFTER) for j in current):
            # also for the pending ones (sacct does not say why they wait), for a node failure that SLURM
            # may already have requeued (accounting hears of the requeue a moment later), and for running
            # ones: accounting hears of a job's end from the controller, so while that is down the
            # accounting record of a running job may be stale, and the user is told
            try:
                squeue = squeue_records(env)
            except Unreachable as err:
                silent = str(err)
    overrides = info.overrides
    return [_one_task(info, task, job_id, task_jobs[task], sacct, squeue,
                      overrides[task] if task < len(overrides) else {}, silent)
            for task, job_id in enumerate(current)]


def _from_scheduler(ts: TaskState, record: SchedulerRecord, waiting: SchedulerRecord | None,
                    depends: bool = False) -> None:
    if record.slurm_state in REQUEUED_AFTER and waiting is not None and waiting.state in ACTIVE:
        record = waiting  # requeued: the controller's record is the job's current life
    ts.state, ts.restarts = record.state, record.restarts
    # A job cancelled before it ran: sacct may give the cancel time as its Start (or not: it varies
    # with when slurmdbd heard of it); it never started.
    never_ran = record.state == "cancelled" and not record.elapsed_s and record.nodes in ("", "None assigned")
    ts.start, ts.end = (None if never_ran else record.start), record.end
    if record.state == "pending" and record.restarts:
        ts.state = "requeued"
    if record.state in FINAL and record.start and record.end:
        ts.wall_time_s = max(0.0, record.end - record.start)
    elif record.elapsed_s is not None and record.state in FINAL:
        ts.wall_time_s = record.elapsed_s
    if record.state not in ("completed",) + ACTIVE:
        ts.error = f"{record.slurm_state}" + (f" (exit {record.exit_code})" if record.exit_code else "")
    reasons = (record.reason, waiting.reason if waiting is not None else "")
    if never_ran and (depends or any(reason.startswith("Dependency") for reason in reasons)):
        # --after whose condition can no longer hold (notok on a run that succeeded): SLURM cancels it.
        # sacct's Reason may be "None" for it, squeue's is DependencyNeverSatisfied until MinJobAge
        # passes; the run's own record says it waited on other runs.
        ts.error = "cancelled before it started, while waiting for the runs it depends on (--after)"
    if waiting is not None and waiting.state == "pending":
        ts.reason, ts.expected_start = waiting.reason, waiting.start


def _from_folder(ts: TaskState, info: RecordedRun, job_id: str, outcomes: dict[int, tuple[str, Any]],
                 failure: tuple[int, str] | None, silent: str = "") -> tuple[int, str] | None:
    """The state of a task the scheduler does not know (any more); returns the failure that stands."""
    ts.source = "run folder"
    success = outcomes.get(0, ("", None))[0] == "success" and failure is None
    if success:
        ts.state = "completed"
    elif float(info.record.get("cancelled_at") or 0) >= _submitted_at(info, job_id) > 0:
        # Ranks killed by a cancel may leave errors (a peer's closed connection): not the cause.
        ts.state, ts.error = "cancelled", "cancelled with `submit.py cancel`"
        return None
    elif failure is not None:
        ts.state = "failed"
    elif (recorded := _recorded_outcome(info, ts.task_dir)) is not None:
        # What a submitter that waited wrote (the debug executor leaves no result pickles).
        ts.state, ts.result, ts.error, rank = recorded
        ts.failed_rank = _int_or_none(rank)
    elif info.executor in ("local", "debug"):
        ts.state, ts.error = "failed", "the process ended without a result (killed?)"
    elif silent:
        # The controller may hold the job: not lost, not known.
        ts.state, ts.error = "unknown", f"slurmctld did not answer ({silent})"
    else:
        # Neither the scheduler nor the folder knows it: cancelled before it started, or purged.
        ts.state, ts.error = "failed", "no result and not in the queue (cancelled or lost)"
    return failure


def _returned(outcomes: dict[int, tuple[str, Any]], failure: Any) -> bool:
    """A job step's run is over once rank 0 returned its result and no rank failed, though its step may stay
    listed a while as it completes (seen on SLURM 22.05: `squeue --steps` right after the run ended)."""
    return failure is None and outcomes.get(0, ("", None))[0] == "success"


def _step_alive(info: RecordedRun, ended: bool) -> bool:
    """A run in an allocation held where it was submitted: its bash (on that host); from another host, its
    job step while squeue lists it. The allocation outlives the step, so it alone does not say the run
    runs; but a step that has not started yet is not listed either: before any rank `ended` (wrote its
    outcome), a live allocation still counts."""
    step = info.step
    if step.get("host") == socket.gethostname():
        return local.launcher_alive(step.get("pid", 0), info.run_dir)
    env, held = slurm_env(info.slurm_conf, cluster=info.cluster), str(step.get("job_id"))
    if (squeue_records(env) or {}).get(held) is None:
        return False
    return bool(allocation.steps_named(held, allocation.step_name(info.run_dir.name), env)) or not ended


def _one_task(info: RecordedRun, task: int, job_id: str, history: list[str],
              sacct: dict[str, SchedulerRecord] | None, squeue: dict[str, SchedulerRecord] | None,
              overrides: dict[str, Any], silent: str = "") -> TaskState:
    ts = TaskState(task, job_id, "unknown", overrides=overrides, task_dir=info.task_dir(task),
                   job_history=list(history), controller=silent)
    if not job_id:
        ts.state, ts.source, ts.error = "failed", "run folder", "never submitted"
        return ts
    # Recorded by an earlier `status` once this job had completed: its pickles, logs and events no
    # longer change, so they are not read again (what makes 10,000 tasks answer in seconds). The
    # scheduler, where it knows the job, still gives the state.
    finished = finished_record(ts.task_dir, job_id) if info.is_sweep else None
    ts.recorded = finished is not None
    # One listing of the job's log folder serves its pickles and its log times.
    files = job_files(info.run_dir, job_id) if finished is None else None
    outcomes = {0: ("success", finished)} if finished is not None else read_outcomes(info.run_dir, job_id, files)
    failure = failure_of(outcomes, job_log_dir(info.run_dir, job_id) if files and TORCHRUN_DIR in files else None,
                         ts.task_dir)
    record = (sacct or {}).get(job_id) or (squeue or {}).get(job_id)
    if record is not None:
        ts.source = "sacct" if sacct and job_id in sacct else "squeue"
        _from_scheduler(ts, record, (squeue or {}).get(job_id), info.depends)
    elif info.executor == "local" and local.controller_alive(job_id, info.run_dir) or \
            info.step and sacct is None and not _returned(outcomes, failure) and \
            _step_alive(info, ended=bool(outcomes)):
        ts.state, ts.source = "running", "process"
    else:
        failure = _from_folder(ts, info, job_id, outcomes, failure, silent)
    if finished is not None and ts.state in FINAL:
        ts.wall_time_s = finished.get("wall_time_s") if ts.wall_time_s is None else ts.wall_time_s
    if ts.wall_time_s is None and ts.state in FINAL:
        start, end = log_times(info.run_dir, job_id, files)
        if start is not None and end is not None:
            ts.wall_time_s = max(0.0, end - start)
    if failure is not None and ts.state not in ACTIVE:
        ts.failed_rank, ts.error = failure
        if ts.state == "completed":
            ts.state = "failed"
    if ts.state in ("failed", "timeout"):
        ts.failure = raised(ts.task_dir, ts.failed_rank)
    if ts.state == "completed" and outcomes.get(0, ("", None))[0] == "success":
        ts.result = outcomes[0][1] if isinstance(outcomes[0][1], dict) else None
    # The attempt's number by trainer.rank.events' one rule, from the attempts the task's log (or its result.json,
    # once it has ended) counts and the scheduler's restarts (one per job id a --resume added, too).
    scheduler = ts.restarts + len(history) - 1
    logged = int(finished.get("restarts") or 0) if finished is not None else restarts.read(ts.task_dir).count
    ts.restarts = events.attempt_of(logged + 1, scheduler) - 1
    return ts
