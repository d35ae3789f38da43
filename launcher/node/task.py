"""What submitit runs once per task on a node: `TrainTask` calls the trainer and cooperates with
requeueing (`probe` reports where a task landed instead: launcher.node.placement). Kept free of torch at import time (the submitter pickles these); the trainer is imported
on the node.

How a requeue goes (SLURM's pre-timeout or preemption signal, or the local executor's):

1. The signal lands on some or all ranks. The trainer's handler only records it (submitit's own
   handler, which would requeue from inside a collective on rank 0 alone, is set aside while
   training runs); every rank finishes its step and they agree at the step boundary.
2. Rank 0 writes a checkpoint, then calls `SubmititRequeue`, which runs submitit's own
   `SignalHandler.checkpoint_and_try_requeue`: time-out or preemption (submitit's rule), the
   time-out countdown (`max_num_timeout` = profile.max_timeout_requeues; preemptions are not
   counted), the re-pickled task and `scontrol requeue` (SLURM) or exit code 144 (local). The
   exit it asks for is deferred, not taken inside the trainer.
3. Rank 0 tells the others the decision (a broadcast that also keeps them alive until the job is
   requeued: with `srun --kill-on-bad-exit=1` an early non-zero exit would kill rank 0 first).
4. Every rank exits with the same code and writes no result file, so the submitter keeps waiting
   for the requeued job. The next attempt resumes from the checkpoint in the same run folder.

A job that SLURM ends itself (SIGTERM: `scancel`, `scontrol requeue`, node failure) is checkpointed
if time allows and exits without a result; SLURM decides whether it comes back.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from submitit.core.job_environment import JobEnvironment
from submitit.core.utils import UncompletedJobError
from submitit.helpers import Checkpointable

from launcher import submitit_private
from launcher.reports import rank_notes
from launcher.cluster.slurm import sbatch
from trainer.config.job import JobConfig, RunSettings
from trainer.distributed import environment
from trainer.rank import events
from trainer.rank.rundir import ATTEMPT_BANNER, CHECKPOINTS_DIR
from trainer.rank.stopping import TERMINATE, StopRequested, StopSignals
from trainer.runners import dispatch, envelope

# Exit code of ranks that stopped on SIGTERM (128 + 15, what the signal itself would give).
TERMINATED_EXIT_CODE = 143


class NotRequeued(RuntimeError):
    """The job stopped on its stop signal and checkpointed, but was not requeued."""


class SubmititRequeue:
    """submitit's requeue decision and action, called by the trainer on rank 0 after its checkpoint."""

    def __init__(self, handler: Any, signum: int) -> None:
        self.handler, self.signum = handler, signum

    @classmethod
    def current(cls) -> SubmititRequeue | None:
        """submitit's handler for its requeue signal in this process (None outside a submitit job,
        e.g. the debug executor, which installs none)."""
        found = submitit_private.requeue_handler()
        return None if found is None else cls(*found)

    @property
    def allowed(self) -> bool:
        """A job step of an allocation the submitter held (`in_allocation`) is never requeued: SLURM cannot
        requeue an allocation, and `scontrol requeue` is not asked."""
        return not os.environ.get(sbatch.STEP_VARIABLE)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name.removeprefix("SIG")

    def __call__(self, signal_name: str) -> dict[str, Any]:
        decision = reason_and_countdown(self.handler.has_timed_out(),
                                        submitit_private.timeout_requeues_left(self.handler))
        if not self.allowed:
            return {"requeued": False, "message": "a job step of your own allocation is not requeued", **decision}
        # SLURM may signal the step again while `scontrol requeue` runs (it sends to every process of
        # the step): ignored here, the disposition is inherited by that child, which would otherwise
        # die of it and leave the job unrequeued.
        previous = signal.signal(self.signum, signal.SIG_IGN)
        try:
            self.handler.checkpoint_and_try_requeue(self.signum)
        except SystemExit as done:  # requeued: submitit wants the process to end now; we end it later
            code = done.code if isinstance(done.code, int) else 1
            return {"requeued": True, "exit_code": code, **decision}
        except UncompletedJobError as err:  # e.g. "timed-out too many times"
            return {"requeued": False, "message": str(err), **decision}
        finally:
            signal.signal(self.signum, previous)
        return {"requeued": False, "message": "submitit did not requeue (not global rank 0)", **decision}


