"""The submission as plain data: built first (what `--dry-run` shows), then sent in one place.

`build()` has no side effects (no folders, no SLURM calls). `launcher.send.send()` is the only place
that creates executors and queues work.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from launcher.profile import Profile
from launcher.resolve import project_path
from trainer.config import JobConfig, RunSettings
from trainer.schema import ConfigError

# Every SLURM task is killed as soon as one exits with an error, so a crashed rank ends the job
# instead of leaving its peers waiting in a collective.
SRUN_ARGS = ["--kill-on-bad-exit=1"]


@dataclass
class TaskSpec:
    """One unit of work: a single run, or one element of a job array (a sweep point)."""

    job: JobConfig
    settings: RunSettings
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class Submission:
    executor: str  # local, debug or slurm
    run_dir: Path
    log_dir: Path
    profile: Profile
    tasks: list[TaskSpec]
    # Keyword arguments for the submitit executor's update_parameters.
    parameters: dict[str, Any]
    # Variables the submitter needs for SLURM's commands (SLURM_CONF).
    client_env: dict[str, str]
    max_num_timeout: int = 3
    after_job_ids: list[str] = field(default_factory=list)

    @property
    def is_array(self) -> bool:
        return len(self.tasks) > 1

    def describe(self) -> dict[str, Any]:
        """JSON-ready view for --dry-run and run.json."""
        first = self.tasks[0]
        return {
            "executor": self.executor, "run_dir": str(self.run_dir), "log_dir": str(self.log_dir),
            "world_size": self.profile.world_size, "tasks": len(self.tasks),
            "batch_size_per_rank": first.job.batch_size_per_rank,
            "global_batch_size": first.job.batch_size_per_rank * self.profile.world_size,
            "profile": asdict(self.profile), "job": asdict(first.job), "settings": asdict(first.settings),
            "executor_parameters": self.parameters,
            "sweep_overrides": [t.overrides for t in self.tasks] if self.is_array else None,
        }


def quote_setup_line(line: str, key: str = "setup") -> str:
    """A setup line as one simple command: words re-quoted so metacharacters never execute
    (`echo a; touch x` runs echo with the words 'a;', 'touch' and 'x')."""
    try:
        return shlex.join(shlex.split(line))
    except ValueError as err:  # unbalanced quotes
        raise ConfigError(f"profile.{key}: {line!r} is not a command line ({err}); each setup line is "
                          f"one command whose words are quoted before they reach the script") from None


def setup_lines(profile: Profile, client_env: dict[str, str]) -> list[str]:
    """The batch script's setup: exports first (setup commands may read them), then the profile's
    commands. Every value is quoted: nothing from a profile or --set is interpreted by the shell."""
    # OMP_NUM_THREADS: libraries that start thread pools before the trainer sets its thread count
    # (torch reads it at import) use the task's CPUs, not the whole node's.
    env = {**client_env, "SUBMITIT_PREEMPT_SIGNAL": profile.signal,
           "OMP_NUM_THREADS": str(profile.cpus_per_task), **profile.env}
    lines = [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    lines += [quote_setup_line(line, f"setup[{i}]") for i, line in enumerate(profile.setup)]
    return lines


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_one_line(values: dict[str, str]) -> None:
    """Values written into `#SBATCH --key=value` lines must stay on their line: submitit quotes them
    for sbatch, but a newline would end the directive and start a shell command in the script."""
    for key, value in values.items():
        found = _CONTROL.search(value)
        if found:
            raise ConfigError(f"{key}: {value!r} contains the control character {found.group()!r}; "
                              f"SLURM options are single-line text")


def executor_parameters(profile: Profile, job_name: str, log_dir: Path, client_env: dict[str, str],
                        after: list[str]) -> dict[str, Any]:
    """submitit parameters for the profile's executor (SLURM's names for slurm)."""
    if profile.executor == "debug":
        return {"timeout_min": profile.time_min}
    if profile.executor == "local":
        return {"timeout_min": profile.time_min, "tasks_per_node": profile.tasks_per_node, "nodes": 1,
                "gpus_per_node": profile.gpus_per_node, "signal_delay_s": profile.signal_delay_s}
    check_one_line({"job.name": job_name, "profile.constraint": profile.constraint,
                    **{f"profile.sbatch_extra.{k}": v for k, v in profile.sbatch_extra.items()}})
    params: dict[str, Any] = {
        "job_name": job_name, "time": profile.time_min, "nodes": profile.nodes,
        "ntasks_per_node": profile.tasks_per_node, "cpus_per_task": profile.cpus_per_task,
        "signal_delay_s": profile.signal_delay_s, "setup": setup_lines(profile, client_env),
        "srun_args": list(SRUN_ARGS), "array_parallelism": profile.array_parallelism,
        "stderr_to_stdout": False, "additional_parameters": {"requeue": True, **profile.sbatch_extra},
    }
    if profile.gpus_per_node:
        params["gpus_per_node"] = profile.gpus_per_node
    if profile.mem_per_task_gb:
        params["mem"] = f"{int(profile.mem_per_task_gb * 1024 * profile.tasks_per_node)}M"
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(profile, key):
            params[key] = getattr(profile, key)
    if after:
        params["dependency"] = "afterok:" + ":".join(after)
    return params


def client_environment(profile: Profile) -> dict[str, str]:
    if profile.executor == "slurm" and profile.slurm_conf:
        return {"SLURM_CONF": str(project_path(profile.slurm_conf))}
    return {}


def run_settings(profile: Profile, job: JobConfig, run_dir: Path) -> RunSettings:
    data_dir = Path(job.data_dir or profile.data_dir).expanduser()
    return RunSettings(
        run_dir=str(run_dir), data_dir=str(data_dir.resolve()), use_gpus=profile.gpus_per_node > 0,
        threads=profile.cpus_per_task, checkpoint_every_steps=profile.checkpoint_every_steps,
        init_timeout_s=profile.init_timeout_s, collective_timeout_s=profile.collective_timeout_s,
        stop_signal=profile.signal,
        progress_bar=profile.executor != "slurm" and sys.stderr.isatty(),
    )


def build(profile: Profile, jobs: list[tuple[JobConfig, dict[str, Any]]], run_dir: Path,
          after: list[str] | None = None) -> Submission:
    """The whole submission for `jobs` (one, or one per array task) under `run_dir`. Pure."""
    log_dir = run_dir / "logs"
    client_env = client_environment(profile)
    tasks = []
    for index, (job, overrides) in enumerate(jobs):
        task_dir = run_dir if len(jobs) == 1 else run_dir / f"task-{index:04d}"
        tasks.append(TaskSpec(job, run_settings(profile, job, task_dir), overrides))
    params = executor_parameters(profile, jobs[0][0].name, log_dir, client_env, after or [])
    return Submission(profile.executor, run_dir, log_dir, profile, tasks, params, client_env,
                      profile.max_timeout_requeues, list(after or []))


def cuda_visible_here() -> bool:
    """Whether this machine has an NVIDIA driver, without importing torch (keeps the submitter fast)."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")
