"""A process group held across many runs: a pool worker's (launcher.node.pool_worker), whose ranks stay up
and run one sweep point after another. Formed once (the rendezvous, 1-2 s) and kept; the ranks agree on
what to do next through the rendezvous store, not through the group, so that a point that broke the group
(a rank raised in the middle of a collective) cannot break the agreeing too.

    held = HeldGroup(env, device, init_timeout_s, collective_timeout_s)
    step = held.share(rank0_decision)        # what rank 0 decided, on every rank
    ends = held.gather(this_ranks_outcome)   # every rank's outcome of the point, on every rank
    held.abandon()                           # a rank whose point failed: its peers' collectives fail at once
    held.reform()                            # after a failed point: a fresh group on the same store
    held.close()

A rank whose point raised leaves the group at once (`abandon`): a peer waiting for it in a collective
then fails within moments ("Connection closed by peer") instead of after collective_timeout_s, every rank
reports its outcome through the store, and all of them form the group again before the next point.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import torch
import torch.distributed as dist

from trainer.distributed import process
from trainer.distributed.environment import DistEnv


class HeldGroup:
    """This rank's place in a group kept across runs, and the store its ranks agree through."""

    def __init__(self, env: DistEnv, device: torch.device, init_timeout_s: int, collective_timeout_s: int) -> None:
        self.env, self.device = env, device
        self.collective_timeout_s = collective_timeout_s
        # Agreeing waits as long as a point may run between two agreements: no limit of its own.
        self.wait = datetime.timedelta(days=30)
        self.generation = self.sequence = 0
        self.store: Any = None
        if env.distributed:
            self.store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, is_master=env.is_main,
                                       timeout=datetime.timedelta(seconds=init_timeout_s), wait_for_workers=True)
            self._form()

    def _form(self) -> None:
        backend = "cpu:gloo,cuda:nccl" if self.device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, store=dist.PrefixStore(f"group-{self.generation}/", self.store),
                                rank=self.env.rank, world_size=self.env.world_size,
                                timeout=datetime.timedelta(seconds=self.collective_timeout_s),
                                device_id=self.device if self.device.type == "cuda" else None)

    def share(self, value: Any) -> Any:
        """Rank 0's `value` (JSON) on every rank; the other ranks' `value` is not used."""
        if self.store is None:
            return value
        key = f"share-{self.sequence}"
        self.sequence += 1
        if self.env.is_main:
            self.store.set(key, json.dumps(value))
            return value
        self.store.wait([key], self.wait)
        return json.loads(self.store.get(key))

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value` (JSON), in rank order, on every rank."""
        if self.store is None:
            return [value]
        prefix = f"gather-{self.sequence}/"
        self.sequence += 1
        self.store.set(f"{prefix}{self.env.rank}", json.dumps(value, default=str))
        keys = [f"{prefix}{rank}" for rank in range(self.env.world_size)]
        self.store.wait(keys, self.wait)
        return [json.loads(self.store.get(key)) for key in keys]

    def abandon(self) -> None:
        """Leave the group now, without meeting the others (this rank's run failed)."""
        if dist.is_initialized():
            dist.destroy_process_group()

    def reform(self) -> None:
        """A fresh group for the next run, on the same store (every rank calls it, after `gather`)."""
        if self.store is None:
            if dist.is_initialized():  # a single rank's function formed a group of its own: it ends with the run
                dist.destroy_process_group()
            return
        self.abandon()
        self.generation += 1
        self._form()

    def close(self, together: bool = True) -> None:
        """The group gone, threads joined (trainer.distributed.process.destroy_process_group)."""
        process.destroy_process_group(together and self.store is not None)
        self.store = None
