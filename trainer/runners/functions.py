"""Running a training function on this rank: a job's `entrypoint`, or the built-in recipe's
`trainer.recipes.training.fit`, which is written on the same public API (trainer.api) as a user's.

Called by the dispatcher (trainer.runners.dispatch) with the stop handlers already installed: the
function runs inside the job's process group, with the same requeue hook for both kinds, so a
user's loop that calls `ctx.step_boundary` requeues and resumes exactly like a built-in job.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.config import project
from trainer.config.job import JobConfig, RunSettings, interrupt_steps
from trainer.config.lookup import CODE_ROOT
from trainer.config.tracker_key import TrackerConfig, merged
from trainer.distributed import process, usergroup
from trainer.distributed.environment import DistEnv
from trainer.distributed.held import HeldGroup
from trainer.rank import rundir, timing
from trainer.rank.context import Context, previous_attempts
from trainer.rank.stopping import StopHook, StopRequested, StopSignals
from trainer.rank.trackers import TrackedRun, Trackers
from trainer.runners import entrypoints, failures, pickled
from trainer.runners.envelope import envelope


@dataclass(frozen=True)
class Call:
    """What to call on every rank: `function(ctx, config)`, or `function(ctx)` without `with_config`."""

    name: str  # "package.module:function", for the log and errors
    function: Callable[..., Any]
    config: Any
    with_config: bool = True


def of_entrypoint(job: JobConfig, settings: RunSettings) -> Call:
    """The job's `entrypoint:` function, or the function pickled into its run folder (`function:`), and its
    `config:` (validated when it declares a dataclass)."""
    snapshot, source = os.environ.get(project.SNAPSHOT_VAR), f"job '{job.name}'"
    if job.function:
        function, count, config = pickled.prepare(job.function, job.config, settings.run_dir, settings.sweep,
                                                  job.code_dir, job.project_root, source, snapshot)
        return Call(job.function, function, config, count == 2)
    function, count, config = entrypoints.prepare(job.entrypoint, job.config, job.code_dir, source,
                                                  job.project_root, snapshot)
    return Call(job.entrypoint, function, config, count == 2)


def run_function(call: Call, job: JobConfig, settings: RunSettings, env: DistEnv, stops: StopSignals,
                 on_stop: StopHook | None) -> dict[str, Any]:
    """Set this process up (threads, device, process group), call `call` on the API, return its
    metrics in the result envelope (trainer.runners.envelope)."""
    threads = process.set_threads(settings.threads)
    device = process.pick_device(settings.use_gpus, env)
    # Rank 0 opens the MLflow/W&B runs before the group forms: their imports and start-up take seconds,
    # which the other ranks wait out in the rendezvous (init_timeout_s), not in a collective (45 s).
    trackers, opened = open_trackers(job, settings, env)
    with closed_on_error(opened), process_group(env, device, settings.init_timeout_s, settings.collective_timeout_s):
        timing.mark("process_group")
        return call_on_rank(call, job, settings, env, stops, on_stop, device, threads, trackers, opened)


def run_in_held_group(call: Call, job: JobConfig, settings: RunSettings, held: HeldGroup, stops: StopSignals,
                      on_stop: StopHook | None) -> dict[str, Any]:
    """`run_function` for one of the runs of a group held across them (a pool worker's point,
    trainer.distributed.held): the process is set up and the group formed already; what a fresh
    process would not carry over from the run before is set again (call_on_rank)."""
    threads = process.set_threads(settings.threads)
    trackers, opened = open_trackers(job, settings, held.env)
    with closed_on_error(opened):
        timing.mark("process_group")
        return call_on_rank(call, job, settings, held.env, stops, on_stop, held.device, threads, trackers, opened)


def open_trackers(job: JobConfig, settings: RunSettings, env: DistEnv) -> tuple[TrackerConfig, Trackers | None]:
    """The run's trackers, and on rank 0 their MLflow/W&B runs opened (None elsewhere or without one)."""
    # The submitter merged the job's and the profile's; `python -m trainer` has only the job's.
    trackers = settings.tracker if settings.tracker.names() else merged(job.tracker, None, job.tensorboard)
    if env.is_main and (trackers.mlflow or trackers.wandb):
        attempt = previous_attempts(Path(settings.run_dir)) + 1
        return trackers, Trackers(Path(settings.run_dir), trackers, tracker_info(job, settings, env, attempt))
    return trackers, None


