"""`python submit.py --resume RUN [--set KEY=VALUE ...] [--wait]`: resubmit the tasks that did not complete.

Only tasks that ended without completing (failed, cancelled, timed out, lost, never submitted) are
queued again; tasks still pending or running are left alone, completed ones are never rerun. Each
goes back into its own folder under the same run, so the trainer resumes from the task's newest
good checkpoint. `--set` applies to the resubmitted tasks only (e.g. `--set profile.time=2:00:00`
after time-outs, or a fixed job key); the run's recorded profile and each task's recorded job are
the starting point. RUN is a run folder, or its name under the profile's `runs_dir` (`--profile`,
default local) or `--runs-dir`.
"""

from __future__ import annotations

import argparse
import time
import dataclasses
from dataclasses import asdict
from pathlib import Path
from typing import Any

from launcher.reports import pool_claims
from launcher.cluster.jobids import base_id
from launcher.commands.console import EXIT_OK, emit, relative
from launcher.commands.sending import execute, wait_for_sweep
from launcher.config import cluster_keys
from launcher.config.profile import PROFILE_FILES, Profile
from launcher.config.resolve import parse_overrides, point, profile_overrides, runs_dir
from launcher.request import channel
from launcher.request.plan import Plan, check
from launcher.request.submission import Submission, runs_as_pool
from launcher.rundir import layout, record, reused
from launcher.rundir.claims import Claim
from launcher.rundir.record import RecordedRun
from launcher.rundir.states import ACTIVE, TaskState, task_states
from trainer.config.files import deep_merge, renamed
from trainer.config.job import JobConfig
from trainer.config.schema import ConfigError, build


class ResumePlan(Plan):
    def __init__(self, sub: Submission, source: str, argv: list[str], info: RecordedRun, todo: list[TaskState],
                 job_sets: dict[str, Any]) -> None:
        super().__init__(sub, source, argv)
        self.info, self.todo, self.job_sets = info, todo, job_sets
        self.before = info.record  # run.json as it was: each record() call rewrites from it

    def heading(self) -> str:
        return (f"# would resubmit task(s) {', '.join(str(t.task) for t in self.todo)} of "
                f"{relative(self.info.run_dir)}\n")

    def prepare(self) -> None:
        for ts in self.todo:
            record.clear_outcome(ts.task_dir)
            if self.info.is_pool:  # a failed or cancelled point may be taken again
                pool_claims.reopen(self.info.run_dir, ts.task)

    def record(self, job_ids: list[str]) -> None:
        info, before = self.info, self.before
        resumes = [*before.get("resumes", []), {"time": time.time(), "tasks": [t.task for t in self.todo],
                                                 "job_ids": job_ids, "argv": ["submit.py", *self.argv]}]
        fields: dict[str, Any] = {}
        if info.is_pool:  # the pool's workers, each submission's: a point's job is the worker that held it
            fields.update(job_ids=[*before.get("job_ids", []), *job_ids])
        else:
            task_jobs = info.task_jobs
            for ts, job_id in zip(self.todo, job_ids):
                task_jobs[ts.task].append(job_id)
            fields.update(task_jobs=task_jobs, job_ids=[ids[-1] if ids else "" for ids in task_jobs])
        if info.is_sweep and self.job_sets:
            # The summary shows what each task really ran with: a resubmitted task's row gets the job
            # keys that --set changed (the sweep as first submitted stays in submitted_overrides).
            overrides = info.overrides
            for ts in self.todo:
                overrides[ts.task] = {**overrides[ts.task], **dotted(self.job_sets)}
            fields.update(sweep_overrides=overrides,
                          submitted_overrides=before.get("submitted_overrides") or before.get("sweep_overrides"))
            self._update_tasks_file(overrides)
        if any(t.task in info.reused for t in self.todo):  # (a reused point whose result is gone: run here now)
            fields[reused.RECORD_KEY] = {str(t): came for t, came in info.reused.items()
                                         if t not in {ts.task for ts in self.todo}}
        record.update_record(info.run_dir, resumes=resumes, state=None, error=None, failed_rank=None, best=None,
                             **fields)
        channel.tell("queued", run_dir=str(info.run_dir), job_ids=job_ids, reused=self.claim is not None)

    def _update_tasks_file(self, overrides: list[dict[str, Any]]) -> None:
        """tasks.json keeps each task's job as it last ran, so a later --resume starts from that."""
        entries = record.read_tasks(self.info.run_dir)
        for spec in self.sub.tasks:
            entries[spec.task] = {**entries.get(spec.task, {}), "task": spec.task, "overrides": overrides[spec.task],
                                  "job": asdict(spec.job), "run_dir": spec.settings.run_dir}
        record.write_tasks(self.info.run_dir, list(entries.values()))

    def report(self, jobs: list[Any], as_json: bool) -> int:
        run_dir, new_ids = self.info.run_dir, [str(j.job_id) for j in jobs]
        if self.sub.profile.waits:
            return wait_for_sweep(run_dir, jobs, as_json)
        tasks = [t.task for t in self.todo]
        human = (f"resubmitted {len(tasks)} task(s) of {relative(run_dir)} ({', '.join(map(str, tasks))}) as "
                 f"job(s) {', '.join(new_ids)}\nfollow with: python submit.py status {relative(run_dir)}")
        emit(human, {"run_dir": str(run_dir), "resubmitted": tasks, "job_ids": new_ids,
                     "job_id": base_id(new_ids[0]), **({"reused": True} if self.claim is not None else {})}, as_json)
        return EXIT_OK


