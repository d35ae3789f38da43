"""What a SLURM job used, from `sacct`: elapsed time, CPU time, allocated CPUs, nodes and peak memory
(what `seff` reports). Only text parsing and one sacct call; nothing here imports torch.

The allocation's record holds Elapsed, AllocCPUS, NNodes and TotalCPU (which sacct sums over the
job's steps); MaxRSS is only on the step records (`.batch`, `.0`, ...), so the job's peak is the
largest of its steps'. A requeued job's earlier lives (`--duplicates`) add their time.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from launcher.cluster.jobids import distinct_bases, expand_array_id
from launcher.cluster.slurm.accounting import NO_SACCT_ENV, query, table

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
    total_cpu_s: float = 0.0
    alloc_cpus: int = 0
    nodes: int = 0
    max_rss_bytes: int | None = None  # None: no step recorded it (the job never ran a step)

    @property
    def cpu_efficiency(self) -> float | None:
        """TotalCPU / (Elapsed x AllocCPUS), as seff computes it."""
        return self.total_cpu_s / (self.elapsed_s * self.alloc_cpus) if self.elapsed_s and self.alloc_cpus else None

    @property
    def node_hours(self) -> float:
        return self.elapsed_s * self.nodes / 3600


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0


def usage_from_table(text: str) -> dict[str, JobUsage]:
    """Each job's usage from `sacct -D -P --format=USAGE_COLUMNS` output (allocations and steps)."""
    usage: dict[str, JobUsage] = {}
    for row in table(text):
        job, _, step = row["JobID"].partition(".")
        for one in expand_array_id(job):
            entry = usage.setdefault(one, JobUsage(one))
            if not step:  # the allocation: one per life of the job
                entry.elapsed_s += _int(row["ElapsedRaw"])
                entry.total_cpu_s += cpu_seconds(row["TotalCPU"]) or 0.0
                entry.alloc_cpus = max(entry.alloc_cpus, _int(row["AllocCPUS"]))
                entry.nodes = max(entry.nodes, _int(row["NNodes"]))
            elif (rss := memory_bytes(row["MaxRSS"])) is not None:
                entry.max_rss_bytes = max(rss, entry.max_rss_bytes or 0)
    return usage


def sacct_usage(job_ids: list[str], env: dict[str, str], since: float | None = None) -> dict[str, JobUsage] | None:
    """The usage of `job_ids` (array tasks one by one); None where accounting is unavailable.
    `since`: as in accounting.sacct_records (ids a reset controller reuses)."""
    if env.get(NO_SACCT_ENV, "") not in ("", "0"):
        return None
    if not job_ids:
        return {}
    window = ["-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))] if since else []
    out = query(["sacct", "-D", "-P", "-j", ",".join(distinct_bases(job_ids)), *window,
                 f"--format={','.join(USAGE_COLUMNS)}"], env)
    return None if out is None else usage_from_table(out)
