"""The submission as plain data: built first (what `--dry-run` shows), then sent in one place.

`build()` has no side effects (no folders, no SLURM calls). `launcher.request.send.send()` is the
only place that creates executors and queues work.
"""

from __future__ import annotations

import shlex
import sys
from functools import cached_property
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher.cluster.slurm import allocation, sbatch
from launcher.config import cluster_keys
from launcher.config.profile import Profile
from launcher.config.resolve import Point
from launcher.node import torchrun_command
from launcher.rundir import exclusions, signature, snapshot
from launcher.rundir.layout import log_dir, task_dir
from trainer.config import project
from trainer.config.job import JobConfig, RunSettings
from trainer.config.lookup import CODE_ROOT


@dataclass
class TaskSpec:
    """One unit of work: a single run, or one element of a job array (a sweep point)."""

    task: int
    job: JobConfig
    settings: RunSettings
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class Submission:
    """Everything one submission sends, as data: what `--dry-run` prints and `send` queues."""

    executor: str  # local, debug or slurm
    run_dir: Path
    log_dir: Path
    profile: Profile
    tasks: list[TaskSpec]
    # Keyword arguments for the submitit executor's update_parameters.
    parameters: dict[str, Any]
    # SLURM_CONF for the submitter's SLURM commands and the job ("": SLURM's default).
    slurm_conf: str = ""
    after_job_ids: list[str] = field(default_factory=list)
    # What srun (or the local executor) starts before `-u -m submitit.core._submit`: the profile's
    # interpreter or container; None: submitit's default, this submitter's interpreter.
    python: str | None = None
    # What SLURM is asked for (None for the local and debug executors): the preflight checks it, and
    # `parameters` and `python` are made from it.
    request: sbatch.SlurmRequest | None = None
    # The directory the user submitted from: the ranks' working directory (trainer/config/project.py).
    submit_dir: Path = field(default_factory=Path.cwd)
    # The project's files to snapshot (the check surveyed them); None: no project to copy.
    project: snapshot.Survey | None = None
    # The tool's code the tasks import (copied into RUN/code): this checkout, or over SSH its synced
    # copy on the cluster side (launcher.remote.cluster_side), where this submission is sent from.
    code_root: Path = CODE_ROOT
    # What RUN/code/SNAPSHOT.json also records of where the code came from (over SSH: the laptop's
    # commit and dirty state, its project root and submit directory); {}: it was taken here.
    origin: dict[str, Any] = field(default_factory=dict)
    # A job step of the allocation the submitter runs in (`in_allocation`; None: a job of their own).
    allocation: allocation.Allocation | None = None
    # A function handed over from Python by value (launcher.client), for the new run folder
    # (trainer.runners.pickled); over SSH it travels inside this object (launcher.request.wire).
    function: bytes | None = None

    @property
    def cluster(self) -> str:
        """The SLURM cluster(s) the run may go to (the profile's `clusters:`, "a,b" for several: SLURM picks one;
        "": the SLURM_CONF's own)."""
        return self.request.cluster if self.request is not None else ""

    @property
    def project_root(self) -> str:
        """The project the tasks' code comes from ("" for a built-in job)."""
        return next((t.job.project_root for t in self.tasks if t.job.project_root), "")

    def search_path(self) -> list[str]:
        """The tool's code, then the rule's folders, as the ranks import them (inside the run's snapshot)."""
        job = next((t.job for t in self.tasks if t.job.project_root), None)
        if not self.profile.snapshot or self.executor == "debug":
            code, copy = str(self.code_root), None
        else:
            code = str(snapshot.snapshot_dir(self.run_dir))
            copy = str(snapshot.project_dir(self.run_dir, self.project_root, self.code_root))
        if job is None:
            return [code]
        folders = project.rank_path(job.project_root, job.code_dir, str(self.submit_dir), copy)
        return [code, *(f for f in folders if f != code)]

    @property
    def is_sweep(self) -> bool:
        """A sweep's points (an array task each, or a pool's), one point or many: the one rule, what `build` was
        told (each task's settings name its sweep), recorded in run.json (`sweep_overrides`) for the commands."""
        return bool(self.tasks[0].settings.sweep)

    @property
    def is_pool(self) -> bool:
        """A sweep run by a pool of workers that take its points in turn (`sweep_runner: pool`)."""
        return runs_as_pool(self.profile, self.is_sweep)

    @property
    def jobs(self) -> int:
        """How many scheduler jobs (array elements) are queued: a pool's workers, else one per task."""
        return min(self.profile.pool_workers, len(self.tasks)) if self.is_pool else len(self.tasks)

    @property
    def max_num_timeout(self) -> int:
        return self.profile.max_timeout_requeues

    @cached_property
    def signatures(self) -> signature.Signed:
        """What the run is (launcher.rundir.signature): its signature and each task's; hashed once."""
        laptop = (self.origin.get("project") or {}).get("laptop_root")  # over SSH: where the files are here
        job = next((t.job for t in self.tasks if t.job.project_root), self.tasks[0].job)
        code = signature.code_digest(self.project, Path(laptop) if laptop else None, job, self.function)
        return signature.signatures([t.job for t in self.tasks], self.profile, code, self.is_sweep)

    def describe(self) -> dict[str, Any]:
        """JSON-ready view for --dry-run and run.json."""
        first = self.tasks[0]
        return {
            "executor": self.executor, "run_dir": str(self.run_dir), "log_dir": str(self.log_dir),
            "submit_dir": str(self.submit_dir), "signature": self.signatures.run,
            "task_signatures": self.signatures.tasks if self.is_sweep else None,
            "signature_parts": self.signatures.parts(),
            "world_size": self.profile.world_size, "tasks": len(self.tasks),
            "batch_size_per_rank": first.job.batch_size_per_rank,
            "global_batch_size": first.job.batch_size_per_rank * self.profile.world_size,
            "profile": asdict(self.profile), "job": asdict(first.job), "settings": asdict(first.settings),
            "executor_parameters": self.parameters,
            "sweep_overrides": [t.overrides for t in self.tasks] if self.is_sweep else None,
            **({"runner": "pool", "pool_workers": self.jobs} if self.is_pool else {}),
            **({"in_allocation": {"job_id": self.allocation.job_id, "nodes": self.allocation.nodelist}}
               if self.allocation is not None else {}),
            **({"torchrun": torchrun_command.preview(self.profile.nodes, self.profile.tasks_per_node)}
               if self.profile.launch == "torchrun" else {}),
            # The one lookup rule, as the ranks will apply it (docs/your-code.md#where-your-code-is-found).
            "your_code": {"project_root": self.project_root or None, "working_directory": str(self.submit_dir),
                          "search_path": self.search_path(),
                          "snapshot": None if self.project is None else
                          {"files": len(self.project.files), "bytes": self.project.bytes}},
        }


