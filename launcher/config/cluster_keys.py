"""The profile key `clusters:` (SLURM's `-M`): which of a site's clusters behind one login runs the job.

Every SLURM command the toolkit runs for the run then names it: the submission, `squeue`, `sacct`, `scancel`,
`scontrol` (release, requeue, update, show), the batch script's own `srun`, retry step and requeue, and `--when`.
With several (`-M a,b`), SLURM sends the job to the one that would start it first; the submitter reads which from
sbatch's answer, sends the rest of the run there (a split array's other parts) and records it (run.json's
`cluster`), and every later command, `--resume` included, goes to that one.
"""

from __future__ import annotations

import re
from typing import Union

from trainer.config.schema import require

CLUSTER_NAME = r"[A-Za-z0-9_-]+"


def names(value: Union[str, list[str]]) -> list[str]:
    """`clusters:` as a list: a name, or a list of names ([] for none)."""
    return [value] if isinstance(value, str) and value else list(value) if isinstance(value, list) else []


def check(value: Union[str, list[str]], executor: str, in_allocation: bool) -> None:
    """ConfigError naming the key for a value that cannot be used."""
    listed = names(value)
    for name in listed:
        require(re.fullmatch(CLUSTER_NAME, name) is not None, "clusters", value,
                "a SLURM cluster name (letters, digits, '_', '-'), or a list of them")
    require(len(set(listed)) == len(listed), "clusters", value, "each cluster named once")
    require(not listed or executor == "slurm", "clusters", value, f"empty for the {executor} executor (a SLURM "
            f"cluster is where a slurm profile's jobs go)")
    require(not listed or not in_allocation, "clusters", value, "empty with in_allocation: true (the run is a job "
            "step of the allocation you hold, on its cluster)")
