"""What a job's recipe becomes on this rank: its dataset, its model (wrapped for DDP), its optimizer
and its learning-rate schedule."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer.config.job import JobConfig
from trainer.distributed.ranks import Ranks
from trainer.rank import timing
from trainer.recipes import data
from trainer.recipes.models import build_model


def load_data(job: JobConfig, local_rank: int, ranks: Ranks) -> data.ImageTensors:
    """The job's dataset on this rank (on the CPU), from `job.data_dir` (which the dispatcher filled
    in: trainer.config.job.data_folder). Marks when loading began and ended, for the start-up
    benchmark (trainer.rank.timing)."""
    timing.mark("data_start")
    dataset = _load_data(job, local_rank, ranks)
    timing.mark("data")
    return dataset


def _load_data(job: JobConfig, local_rank: int, ranks: Ranks) -> data.ImageTensors:
    if job.dataset == "digits":
        return data.load_digits()
    if job.dataset == "synthetic-cifar10":
        return data.load_synthetic_cifar10(job.synthetic_train_size, job.synthetic_test_size, seed=1234)
    root = Path(job.data_dir)
    # Only one rank per node downloads; the others wait. A failure is shared so nobody hangs.
    failure = ""
    if job.download and local_rank == 0:
        try:
            data.fetch_cifar10(root, job.verify_checksums)
        except data.DataError as err:
            failure = str(err)
    if ranks.max(1 if failure else 0) and not failure:
        failure = data.cifar10_missing_message(root, "the download failed on another rank")
    if failure:
        raise data.DataError(failure)
    return data.load_cifar10(root, download=False, verify_checksums=job.verify_checksums)


def build(job: JobConfig, device: torch.device, distributed: bool) -> tuple[nn.Module, nn.Module, Callable]:
    """(the model, the module that trains it: DDP across ranks or the model itself, its forward)."""
    gpu = device.type == "cuda"
    model = build_model(job.model).to(device)
    if job.channels_last:  # oneDNN's CPU convolutions prefer it too (LeNet: ~15-30 % faster)
        model = model.to(memory_format=torch.channels_last)
    ddp: nn.Module = model
    if distributed:
        # Gradients land straight in the all-reduce buckets (no copy); buckets are reduced while
        # backward still runs for earlier layers.
        ddp = DDP(model, device_ids=[device.index] if gpu else None,
                  gradient_as_bucket_view=True, bucket_cap_mb=25 if gpu else 4)
    forward = torch.compile(ddp) if (gpu and job.compile) else ddp
    return model, ddp, forward


def settle_buckets(ddp: nn.Module, sample: torch.Tensor) -> None:
    """Run one gradient-free pass (a zero loss, eval mode, nothing stepped) through DDP, so that every
    real step of every attempt reduces its gradients in the same bucket layout.

    Why: DDP's first backward reduces all gradients in one bucket in parameter order, then it
    rebuilds the buckets in the order gradients became ready (the reverse, in 1 MB/`bucket_cap_mb`
    buckets). A resumed attempt's first step is its DDP's first backward, so it reduced that step in
    the first layout where the uninterrupted run used the rebuilt one. With 3 or more ranks, where an
    element sits in the flat bucket decides the order in which the ring all-reduce adds the ranks'
    values (2 ranks: a + b = b + a exactly): the resumed weights differed by ~1e-8 from that step on.
    After this pass both runs reduce every step in the rebuilt layout.
    """
    if not isinstance(ddp, DDP):
        return
    module, training = ddp.module, ddp.module.training
    module.eval()  # no BatchNorm statistics updated, no dropout drawn: the weights' and RNG's state stay as built
    try:
        (ddp(sample).float().sum() * 0).backward()
    finally:
        module.train(training)
    for param in module.parameters():
        param.grad = None


def make_optimizer(job: JobConfig, model: nn.Module) -> torch.optim.Optimizer:
    if job.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=job.lr, weight_decay=job.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=job.lr, momentum=job.momentum,
                           nesterov=job.nesterov and job.momentum > 0, weight_decay=job.weight_decay)


def make_scheduler(job: JobConfig, optimizer: torch.optim.Optimizer,
                   total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """One schedule step per optimizer step. A plain function (not a callable object), so that its
    state_dict holds no lambda state, as checkpoints written before expect."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(job.lr_schedule, s, total_steps, job.warmup_fraction))


def lr_factor(schedule: str, step: int, total: int, warmup_fraction: float) -> float:
    if schedule == "constant":
        return 1.0
    warmup = max(1, int(total * warmup_fraction))
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "onecycle":
        return max(0.0, 1.0 - progress)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