def slurm_request(profile: Profile, job_name: str, after: list[str] | None = None,
                  run_dir: Path | None = None, submit_dir: Path | None = None,
                  project_root: str = "", code_root: Path = CODE_ROOT) -> sbatch.SlurmRequest:
    """What the profile asks SLURM for: built once per submission (`build`), then read by the live
    preflight, the executor parameters and the batch script alike."""
    # A container sees the run folder (pickles, checkpoints, results, the snapshot), the code, the
    # directory the ranks start in and the live project (snapshot: false) as on the host.
    extra = [str(p) for p in (run_dir, submit_dir) if p] + ([project_root] if project_root else [])
    binds = list(dict.fromkeys([*profile.container_binds, str(code_root), *extra])) if profile.container else []
    # torchrun: one SLURM task per node holds the CPUs (and GPUs) of all its processes.
    per_node = profile.tasks_per_node if profile.launch == "torchrun" else 1
    return sbatch.SlurmRequest(
        job_name=job_name, nodes=profile.nodes, tasks_per_node=profile.tasks_per_node // per_node,
        cpus_per_task=profile.cpus_per_task * per_node, rank_threads=profile.cpus_per_task,
        time_min=profile.time_min, gpus_per_node=profile.gpus_per_node,
        gpu_type=profile.gpu_type, gpus_per_task=profile.gpus_per_task, gpu_request=profile.gpu_request,
        mem_per_node_mb=profile.mem_per_node_mb, partition=profile.partition, account=profile.account,
        qos=profile.qos, constraint=profile.constraint, signal=profile.signal, signal_delay_s=profile.signal_delay_s,
        array_parallelism=profile.array_parallelism, env=dict(profile.env), setup=list(profile.setup),
        sbatch_extra=dict(profile.sbatch_extra), slurm_conf=profile.slurm_conf_file, after=list(after or []),
        cluster=",".join(cluster_keys.names(profile.clusters)),
        python=profile.python, container=profile.container, container_runtime=profile.container_runtime,
        container_binds=binds, run_dir=str(run_dir or ""), max_failures=profile.failures_allowed,
        node_error_patterns=list(profile.node_error_patterns),
        exclude=exclusions.excluded(run_dir) if run_dir else [],  # --resume: the nodes the run left out
        step_name=allocation.step_name(run_dir.name if run_dir else job_name) if profile.in_allocation else "")


