"""`submit.py ... --when`: when SLURM would start this request, and a few variants the user could pick
instead, each asked of `sbatch --test-only` (launcher.cluster.slurm.start_estimate) with the very batch
script it would be sent with; nothing is queued.

The variants: fewer nodes (halved, down to one), each other partition the user may submit to, and the
shortest time limit that still fits the run in the attempts `max_timeout_requeues` allows (the time limit
split over 1 + that many attempts: a shorter job often starts sooner, in a gap the scheduler backfills).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from launcher.cluster.slurm import start_estimate
from launcher.cluster.slurm.env import slurm_env
from launcher.config.profile import Profile
from launcher.config.resolve import Point
from launcher.request import executor
from launcher.request.submission import Submission, build
from trainer.config.schema import ConfigError


@dataclass(frozen=True)
class Variant:
    """One request SLURM is asked about: what changed from the profile, and its answer."""

    label: str
    nodes: int
    partition: str
    time_min: int
    estimate: start_estimate.Estimate
    cluster: str = ""  # which of the profile's clusters was asked ("": the SLURM_CONF's own)


def variants(profile: Profile, partitions: list[str]) -> list[tuple[str, dict[str, object]]]:
    """(label, profile changes) for the request as asked and each variant."""
    out: list[tuple[str, dict[str, object]]] = [("as asked", {})]
    nodes = profile.nodes // 2
    while nodes >= 1:
        out.append((f"{nodes} node(s)", {"nodes": nodes}))
        nodes = nodes // 2 if nodes > 1 else 0
    out += [(f"partition {name}", {"partition": name}) for name in partitions if name != profile.partition]
    shortest = -(-profile.time_min // (profile.max_timeout_requeues + 1))
    if shortest < profile.time_min and shortest * 60 > profile.signal_delay_s:
        out.append((f"time {shortest} min ({profile.max_timeout_requeues + 1} attempts)", {"time": shortest}))
    return out


def when(sub: Submission) -> list[Variant]:
    """SLURM's estimate for `sub` and each variant (a variant the profile's own checks refuse is left out), on each
    of the profile's clusters where it names several (SLURM sends the job to the one that starts it first)."""
    if sub.executor != "slurm" or sub.request is None or sub.profile.login or sub.allocation is not None:
        raise ConfigError("--when: asks SLURM when a new job would start; it needs a slurm profile submitting from "
                          "here (not over SSH, not --in-allocation, which starts at once)")
    return [v for cluster in (sub.cluster.split(",") if sub.cluster else [""]) for v in _on(sub, cluster)]


def _on(sub: Submission, cluster: str) -> list[Variant]:
    env = slurm_env(sub.slurm_conf, cluster=cluster)  # (SLURM_CLUSTERS outranks the script's --clusters)
    default = sub.profile.partition
    out = []
    for label, changes in variants(sub.profile, start_estimate.partitions(env, sub.profile.account)):
        points = [Point(t.task, t.job, t.overrides, "", t.settings.data_dir, t.settings.tracker) for t in sub.tasks]
        try:
            profile = dataclasses.replace(sub.profile, **changes)
            variant = build(profile, points, sub.run_dir, sub.is_sweep, sub.after_job_ids, sub.submit_dir,
                            sub.project, sub.code_root, sub.origin)
        except ValueError:  # the profile's checks (FieldError) or the request's (ConfigError) refuse this variant
            continue
        found = start_estimate.estimate(executor.sbatch_script(variant), env)
        out.append(Variant(label, profile.nodes, profile.partition or found.partition or default, profile.time_min,
                           found, cluster))
    return out
