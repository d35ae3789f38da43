"""How many CPU threads a rank uses, and the variables that tell libraries so: the one home of both.

Each rank uses the profile's `cpus_per_task` threads, never more than SLURM granted the task
(`SLURM_CPUS_PER_TASK`) or than its CPU mask allows: more threads than cores made the blog's seed
program 3x slower on two cores. The count is exported to the batch script (for libraries that
start thread pools before the trainer runs), set in a function rank's process
(trainer.distributed.process.set_threads) and given to a `script:` rank's environment
(trainer.runners.scripts), all from here. No torch: the submitter and the script runner read it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Read by OpenMP, MKL and OpenBLAS in any process this one starts (a download, a DataLoader worker).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def usable_cpus() -> int:
    """CPUs this process may run on: SLURM's task binding (cgroup or affinity mask) shows up here."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_count(requested: int, environ: Mapping[str, str], usable: int) -> int:
    """The profile's cpus_per_task, never more than SLURM granted (SLURM_CPUS_PER_TASK) or than the
    CPUs this process may use: more threads than cores made the seed 3x slower on two cores."""
    count = requested
    granted = environ.get("SLURM_CPUS_PER_TASK", "")
    if granted.isdigit() and int(granted) > 0:
        count = min(count, int(granted))
    return max(1, min(count, usable))


def count(requested: int, environ: Mapping[str, str] | None = None) -> int:
    """This process's thread count for `requested` (the profile's cpus_per_task), capped as above."""
    return thread_count(requested, os.environ if environ is None else environ, usable_cpus())


def variables(threads: int) -> dict[str, str]:
    """The environment that holds OpenMP, MKL and OpenBLAS to `threads` in this process and any it starts."""
    return {name: str(threads) for name in THREAD_VARIABLES}
