"""tiny's training, and where every rank ran as the public API tells it (`ctx.rank`, `world_size`,
`local_rank`, `node`) beside torchrun's variables. tests/test_torchrun_launch.py submits it as
`entrypoint: "tests.userpkg.ranks:train"` in the `launch: torchrun` shape."""

from __future__ import annotations

import os

from tests.userpkg.tiny import TinyConfig
from tests.userpkg.tiny import train as tiny_train
from trainer.api import Context


def train(ctx: Context, config: TinyConfig) -> dict:
    result = tiny_train(ctx, config)
    seen = {"rank": ctx.rank, "world_size": ctx.world_size, "local_rank": ctx.local_rank, "node": ctx.node,
            "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_NODEID")}}
    return {**result, "places": ctx.ranks.gather(seen)}  # every rank's, in rank order, on rank 0
