"""The built-in recipes (`digits`, `cifar10`, `cifar10-seed`, `cifar10-fast`: a job with a `model` and a
`dataset` instead of an `entrypoint` or a `script`), written on the public per-rank API as your own
function would be. The dispatcher (trainer.runners.dispatch) calls `fit(ctx, job)` through the same
path as an `entrypoint:` job (trainer.runners.functions); the model, data and step helpers used here
(this wing's `components`, `data`, `step` and `models`) are importable by your code too.

Exact resume: the data order is a pure function of (seed, epoch), so the checkpoint's `loop` counters
(the epoch and the position in it) plus what the Context keeps for every rank (its RNG states and, as a
`per_rank` object, its running epoch loss) restart an interrupted epoch bit for bit; and every step
of every attempt reduces its gradients in the same DDP bucket layout (components.settle_buckets).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainer.api import Context, steps_per_epoch
from trainer.config.job import JobConfig
from trainer.rank import durable
from trainer.rank.rundir import MODEL_FILE
from trainer.recipes import components, data, step


class InjectedFailure(RuntimeError):
    """Raised on purpose by `job.fail_at` to test how failures propagate."""


class EpochLoss:
    """This rank's running loss over the epoch under way. Ranks differ, so it is checkpointed per rank:
    an epoch resumed in the middle then reports the same train_loss as an uninterrupted one."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.reset()

    def reset(self) -> None:
        self.sum = torch.zeros((), device=self.device)  # on the device: adding a step's loss needs no sync
        self.steps = 0

    def add(self, loss: torch.Tensor) -> None:
        self.sum += loss
        self.steps += 1

    def mean(self) -> torch.Tensor:
        return self.sum / max(self.steps, 1)

    def state_dict(self) -> dict[str, Any]:
        return {"sum": self.sum.detach().cpu(), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sum, self.steps = state["sum"].to(self.device), state["steps"]


@dataclass
class Loop:
    """Where training is and what it has measured: the checkpoint's `loop` object."""

    seed: int
    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)  # each epoch's metrics
    train_time: float = 0.0  # seconds in training steps (not evaluation, not checkpoints)
    images_seen: int = 0  # by this rank

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step_in_epoch": self.step_in_epoch, "global_step": self.global_step,
                "history": list(self.history), "train_time": self.train_time, "images_seen": self.images_seen,
                # The data order is a pure function of (seed, epoch) and the position is step_in_epoch.
                "sampler": {"seed": self.seed, "epoch": self.epoch, "position": self.step_in_epoch}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.step_in_epoch, self.global_step = state["epoch"], state["step_in_epoch"], state["global_step"]
        self.history, self.train_time, self.images_seen = state["history"], state["train_time"], state["images_seen"]


@dataclass
class Parts:
    """What trains, in one object that `fit` empties of DDP when it leaves, however it leaves: DDP's
    reducer holds the process group, which the launcher frees only once nobody does, and an exception's
    traceback keeps every frame's locals alive (so no frame here holds DDP in a local variable)."""

    data: data.ImageTensors
    model: nn.Module
    ddp: Any  # DDP around the model (the model itself on one rank); None once fit has left
    forward: Callable[[torch.Tensor], torch.Tensor] | None  # ddp, or torch.compile of it
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    steps_per_epoch: int
    bf16: bool


def fit(ctx: Context, job: JobConfig) -> dict[str, Any]:
    """Train `job` on this rank to the end (or to a stop) and return the final metrics (the same on every rank).
    The caller (trainer.runners.functions, as for any function) has seeded torch with `job.seed`, so every rank builds
    the same initial weights (DDP also broadcasts them), and set `deterministic`."""
    parts = build(ctx, job)
    try:
        return train(ctx, job, parts)
    finally:
        parts.ddp = parts.forward = None


def build(ctx: Context, job: JobConfig) -> Parts:
    dataset = components.load_data(job, ctx.local_rank, ctx.ranks).to(ctx.device)
    model, ddp, forward = components.build(job, ctx.device, ctx.distributed)
    components.settle_buckets(ddp, data.prepare(dataset.train_x[:1], dataset, False, None, job.channels_last))
    optimizer = components.make_optimizer(job, model)
    per_epoch = steps_per_epoch(len(dataset.train_y), ctx.world_size, job.batch_size_per_rank)
    scheduler = components.make_scheduler(job, optimizer, per_epoch * job.epochs)
    return Parts(dataset, model, ddp, forward, optimizer, scheduler, per_epoch,
                 bf16=ctx.device.type == "cuda" and job.amp_bf16)


