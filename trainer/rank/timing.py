"""Wall-clock marks of one process's way to its first training step, written to the run folder.

`benchmarks/submit_to_first_step.py` splits "submit -> first step" into its phases with them:
the process's start (from /proc), `run()` entered (Python, the launcher and torch imported), the
process group formed, the data ready, the first optimizer step done. Costs a few microseconds;
no torch here, so it can be imported anywhere.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from trainer.rank.rundir import TIMING_DIR

MARKS: dict[str, float] = {}


def begin() -> None:
    """`run()` entered: start a fresh record (an in-process executor may call run() again)."""
    MARKS.clear()
    MARKS["run"] = time.time()


def mark(name: str) -> None:
    """Remember when this process first reached `name` (later calls keep the first time)."""
    MARKS.setdefault(name, time.time())


def first_step(run_dir: str | Path, rank: int) -> None:
    """Called after every optimizer step; only the first one marks and writes (a dict lookup after),
    and only in a process whose `run()` began the record (not a script's own `trainer.api.init()`)."""
    if "first_step" not in MARKS and "run" in MARKS:
        mark("first_step")
        write(run_dir, rank)


def process_start_time() -> float | None:
    """When the kernel started this process (epoch seconds), or None where /proc cannot tell."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            # Field 22 (starttime, clock ticks after boot) comes after the parenthesised command name.
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def write(run_dir: str | Path, rank: int) -> None:
    """Write this rank's marks to RUN_DIR/startup/rank-N.json."""
    folder = Path(run_dir) / TIMING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    record = {"rank": rank, "pid": os.getpid(), "process_start": process_start_time(), **MARKS}
    (folder / f"rank-{rank}.json").write_text(json.dumps(record))
