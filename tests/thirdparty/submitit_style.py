"""An entrypoint written for submitit, unchanged: it exports submitit's torch variables and forms the
process group itself (inside a job the tool has already formed it: a no-op with one log line), then
destroys it at the end. Its config is a nested dataclass of the types a user writes (issue 19)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import submitit
import torch
import torch.distributed as dist
from torch import nn


class Activation(enum.Enum):
    RELU = "relu"
    TANH = "tanh"


@dataclass
class Model:
    depth: int = 1
    widths: tuple[int, ...] = (16,)
    activation: Activation = Activation.RELU

    def __post_init__(self) -> None:
        if len(self.widths) != self.depth:
            raise ValueError(f"widths has {len(self.widths)} entries for depth {self.depth}")


@dataclass
class Optim:
    name: Literal["sgd", "adam"] = "sgd"
    lr: float = 0.1
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass
class NestedConfig:
    model: Model = field(default_factory=Model)
    optim: Optim = field(default_factory=Optim)
    data_dir: Path = Path("data")
    loss_weights: dict[str, float] = field(default_factory=lambda: {"ce": 1.0})
    warm_start: Optional[Path] = None
    steps: int = 5


def main(ctx, config: NestedConfig) -> dict:  # noqa: ANN001 - written as for submitit: ctx unused but for rank 0's print
    submitit.helpers.TorchDistributedEnvironment().export()
    dist.init_process_group(backend="gloo")  # as a submitit user writes it
    world, rank = dist.get_world_size(), dist.get_rank()
    act = nn.ReLU() if config.model.activation is Activation.RELU else nn.Tanh()
    layers, width = [], 8
    for out in config.model.widths:
        layers += [nn.Linear(width, out), act]
        width = out
    net = nn.parallel.DistributedDataParallel(nn.Sequential(*layers, nn.Linear(width, 2)))
    opt = (torch.optim.SGD(net.parameters(), lr=config.optim.lr) if config.optim.name == "sgd"
           else torch.optim.Adam(net.parameters(), lr=config.optim.lr, betas=config.optim.betas))
    gen = torch.Generator().manual_seed(rank)
    for _ in range(config.steps):
        x = torch.randn(16, 8, generator=gen)
        loss = config.loss_weights["ce"] * nn.functional.cross_entropy(net(x), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    ranks = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(ranks, torch.tensor([float(rank)]))
    dist.destroy_process_group()  # as a submitit user writes it: the tool tears the group down after
    types_ok = (isinstance(config.data_dir, Path) and isinstance(config.model.widths, tuple)
                and isinstance(config.model.activation, Activation)
                and all(type(v) is float for v in config.loss_weights.values()))
    return {"loss": loss.item(), "world": world, "ranks_seen": sum(r.item() for r in ranks),
            "depth": config.model.depth, "types_ok": float(types_ok), "adam": float(config.optim.name == "adam"),
            "beta2": config.optim.betas[1]}
