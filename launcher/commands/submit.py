"""`submit.py [--profile P] [--job J]`, and the one path every submission takes (a new run, or
`--resume`): plan -> check -> dry-run or send -> report.

A plan is the submission as data plus what its run folder needs before and after sbatch; `execute`
runs the same checks (local, then the live SLURM preflight, which `--dry-run` may skip where the
cluster cannot be asked) and the same sending for both, so they cannot drift apart.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from launcher.cluster import jobids
from launcher.cluster.slurm import limits
from launcher.commands import waiting
from launcher.commands.console import EXIT_OK, emit, relative
from launcher.config import checks
from launcher.config.profile import Profile
from launcher.config.resolve import resolve
from launcher.config.sweep import expand
from launcher.request import send
from launcher.request.submission import Point, Submission, build, moved
from launcher.rundir import layout, record
from trainer.schema import ConfigError


class Plan:
    """A submission and its run folder's bookkeeping (a new run; `resume.ResumePlan` overrides)."""

    def __init__(self, sub: Submission, source: str, argv: list[str]) -> None:
        self.sub, self.source, self.argv = sub, source, argv

    def heading(self) -> str:
        return ""

    def prepare(self) -> None:
        """Before sbatch: the run folder and what it must hold."""
        while True:
            try:
                record.create(self.sub.run_dir, self.sub.describe(), ["submit.py", *self.argv])
                break
            except FileExistsError:  # another submitter made this name since we chose it
                self.sub = moved(self.sub, layout.next_free(self.sub.run_dir))
        record.write_tasks(self.sub.run_dir, [{"task": t.task, "overrides": t.overrides, "job": asdict(t.job),
                                               "run_dir": t.settings.run_dir} for t in self.sub.tasks])

    def record(self, job_ids: list[str]) -> None:
        """After each sbatch (a split array calls it once per array): what is queued so far."""
        record.update_record(self.sub.run_dir, job_ids=job_ids)

    def report(self, jobs: list[Any], as_json: bool) -> int:
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


def plan_submission(profile: Profile, points: list[Point], run_dir: Path, is_sweep: bool, source: str,
                    after: str | None) -> Submission:
    """Local checks, the --after dependency, and the submission as data (new runs and --resume alike)."""
    checks.check_writable_folder(run_dir.parent, "profile.runs_dir", "the run folder")
    for point in points:
        checks.check_local(profile, point.job, source, point.source)
    if after and profile.executor != "slurm":
        raise ConfigError(f"--after {after}: dependencies need a slurm profile, not '{profile.executor}'")
    return build(profile, points, run_dir, is_sweep, _job_ids_of(Path(after)) if after else [])


def execute(plan: Plan, args: argparse.Namespace) -> int:
    sub = plan.sub
    chunk = None
    if sub.executor == "slurm":
        # --dry-run still shows the script where the cluster cannot be asked (a laptop).
        chunk = limits.check(sub.slurm_request, sub.profile.max_array_size, plan.source, required=not args.dry_run,
                             tasks=len(sub.tasks))
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
    resolved = resolve(args.profile, args.job, args.sets)
    profile, job = resolved.profile, resolved.job
    if args.wait:
        profile.wait = True
    jobs = (expand(resolved.job_data, resolved.sweep, resolved.job_source) if resolved.sweep is not None
            else [(job, {})])
    points = [Point(i, one, overrides, resolved.job_source + (f" (sweep task {i})" if resolved.sweep is not None
                                                              else "")) for i, (one, overrides) in enumerate(jobs)]
    run_dir = layout.new_run_dir(Path(profile.runs_dir), job.name, profile.name)
    sub = plan_submission(profile, points, run_dir, len(points) > 1, resolved.profile_source, args.after)
    return execute(Plan(sub, resolved.profile_source, argv), args)


def _job_ids_of(run_dir: Path) -> list[str]:
    if not (run_dir / layout.RUN_FILE).is_file():
        raise ConfigError(f"--after {run_dir}: not a run folder (no readable {layout.RUN_FILE})")
    info = record.load_run(run_dir)
    ids = [str(i) for i in info.record.get("job_ids") or []]
    if not ids:
        raise ConfigError(f"--after {run_dir}: that run has no SLURM job id to depend on")
    if info.record.get("resumes"):
        # A resumed sweep's first array has failed tasks (afterok on it never holds): depend on the
        # job that ran each task last instead.
        return ids
    return jobids.distinct_bases(ids)


def dry_run(plan: Plan, as_json: bool, chunk: int | None = None) -> int:
    sub = plan.sub
    description = sub.describe()
    text = plan.heading()
    text += yaml.safe_dump({k: v for k, v in description.items() if v is not None}, sort_keys=False)
    if sub.is_array:
        text += sweep_listing(sub, chunk)
        description["task_dirs"] = [t.settings.run_dir for t in sub.tasks]
    if sub.executor == "slurm":
        script = send.sbatch_script(sub, chunk)
        description["sbatch_script"] = script
        text += "\n# sbatch script (submitted with sbatch):\n" + script
    emit(text + "\nDry run: nothing was submitted.", {"dry_run": True, **description}, as_json)
    return EXIT_OK


def sweep_listing(sub: Submission, chunk: int | None) -> str:
    """The expanded tasks of a sweep, one line each, and how the array is split (for --dry-run)."""
    lines = [f"\n# {len(sub.tasks)} sweep task(s), one job array element each:"]
    lines += [f"#   task-{t.task:04d}: " + " ".join(f"{k}={v}" for k, v in t.overrides.items()) for t in sub.tasks]
    if chunk and chunk < len(sub.tasks):
        pieces = -(-len(sub.tasks) // chunk)
        lines.append(f"# split into {pieces} arrays of at most {chunk} tasks (the cluster's MaxArraySize or "
                     f"profile.max_array_size); one sbatch per array")
    return "\n".join(lines) + "\n"
