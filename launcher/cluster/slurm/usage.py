"""What a SLURM job used, from `sacct`: elapsed time, CPU time, allocated CPUs, nodes and peak memory
(what `seff` reports). Only text parsing and one sacct call; nothing here imports torch.

The allocation's record holds Elapsed, AllocCPUS, NNodes and TotalCPU (which sacct sums over the
job's steps); MaxRSS is only on the step records (`.batch`, `.0`, ...), so the job's peak is the
largest of its steps'. A requeued job's earlier lives (`--duplicates`) add their time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.cluster.jobids import expand_array_id
from launcher.cluster.slurm.accounting import sacct

USAGE_COLUMNS = ("JobID", "State", "ElapsedRaw", "TotalCPU", "AllocCPUS", "NNodes", "MaxRSS")
_CLOCK = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
_SIZE = re.compile(r"(?i)^(\d+(?:\.\d+)?)([KMGTP]?)$")
_BYTES_PER_UNIT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def cpu_seconds(text: str) -> float | None:
    """sacct's TotalCPU (`[DD-[HH:]]MM:SS[.mmm]`, e.g. `00:07.036`, `01:02:03`, `1-02:03:04`) in
    seconds; None where it is empty or not in that form."""
    match = _CLOCK.match(text.strip())
    if not match:
        return None
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


def memory_bytes(text: str) -> int | None:
    """sacct's MaxRSS (`12448K`, `1.5G`; a bare number is bytes) in bytes; None where it is empty."""
    match = _SIZE.match(text.strip())
    if not match:
        return None
    return round(float(match.group(1)) * _BYTES_PER_UNIT[match.group(2).upper()])


@dataclass
class JobUsage:
    """What one job (or array task) used over all its lives."""

    job_id: str
    elapsed_s: float = 0.0
    total_cpu_s: float | None = None  # None: sacct gave no TotalCPU (yet) for any life of the job
    alloc_cpus: int = 0
    nodes: int = 0
    max_rss_bytes: int | None = None  # None: no step recorded it (the job never ran a step)

    @property
    def cpu_efficiency(self) -> float | None:
        """TotalCPU / (Elapsed x AllocCPUS), as seff computes it."""
        if self.total_cpu_s is None or not (self.elapsed_s and self.alloc_cpus):
            return None
        return self.total_cpu_s / (self.elapsed_s * self.alloc_cpus)

    @property
    def node_hours(self) -> float:
        return self.elapsed_s * self.nodes / 3600


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0


def usage_from_rows(rows: list[dict[str, str]]) -> dict[str, JobUsage]:
    """Each job's usage from sacct's rows of USAGE_COLUMNS (allocations and steps)."""
    usage: dict[str, JobUsage] = {}
    for row in rows:
        job, _, step = row["JobID"].partition(".")
        for one in expand_array_id(job):
            entry = usage.setdefault(one, JobUsage(one))
            if not step:  # the allocation: one per life of the job
                entry.elapsed_s += _int(row["ElapsedRaw"])
                if (cpu := cpu_seconds(row["TotalCPU"])) is not None:
                    entry.total_cpu_s = (entry.total_cpu_s or 0.0) + cpu
                entry.alloc_cpus = max(entry.alloc_cpus, _int(row["AllocCPUS"]))
                entry.nodes = max(entry.nodes, _int(row["NNodes"]))
            elif (rss := memory_bytes(row["MaxRSS"])) is not None:
                entry.max_rss_bytes = max(rss, entry.max_rss_bytes or 0)
    return usage


def sacct_usage(job_ids: list[str], env: dict[str, str], since: float | None = None) -> dict[str, JobUsage] | None:
    """The usage of `job_ids` (array tasks one by one); None where accounting is unavailable.
    `since`: as in accounting.sacct (ids a reset controller reuses)."""
    rows = sacct(job_ids, USAGE_COLUMNS, env, since)
    return None if rows is None else usage_from_rows(rows)
