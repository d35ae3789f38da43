"""What each point of a pool (`sweep_runner: pool`) is doing now: from its claim records
(launcher.reports.pool_claims) and the state of the pool's workers (SLURM's, or the local controllers').

A point's state reads as an array task's does (launcher.rundir.task_state.TaskState), so that `status`,
`watch`, `--wait`, the summary and `--resume` need no second story: done (its record's outcome), held by
a running worker (running), free or held by a worker that ended while others still run (pending: a
worker takes it, back from the dead one if need be), or, once no worker is left, not run (failed:
`--resume` runs it). Its job id is the worker's that holds (or last held) it, its restarts the attempts
its events.jsonl counts, as a task's. Nothing here imports torch.
"""

from __future__ import annotations

from launcher.cluster import local
from launcher.reports import pool_claims
from launcher.cluster.slurm.accounting import SchedulerRecord, sacct_records, squeue_records
from launcher.cluster.slurm.env import slurm_env
from launcher.rundir import restarts
from launcher.rundir.record import RecordedRun
from launcher.rundir.task_state import ACTIVE, TaskState, raised


def worker_ids(info: RecordedRun) -> list[str]:
    """Every worker the run's pool ever had (its first submission's and each --resume's)."""
    return [str(j) for j in info.record.get("job_ids") or []]


def worker_states(info: RecordedRun, use_scheduler: bool = True) -> dict[str, SchedulerRecord]:
    """The pool's workers as the scheduler (or, locally, /proc) knows them; a worker it no longer knows is left out."""
    ids = worker_ids(info)
    if info.executor == "local":
        return {j: SchedulerRecord(j, "running", "RUNNING") for j in ids if local.controller_alive(j, info.run_dir)}
    if info.executor != "slurm" or not use_scheduler or not ids:
        return {}
    env = slurm_env(info.slurm_conf, cluster=info.cluster)
    found = dict(sacct_records(ids, env, info.record.get("created")) or {})
    queued = squeue_records(env) or {}
    # The controller's record is a worker's current life (sacct hears of a requeue a moment later).
    found.update({j: queued[j] for j in ids if j in queued})
    return {j: found[j] for j in ids if j in found}


def task_states(info: RecordedRun, use_scheduler: bool = True) -> list[TaskState]:
    """The state of every point of the pool."""
    workers = worker_states(info, use_scheduler)
    active = {j: w for j, w in workers.items() if w.state in ACTIVE}
    waiting = next((w for w in active.values() if w.state == "pending"), None)
    all_waiting = bool(active) and all(w.state != "running" for w in active.values())
    cancelled_at = float(info.record.get("cancelled_at") or 0)
    last_sent = max([float(info.record.get("created") or 0)] +
                    [float(r.get("time") or 0) for r in info.record.get("resumes") or []])
    overrides = info.overrides
    out = []
    for task in range(info.num_tasks):
        held = pool_claims.records(info.run_dir, task)
        last = held[-1] if held else None
        history = list(dict.fromkeys(r.job_id for r in held if r.state == pool_claims.HELD))
        ts = TaskState(task, last.job_id if last else "", "pending", source="pool", task_dir=info.task_dir(task),
                       overrides=overrides[task] if task < len(overrides) else {}, job_history=history)
        if last is not None and last.state == pool_claims.DONE:
            _ended(ts, last)
        elif last is not None and last.state == pool_claims.CANCELLED:
            ts.state, ts.error = "cancelled", "cancelled with `submit.py cancel`"
        elif last is not None and last.state == pool_claims.HELD and last.job_id in workers and \
                workers[last.job_id].state == "running":
            ts.state, ts.start = "running", float(last.data.get("time") or 0) or None
        elif active:  # free, or held by a worker that ended: a running worker takes it (back)
            ts.state = "requeued" if last is not None else "pending"
            if all_waiting and waiting is not None:
                ts.reason, ts.expected_start = waiting.reason, waiting.start
        elif cancelled_at >= last_sent > 0:
            ts.state, ts.error = "cancelled", "cancelled with `submit.py cancel`"
        elif last is not None and last.state == pool_claims.HELD:
            ts.state, ts.error = "failed", f"its pool worker {last.job_id} ended while running it"
        else:
            ts.state, ts.error = "failed", "not run: the pool's workers ended"
        ts.restarts = restarts.read(ts.task_dir).count if history else 0
        out.append(ts)
    return out


def _ended(ts: TaskState, record: pool_claims.Record) -> None:
    """A point's done record: its result, or the rank whose failure is the cause."""
    ts.wall_time_s = record.data.get("wall_time_s")
    ts.end = float(record.data.get("time") or 0) or None
    if record.data.get("outcome") == "completed" and isinstance(record.data.get("result"), dict):
        ts.state, ts.result = "completed", dict(record.data["result"])
        return
    rank = record.data.get("rank")
    ts.state, ts.error = "failed", str(record.data.get("error") or "failed")
    ts.failed_rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
    ts.failure = raised(ts.task_dir, ts.failed_rank)  # what the function raised, as an array task shows it


def active_workers(info: RecordedRun) -> list[str]:
    """The workers still pending or running (what `cancel RUN` ends)."""
    return [j for j, w in worker_states(info).items() if w.state in ACTIVE]