def local_parameters(profile: Profile) -> dict[str, Any]:
    """submitit's parameters for the local and debug executors (SLURM's come from the request)."""
    if profile.executor == "debug":
        return {"timeout_min": profile.time_min}
    return {"timeout_min": profile.time_min, "tasks_per_node": profile.tasks_per_node, "nodes": 1,
            "gpus_per_node": profile.gpus_per_node, "signal_delay_s": profile.signal_delay_s}


# How many of a sweep's points before a point its `checkpoint_every_steps: auto` reads (trainer.rank.interval): enough
# for a rate of interruptions, few enough that starting a point of a 10,000-point sweep reads a handful of files.
HISTORY_POINTS = 16


def run_settings(profile: Profile, point: Point, folder: Path, swept: bool, run_dir: Path) -> RunSettings:
    """What the profile decides for one task, training in `folder` (its data folder and trackers
    came resolved with the point: launcher.config.resolve)."""
    return RunSettings(
        run_dir=str(folder), data_dir=point.data_dir, use_gpus=profile.gpus_per_node > 0,
        threads=profile.cpus_per_task, checkpoint_every_steps=profile.checkpoint_every_steps,
        init_timeout_s=profile.init_timeout_s, collective_timeout_s=profile.collective_timeout_s,
        stop_signal=profile.signal,
        progress_bar=profile.executor != "slurm" and sys.stderr.isatty(),
        max_restarts=profile.max_timeout_requeues,
        tracker=point.tracker, profile=profile.name, task=point.task, swept=dict(point.overrides) if swept else {},
        sweep=run_dir.name if swept else "",
        history=[str(task_dir(run_dir, t, True)) for t in range(max(0, point.task - HISTORY_POINTS), point.task)]
        if swept else [],
    )


def runs_as_pool(profile: Profile, is_sweep: bool) -> bool:
    """A sweep run by a pool of workers (`sweep_runner: pool`; a single run ignores the key)."""
    return is_sweep and profile.sweep_runner == "pool"


def build(profile: Profile, points: list[Point], run_dir: Path, is_sweep: bool,
          after: list[str] | None = None, submit_dir: Path | None = None,
          project_files: snapshot.Survey | None = None, code_root: Path = CODE_ROOT,
          origin: dict[str, Any] | None = None, held: allocation.Allocation | None = None,
          function: bytes | None = None) -> Submission:
    """The whole submission for `points` (one, or one per array task) under `run_dir`. Pure."""
    tasks = [TaskSpec(p.task, p.job, run_settings(profile, p, task_dir(run_dir, p.task, is_sweep), is_sweep, run_dir),
                      p.overrides) for p in points]
    submit_dir = submit_dir or Path.cwd()
    request = None
    if profile.executor == "slurm":
        root = next((p.job.project_root for p in points if p.job.project_root), "")
        request = slurm_request(profile, points[0].job.name, after, run_dir, submit_dir, root, code_root)
        pool = runs_as_pool(profile, is_sweep)
        if pool:
            # No batch-script retry step: a pool's worker is no task of its own (its points are), and
            # a dead worker's point is taken back by the others (launcher.reports.pool_claims).
            request = replace(request, run_dir="")
        params, python = sbatch.parameters(request), sbatch.python_command(request)
        if pool:  # every worker at once: they share the points
            params["array_parallelism"] = max(1, min(profile.pool_workers, len(points)))
    else:  # the local executor starts the same command (containers need srun: refused in Profile)
        params, python = local_parameters(profile), shlex.quote(profile.python) if profile.python else None
    return Submission(profile.executor, run_dir, log_dir(run_dir), profile, tasks, params,
                      profile.slurm_conf_file, list(after or []), python, request, submit_dir, project_files,
                      code_root, dict(origin or {}), held if profile.in_allocation else None, function)


def moved(sub: Submission, run_dir: Path) -> Submission:
    """The same submission under another (not yet existing) run folder: a concurrent submitter took
    the name first (two runs of one job started in the same second). Built again: the request binds
    the run folder into a container."""
    points = [Point(t.task, t.job, t.overrides, "", t.settings.data_dir, t.settings.tracker) for t in sub.tasks]
    return build(sub.profile, points, run_dir, sub.is_sweep, sub.after_job_ids, sub.submit_dir, sub.project,
                 sub.code_root, sub.origin, held=sub.allocation, function=sub.function)
