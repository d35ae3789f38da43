"""The one environment every SLURM command of the submitter runs with (sbatch through submitit,
scontrol, sacct, squeue, scancel).

A submitter may itself run inside a SLURM job (a pipeline step, an interactive allocation): that
job's variables would describe it instead of the run being submitted or asked about (SLURM_JOB_ID,
SBATCH_PARTITION and SRUN_* change requests; SLURM_TIME_FORMAT, SACCT_FORMAT and SQUEUE_FORMAT
change the output we parse). They are removed, and the profile's SLURM_CONF names the cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from trainer.distributed.environment import scrubbed

# Not SLURM_*-prefixed, but they reformat what sacct and squeue print.
OUTPUT_FORMAT_VARIABLES = ("SACCT_FORMAT", "SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SQUEUE_SORT", "SINFO_FORMAT")


def slurm_env(slurm_conf: str = "", base: Mapping[str, str] | None = None, cluster: str = "") -> dict[str, str]:
    """`base` (default: this process's environment) without an enclosing job's variables, with
    SLURM_CONF set to `slurm_conf` when one is given (else the caller's SLURM_CONF, if any), and SLURM_CLUSTERS to
    the run's cluster (the profile's `clusters:`), which sbatch, squeue, scancel, scontrol and srun read as `-M`
    (sacct does not: `sacct_cluster_args` gives it the option)."""
    env = scrubbed(os.environ if base is None else base)
    for name in OUTPUT_FORMAT_VARIABLES:
        env.pop(name, None)
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    if cluster:
        env["SLURM_CLUSTERS"] = cluster
    return env


def sacct_cluster_args(env: Mapping[str, str]) -> list[str]:
    """sacct's own `-M` for the cluster `env` names (sacct ignores SLURM_CLUSTERS and reads the local cluster)."""
    cluster = env.get("SLURM_CLUSTERS", "")
    return ["-M", cluster] if cluster else []
