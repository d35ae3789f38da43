"""The one place that queues work: make the submitit executor for a Submission and submit it."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from launcher.submission import Submission
from launcher.task import TrainTask
from trainer.distenv import scrubbed
from trainer.schema import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def submission_environment(extra: dict[str, str]) -> Iterator[None]:
    """Submit with a clean environment: a submitter running inside a job must not pass that job's
    SLURM_*/RANK/MASTER_* variables on (sbatch exports the caller's environment to the new job,
    and the local executor copies it into its processes)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(scrubbed(saved))
    os.environ.update(extra)
    # The task unpickles launcher.task.TrainTask wherever it runs: make the project importable there
    # even when the submitter was started from another folder and the project is not installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), saved.get("PYTHONPATH", "")) if p)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def make_executor(sub: Submission, script_only: bool = False) -> Any:
    """The submitit executor for `sub`, with its parameters set; creating it queues nothing.

    `script_only`: the executor only writes the sbatch script (--dry-run), so it may be made on a
    machine without `srun`; everything else is the same construction as for sending."""
    import submitit
    from submitit.core.job_environment import JobEnvironment

    folder = sub.log_dir / "%j"
    if sub.executor == "debug":
        executor: Any = submitit.DebugExecutor(folder)
    elif sub.executor == "local":
        executor = submitit.LocalExecutor(folder, max_num_timeout=sub.max_num_timeout)
    else:
        # The signal name is read by submitit both when writing --signal and on the node.
        JobEnvironment.USR_SIG = sub.profile.signal
        cls = _script_only_slurm_executor() if script_only else submitit.SlurmExecutor
        executor = cls(folder, max_num_timeout=sub.max_num_timeout)
    executor.update_parameters(**sub.parameters)
    return executor


def _script_only_slurm_executor() -> type:
    import submitit

    class ScriptOnlySlurmExecutor(submitit.SlurmExecutor):
        """A SlurmExecutor that does not insist on `srun` being installed (it never submits)."""

        @classmethod
        def affinity(cls) -> int:
            return 2

    return ScriptOnlySlurmExecutor


def sbatch_script(sub: Submission, chunk_size: int | None = None) -> str:
    """The exact script `send` would pass to sbatch (for the first array, if it is split), for
    --dry-run and its recorded-file test. submitit builds it from the same executor parameters."""
    executor = make_executor(sub, script_only=True)
    if sub.is_array:
        # What submitit sets on the array executor it makes for each batch of tasks.
        executor.parameters["map_count"] = min(len(sub.tasks), chunk_size or len(sub.tasks))
    return executor._make_submission_file_text(executor._submitit_command_str, "dry-run")


class SubmissionRefused(ConfigError):
    """sbatch refused the job (a request the preflight cannot see, e.g. an unknown node name)."""


def send(sub: Submission, chunk_size: int | None = None) -> list[Any]:
    """Queue `sub`: one job, or one job array (split into arrays of at most `chunk_size` tasks).

    If sbatch refuses the first job, nothing is queued: the run folder is removed again and the
    refusal is a SubmissionRefused (bad input, exit 2) carrying sbatch's own message."""
    from submitit.core.utils import FailedJobError, FailedSubmissionError

    executor = make_executor(sub)
    calls = [TrainTask(t.job, t.settings) for t in sub.tasks]
    # submitit keeps calling SLURM after sbatch (sacct while waiting, scancel), from this process's
    # environment: those calls must reach the same cluster (the profile's SLURM_CONF).
    os.environ.update(sub.client_env)
    jobs: list[Any] = []
    # submitit prints sbatch's stderr itself when sbatch fails; hold it back, since the error we
    # raise quotes it (one line instead of two), and pass it on otherwise.
    # (SLURM only: the debug executor runs the task in this process, where pdb needs the terminal.)
    held = io.StringIO()
    holding = contextlib.redirect_stderr(held) if sub.executor == "slurm" else contextlib.nullcontext()
    try:
        with submission_environment(sub.client_env), holding:
            if not sub.is_array:
                jobs = [executor.submit(calls[0])]
            else:
                size = chunk_size or len(calls)
                for start in range(0, len(calls), size):
                    with executor.batch():
                        jobs += [executor.submit(call) for call in calls[start:start + size]]
    except (FailedJobError, FailedSubmissionError) as err:
        said = " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
        if jobs:
            queued = ", ".join(dict.fromkeys(str(j.job_id).split("_")[0] for j in jobs))
            raise SubmissionRefused(f"sbatch refused part of the sweep after job(s) {queued} were queued "
                                    f"(run folder {sub.run_dir}): {said}") from None
        if sub.executor == "slurm":
            shutil.rmtree(sub.run_dir, ignore_errors=True)
        raise SubmissionRefused(f"sbatch refused the job, nothing was queued: {said}") from None
    except BaseException:
        sys.stderr.write(held.getvalue())
        raise
    sys.stderr.write(held.getvalue())
    return jobs
