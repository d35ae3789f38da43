"""A model sharded across ranks with FSDP2 (`fully_shard`), checkpointed and resumed through the same `ctx` calls
as any model: each rank writes its own shards (torch.distributed.checkpoint, in the background), nothing is
gathered to rank 0, a requeue resumes bitwise, and a run resumed on another world size reshards.

An MLP on scikit-learn's 8x8 digits (shipped with it: no download), AdamW, dropout (random numbers that an exact
resume must give back), a fixed global batch: each rank's share is `global_batch / world_size`, so a step means
the same samples-worth on any world size and a resharded run continues the same schedule.

    python submit.py --job examples/fsdp2.yaml                              # 2 local ranks (CPU, gloo)
    python submit.py --profile dev-cluster --job examples/fsdp2.yaml --wait # on SLURM
    python submit.py --resume RUN --set profile.tasks_per_node=4            # the same run, resharded to 4 ranks
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset

from trainer.api import Context, ResumableSampler, epoch_and_skip
from trainer.recipes.data import load_digits


@dataclass
class FsdpConfig:
    epochs: int = 6
    global_batch: int = 64  # divided among the ranks: a multiple of the world size
    hidden: int = 256
    lr: float = 3e-3
    dropout: float = 0.1
    # Raise on rank 0 at this global step (0: never): a run that ends with checkpoints and unfinished, to try
    # `--resume RUN` on it (with another world size, say).
    fail_at_step: int = 0


def build(config: FsdpConfig, ctx: Context) -> nn.Module:
    torch.manual_seed(0)  # the same full weights on every rank before sharding, on any world size
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, config.hidden), nn.ReLU(), nn.Dropout(config.dropout),
                          nn.Linear(config.hidden, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 10))
    if ctx.distributed:  # each Linear its own unit, then the root: every parameter a DTensor sharded on dim 0
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    return model


def train(ctx: Context, config: FsdpConfig) -> dict:
    if config.global_batch % ctx.world_size:
        raise ValueError(f"config.global_batch {config.global_batch} is not a multiple of the world size "
                         f"{ctx.world_size}")
    per_rank = config.global_batch // ctx.world_size
    data = load_digits()
    train_set = TensorDataset(data.train_x, data.train_y)
    model = build(config, ctx)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    sampler = ResumableSampler(train_set, ctx, shuffle=True, seed=1)
    per_epoch = -(-len(sampler) // per_rank)
    step = ctx.resume(model=model, optimizer=optimizer)  # this rank's shards, from any world size's checkpoint
    loss = torch.zeros(())
    while step < per_epoch * config.epochs:
        epoch, skip = epoch_and_skip(step, per_epoch, per_rank)
        sampler.set_epoch(epoch, skip=skip)
        # (Its own generator: a DataLoader draws its seed from the global RNG, which the dropout's resume restores.)
        loader = DataLoader(train_set, batch_size=per_rank, sampler=sampler, generator=torch.Generator())
        for inputs, labels in loader:
            ctx.step_boundary(step)
            if config.fail_at_step and step == config.fail_at_step and ctx.is_main:
                raise RuntimeError(f"failing on purpose at step {step} (config.fail_at_step)")
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs.float() / 255.0), labels)
            loss.backward()
            optimizer.step()
            step += 1
        ctx.log({"epoch": epoch + 1, "train_loss": ctx.ranks.mean_(loss.detach().clone()).item()}, step)
    # The full weights, gathered once at the end (a collective: every rank calls it), for evaluation and the file.
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    model.eval()
    accuracy = 0.0
    if ctx.is_main:
        torch.save(full, ctx.run_dir / "model_final.pt")
    with torch.no_grad():  # every rank: FSDP2's forward gathers each unit's shards
        accuracy = (model(data.test_x.float() / 255.0).argmax(1) == data.test_y).float().mean().item()
    return {"test_accuracy": accuracy, "train_loss": loss.item(), "steps": step}
