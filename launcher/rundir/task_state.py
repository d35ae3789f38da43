"""One task's state as `status`, `watch`, `--wait` and `--resume` read it (`TaskState`), whatever it came
from: an array task's scheduler record and folder (launcher.rundir.states), or a pool's claim records
(launcher.rundir.pool_states)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.rank.rundir import ERRORS_DIR, error_file
from trainer.runners import failures

# "unknown": the controller did not answer and nothing else says the task ended; it may still run, so
# `watch`, `--wait` and `cancel` treat it as going on and `--resume` does not send it again.
ACTIVE = ("pending", "running", "requeued", "unknown")
FINAL = ("completed", "failed", "cancelled", "timeout")


@dataclass
class TaskState:
    """One task's state as the scheduler, the run folder or its process last showed it."""

    task: int
    job_id: str
    state: str
    restarts: int = 0
    source: str = ""  # sacct, squeue, run folder, process
    start: float | None = None
    end: float | None = None
    wall_time_s: float | None = None
    error: str = ""
    failed_rank: int | None = None
    result: dict[str, Any] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    task_dir: Path = Path()
    # Every job id this task ran under (a --resume adds one), oldest first.
    job_history: list[str] = field(default_factory=list)
    # Why a pending task waits (SLURM's reason), and when SLURM expects it to start.
    reason: str = ""
    expected_start: float | None = None
    # The outcome came from the task's result.json (see finished_record), not its pickles and logs.
    recorded: bool = False
    # What your function raised on the failing rank (trainer.runners.failures: type, message, traceback).
    failure: dict[str, Any] | None = None
    # The controller's complaint when it was asked about this task and did not answer ("" when it did).
    controller: str = ""
    # A sweep point another run computed (launcher.rundir.reused): that run's folder name and task, "RUN/task-NNNN".
    reused: str = ""

    @property
    def attempt(self) -> int:
        """The task's attempt now (1 for the first; 0: never submitted): its restarts, from the scheduler
        and its events (trainer.rank.events counts attempts), plus one. `status` and `watch` show this one number."""
        return self.restarts + 1 if self.job_id else 0

    @property
    def waiting(self) -> bool:
        """Whether SLURM says why this task waits or when it should start (`status` and `watch` show it)."""
        return self.state in ("pending", "requeued") and bool(self.reason or self.expected_start)

    def as_json(self) -> dict[str, Any]:
        shown = {"task": self.task, "state": self.state, "restarts": self.restarts, "job_id": self.job_id,
                 "source": self.source, "wall_time_s": _round(self.wall_time_s), "error": self.error or None,
                 "failed_rank": self.failed_rank, "overrides": self.overrides, "task_dir": str(self.task_dir),
                 "attempts": self.attempt, "start": self.start if self.state != "pending" else None,
                 "end": self.end, "reason": self.reason or None,
                 "expected_start": self.expected_start, "result": self.result, "failure": self.failure}
        if self.controller:  # only where slurmctld did not answer: what it said
            shown["controller_unreachable"] = self.controller
        if self.reused:
            shown["reused_from"] = self.reused
        return shown


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def raised(task_dir: Path, rank: int | None) -> dict[str, Any] | None:
    """The record of what the function raised on `rank` (None: the first rank that recorded one)."""
    if rank is None:
        found = sorted(Path(task_dir, ERRORS_DIR).glob("rank-*.json"))
        return failures.read(found[0]) if found else None
    return failures.read(error_file(task_dir, rank))
