"""A user's loop that keeps state which differs between ranks (each rank's running loss over the
epoch, checkpointed with `per_rank=`), checkpoints every epoch end itself, and shows rank 0's
progress and a log line: the parts of trainer.api the built-in recipes (trainer.recipes.training) use too.
The tests submit it as `entrypoint: "tests.userpkg.perrank:train"`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from tests.userpkg.tiny import TinyConfig, blobs
from trainer.api import Context, ResumableSampler, epoch_and_skip, steps_per_epoch


@dataclass
class Config(TinyConfig):
    """tiny's knobs (its data set, batch size, ...), with a smaller data set and learning rate."""

    epochs: int = 3
    samples: int = 256
    lr: float = 0.05


class Running:
    """This rank's loss summed since its epoch began: ranks see different samples, so it differs."""

    def __init__(self) -> None:
        self.sum, self.steps = 0.0, 0

    def state_dict(self) -> dict[str, Any]:
        return {"sum": self.sum, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sum, self.steps = state["sum"], state["steps"]


def train(ctx: Context, config: Config) -> dict:
    torch.manual_seed(0)
    net = nn.Linear(8, 4)
    model = nn.parallel.DistributedDataParallel(net) if ctx.distributed else net
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    per_epoch = steps_per_epoch(config.samples, ctx.world_size, config.batch_size)
    total = per_epoch * config.epochs
    data = blobs(config.samples)
    sampler = ResumableSampler(data, ctx, shuffle=True, seed=1)
    running = Running()
    step = ctx.resume(model=net, optimizer=optimizer, per_rank={"running": running})
    boundary_saves = []
    while step < total:
        epoch, skip = epoch_and_skip(step, per_epoch, config.batch_size)
        if skip == 0:
            running.__init__()  # a new epoch (not one resumed in the middle)
        sampler.set_epoch(epoch, skip=skip)
        loader = DataLoader(data, batch_size=config.batch_size, sampler=sampler, generator=torch.Generator())
        with ctx.progress(per_epoch, skip // config.batch_size, f"epoch {epoch + 1}") as bar:
            for x, y in loader:
                if ctx.step_boundary(step):
                    boundary_saves.append(step)
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                running.sum, running.steps = running.sum + loss.item(), running.steps + 1
                step += 1
                bar.step(step, lambda: f"user step {step} loss {loss.item():.4f}")
        mean = ctx.ranks.mean_(torch.tensor([running.sum / running.steps], dtype=torch.float64))
        ctx.log({"epoch": epoch + 1, "mean_rank_loss": mean.item()}, step)
        if step < total:
            ctx.checkpoint(step)  # every epoch end, as the built-in recipes do
    ctx.print(f"perrank: done after {step} steps")
    return {"steps": step, "boundary_saves": ",".join(map(str, boundary_saves))}