def dotted(sets: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"config": {"lr": 0.1}} -> {"config.lr": 0.1}: summary columns as a sweep names them."""
    out: dict[str, Any] = {}
    for key, value in sets.items():
        if isinstance(value, dict) and key == "config":
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _recorded_jobs(info: RecordedRun) -> dict[int, dict[str, Any]]:
    if (info.run_dir / layout.TASKS_FILE).exists():
        return {t: e["job"] for t, e in record.read_tasks(info.run_dir).items()}
    if not info.is_sweep:
        return {0: info.job}
    raise ConfigError(f"--resume {info.run_dir}: no {layout.TASKS_FILE} in that sweep's folder (made by an older "
                      f"version?), so its tasks cannot be rebuilt")


def runner(is_pool: bool) -> str:
    return "a pool" if is_pool else "a job array"


def other_runner(info: RecordedRun, profile: Profile) -> bool:
    """`profile` runs the recorded sweep otherwise than it ran (its records are one runner's: a pool's workers' or
    an array's tasks'), so it cannot continue it."""
    return info.is_sweep and runs_as_pool(profile, True) != info.is_pool


def resume(args: argparse.Namespace, argv: list[str], claim: Claim | None = None, profile: Profile | None = None
           ) -> int:
    """`--resume RUN`; or, from an identical new submission (launcher.commands.reuse), the run it continues under
    the `claim` it holds, with its own resolved `profile` in place of the recorded one (a longer time limit, another
    partition: what does not change the signature)."""
    overrides = parse_overrides(args.sets)
    if args.job is not None:  # it would be silently ignored: the run's own jobs are what is resubmitted
        raise ConfigError(f"--job {args.job}: --resume resubmits the run's recorded jobs; change one of their "
                          f"keys with --set job.KEY=VALUE instead")
    given = overrides["profile"].get("runs_dir")
    where = runs_dir(args.profile, args.runs_dir if args.runs_dir is not None else
                     given if isinstance(given, str) and given else None)
    info = record.load_run(record.find_run(args.resume, where))
    run_dir = info.run_dir
    source = f"{run_dir / layout.RUN_FILE} (profile, with --set)"
    # A run recorded before `time`/`mem_per_task` had those names reads as well.
    if profile is None:
        recorded = renamed(PROFILE_FILES, info.profile, source)
        profile = build(Profile, {**recorded, **profile_overrides(overrides["profile"])}, source)
    if args.wait:
        profile.wait = True
    if info.cluster and len(cluster_keys.names(profile.clusters)) > 1 and "clusters" not in overrides["profile"]:
        # Where SLURM sent the run among several: its jobs, records and requeues stay on one cluster.
        profile = dataclasses.replace(profile, clusters=info.cluster)
    if other_runner(info, profile):
        raise ConfigError(f"profile.sweep_runner: {profile.sweep_runner!r}: {run_dir} ran as "
                          f"{runner(info.is_pool)}, and --resume runs its tasks the same way")
    states = task_states(info)
    todo = [s for s in states if s.state not in ACTIVE and s.state != "completed"]
    busy = [s for s in states if s.state in ACTIVE]
    if not todo:
        emit(f"nothing to resume: every task of {relative(run_dir)} completed"
             + (f" or is still pending/running ({len(busy)})" if busy else ""),
             {"run_dir": str(run_dir), "resubmitted": [], "job_ids": []}, args.json)
        return EXIT_OK
    recorded = _recorded_jobs(info)
    missing = [ts.task for ts in todo if ts.task not in recorded]
    if missing:
        raise ConfigError(f"--resume {run_dir}: {layout.TASKS_FILE} has no entry for task(s) "
                          f"{', '.join(map(str, missing))}, so they cannot be rebuilt")
    # Merged, not replaced: `--set job.config.KEY=V` changes one key of an entrypoint's config.
    points = []
    for ts in todo:
        where = f"{run_dir / layout.TASKS_FILE} (task {ts.task}, with --set)"
        job = build(JobConfig, deep_merge(recorded[ts.task], overrides["job"]), where)
        points.append(point(profile, ts.task, job, ts.overrides, where, runs_dir=str(run_dir.parent)))
    # The ranks start where the run was first submitted from: its relative paths mean what they meant.
    submitted_from = info.record.get("submit_dir")
    sub = check(profile, points, run_dir, info.is_sweep, source, args.after,
                Path(submitted_from) if isinstance(submitted_from, str) and submitted_from else None).submission()
    plan = ResumePlan(sub, source, argv, info, todo, overrides["job"])
    plan.claim = claim
    if args.when:
        from launcher.commands.when import estimate

        return estimate(plan, args.json)
    return execute(plan, args.dry_run, args.json)
