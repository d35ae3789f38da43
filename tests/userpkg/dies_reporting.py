"""A rank that raises and then dies before it reports: rank 1's exception is recorded as it leaves the function
(trainer.runners.failures, errors/rank-00001.json), and the process ends (`os._exit`) the next time the exception
is turned into text, which is when submitit writes the rank's result. Rank 0, waiting for it in an all-reduce,
fails on the closed connection and reports first, and the local fail-fast stops the run on that report. Which is
what happens, by timing alone, when a rank that raised is stopped before it reported (its peers' errors came
first). tests/test_failfast.py submits it as `entrypoint: "tests.userpkg.dies_reporting:train"`."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from trainer.api import Context


class BadBatch(ValueError):
    def __init__(self, record: str) -> None:
        super().__init__()
        self.record = record

    def __str__(self) -> str:
        if os.path.exists(self.record):  # recorded: the rank goes before it can report
            os._exit(1)
        return "bad batch on rank 1"


def train(ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
    if ctx.rank == 1:
        raise BadBatch(os.path.join(ctx.run_dir, "errors", "rank-00001.json"))
    dist.all_reduce(torch.zeros(1))  # rank 1 never joins: the connection closes when its process ends
    return {"rank": ctx.rank}
