"""srun's report of tasks that ended badly, read from the job's log.

e.g. "srun: error: cpu2: task 1: Killed" or "srun: error: cpu2: task 1: Exited with exit code 1".
The lines before "Terminating StepId" happened first; the others are srun's own kill-on-bad-exit.
"""

from __future__ import annotations

import re

# Every SLURM task is killed as soon as one exits with an error, so a crashed rank ends the job
# instead of leaving its peers waiting in a collective.
SRUN_ARGS = ("--kill-on-bad-exit=1",)

# A pattern string: re compiles (and caches) it on first use, so a submission never pays for it.
_SRUN_TASK = r"^srun: error: (?P<node>\S+): tasks? (?P<ranks>[\d,-]+): (?P<what>.+)$"


def task_failures(log_text: str) -> list[tuple[int, str]]:
    """(rank, srun's line) for every task srun reported as failed, in the order it reported them."""
    out: list[tuple[int, str]] = []
    for line in log_text.splitlines():
        match = re.match(_SRUN_TASK, line.strip())
        if not match:
            continue
        for part in match.group("ranks").split(","):
            lo, _, hi = part.partition("-")
            for rank in range(int(lo), int(hi or lo) + 1):
                out.append((rank, line.strip()))
    return out
