"""The few collectives the trainer calls itself (DDP all-reduces the gradients on its own).

Each is a no-op in a one-process run, so the training loop reads the same with one rank or many.
Flags and Python objects travel as CPU tensors, which the process group sends through gloo also on
GPU runs (see trainer.distributed.process): a stop flag checked at every step then costs no device sync.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from trainer.distributed.environment import DistEnv


class Ranks:
    """This process's view of the job's ranks."""

    def __init__(self, env: DistEnv) -> None:
        self.env = env
        self.distributed, self.is_main, self.world_size = env.distributed, env.is_main, env.world_size

    def max(self, value: int) -> int:
        """The largest `value` of any rank: a flag that any one rank may raise for all."""
        if not self.distributed:
            return value
        flag = torch.tensor([value])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """Sum `t` over the ranks, in place."""
        if self.distributed:
            dist.all_reduce(t)
        return t

    def mean_(self, t: torch.Tensor) -> torch.Tensor:
        """Average `t` over the ranks, in place."""
        if self.distributed:
            dist.all_reduce(t, op=dist.ReduceOp.AVG if t.is_cuda else dist.ReduceOp.SUM)
            if not t.is_cuda:
                t /= self.world_size  # gloo has no AVG
        return t

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj` in rank order on rank 0; an empty list on the others."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size if self.is_main else []
        dist.gather_object(obj, out if self.is_main else None, dst=0)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (the others' `obj` is ignored)."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()
