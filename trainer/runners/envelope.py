"""Where and how a rank ran, around the metrics it returns: the one shape of every rank's result.

A function rank (trainer.runners.functions) and a script rank (trainer.runners.scripts) wrap their
metrics the same way; the launcher's task adds which interpreter and code ran (`launched`, in both
shapes: launcher.node.task and launcher.node.torchrun_worker); the submitter shows these keys with
`--json` and leaves them out of the metrics line (launcher.commands.submit). No torch here.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from trainer.config.lookup import CODE_ROOT
from trainer.distributed.environment import DistEnv

# The envelope's keys that are not metrics (world_size and wall_time_s are shown with the metrics).
PLACE_KEYS = ("run_dir", "node", "rank", "master_addr", "threads", "resumed_from", "returncode", "python", "code")
# The key under which a `launch: torchrun` node task returns where each of its ranks ran, {rank: node}
# (submitit keys results by SLURM task, a node there): the submitter lists every rank's node from it.
RANK_NODES = "rank_nodes"


def envelope(metrics: dict[str, Any], env: DistEnv, run_dir: str, threads: int, started: float,
             **more: Any) -> dict[str, Any]:
    """`metrics` and where this rank ran: the world, the run folder, the node, the rank, its threads,
    anything in `more`, and the wall time since `started` (a time.perf_counter() reading)."""
    return {**metrics, "world_size": env.world_size, "run_dir": run_dir, "node": env.node, "rank": env.rank,
            "master_addr": env.master_addr, "threads": threads, **more,
            "wall_time_s": round(time.perf_counter() - started, 3)}


def launched(result: dict[str, Any]) -> dict[str, Any]:
    """A rank's result with what the launcher ran it with: the interpreter (the profile's `python`) and
    the code (the run's snapshot, or this checkout)."""
    return {**result, "python": sys.executable, "code": str(CODE_ROOT)}
