"""A user's own training code, written only against the public API (trainer.api): its own model,
its own dataset, its own loop. The tests submit it as `entrypoint: "tests.userpkg.tiny:train"`."""

from __future__ import annotations

import atexit
import os
import signal
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.userpkg import faults
from trainer.api import Context, ResumableSampler, epoch_and_skip, steps_per_epoch


@dataclass
class TinyConfig:
    lr: float = 0.1
    epochs: int = 4
    batch_size: int = 16
    samples: int = 512
    hidden: int = 32
    dropout: float = 0.1  # dropout draws random numbers: exact resume needs every rank's RNG back
    fail_at_step: int = 0  # the user's own failure, for the sweep/--resume tests (0: never)
    step_sleep_s: float = 0.0  # slows each step, so that a test can signal the run from outside
    bad_node_file: str = ""  # a node that fails every rank on it from node_fault_at_step (tests/userpkg/faults.py)
    node_fault_at_step: int = 0
    signal_at_exit: str = ""  # e.g. "USR2": each rank ends by this signal after its result (a late time-limit warning)
    # Trains on (`epochs` only a ceiling) until this file exists: a run that outlasts whatever a test waits for,
    # however fast the machine. Every rank stops at the same step (they agree through one all-reduce a step).
    until_file: str = ""


def blobs(samples: int, seed: int = 0) -> TensorDataset:
    """Four Gaussian blobs in 8 dimensions, one per class: learnable in a few epochs."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(samples) % 4
    centres = torch.randn(4, 8, generator=gen) * 2
    return TensorDataset(centres[labels] + torch.randn(samples, 8, generator=gen), labels)


def train(ctx: Context, config: TinyConfig) -> dict:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, config.hidden), nn.ReLU(), nn.Dropout(config.dropout),
                        nn.Linear(config.hidden, 4))
    model = nn.parallel.DistributedDataParallel(net) if ctx.distributed else net
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9)
    per_epoch = steps_per_epoch(config.samples, ctx.world_size, config.batch_size)
    total = per_epoch * config.epochs
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.lr, total_steps=total)
    data = blobs(config.samples)
    sampler = ResumableSampler(data, ctx, shuffle=True, seed=1)
    step = ctx.resume(model=net, optimizer=optimizer, scheduler=scheduler)
    faults.claim(ctx, config.bad_node_file)
    if config.signal_at_exit:  # (atexit: after submitit wrote the rank's result, as the process exits)
        atexit.register(os.kill, os.getpid(), getattr(signal, f"SIG{config.signal_at_exit}"))
    loss = torch.zeros(())
    while step < total:
        epoch, skip = epoch_and_skip(step, per_epoch, config.batch_size)
        sampler.set_epoch(epoch, skip=skip)
        # A DataLoader draws a seed from the global RNG each time it starts iterating: with its own
        # generator, a resumed epoch leaves the global RNG (dropout here) where the first attempt had it.
        loader = DataLoader(data, batch_size=config.batch_size, sampler=sampler, generator=torch.Generator())
        for x, y in loader:
            ctx.step_boundary(step)
            if config.until_file and seen_by_a_rank(ctx, config.until_file):
                total = step  # ends the epoch loop too
                break
            faults.at_step(ctx, config.bad_node_file, config.node_fault_at_step, step)
            if config.fail_at_step and step == config.fail_at_step and ctx.rank == 0:
                raise RuntimeError(f"failing on purpose at step {step} (config.fail_at_step)")
            time.sleep(config.step_sleep_s)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
        ctx.log({"epoch": epoch + 1, "train_loss": loss.item(), "lr": scheduler.get_last_lr()[0]}, step)
    net.eval()
    with torch.no_grad():
        x, y = data.tensors
        accuracy = (net(x).argmax(1) == y).float().mean().item()
    if ctx.is_main:
        torch.save(net.state_dict(), ctx.run_dir / "weights.pt")
    return {"accuracy": accuracy, "train_loss": loss.item(), "steps": step}


def seen_by_a_rank(ctx: Context, path: str) -> bool:
    seen = torch.tensor([float(os.path.exists(path))])
    if ctx.distributed:
        torch.distributed.all_reduce(seen, op=torch.distributed.ReduceOp.MAX)
    return bool(seen.item())


def plain(ctx):
    """Uses nothing of the API: still runs (it restarts from scratch after a requeue)."""
    return {"rank_seen": ctx.rank}


def broken(ctx, config):
    if ctx.rank == int(config.get("fail_rank", 1)):
        raise ValueError("user code failed on purpose")
    return {}
