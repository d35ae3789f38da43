"""The one path every submission takes (a new run here or over SSH, `--resume`, an identical submission that
continues a run, and the cluster side's `receive`): plan -> check -> dry-run or send -> report, and the reports
of a new run (where it went, or with `--wait` its result).

`execute` runs the same check (the plan's: the live SLURM preflight, which `--dry-run` may skip
where the cluster cannot be asked; over SSH the cluster side's), the same dry run and the same
sending for every kind of plan, so they cannot drift apart. The sending and waiting code
(launcher.request.send, .waiting) is imported only when something is sent: a dry run never loads it.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from launcher.cluster import jobids
from launcher.cluster.preflights import Answer
from launcher.commands.console import EXIT_FAILED, EXIT_OK, emit, overrides_text, relative
from launcher.request import channel, executor
from launcher.request.plan import Plan
from launcher.request.submission import Submission
from launcher.rundir import ettr, layout, record, reused

if TYPE_CHECKING:
    from launcher.request.over_ssh import SshPlan

# Not metrics (besides where and how each rank ran: trainer.runners.envelope.PLACE_KEYS): how the run
# went, shown by --json only.
NOT_METRICS = ("job_id", "state", "nodes", "restarts", "restart_causes", "time")


class NewRun(Plan):
    """A new run's plan: after sending, wait for it (a waiting profile) or say where it went. A new sweep whose
    points other runs computed (`reused`, found by launcher.commands.reuse) queues only the others."""

    verbose = False  # --verbose: submitit's own INFO lines too

    def prepare(self) -> None:
        super().prepare()
        if not self.reused:
            return
        sub = self.sub
        entries = {str(t.task): reused.bring(sub.run_dir, t.task, self.reused[t.task], t.overrides)
                   for t in sub.tasks if t.task in self.reused}
        record.update_record(sub.run_dir, **{reused.RECORD_KEY: entries})
        if len(entries) < len(sub.tasks):  # what is queued: the other points
            self.sub = replace(sub, tasks=[t for t in sub.tasks if t.task not in self.reused])

    def record(self, job_ids: list[str]) -> None:
        if not self.reused or self.sub.is_pool:  # (a pool's job ids are its workers': its points are in its claims)
            super().record(job_ids)
            return
        task_jobs: list[list[str]] = [[] for _ in range(len(self.sub.tasks) + len(self.reused))]
        for spec, job_id in zip(self.sub.tasks, job_ids):
            task_jobs[spec.task] = [job_id]
        record.update_record(self.sub.run_dir, job_ids=job_ids, task_jobs=task_jobs)
        channel.tell("queued", run_dir=str(self.sub.run_dir), job_ids=job_ids)

    def report(self, jobs: list[Any], as_json: bool) -> int:
        sub = self.sub
        if sub.profile.waits:
            if sub.is_sweep:
                return wait_for_sweep(sub.run_dir, jobs, as_json)
            return wait_for_run(sub, jobs[0], as_json, self.verbose)
        job_ids = [str(j.job_id) for j in jobs]
        where = relative(sub.run_dir)
        logs = [relative(layout.job_log_dir(sub.run_dir, b)) for b in jobids.distinct_bases(job_ids)]
        pool = f"a pool of {sub.jobs} worker(s) for " if sub.is_pool else ""
        human = (f"submitted job {jobids.summary(job_ids)} ({pool}{len(sub.tasks)} task(s), {sub.profile.world_size} "
                 f"rank(s) each)\nrun folder: {where}\nlogs: {', '.join(logs)}\n"
                 f"follow with: python submit.py status {where}")
        reused_points = sorted(self.reused)
        if reused_points:
            human += f"\n{len(reused_points)} more point(s) of the sweep came from earlier runs (status shows them)"
        emit(human, {"job_id": jobids.base_id(job_ids[0]), "job_ids": job_ids, "run_dir": str(sub.run_dir),
                     "log_dir": str(sub.log_dir), "tasks": len(sub.tasks) + len(reused_points),
                     **({"reused_points": reused_points} if reused_points else {})}, as_json)
        return EXIT_OK


def execute(plan: Plan | SshPlan, dry: bool, as_json: bool) -> int:
    """Check, then show or send: the one path of every submission (`--when`'s estimate: launcher.commands.when,
    after the same check)."""
    answer = plan.preflight(dry)
    if dry:
        return dry_run(plan, as_json, answer)
    return plan.send(answer, as_json)


def dry_run(plan: Plan | SshPlan, as_json: bool, answer: Answer | None = None) -> int:
    """What would be sent, as data: the submission (and over SSH the commands that send it)."""
    sub = plan.sub
    description = sub.describe()
    text = plan.heading()
    # libyaml's emitter where PyYAML has it (the same text, several times faster than the pure-Python
    # one: a 1,000-task sweep's description is what users wait for). Names as written: `café`, not `caf\xE9`.
    text += yaml.dump({k: v for k, v in description.items() if v is not None}, sort_keys=False,
                      allow_unicode=True, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    answer = answer or Answer()
    if sub.is_sweep:
        text += sweep_listing(sub, answer.chunk)
        description["task_dirs"] = [t.settings.run_dir for t in sub.tasks]
    if sub.executor == "slurm":
        script = executor.sbatch_script(sub, answer)
        description["slurm"] = answer.release.describe()
        description["sbatch_script"] = script
        text += "\n# SLURM: " + "; ".join(f"{k} {v}" for k, v in description["slurm"].items())
        text += "\n# sbatch script (submitted with sbatch):\n" + script
    emit(text + "\nDry run: nothing was submitted.", {"dry_run": True, **description}, as_json)
    return EXIT_OK


def sweep_listing(sub: Submission, chunk: int | None) -> str:
    """The expanded tasks of a sweep, one line each, and how the array is split (for --dry-run)."""
    lines = [f"\n# {len(sub.tasks)} sweep task(s), " + (f"taken in turn by a pool of {sub.jobs} worker(s), each the "
                                                     f"size of one task:" if sub.is_pool else "one job array element each:")]
    lines += [f"#   task-{t.task:04d}: " + " ".join(f"{k}={v}" for k, v in t.overrides.items()) for t in sub.tasks]
    if chunk and chunk < sub.jobs:
        pieces = -(-sub.jobs // chunk)
        lines.append(f"# split into {pieces} arrays of at most {chunk} tasks (the cluster's MaxArraySize or "
                     f"profile.max_array_size); one sbatch per array")
    return "\n".join(lines) + "\n"


def metrics_line(result: dict[str, Any]) -> str:
    """The final metrics in one line: the built-in recipe's fixed set, or what a user's function
    logged last and returned."""
    from trainer.runners.envelope import PLACE_KEYS  # (the result's own keys: once a run has ended)

    if all(k in result for k in ("test_accuracy", "test_loss", "epochs", "images_per_second")):
        return (f"test_accuracy {result['test_accuracy']:.4f}  test_loss {result['test_loss']:.4f}  "
                f"epochs {result['epochs']}  world_size {result['world_size']}  "
                f"images/s {result['images_per_second']:.0f}")
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()
                     if k not in NOT_METRICS and k not in PLACE_KEYS and isinstance(v, (int, float, str)) and not isinstance(v, bool))


def wait_for_run(sub: Submission, job: Any, as_json: bool, verbose: bool = False) -> int:
    """`--wait` for a single run: its result (or failure) into the run folder, and reported."""
    import logging

    from launcher.cluster.slurm.sbatch import heal_policy
    from launcher.waiting.echo import rank0_echo
    from launcher.waiting.pending import LeaveOutWhilePending
    from launcher.waiting.ends import wait
    from launcher.rundir import plots, restarts, retries

    if not verbose:  # submitit's INFO lines (the debug executor runs the job in this process)
        logging.getLogger("submitit").setLevel(logging.WARNING)
    print(f"running {sub.tasks[0].job.name} on {sub.executor} ({sub.profile.world_size} rank(s)), "
          f"run folder {relative(sub.run_dir)}", flush=True)
    echo = rank0_echo(job, verbose) if sub.executor == "local" else None
    policy = heal_policy(sub.request) if sub.request is not None and sub.executor == "slurm" else None
    pending = LeaveOutWhilePending(policy, str(job.job_id)) if policy is not None else None
    with echo or contextlib.nullcontext():
        done = wait(job, retries=sub.profile.failures_allowed > 0, pending=pending, run_dir=sub.run_dir)
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
    effective = ettr.of_task(sub.run_dir, record.read_run_record(sub.run_dir).get("created"), None)
    if effective is not None:  # (how much of the wall time from submission its steps kept: status shows it too)
        result["ettr"] = effective.as_json()
    record.write_result(sub.run_dir, result)
    record.update_record(sub.run_dir, state="COMPLETED")
    plots.write_curves(sub.run_dir)
    human = f"run folder: {relative(sub.run_dir)}\n{metrics_line(result)}"
    if counted.count:
        human += f"\n{counted.summary()}"
    emit(human, result, as_json)
    return EXIT_OK


def wait_for_sweep(run_dir: Path, jobs: list[Any], as_json: bool) -> int:
    """`--wait` for the array tasks in `jobs` (a sweep, or the tasks `--resume` sent again): each as it
    ends, then the summary; 0 if every task of the run completed, 1 otherwise (the failed rows say why)."""
    from launcher.waiting.ends import sweep_endings, sweep_tasks
    from launcher.rundir import results
    from launcher.rundir.states import task_states

    info = record.load_run(run_dir)
    print(f"running sweep {info.job.get('name', '')}: {len(sweep_tasks(info, jobs))} task(s) on {info.executor}, "
          f"run folder {relative(run_dir)}", flush=True)
    metric, _ = info.target
    states = None
    for ended, states in sweep_endings(info, jobs):
        for ts in ended:
            value = (ts.result or {}).get(metric)
            detail = f"{metric} {value:.4f}" if isinstance(value, (int, float)) else ts.error
            print(f"task {ts.task} {ts.state}: {overrides_text(ts.overrides)}  {detail}", flush=True)
    states = states if states is not None else task_states(info)
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
    emit("", payload, as_json)
    return EXIT_FAILED if failed else EXIT_OK
