"""`submit.py [--profile P] [--job J]`: resolve, check, build, (dry-run or) send, and report."""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from launcher import preflight, runs, submission
from launcher.relay import for_local_run as relay_logs
from launcher.cli import EXIT_FAILED, EXIT_OK, emit, relative
from launcher.resolve import resolve
from launcher.sweep import expand, write_tasks
from trainer.schema import ConfigError


def submit(args: argparse.Namespace, argv: list[str]) -> int:
    if args.resume:
        from launcher.resume import resume

        return resume(args, argv)
    resolved = resolve(args.profile, args.job, args.sets)
    profile, job = resolved.profile, resolved.job
    if args.wait:
        profile.wait = True
    jobs = (expand(resolved.job_data, resolved.sweep, resolved.job_source) if resolved.sweep is not None
            else [(job, {})])
    for one, _ in jobs:
        preflight.check_local(profile, one, resolved.profile_source)
    if args.after and profile.executor != "slurm":
        raise ConfigError(f"--after {args.after}: dependencies need a slurm profile, not '{profile.executor}'")
    after = _job_ids_of(Path(args.after)) if args.after else []
    run_dir = runs.new_run_dir(Path(profile.runs_dir), job.name, profile.name)
    sub = submission.build(profile, jobs, run_dir, after)
    chunk = None
    if profile.executor == "slurm":
        from launcher import slurm_preflight

        # --dry-run still shows the script where the cluster cannot be asked (a laptop).
        chunk = slurm_preflight.check(sub, resolved.profile_source, required=not args.dry_run)
    if args.dry_run:
        return dry_run(sub, args.json, chunk)
    return send_and_report(sub, args, argv, chunk)


def _job_ids_of(run_dir: Path) -> list[str]:
    try:
        ids = runs.read_record(run_dir).get("job_ids", [])
    except (OSError, ValueError):
        raise ConfigError(f"--after {run_dir}: not a run folder (no readable {runs.RUN_FILE})") from None
    if not ids:
        raise ConfigError(f"--after {run_dir}: that run has no SLURM job id to depend on")
    if runs.read_record(run_dir).get("resumes"):
        # A resumed sweep's first array has failed tasks (afterok on it never holds): depend on the
        # job that ran each task last instead.
        return [str(i) for i in ids]
    return list(dict.fromkeys(str(i).split("_")[0] for i in ids))


def dry_run(sub: submission.Submission, as_json: bool, chunk: int | None = None) -> int:
    import yaml

    description = sub.describe()
    text = yaml.safe_dump({k: v for k, v in description.items() if v is not None}, sort_keys=False)
    if sub.is_array:
        text += sweep_listing(sub, chunk)
        description["task_dirs"] = [t.settings.run_dir for t in sub.tasks]
    if sub.executor == "slurm":
        from launcher.send import sbatch_script

        script = sbatch_script(sub, chunk)
        description["sbatch_script"] = script
        text += "\n# sbatch script (submitted with sbatch):\n" + script
    emit(text + "\nDry run: nothing was submitted.", {"dry_run": True, **description}, as_json)
    return EXIT_OK


def send_and_report(sub: submission.Submission, args: argparse.Namespace, argv: list[str],
                    chunk: int | None) -> int:
    from launcher import outcome
    from launcher.send import send

    runs.create(sub.run_dir, sub.describe(), ["submit.py", *argv])
    write_tasks(sub.run_dir, [(i, t.overrides, asdict(t.job), t.settings.run_dir)
                              for i, t in enumerate(sub.tasks)])
    jobs = send(sub, chunk)
    job_ids = [str(j.job_id) for j in jobs]
    runs.update_record(sub.run_dir, job_ids=job_ids)
    where = relative(sub.run_dir)
    if not sub.profile.waits:
        logs = [relative(sub.log_dir / jid.split("_")[0]) for jid in dict.fromkeys(job_ids)]
        human = (f"submitted job {_id_summary(job_ids)} ({len(sub.tasks)} task(s), {sub.profile.world_size} rank(s) "
                 f"each)\nrun folder: {where}\nlogs: {', '.join(logs)}\n"
                 f"follow with: python submit.py status {where}")
        emit(human, {"job_id": job_ids[0].split("_")[0], "job_ids": job_ids, "run_dir": str(sub.run_dir),
                     "log_dir": str(sub.log_dir), "tasks": len(sub.tasks)}, args.json)
        return EXIT_OK
    if sub.is_array:
        from launcher import operations

        return operations.wait_for_sweep(sub.run_dir, jobs, args.json)
    print(f"running {sub.tasks[0].job.name} on {sub.executor} ({sub.profile.world_size} rank(s)), "
          f"run folder {where}", flush=True)
    relay = relay_logs(jobs[0]) if sub.executor == "local" else None
    with relay or contextlib.nullcontext():
        done = outcome.wait(jobs[0])
    if not done.ok:
        rank, short, text = done.failures[0]
        print(f"error: the run failed on rank {rank}: {short}", file=sys.stderr)
        print(text, file=sys.stderr)
        runs.update_record(sub.run_dir, state="FAILED", failed_rank=rank, error=short)
        emit("", {"run_dir": str(sub.run_dir), "job_id": job_ids[0], "state": "FAILED", "failed_rank": rank,
                  "error": short, **_restarts(sub.run_dir)}, args.json)
        return EXIT_FAILED
    result = {**done.result, "run_dir": str(sub.run_dir), "job_id": job_ids[0], "state": "COMPLETED"}
    result.update(_restarts(sub.run_dir))
    runs.write_result(sub.run_dir, result)
    runs.update_record(sub.run_dir, state="COMPLETED")
    from launcher import plots

    plots.write_curves(sub.run_dir)
    human = (f"run folder: {where}\n"
             f"test_accuracy {result['test_accuracy']:.4f}  test_loss {result['test_loss']:.4f}  "
             f"epochs {result['epochs']}  world_size {result['world_size']}  "
             f"images/s {result['images_per_second']:.0f}")
    if result.get("restarts"):
        from launcher import restarts

        human += f"\n{restarts.read(sub.run_dir).summary()}"
    emit(human, result, args.json)
    return EXIT_OK


def _restarts(run_dir: Path) -> dict[str, Any]:
    """How many times the run was restarted and why ({"restarts": N, "restart_causes": {...}})."""
    from launcher import restarts

    return restarts.read(run_dir).as_json()


def _id_summary(job_ids: list[str]) -> str:
    arrays = list(dict.fromkeys(j.split("_")[0] for j in job_ids))
    if len(job_ids) == 1:
        return job_ids[0]
    return f"array {', '.join(arrays)} ({len(job_ids)} tasks)"


def sweep_listing(sub: submission.Submission, chunk: int | None) -> str:
    """The expanded tasks of a sweep, one line each, and how the array is split (for --dry-run)."""
    lines = [f"\n# {len(sub.tasks)} sweep task(s), one job array element each:"]
    lines += [f"#   task-{i:04d}: " + " ".join(f"{k}={v}" for k, v in t.overrides.items())
              for i, t in enumerate(sub.tasks)]
    if chunk and chunk < len(sub.tasks):
        pieces = -(-len(sub.tasks) // chunk)
        lines.append(f"# split into {pieces} arrays of at most {chunk} tasks (the cluster's MaxArraySize or "
                     f"profile.max_array_size); one sbatch per array")
    return "\n".join(lines) + "\n"
