"""The few private parts of submitit this project relies on, in one place.

submitit has no public API for four things the submitter needs: which signal its job environment
listens to (and setting it before the script is written), the time-out countdown of a requeue
decision, the text of the sbatch script without submitting it (--dry-run), and the environment a debug
job runs its function in (which it otherwise copies from this process when it is made). They are reached only
through this module. `check()` names any attribute an installed submitit lacks, and the test suite
calls it, so an upgrade that moves one fails loudly there instead of deep inside a requeue;
`pyproject.toml` bounds submitit to the versions that test passed on.

Importers outside the node side load this module lazily: it imports submitit.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import signal
from types import SimpleNamespace
from typing import Any

from submitit.core import utils
from submitit.core.job_environment import JobEnvironment, SignalHandler
from submitit.local.debug import DebugJob
from submitit.slurm.slurm import SlurmExecutor, SlurmInfoWatcher, SlurmJob

# (owner, attribute, what we use it for)
REQUIRED: tuple[tuple[type, str, str], ...] = (
    (JobEnvironment, "USR_SIG", "the requeue signal's name, set before the sbatch script is written"),
    (JobEnvironment, "_usr_sig", "the signal number submitit listens to on the node"),
    (SignalHandler, "checkpoint_and_try_requeue", "submitit's requeue decision and action"),
    (SignalHandler, "has_timed_out", "time-out or preemption"),
    (SlurmExecutor, "_make_submission_file_text", "the sbatch script for --dry-run"),
    (SlurmExecutor, "_submitit_command_str", "the command the sbatch script runs"),
    (SlurmInfoWatcher, "_make_command", "submitit's sacct while --wait waits, which must name the run's cluster"),
    (SlurmJob, "watcher", "the watcher of a run's jobs, one that names the run's cluster"),
    (SlurmExecutor, "_internal_process_submissions", "an array's jobs, given that watcher too"),
)


def check() -> list[str]:
    """The private attributes this installed submitit lacks, each with what we need it for."""
    missing = [f"{owner.__module__}.{owner.__name__}.{name} ({why})"
               for owner, name, why in REQUIRED if not hasattr(owner, name)]
    # An instance attribute: only a made DelayedSubmission shows it.
    if not hasattr(utils.DelayedSubmission(print), "_timeout_countdown"):
        missing.append("submitit.core.utils.DelayedSubmission._timeout_countdown (time-out requeues left)")
    if not hasattr(utils.DelayedSubmission(print), "_timeout_min"):
        missing.append("submitit.core.utils.DelayedSubmission._timeout_min (the time limit, for time-out or preemption)")
    # Read in the source: only a job made and run shows it.
    if "self.environ" not in inspect.getsource(DebugJob.__init__) or "self.environ" not in inspect.getsource(
            DebugJob.results):
        missing.append("submitit.local.debug.DebugJob.environ (the environment a debug run's function runs in)")
    return missing


def give_environment(job: DebugJob, env: dict[str, str]) -> None:
    """A debug job runs its function in this process with its `environ` put in place for the run and taken
    back after (submitit's DebugJob.results): the run's environment, given to it as data, so that the
    caller's own is never replaced around the submission (a debug run's caller may be a notebook)."""
    job.environ = dict(env)


def set_requeue_signal(name: str) -> None:
    """The signal (e.g. "USR2") submitit writes into `#SBATCH --signal` and listens to on the node."""
    JobEnvironment.USR_SIG = name


def requeue_handler() -> tuple[SignalHandler, int] | None:
    """submitit's handler for its requeue signal in this process, with the signal number; None
    outside a submitit job (e.g. the debug executor, which installs none)."""
    try:
        signum = int(JobEnvironment._usr_sig())
    except RuntimeError:
        return None
    owner = getattr(signal.getsignal(signum), "__self__", None)
    return (owner, signum) if isinstance(owner, SignalHandler) else None


def timeout_clock(handler: SignalHandler) -> dict[str, float]:
    """What submitit's time-out rule reads (when its job process started, the time limit), for a process
    that has no handler of its own: a `launch: torchrun` worker (see `has_timed_out`)."""
    return {"start": float(handler._start_time), "timeout_min": float(handler._delayed._timeout_min)}


def has_timed_out(clock: dict[str, float]) -> bool:
    """submitit's own rule (`SignalHandler.has_timed_out`: time-out or preemption) applied to `clock`."""
    state = SimpleNamespace(_start_time=clock["start"], _delayed=SimpleNamespace(_timeout_min=clock["timeout_min"]),
                            _logger=logging.getLogger("submitit"))
    return bool(SignalHandler.has_timed_out(state))  # type: ignore[arg-type]


def timeout_requeues_left(handler: SignalHandler) -> int | None:
    """How many more time-out requeues submitit will allow (before counting the current one)."""
    return getattr(getattr(handler, "_delayed", None), "_timeout_countdown", None)


def submission_script(executor: Any) -> str:
    """The sbatch script `executor` would submit (what submitit writes to the job's folder)."""
    return str(executor._make_submission_file_text(executor._submitit_command_str, "dry-run"))


def cluster_picking(cls: type) -> type:
    """`cls` (a SlurmExecutor) for a run on a named cluster (the profile's `clusters:`): it keeps which cluster
    sbatch sent each job to (`landed`: with several, `-M a,b`, sbatch answers "Submitted batch job N on cluster b",
    whose id submitit reads and whose cluster it drops), and its jobs' watcher asks sacct with `-M`: sacct, unlike
    SLURM's other commands, ignores SLURM_CLUSTERS (which launcher.request.send sets to the run's cluster in this
    process while the run is sent and waited for)."""

    class ClusterWatcher(SlurmInfoWatcher):
        def _make_command(self) -> list[str] | None:
            command = super()._make_command()
            cluster = os.environ.get("SLURM_CLUSTERS", "")
            return command if command is None or not cluster else [command[0], "-M", cluster, *command[1:]]

    class ClusterJob(SlurmJob):
        watcher = ClusterWatcher(delay_s=600)

    class ClusterPicking(cls):  # type: ignore[misc, valid-type]
        job_class = ClusterJob
        landed = ""

        def _internal_process_submissions(self, delayed: list[Any]) -> list[Any]:
            # (submitit makes an array's jobs as plain SlurmJob, not job_class: they get the same watcher)
            jobs = super()._internal_process_submissions(delayed)
            for job in jobs:
                if job.watcher is not ClusterJob.watcher:
                    job.watcher = ClusterJob.watcher
                    job.watcher.register_job(str(job.job_id))
            return jobs

        def _get_job_id_from_submission_command(self, string: bytes | str) -> str:  # type: ignore[override]
            text = string.decode() if isinstance(string, bytes) else string
            found = re.search(r"on cluster (\S+)", text)
            if found:
                self.landed = found.group(1)
            return cls._get_job_id_from_submission_command(text)

    return ClusterPicking
