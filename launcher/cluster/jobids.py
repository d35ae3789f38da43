"""Job ids as the run folder records them: "12" (a job or a local controller's pid), "12_3" (task 3
of array 12), "DEBUG_12" (a debug run's). The one place that reads, splits and expands them."""

from __future__ import annotations

import re

# What a run folder records as a job id (a run's records are read back into dependencies and scancel).
RECORDED = r"(\d{1,20}(_\d{1,10})?|DEBUG_\d{1,20})?"
SLURM = r"\d{1,20}(_\d{1,10})?"


def recorded(job_id: str) -> bool:
    """Whether `job_id` is one a run folder may hold ("" too: a task never queued)."""
    return re.fullmatch(RECORDED, job_id) is not None


def is_slurm(job_id: str) -> bool:
    """Whether `job_id` is a SLURM job or array task id ("12", "12_3")."""
    return re.fullmatch(SLURM, str(job_id)) is not None


def base_id(job_id: str) -> str:
    """The job (or array) id: "12_3" -> "12"."""
    return str(job_id).split("_", 1)[0]


def distinct_bases(job_ids: list[str]) -> list[str]:
    """The arrays and jobs among `job_ids`, in order, once each."""
    return list(dict.fromkeys(base_id(j) for j in job_ids))


def expand_array_id(job_id: str) -> list[str]:
    """`12_[3-5,7%2]` (an array's not yet started tasks, as SLURM lists them) -> 12_3, 12_4, 12_5, 12_7."""
    match = re.fullmatch(r"(\d+)_\[([^\]%]+)(%\d+)?\]", job_id)
    if not match:
        return [job_id]
    out = []
    for part in match.group(2).split(","):
        lo, _, hi = part.partition("-")
        out += [f"{match.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def summary(job_ids: list[str]) -> str:
    """"12" for one job, "array 12 (6 tasks)" for an array (or several arrays)."""
    if len(job_ids) == 1:
        return job_ids[0]
    return f"array {', '.join(distinct_bases(job_ids))} ({len(job_ids)} tasks)"