def call_on_rank(call: Call, job: JobConfig, settings: RunSettings, env: DistEnv, stops: StopSignals,
                 on_stop: StopHook | None, device: torch.device, threads: int, trackers: TrackerConfig,
                 opened: Trackers | None) -> dict[str, Any]:
    """The function called on this rank inside the job's group, with its Context; its metrics."""
    every = settings.checkpoint_every_steps if job.checkpoint_every_steps is None else job.checkpoint_every_steps
    auto = (job.auto_checkpoint_min_s, job.auto_checkpoint_max_s) if every == "auto" else None
    # Set whichever way, each run: a process that ran another run before (a pool worker) must start
    # where a fresh one does.
    torch.use_deterministic_algorithms(job.deterministic and device.type == "cpu", warn_only=True)
    if device.type == "cuda":
        process.gpu_defaults()
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(job.seed)  # the same start on every rank unless the function seeds itself
    ctx = Context(env, device, settings.run_dir, call.config, stops=stops, stop_signal=settings.stop_signal,
                  on_stop=on_stop, checkpoint_every_steps=0 if auto else int(every), keep_checkpoints=job.keep_checkpoints,
                  tensorboard=trackers.tensorboard, progress_bar=settings.progress_bar,
                  log_every_steps=job.log_every_steps, interrupts=interrupt_steps(job), trackers=opened,
                  async_checkpoints=job.async_checkpoints, auto_interval_s=auto,
                  history=settings.history)
    ctx.report.log(f"{job.name}: {call.name} on {env.world_size} rank(s) via {env.launcher}, device {device}"
                   + (f", attempt {ctx.restarts + 1}" if ctx.restarts else ""))
    if ctx.restarts and not rundir.has_checkpoint(ctx.run_dir):
        # Nothing to resume from (the function checkpoints nothing, or was stopped before it did).
        ctx.report.event("restarted_from_scratch", attempt=ctx.restarts + 1)
    start = time.perf_counter()
    failures.clear(settings.run_dir, env.rank)
    try:
        # Code written for submitit/torchrun forms the group itself: for this world, a no-op (one log line).
        with usergroup.kept_for_the_tool(lambda line: print(f"[trainer] {line}", flush=True)):  # every rank's log
            returned = call.function(ctx, call.config) if call.with_config else call.function(ctx)
    except StopRequested:
        ctx.close("stopped")
        raise
    except BaseException as err:
        failures.write(settings.run_dir, env.rank, call.name, err)  # what `RunFailed` shows, as data
        ctx.close("failed")
        raise
    ctx.close()
    if returned is not None and not isinstance(returned, dict):
        raise TypeError(f"{call.name} returned {type(returned).__name__}; return a dict of metrics or None")
    metrics = {**ctx.last_metrics, **(returned or {})}
    ctx.report.event("finished", step=metrics.get("step"))
    return envelope(metrics, env, settings.run_dir, threads, start, resumed_from=ctx.resumed_from)


@contextlib.contextmanager
def closed_on_error(trackers: Trackers | None) -> Iterator[None]:
    """The tracker runs end with the attempt however it ends, also before the Context owns them
    (`Trackers.close` is idempotent: the Context's close comes first when there is one)."""
    try:
        yield
    except StopRequested:
        if trackers is not None:
            trackers.close("stopped")
        raise
    except BaseException:
        if trackers is not None:
            trackers.close("failed")
        raise


def tracker_info(job: JobConfig, settings: RunSettings, env: DistEnv, attempt: int) -> TrackedRun:
    """What the trackers record of this run: your `config:` (an entrypoint's) or the recipe's job keys."""
    params = dict(job.config) if job.entrypoint or job.function else \
        {k: v for k, v in asdict(job).items() if k not in ("config", "args", "extra", "code_dir", "tracker")}
    note = CODE_ROOT / "SNAPSHOT.json"  # in the run's code snapshot (launcher/rundir/snapshot.py), when it has one
    try:
        commit = str(json.loads(note.read_text(encoding="utf-8")).get("git_commit") or "")
    except (OSError, ValueError, AttributeError):
        commit = ""
    # An array task by the id run.json, `status` and sacct name it with (`7_2`), not its own SLURM_JOB_ID.
    return TrackedRun(job.name, params, attempt, env.scheduler_job_id, settings.profile, settings.sweep, settings.task,
                   tuple(settings.swept), commit)


@contextlib.contextmanager
def process_group(env: DistEnv, device: torch.device, init_timeout_s: int,
                  collective_timeout_s: int) -> Iterator[None]:
    """The job's process group for the length of the block, gone (threads joined) when it ends.

    The block must let go of what holds the group (DDP's reducer) before it ends. A block that ends
    normally or with StopRequested (every rank stops at the same step) leaves in step with the
    other ranks; one that raises anything else leaves at once: a barrier would wait for ranks
    that may never come.
    """
    store = process.init_process_group(env, device, init_timeout_s, collective_timeout_s)
    together = False
    try:
        yield
        together = True
    except StopRequested:
        together = True
        raise
    finally:
        process.destroy_process_group(together)
        # Rank 0's store serves the other ranks from a thread of its own: released with the group,
        # that thread is joined now instead of running on into interpreter exit.
        del store
