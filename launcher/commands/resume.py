"""`python submit.py --resume RUN [--set KEY=VALUE ...] [--wait]`: resubmit the tasks that did not complete.

Only tasks that ended without completing (failed, cancelled, timed out, lost) are queued again; tasks
still pending or running are left alone, completed ones are never rerun. Each goes back into its own
folder under the same run, so the trainer resumes from the task's newest good checkpoint. `--set`
applies to the resubmitted tasks only (e.g. `--set profile.time_min=120` after time-outs, or a fixed
job key); the run's recorded profile and each task's recorded job are the starting point.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from launcher import preflight, runs, submission
from launcher.cli import EXIT_OK, emit, relative
from launcher.profile import Profile
from launcher.resolve import parse_overrides
from launcher.sweep import TASKS_FILE, read_tasks, write_tasks
from launcher.taskstate import ACTIVE, RunInfo, load_run, task_states
from trainer.config import JobConfig
from trainer.schema import ConfigError, build


def _recorded_jobs(info: RunInfo) -> dict[int, dict[str, Any]]:
    if (info.run_dir / TASKS_FILE).exists():
        return {t: e["job"] for t, e in read_tasks(info.run_dir).items()}
    if not info.is_sweep:
        return {0: info.job}
    raise ConfigError(f"--resume {info.run_dir}: no {TASKS_FILE} in that sweep's folder (made by an older "
                      f"version?), so its tasks cannot be rebuilt")


def resume(args: argparse.Namespace, argv: list[str]) -> int:
    from launcher.operations import find_run

    run_dir = find_run(args.resume, "runs")
    info = load_run(run_dir)
    overrides = parse_overrides(args.sets)
    source = f"{run_dir / runs.RUN_FILE} (profile, with --set)"
    profile = build(Profile, {**info.profile, **overrides["profile"]}, source)
    if args.wait:
        profile.wait = True
    states = task_states(info)
    todo = [s for s in states if s.state not in ACTIVE and s.state != "completed"]
    busy = [s for s in states if s.state in ACTIVE]
    if not todo:
        emit(f"nothing to resume: every task of {relative(run_dir)} completed"
             + (f" or is still pending/running ({len(busy)})" if busy else ""),
             {"run_dir": str(run_dir), "resubmitted": [], "job_ids": []}, args.json)
        return EXIT_OK
    recorded = _recorded_jobs(info)
    jobs = []
    for ts in todo:
        job_source = f"{run_dir / TASKS_FILE} (task {ts.task}, with --set)"
        jobs.append((build(JobConfig, {**recorded[ts.task], **overrides["job"]}, job_source), ts.overrides))
    for job, _ in jobs:
        preflight.check_local(profile, job, source)
    if args.after and profile.executor != "slurm":
        raise ConfigError(f"--after {args.after}: dependencies need a slurm profile, not '{profile.executor}'")
    from launcher.submitting import _job_ids_of

    after = _job_ids_of(Path(args.after)) if args.after else []
    sub = submission.build(profile, jobs, run_dir, after)
    # build() numbers task folders from 0; each resubmitted task goes back into its own folder.
    for spec, ts in zip(sub.tasks, todo):
        spec.settings = dataclasses.replace(spec.settings, run_dir=str(ts.task_dir))
    chunk = None
    if profile.executor == "slurm":
        from launcher import slurm_preflight

        chunk = slurm_preflight.check(sub, source)
    if args.dry_run:
        from launcher.submitting import dry_run

        print(f"# would resubmit task(s) {', '.join(str(t.task) for t in todo)} of {relative(run_dir)}")
        return dry_run(sub, args.json)
    return _send(info, sub, todo, chunk, args, argv)


def _send(info: RunInfo, sub: submission.Submission, todo: list[Any], chunk: int | None,
          args: argparse.Namespace, argv: list[str]) -> int:
    from launcher.operations import wait_for_sweep
    from launcher.send import send

    run_dir = info.run_dir
    for ts in todo:  # a stale failure record must not outlive the retry
        (ts.task_dir / "failure.json").unlink(missing_ok=True)
    jobs = send(sub, chunk)
    new_ids = [str(j.job_id) for j in jobs]
    task_jobs = info.task_jobs
    for ts, job_id in zip(todo, new_ids):
        task_jobs[ts.task].append(job_id)
    record = runs.read_record(run_dir)
    resumes = [*record.get("resumes", []), {"time": time.time(), "tasks": [t.task for t in todo],
                                            "job_ids": new_ids, "argv": ["submit.py", *argv]}]
    fields: dict[str, Any] = {}
    job_sets = parse_overrides(args.sets)["job"]
    if info.is_sweep and job_sets:
        # The summary shows what each task really ran with: a resubmitted task's row gets the job
        # keys that --set changed (the sweep as first submitted stays in submitted_overrides).
        overrides = info.overrides
        for ts in todo:
            overrides[ts.task] = {**overrides[ts.task], **job_sets}
        fields.update(sweep_overrides=overrides,
                      submitted_overrides=record.get("submitted_overrides") or record.get("sweep_overrides"))
        _update_tasks_file(run_dir, sub, todo, overrides)
    runs.update_record(run_dir, task_jobs=task_jobs, job_ids=[ids[-1] if ids else "" for ids in task_jobs],
                       resumes=resumes, state=None, error=None, failed_rank=None, best=None, **fields)
    tasks = [t.task for t in todo]
    if sub.profile.waits:
        return wait_for_sweep(run_dir, jobs, args.json)
    human = (f"resubmitted {len(todo)} task(s) of {relative(run_dir)} ({', '.join(map(str, tasks))}) as job(s) "
             f"{', '.join(new_ids)}\nfollow with: python submit.py status {relative(run_dir)}")
    emit(human, {"run_dir": str(run_dir), "resubmitted": tasks, "job_ids": new_ids,
                 "job_id": new_ids[0].split("_")[0]}, args.json)
    return EXIT_OK



def _update_tasks_file(run_dir: Path, sub: submission.Submission, todo: list[Any],
                       overrides: list[dict[str, Any]]) -> None:
    """tasks.json keeps each task's job as it last ran, so a later --resume starts from that."""
    entries = read_tasks(run_dir)
    for spec, ts in zip(sub.tasks, todo):
        entries[ts.task] = {**entries.get(ts.task, {}), "task": ts.task, "overrides": overrides[ts.task],
                            "job": dataclasses.asdict(spec.job), "run_dir": str(ts.task_dir)}
    write_tasks(run_dir, [(t, e["overrides"], e["job"], e["run_dir"]) for t, e in sorted(entries.items())])
