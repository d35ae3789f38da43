"""Job ids as the run folder records them: "12" (a job or a local controller's pid), "12_3" (task 3
of array 12). The one place that splits and expands them."""

from __future__ import annotations

import re


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
