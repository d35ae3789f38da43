"""`ResumableSampler`, part of the public per-rank API (import it from `trainer.api`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data.distributed import DistributedSampler


class ResumableSampler(DistributedSampler):  # type: ignore[type-arg]
    """A DistributedSampler whose epoch can start mid-way: `set_epoch(epoch, skip=n)` leaves out
    the first `n` samples of this rank's share (those an interrupted attempt already trained on),
    so the rest of the epoch sees exactly the samples, in the order, an uninterrupted run would."""

    def __init__(self, dataset: Any, ctx: Any = None, **kwargs: Any) -> None:
        # ctx: a trainer.api.Context (its rank and world size), typed loosely: trainer.api imports this module.
        if ctx is not None:
            kwargs.setdefault("num_replicas", ctx.world_size)
            kwargs.setdefault("rank", ctx.rank)
        super().__init__(dataset, **kwargs)
        self.skip = 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        super().set_epoch(epoch)
        self.skip = skip

    def __iter__(self) -> Iterator[int]:
        return iter(list(super().__iter__())[self.skip:])

    def __len__(self) -> int:
        return max(0, self.num_samples - self.skip)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "skip": self.skip}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.set_epoch(state["epoch"], state["skip"])
