"""Running a training function on this rank: a job's `entrypoint`, or the built-in recipe's
`trainer.builtin.fit`, which is written on the same public API (trainer.api) as a user's.

Called by `trainer.train.run` inside the process group, with the same stop handlers and requeue
hook for both, so a user's loop that calls `ctx.step_boundary` requeues and resumes exactly like a
built-in job.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainer import checkpoint, distenv, entry
from trainer.api import Context
from trainer.config import JobConfig, RunSettings, interrupt_steps
from trainer.stopping import StopHook, StopSignals


@dataclass(frozen=True)
class Call:
    """What to call on every rank: `function(ctx, config)`, or `function(ctx)` without `with_config`."""

    name: str  # "package.module:function", for the log and errors
    function: Callable[..., Any]
    config: Any
    with_config: bool = True


def of_entrypoint(job: JobConfig) -> Call:
    """The job's `entrypoint:` function and its `config:` (validated when it declares a dataclass)."""
    function, count, config = entry.prepare(job.entrypoint, job.config, job.code_dir, f"job '{job.name}'")
    return Call(job.entrypoint, function, config, count == 2)


def run(job: JobConfig, settings: RunSettings, env: distenv.DistEnv, device: torch.device,
        stops: StopSignals, on_stop: StopHook | None, call: Call) -> dict[str, Any]:
    every = job.checkpoint_every_steps if job.checkpoint_every_steps is not None else settings.checkpoint_every_steps
    if job.deterministic and device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(job.seed)  # the same start on every rank unless the function seeds itself
    ctx = Context(env, device, settings.run_dir, call.config, stops=stops, stop_signal=settings.stop_signal,
                  on_stop=on_stop, checkpoint_every_steps=every, keep_checkpoints=job.keep_checkpoints,
                  tensorboard=job.tensorboard, progress_bar=settings.progress_bar,
                  log_every_steps=job.log_every_steps, interrupts=interrupt_steps(job))
    ctx.report.log(f"{job.name}: {call.name} on {env.world_size} rank(s) via {env.launcher}, device {device}"
                   + (f", attempt {ctx.restarts + 1}" if ctx.restarts else ""))
    if ctx.restarts and not checkpoint.list_checkpoints(ctx.run_dir / "checkpoints"):
        # Nothing to resume from (the function checkpoints nothing, or was stopped before it did).
        ctx.report.event("restarted_from_scratch", attempt=ctx.restarts + 1)
    start = time.perf_counter()
    try:
        returned = call.function(ctx, call.config) if call.with_config else call.function(ctx)
    finally:
        ctx.close()
    if returned is not None and not isinstance(returned, dict):
        raise TypeError(f"{call.name} returned {type(returned).__name__}; return a dict of metrics or None")
    metrics = {k: v for k, v in ctx.last_metrics.items()}
    metrics.update(returned or {})
    result = {**metrics, "world_size": env.world_size, "run_dir": settings.run_dir, "node": env.node,
              "rank": env.rank, "master_addr": env.master_addr, "threads": torch.get_num_threads(),
              "resumed_from": ctx.resumed_from, "wall_time_s": round(time.perf_counter() - start, 3)}
    ctx.report.event("finished", step=metrics.get("step"))
    return result
