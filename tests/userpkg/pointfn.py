"""A small function for the pool tests and benchmark: every rank trains the same little model on the same
data (no sharding), so the outcome of a point is a function of its config alone, and `reference` computes
it here, in the test's own process, with the very same steps; the ranks still meet in a collective each
step (they check they agree), so a point uses the worker's process group like any DDP loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from trainer.api import Context


@dataclass
class PointConfig:
    samples: int = 256  # the data and the model: the same on every rank and every point
    width: int = 16
    lr: float = 0.1
    steps: int = 20
    fail: bool = False  # the last rank raises at step 5: the point fails, alone
    step_sleep_s: float = 0.0  # slows each step, so that a test can act on the point meanwhile


def _setup(config: PointConfig) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(config.samples, config.width, generator=gen)
    y = (x @ torch.randn(config.width, 1, generator=gen)).squeeze(1)
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(config.width, config.width), nn.Tanh(), nn.Linear(config.width, 1))
    return net, torch.optim.SGD(net.parameters(), lr=config.lr, momentum=0.9), x, y


def _steps(config: PointConfig, net: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
           step: int, before: Callable[[int], None], after: Callable[[int, float], None]) -> float:
    loss = torch.zeros(())
    while step < config.steps:
        before(step)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(net(x).squeeze(1), y)
        loss.backward()
        optimizer.step()
        step += 1
        after(step, loss.item())
    return float(loss.item())


def reference(config: PointConfig, threads: int = 1) -> tuple[dict[str, torch.Tensor], float]:
    """The point's final weights and loss, trained here without interruption, on as many threads as a rank
    has (the profiles' cpus_per_task: 1). A matrix product's sums are ordered by its thread count, so the
    bits depend on it: with this process's own count (whatever the tests before it in this process set),
    every point differed from its rank's in one pass of the suite."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        net, optimizer, x, y = _setup(config)
        loss = _steps(config, net, optimizer, x, y, 0, lambda step: None, lambda step, value: None)
    finally:
        torch.set_num_threads(before)
    return net.state_dict(), loss


def train(ctx: Context, config: PointConfig) -> dict:
    net, optimizer, x, y = _setup(config)
    start = ctx.resume(model=net, optimizer=optimizer)

    def before(step: int) -> None:
        ctx.step_boundary(step)
        if config.fail and step == 5 and ctx.rank == ctx.world_size - 1:
            raise RuntimeError(f"point fails on purpose at step {step} (config.fail)")
        time.sleep(config.step_sleep_s)

    def after(step: int, loss: float) -> None:
        if ctx.distributed:  # every rank computed the same loss: the group says so
            values = torch.tensor([loss, -loss])
            torch.distributed.all_reduce(values, op=torch.distributed.ReduceOp.MAX)
            assert values[0].item() == -values[1].item() == loss, "the ranks disagree"
        ctx.log({"loss": loss}, step)

    began, cpu = time.perf_counter(), time.thread_time()  # (one thread: the rank's intra-op threads are 1)
    loss = _steps(config, net, optimizer, x, y, start, before, after)
    if ctx.is_main:
        torch.save(net.state_dict(), ctx.run_dir / "weights.pt")
    return {"loss": loss, "steps": config.steps, "fit_s": time.perf_counter() - began,
            "fit_cpu_s": time.thread_time() - cpu}
