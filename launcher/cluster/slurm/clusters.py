"""The preflight of a request that may go to several clusters (the profile's `clusters: [a, b]`: SLURM sends the job
to the one that would start it first): it must fit one of them. scontrol reads one cluster at a time, so each is
asked in turn (launcher.cluster.slurm.limits.check); the answer is the strictest of those it fits, and a request
none can take is refused with each one's reason. One cluster, or none named, is limits.check itself.
"""

from __future__ import annotations

from launcher.cluster.preflights import Answer
from launcher.cluster.slurm import limits
from launcher.cluster.slurm.sbatch import SlurmRequest
from trainer.config.schema import ConfigError


def check(request: SlurmRequest, max_array_size: int | None, source: str, required: bool = True,
          tasks: int = 1) -> Answer:
    """limits.check on each of the request's clusters, as the module doc says."""
    clusters = request.cluster.split(",") if request.cluster else [""]
    if len(clusters) == 1:
        return limits.check(request, max_array_size, source, required, tasks, clusters[0])
    fits, refusals = [], []
    for cluster in clusters:
        try:
            fits.append(limits.check(request, max_array_size, source, required, tasks, cluster))
        except ConfigError as err:
            refusals.append(f"on cluster {cluster}: {err}")
    if not fits:
        raise ConfigError(f"no cluster of {request.cluster} can run it: " + "; ".join(refusals))
    chunks = [a.chunk for a in fits if a.chunk]
    return Answer(min(chunks) if chunks else None, min((a.release for a in fits), key=lambda r: r.parts))
