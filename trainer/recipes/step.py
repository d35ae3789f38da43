"""The arithmetic of one training step and of one evaluation: forward, loss, backward, micro-batches,
bf16 autocast. The bookkeeping around them (counters, checkpoints, stops) is the loop's (trainer.recipes.training)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer.distributed.ranks import Ranks
from trainer.recipes import data

EVAL_BATCH = 1024


def autocast(bf16: bool) -> torch.autocast:
    """bf16 autocast for the job's GPU path (amp_bf16); a no-op otherwise."""
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16)


def forward_backward(forward: Callable[[torch.Tensor], torch.Tensor], ddp: nn.Module, x: torch.Tensor,
                     y: torch.Tensor, micro_batches: int, label_smoothing: float, bf16: bool) -> torch.Tensor:
    """Forward and backward over `micro_batches` chunks of the batch, all-reducing only on the last;
    returns the batch's mean loss (detached)."""
    chunks = list(zip(x.chunk(max(1, micro_batches)), y.chunk(max(1, micro_batches))))
    total = torch.zeros((), device=x.device)
    for i, (xc, yc) in enumerate(chunks):
        sync = i == len(chunks) - 1 or not isinstance(ddp, DDP)
        context = ddp.no_sync() if not sync else contextlib.nullcontext()
        with context, autocast(bf16):
            out = forward(xc)
            loss = F.cross_entropy(out.float(), yc, label_smoothing=label_smoothing)
        (loss * len(yc) / len(y)).backward()
        total += loss.detach() * len(yc) / len(y)
    return total


@torch.no_grad()
def evaluate(model: nn.Module, dataset: data.ImageTensors, shard: slice, channels_last: bool, bf16: bool,
             ranks: Ranks) -> dict[str, float]:
    """Loss and accuracy on the whole test set: this rank takes `shard`, the sums are all-reduced."""
    model.eval()
    xs, ys = dataset.test_x[shard], dataset.test_y[shard]
    sums = torch.zeros(3, dtype=torch.float64, device=ys.device)  # loss sum, correct, count
    for lo in range(0, len(ys), EVAL_BATCH):
        x = data.prepare(xs[lo:lo + EVAL_BATCH], dataset, False, None, channels_last)
        y = ys[lo:lo + EVAL_BATCH]
        with autocast(bf16):
            out = model(x).float()
        sums[0] += F.cross_entropy(out, y, reduction="sum").double()
        sums[1] += (out.argmax(1) == y).sum()
        sums[2] += len(y)
    ranks.sum_(sums)
    model.train()
    loss, correct, count = sums.tolist()
    return {"test_loss": loss / count, "test_accuracy": correct / count, "test_count": int(count)}
