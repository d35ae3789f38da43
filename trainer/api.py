"""The public per-rank API: what your own training function (or script) gets from the launcher.

    # mypkg/train.py  (job file: `entrypoint: "mypkg.train:main"` and a `config:` mapping)
    from trainer.api import Context, ResumableSampler

    def main(ctx: Context, config: dict) -> dict:
        model = torch.nn.parallel.DistributedDataParallel(Net()) if ctx.distributed else Net()
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        start = ctx.resume(model=model, optimizer=opt)      # 0, or the step the last checkpoint holds
        for step in range(start, total_steps):
            ctx.step_boundary(step)    # checkpoints on cadence; on a stop signal every rank stops here
            ...one optimizer step...
            ctx.log({"loss": loss.item()}, step + 1)
        return {"loss": final_loss}

`Context` gives the distributed environment with the process group already formed once (NCCL on
GPUs, gloo otherwise; the profile's timeouts) and `ranks`, the few collectives a loop needs (no-ops
in a one-process run), the run folder, `log` (metrics.jsonl, curves.png, TensorBoard, rank-0 log
lines: what built-in jobs get), `print` and `progress` (rank 0's log line and tqdm bar),
`checkpoint`/`resume` of anything with `state_dict()`/`load_state_dict()` (models, optimizers,
schedulers, samplers, plain dicts) plus every rank's RNG states and, with `per_rank=`, objects that
differ between ranks (atomic, checksummed, keep-K: trainer.rank.checkpoint), and `step_boundary`, the
stop check of the requeue protocol (trainer.rank.stopping: all ranks agree, rank 0 checkpoints, the
launcher requeues). `ResumableSampler` resumes a DistributedSampler's epoch mid-way.

The built-in recipes are written on this API too: `trainer.recipes.training.fit` is a complete example.

This module is the public face, and its import path is a promise: what it names lives in the wings
behind it (`Context` in trainer.rank.context, `ResumableSampler` in trainer.rank.sampler,
`StopRequested` in trainer.rank.stopping). Never imports submitit: the same function runs under
the submitter, torchrun (`init()`) and plain python.
"""

from __future__ import annotations

import atexit
import math
import os
from pathlib import Path
from typing import Any

import torch

from trainer.distributed import environment, process
from trainer.rank import handoff, timing
from trainer.rank.context import Context
from trainer.rank.sampler import ResumableSampler
from trainer.rank.stopping import StopRequested, StopSignals

__all__ = ["Context", "ResumableSampler", "StopRequested", "epoch_and_skip", "init", "steps_per_epoch"]


_INITIALISED: dict[str, Any] = {}


def init(run_dir: str | Path | None = None, config: Any = None, threads: int | None = None,
         init_timeout_s: int = 120, collective_timeout_s: int = 45, stop_signal: str | None = None,
         checkpoint_every_steps: int = 0, keep_checkpoints: int = 3, async_checkpoints: bool = True) -> Context:
    """The same Context for a script run by torchrun (or plain python): call it once per process.

    Reads the rank from torchrun's (or SLURM's) variables, forms the process group once (NCCL on a
    GPU, gloo otherwise) and tears it down at exit, takes over the stop signals (`stop_signal`, by
    default the one a `script:` job's profile uses, else USR2; and TERM). A stop at `step_boundary`
    checkpoints and raises StopRequested; left uncaught, the script prints one line and exits with
    status 75 (`trainer.rank.handoff.STOPPED_EXIT_CODE`): a `script:` job then requeues and the next
    attempt resumes from the checkpoint; under torchrun, rerun the same command to resume.
    `run_dir` defaults to $TRAINER_RUN_DIR, then runs/script.
    """
    if "ctx" in _INITIALISED:
        return _INITIALISED["ctx"]
    if "run" not in timing.MARKS:
        # A script's own process: its start-up marks, the first step's among them, which the retry step of
        # a `script:` job reads (launcher.heal: a failure after the first step is retried; before it, not).
        timing.begin()
    env = environment.resolve(os.environ)
    if threads:
        process.set_threads(threads)
    device = process.pick_device(torch.cuda.is_available(), env)
    store = process.init_process_group(env, device, init_timeout_s, collective_timeout_s)
    # Set by trainer.runners.scripts when the submitter runs this script (`script:` jobs).
    channel = os.environ.get(handoff.CHANNEL_VARIABLE, "")
    stop_signal = stop_signal or os.environ.get(handoff.STOP_SIGNAL_VARIABLE) or "USR2"
    interrupts = {int(p) for p in os.environ.get(handoff.INTERRUPT_VARIABLE, "").split(",") if p.strip()}
    stops = StopSignals(stop_signal)
    stops.install()
    folder = run_dir or os.environ.get("TRAINER_RUN_DIR") or "runs/script"
    # Rank 0's stop decision is the task's: it requeues the job (trainer.rank.handoff).
    on_stop = (lambda name: handoff.request_decision(channel, name)) if channel else None
    ctx = Context(env, device, folder, config, stops=stops, stop_signal=stop_signal, on_stop=on_stop,
                  checkpoint_every_steps=checkpoint_every_steps, keep_checkpoints=keep_checkpoints,
                  interrupts=interrupts, async_checkpoints=async_checkpoints)
    handoff.exit_as_stopped_on_stop_requested(channel)

    def teardown() -> None:
        ctx.close()
        process.destroy_process_group(together=False)
        _INITIALISED.clear()
        _INITIALISED_STORE.clear()

    _INITIALISED_STORE.append(store)  # rank 0's rendezvous store lives as long as the group
    _INITIALISED["ctx"] = ctx
    atexit.register(teardown)
    return ctx


_INITIALISED_STORE: list[Any] = []


def epoch_and_skip(step: int, steps_per_epoch: int, batch_size: int) -> tuple[int, int]:
    """Where global step `step` falls: (epoch, samples of this rank's share already consumed)."""
    return step // steps_per_epoch, (step % steps_per_epoch) * batch_size


def steps_per_epoch(samples: int, world_size: int, batch_size: int, drop_last: bool = False) -> int:
    """Optimizer steps per epoch for one rank's share of `samples` (DistributedSampler pads)."""
    per_rank = math.ceil(samples / world_size)
    return per_rank // batch_size if drop_last else math.ceil(per_rank / batch_size)