def reason_and_countdown(timed_out: bool, countdown: int | None) -> dict[str, Any]:
    """submitit's reason for a stop (time-out or preemption, its own rule) and the time-out requeues
    left after it (None: unknown); fewer than 0 left is its refusal ("timed-out too many times")."""
    left = None if countdown is None else countdown - int(timed_out)
    return {"reason": "timeout" if timed_out else "preemption", "timeout_requeues_left": left}


def private_and_coreless() -> None:
    """What every task process does first. No core files: a crash at exit once wrote 860 MB cores
    into the folder the job was submitted from (the job's working directory), and a core holds
    nothing a user reads. Files private to the user (umask 077): the run folder holds pickles that
    `status` loads, and the folder is private whatever umask the node's shell had."""
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    os.umask(0o077)


def drop_stale_result() -> None:
    """Remove this rank's result file of an earlier attempt. A rank whose peer's node died fails on the
    broken connection and leaves an error result; SLURM then requeues the job (NODE_FAIL). The
    submitter reads the results once every rank has one: a stale one beside a fresh peer's would
    stand for this attempt. Every rank removes its own before the rendezvous, so before any peer can
    finish."""
    try:
        JobEnvironment().paths.result_pickle.unlink(missing_ok=True)
    # Not under a submitit job (torchrun), the debug executor (in this process: no job folder, so no
    # SUBMITIT_FOLDER), or not ours to remove.
    except (RuntimeError, KeyError, OSError):
        pass


# submitit's LocalExecutor sets CUDA_VISIBLE_DEVICES to 0..gpus_per_node-1 for its tasks ("" for a CPU
# profile), whatever the caller chose; the submitter passes the caller's choice on in this variable
# (JSON: the value, or null for unset) and each task puts it back before torch starts.
CALLER_GPUS = "TRAINER_CALLER_CUDA_VISIBLE_DEVICES"


def remember_caller_gpus(environ: MutableMapping[str, str], local: bool) -> None:
    """In the submitter, in the environment the local executor copies: the caller's CUDA_VISIBLE_DEVICES."""
    environ.pop(CALLER_GPUS, None)
    if local:
        environ[CALLER_GPUS] = json.dumps(environ.get("CUDA_VISIBLE_DEVICES"))


def restore_caller_gpus(environ: MutableMapping[str, str]) -> None:
    """In a local task, first thing: CUDA_VISIBLE_DEVICES as the submitter's caller had it."""
    raw = environ.pop(CALLER_GPUS, None)
    if raw is None or environ.get("SUBMITIT_EXECUTOR") != "local":
        return
    value = json.loads(raw)
    if value is None:
        environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        environ["CUDA_VISIBLE_DEVICES"] = str(value)


class TrainTask(Checkpointable):
    """Train one job. On requeue, submitit pickles this same object again; the trainer then resumes
    from the newest good checkpoint in the run folder, so no state needs to travel in the pickle."""

    def __init__(self, job: JobConfig, settings: RunSettings, run_root: str = "") -> None:
        # run_root: the run folder `--resume` takes (a sweep task trains in a folder below it).
        self.job, self.settings, self.run_root = job, settings, run_root or settings.run_dir

    def __call__(self) -> dict[str, Any]:
        private_and_coreless()
        restore_caller_gpus(os.environ)  # before torch: submitit's local executor set its own
        drop_stale_result()
        requeue = SubmititRequeue.current()
        settings = self.settings
        if requeue is not None and requeue.signal_name != settings.stop_signal:
            # The signal submitit acts on (and the local controller sends) is the one that must stop training.
            settings = dataclasses.replace(settings, stop_signal=requeue.signal_name)
        # Take the stop signals over before importing torch (seconds): from here on a signal only
        # asks for a stop at the first step boundary (submitit's handler would requeue at once from
        # rank 0 alone, with nothing checkpointed and nothing recorded).
        stops = StopSignals(settings.stop_signal)
        stops.install()
        try:
            announce(settings)
            return envelope.launched(dispatch.run_job(self.job, settings, on_stop=requeue, stops=stops))
        except StopRequested as stop:
            exit_after_stop(stop, settings.run_dir, self.run_root)
            raise  # not reached: exit_after_stop always raises
        finally:
            after_the_work(stops, requeue)


