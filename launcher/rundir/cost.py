"""What a SLURM run cost against what its profile asked for: elapsed time, CPU efficiency, peak
memory against `mem_per_task` (the node's request in the torchrun shape), node-hours (from
launcher.cluster.slurm.usage), and one line per profile key that the run used less than half of, so
the user knows which request to lower. A figure sacct does not give (yet: a job of seconds may have
no MaxRSS or TotalCPU recorded) is None, shown as "-", and backs no advice.
"""

from __future__ import annotations

from typing import Any

from launcher.cluster.slurm.env import slurm_env
from launcher.cluster.slurm.usage import JobUsage, sacct_usage
from launcher.config import units
from launcher.rundir.record import RecordedRun
from launcher.rundir.task_state import FINAL, TaskState

# Under this fraction of a request, the request is worth lowering.
WASTE_BELOW = 0.5
# The figures that status --json and the sweep summary carry per task.
COST_COLUMNS = ["elapsed_s", "cpu_efficiency", "max_rss_mb", "mem_requested_mb", "node_hours"]


def ranks_per_task(profile: dict[str, Any]) -> int:
    """How many ranks one SLURM task holds: 1, or in the torchrun shape (one task per node runs torchrun
    and its workers) the node's `tasks_per_node`. sacct's MaxRSS is per SLURM task (its processes
    together), so that is what its memory is measured against."""
    return int(profile.get("tasks_per_node") or 1) if profile.get("launch") == "torchrun" else 1


def task_cost(usage: JobUsage, profile: dict[str, Any]) -> dict[str, Any]:
    """One task's figures; mem_requested_mb is what one SLURM task was given: the profile's mem_per_task,
    or in the torchrun shape the node's request, mem_per_task x tasks_per_node (`mem_per` says which;
    None: the partition default)."""
    ranks = ranks_per_task(profile)
    requested = units.memory_mb(profile["mem_per_task"]) * ranks if profile.get("mem_per_task") is not None else None
    efficiency = usage.cpu_efficiency
    return {"elapsed_s": usage.elapsed_s,
            "cpu_efficiency": None if efficiency is None else round(efficiency, 4),
            "max_rss_mb": None if usage.max_rss_bytes is None else round(usage.max_rss_bytes / 2**20, 1),
            "mem_requested_mb": requested, "mem_per": "node" if ranks > 1 else "task",
            "node_hours": round(usage.node_hours, 6),
            "total_cpu_s": None if usage.total_cpu_s is None else round(usage.total_cpu_s, 3),
            "alloc_cpus": usage.alloc_cpus, "nodes": usage.nodes}


def run_costs(info: RecordedRun, states: list[TaskState]) -> dict[int, dict[str, Any]]:
    """The figures of each finished task of a SLURM run, by task index; {} elsewhere or without accounting."""
    # (A point reused from another run cost nothing here: its job is that run's.)
    finished = {ts.job_id: ts.task for ts in states if ts.state in FINAL and ts.job_id and not ts.reused}
    # (A pool's points share their workers' jobs; a job step's job is the user's whole allocation.)
    if info.executor != "slurm" or not finished or info.is_pool or info.step:
        return {}
    usage = sacct_usage(list(finished), slurm_env(info.slurm_conf, cluster=info.cluster), info.record.get("created")) or {}
    return {task: task_cost(usage[job], info.profile) for job, task in finished.items() if job in usage}


def advice(costs: dict[int, dict[str, Any]], profile: dict[str, Any]) -> list[str]:
    """One line per profile key of which every finished task used under half (the best-used task counts)."""
    if not costs:
        return []
    lines = []
    efficiency = [c["cpu_efficiency"] for c in costs.values() if c["cpu_efficiency"] is not None]
    # (A single CPU per task cannot be lowered: its idle time is waiting on data, not a request to trim.)
    if efficiency and max(efficiency) < WASTE_BELOW and int(profile.get("cpus_per_task") or 1) > 1:
        lines.append(f"the run used at most {max(efficiency):.0%} of its CPUs: lower cpus_per_task "
                     f"(now {profile.get('cpus_per_task')})")
    peaks = [c["max_rss_mb"] for c in costs.values() if c["max_rss_mb"] is not None]
    requested = next(iter(costs.values()))["mem_requested_mb"]
    if peaks and requested and max(peaks) < WASTE_BELOW * requested:
        ranks = ranks_per_task(profile)
        per = f"node (its torchrun and {ranks} ranks)" if ranks > 1 else "task"
        of = f"{requested} MB = mem_per_task x {ranks}" if ranks > 1 else f"{requested} MB"
        lines.append(f"the run's peak memory per {per} was {max(peaks):.0f} MB of {of}: lower "
                     f"mem_per_task (now {profile.get('mem_per_task')})")
    limit_s = 60 * units.time_minutes(profile["time"]) if profile.get("time") is not None else None
    longest = max(c["elapsed_s"] or 0 for c in costs.values())  # (0: accounting has no elapsed time yet)
    if limit_s and 0 < longest < WASTE_BELOW * limit_s:
        lines.append(f"the longest task ran {longest:.0f} s of its {limit_s // 60} min limit: lower time "
                     f"(now {profile.get('time')})")
    return lines


def cost_cell(cost: dict[str, Any] | None) -> str:
    """A short table cell: `cpu 45%, mem 620/768 MB, 0.0042 node-h`."""
    if not cost:
        return "-"
    cpu = f"cpu {cost['cpu_efficiency']:.0%}" if cost["cpu_efficiency"] is not None else "cpu -"
    peak = f"{cost['max_rss_mb']:.0f}" if cost["max_rss_mb"] is not None else "-"
    mem = f"mem {peak}/{cost['mem_requested_mb']} MB" if cost["mem_requested_mb"] else f"mem {peak} MB"
    mem += " per node" if cost.get("mem_per") == "node" else ""  # the torchrun shape: one task holds the node
    return f"{cpu}, {mem}, {cost['node_hours']:.4f} node-h"
