"""The profile keys of a run that heals itself: `max_failures` (how many failed attempts come back by
themselves) and `node_error_patterns` (log lines that blame a rank's node), checked at load.

Retries are made by the retry step of a SLURM batch script (launcher.cluster.slurm.healing), which
calls `scontrol` on the batch host: not for the local or debug executor, nor in a container.
"""

from __future__ import annotations

import re

from trainer.config import values
from trainer.config.schema import require

DEFAULT_SLURM_FAILURES = 2


def allowed(executor: str, container: str, max_failures: int | None) -> int:
    """The retries a run gets: `max_failures`, null meaning 2 on SLURM; 0 where nothing can retry."""
    if executor != "slurm" or container:
        return 0
    return DEFAULT_SLURM_FAILURES if max_failures is None else max_failures


def check(executor: str, container: str, max_failures: int | None, patterns: list[str]) -> None:
    """ConfigError naming the key for a value that cannot be used."""
    require(max_failures is None or 0 <= max_failures <= 1000, "max_failures", max_failures,
            "an integer from 0 to 1000, or null (2 on SLURM, 0 elsewhere)")
    where = "in a container" if container else f"for the {executor} executor"
    require(not max_failures or (executor == "slurm" and not container), "max_failures", max_failures,
            f"0 or null {where} (failed runs are retried by the retry step of SLURM batch scripts, outside "
            f"containers; continue a failed run with --resume)")
    for index, pattern in enumerate(patterns):
        try:
            problem = values.text(pattern)
            re.compile(pattern)
        except re.error as err:
            problem = f"a regular expression (Python's re module): {err}"
        require(problem is None, f"node_error_patterns[{index}]", pattern, problem or "")
