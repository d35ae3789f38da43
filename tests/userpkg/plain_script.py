"""A torchrun-style script that knows nothing of trainer.api: its own process group, N all-reduces
with a pause between them. A stop signal ends it; the requeued job starts it again from scratch.
It marks each attempt's start in the run folder (plain-ATTEMPT-RANK.started) for the tests."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

if __name__ == "__main__":
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    dist.init_process_group("gloo")
    rank, attempt = dist.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    open(os.path.join(os.environ["TRAINER_RUN_DIR"], f"plain-{attempt}-{rank}.started"), "w").close()
    total = torch.zeros(1)
    for _ in range(iterations):
        value = torch.ones(1)
        dist.all_reduce(value)
        total += value
        time.sleep(0.05)
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"sum": total.item(), "attempt": attempt}))
