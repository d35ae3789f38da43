"""`submit.py ... --when`: the table of when SLURM would start this request and its variants
(launcher.request.when_variants asks); nothing is queued."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from launcher.commands.console import EXIT_OK, emit
from launcher.request.submission import Submission
from launcher.request.when_variants import Variant, when

if TYPE_CHECKING:
    from launcher.request.over_ssh import SshPlan
    from launcher.request.plan import Plan


def start_text(start: float | None, now: float) -> str:
    """`now`, `in 29 min (07:49)`, `in 3 h (2026-12-02 10:15)`, or `-` (SLURM gave none)."""
    if start is None:
        return "-"
    wait_s = start - now
    if wait_s < 60:
        return "now"
    clock = time.strftime("%H:%M" if wait_s < 12 * 3600 else "%Y-%m-%d %H:%M", time.localtime(start))
    return f"in {wait_s / 60:.0f} min ({clock})" if wait_s < 5400 else f"in {wait_s / 3600:.1f} h ({clock})"


def estimate(plan: Plan | SshPlan, as_json: bool) -> int:
    """`--when`: the plan's check, as a dry run's (launcher.commands.sending.execute), then SLURM's estimates;
    nothing is queued. Asked before `--dry-run` where both are given: the estimate is what was asked."""
    plan.preflight(True)
    return report(plan.sub, as_json)


def report(sub: Submission, as_json: bool) -> int:
    now = time.time()
    found = when(sub)
    several = "," in sub.cluster
    rows = [[*(["cluster"] if several else []), "variant", "nodes", "partition", "time", "estimated start",
             "on nodes / why not"]]
    rows += [[*([v.cluster] if several else []), v.label, str(v.nodes), v.partition or "-", f"{v.time_min} min",
              start_text(v.estimate.start, now), "; ".join(filter(None, (v.estimate.nodes, v.estimate.error)))]
             for v in found]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    pick = picked(found) if several else None
    human = (f"when would {sub.tasks[0].job.name} start (SLURM's estimates, sbatch --test-only):\n"
             + "\n".join(line.rstrip() for line in lines)
             + (f"\nSLURM would send it to cluster {pick} (the earliest start as asked)" if pick else "")
             + "\nNothing was queued.")
    emit(human, {"when": [_as_json(v) for v in found], **({"cluster": pick} if several else {})}, as_json)
    return EXIT_OK


def picked(found: list[Variant]) -> str | None:
    """Of several clusters, the one SLURM sends the job to as asked: the one that would start it first (sbatch -M
    a,b); None where none can."""
    asked = [v for v in found if v.label == found[0].label and v.estimate.start is not None]
    return min(asked, key=lambda v: v.estimate.start or 0.0).cluster if asked else None


def _as_json(v: Variant) -> dict[str, Any]:
    return {"variant": v.label, "nodes": v.nodes, "partition": v.partition, "time_min": v.time_min,
            "start": v.estimate.start, "on": v.estimate.nodes or None, "error": v.estimate.error or None,
            **({"cluster": v.cluster} if v.cluster else {})}