def after_the_work(stops: StopSignals, requeue: SubmititRequeue | None) -> None:
    """A task's work is over (returned, raised, or stopped): its stop handlers come off only in the debug
    executor (the trainer ran in the submitter's own process). Under submitit they stay, only noting a
    signal: restored, submitit's handler would take a stop signal that comes as the process exits (a time
    limit's warning just after the last step) and requeue a finished job, which then ran its last steps
    again and met the same signal, until max_failures ended it FAILED (the chaos soak's run39)."""
    if requeue is None:
        stops.restore()

def announce(settings: RunSettings, **fields: Any) -> None:
    """Mark the start of an attempt in every rank's log (submitit appends each restart to the same
    files) and, on rank 0, in the run's event log (`fields`: more of the "started" event's)."""
    env = environment.resolve(os.environ)
    restart = environment.restart_count(os.environ)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    slurm = f", SLURM restart count {restart}" if "SLURM_JOB_ID" in os.environ else ""
    host = env.node if env.node and env.node != "localhost" else socket.gethostname()
    banner = (f"{ATTEMPT_BANNER} {stamp}: job {env.scheduler_job_id or '-'}{slurm}, "
              f"rank {env.rank}/{env.world_size} on {host}, pid {os.getpid()} =====")
    print(banner, flush=True)
    if not _same_terminal():  # each log file gets it; one terminal (debug executor) once
        print(banner, file=sys.stderr, flush=True)
    folder, task = os.environ.get("SUBMITIT_FOLDER", ""), os.environ.get("SLURM_PROCID", "")
    job_folder = Path(folder.replace("%j", environment.scheduler_job_id(os.environ))) if folder else None
    if job_folder is not None and job_folder.is_dir() and task.isdigit():  # where this SLURM task runs, as data
        rank_notes.write_place(job_folder, int(task), host)
    if env.is_main:
        events.append(settings.run_dir, "started", job_id=env.scheduler_job_id, slurm_restart_count=restart,
                      executor=os.environ.get("SUBMITIT_EXECUTOR", ""), host=host, world_size=env.world_size,
                      **fields)


def exit_after_stop(stop: StopRequested, run_dir: str, run_root: str) -> None:
    """How a task ends after a stop, in both shapes (always raises); only a refused requeue is an error,
    which says how to continue (`--resume run_root`)."""
    step, name, info = stop.step, stop.signal_name, stop.info
    # A script that uses no trainer.api has no step (-1) and no checkpoint of ours.
    at, saved = (f" at step {step}", "checkpointed and ") if step >= 0 else ("", "")
    if stop.requeued:
        print(f"[task] stopped{at} on SIG{name} ({info.get('reason')}): {saved}requeued", flush=True)
        # SystemExit, not an exception: submitit then writes no result file, and the submitter
        # keeps waiting for the requeued job instead of reading this attempt as the outcome.
        raise SystemExit(info.get("exit_code", 1))
    if stop.kind == TERMINATE:
        print(f"[task] stopped{at} on SIGTERM: {saved.replace(' and ', '; ')}the scheduler ends or requeues "
              "the job", flush=True)
        raise SystemExit(TERMINATED_EXIT_CODE)
    why = str(info.get("message") or info.get("reason") or "unknown").rstrip(".")
    kept = f"The checkpoint of step {step} is in {Path(run_dir) / CHECKPOINTS_DIR}; " if step >= 0 else ""
    raise NotRequeued(
        f"stopped{at} on SIG{name} ({info.get('reason', 'stop signal')}) and not requeued: {why}. "
        f"{kept}continue with: python submit.py --resume {run_root}") from None


def _same_terminal() -> bool:
    try:
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return sys.stdout.isatty() and (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)