def train(ctx: Context, job: JobConfig, parts: Parts) -> dict[str, Any]:
    loop, epoch_loss = Loop(job.seed), EpochLoss(ctx.device)
    ctx.resume(model=parts.model, optimizer=parts.optimizer, scheduler=parts.scheduler, loop=loop,
               per_rank={"epoch_loss": epoch_loss})
    batch = job.batch_size_per_rank
    ctx.print(f"{job.name}: {job.model} on {job.dataset}, device {ctx.device}, batch {batch}/rank = "
              f"{batch * ctx.world_size} global, {parts.steps_per_epoch} steps/epoch"
              + (f", resuming epoch {loop.epoch + 1} at step {loop.step_in_epoch}" if loop.global_step else ""))
    while loop.epoch < job.epochs:
        epoch_start, seen_before = time.perf_counter(), loop.images_seen
        train_loss = train_epoch(ctx, job, parts, loop, epoch_loss)
        elapsed = time.perf_counter() - epoch_start
        last = loop.epoch + 1 == job.epochs
        metrics: dict[str, Any] = {"epoch": loop.epoch + 1, "step": loop.global_step, "train_loss": train_loss,
                                   "lr": parts.scheduler.get_last_lr()[0], "epoch_time_s": round(elapsed, 4),
                                   "images_per_second": (loop.images_seen - seen_before) / max(elapsed, 1e-9)}
        if last or (loop.epoch + 1) % job.eval_every_epochs == 0 or job.stop_at_accuracy:
            metrics.update(evaluate(ctx, job, parts))
        loop.history.append(metrics)
        loop.epoch, loop.step_in_epoch = loop.epoch + 1, 0
        ctx.log(metrics, loop.global_step)
        if not last:
            ctx.checkpoint(loop.global_step)  # every epoch end (the run's end needs none: model_final.pt)
        if job.stop_at_accuracy and metrics["test_accuracy"] >= job.stop_at_accuracy:  # evaluated: see above
            ctx.print(f"reached test accuracy {metrics['test_accuracy']:.4f} >= {job.stop_at_accuracy}")
            break
    return finish(ctx, parts, loop)


def train_epoch(ctx: Context, job: JobConfig, parts: Parts, loop: Loop, epoch_loss: EpochLoss) -> float:
    """The rest of the epoch (all of it, or what a resumed attempt has left); the mean loss over ranks."""
    indices = data.epoch_indices(len(parts.data.train_y), ctx.world_size, ctx.rank, loop.epoch, job.seed)
    indices = indices.to(ctx.device)
    parts.model.train()
    if loop.step_in_epoch == 0:  # a new epoch (not one resumed in the middle)
        epoch_loss.reset()
    total = parts.steps_per_epoch
    with ctx.progress(total, loop.step_in_epoch, f"epoch {loop.epoch + 1}") as bar:
        start = time.perf_counter()
        while loop.step_in_epoch < total:
            now = time.perf_counter()
            loop.train_time += now - start  # before the step boundary, whose checkpoint saves it
            if ctx.step_boundary(loop.global_step):
                now = time.perf_counter()  # checkpoints are not training time
            start = now
            loss = train_step(ctx, job, parts, loop, indices)
            epoch_loss.add(loss)
            loop.step_in_epoch += 1
            loop.global_step += 1
            bar.step(loop.global_step, lambda: (f"epoch {loop.epoch + 1} step {loop.step_in_epoch}/{total} loss "
                                                f"{loss.item():.4f} lr {parts.scheduler.get_last_lr()[0]:.5f}"))
        loop.train_time += time.perf_counter() - start
    return float(ctx.ranks.mean_(epoch_loss.mean()).item())


def train_step(ctx: Context, job: JobConfig, parts: Parts, loop: Loop, indices: torch.Tensor) -> torch.Tensor:
    lo = loop.step_in_epoch * job.batch_size_per_rank
    batch_idx = indices[lo: lo + job.batch_size_per_rank]
    if f"{loop.global_step}:{ctx.rank}" == job.fail_at:
        raise InjectedFailure(f"injected failure at step {loop.global_step} on rank {ctx.rank} (job.fail_at)")
    gen = data.batch_generator(job.seed, loop.epoch, loop.step_in_epoch, ctx.rank) if job.augment else None
    x = data.prepare(parts.data.train_x[batch_idx], parts.data, job.augment, gen, job.channels_last)
    y = parts.data.train_y[batch_idx]
    parts.optimizer.zero_grad(set_to_none=True)
    loss = step.forward_backward(parts.forward, parts.ddp, x, y, job.grad_accum_steps, job.label_smoothing, parts.bf16)
    parts.optimizer.step()
    parts.scheduler.step()
    loop.images_seen += len(batch_idx)
    return loss.detach()


def evaluate(ctx: Context, job: JobConfig, parts: Parts) -> dict[str, float]:
    shard = data.eval_shard(len(parts.data.test_y), ctx.world_size, ctx.rank)
    return step.evaluate(parts.model, parts.data, shard, job.channels_last, parts.bf16, ctx.ranks)


def finish(ctx: Context, parts: Parts, loop: Loop) -> dict[str, Any]:
    """Rank 0 saves model_final.pt; every rank returns what the run adds to its last epoch's line, which
    the caller reports too (train loss, test loss and accuracy: the last epoch is always evaluated)."""
    if ctx.is_main:
        buffer = io.BytesIO()
        torch.save(parts.model.state_dict(), buffer)
        durable.atomic_write(ctx.run_dir / MODEL_FILE, buffer.getvalue())  # as checkpoints are
    return {"epochs": loop.epoch, "steps": loop.global_step,
            "images_per_second": loop.images_seen * ctx.world_size / max(loop.train_time, 1e-9),
            "train_time_s": round(loop.train_time, 3)}
