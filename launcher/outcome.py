"""Waiting for submitted jobs and turning what the ranks returned into one result (or a failure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    result: dict[str, Any] | None
    # (rank, short error, traceback text) for every rank that failed.
    failures: list[tuple[int, str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and self.result is not None


def _error_text(err: BaseException) -> tuple[str, str]:
    text = str(err).strip()
    # submitit wraps the rank's traceback between "-----" rules and then lists the log paths; the
    # traceback's last line is the exception itself.
    body = text.split("\nYou can check full logs")[0]
    lines = [line.strip() for line in body.splitlines() if line.strip() and not line.startswith("-----")]
    return (lines[-1] if lines else type(err).__name__), text


def _root_cause_first(failures: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """Ranks that died of a peer's failure report timeouts or closed connections; show the cause first."""
    symptoms = ("timed out", "Timeout", "Connection closed", "Connection reset", "Broken pipe",
                "killed", "SIGTERM", "has not completed", "UncompletedJobError")
    return sorted(failures, key=lambda f: (any(s in f[2] for s in symptoms), f[0]))


def wait(job: Any) -> Outcome:
    """Wait for every task of a submitit job; rank 0's result, with all ranks' node names."""
    num_tasks = getattr(job, "num_tasks", 1)
    results: list[dict[str, Any]] = []
    failures: list[tuple[int, str, str]] = []
    if num_tasks <= 1:
        tasks = [job]
    else:
        tasks = [job.task(k) for k in range(num_tasks)]
    for rank, task in enumerate(tasks):
        try:
            results.append(task.result())
        except Exception as err:  # noqa: BLE001 - any task failure is reported, not raised
            short, text = _error_text(err)
            failures.append((rank, short, text))
    if failures:
        return Outcome(None, _root_cause_first(failures))
    result = dict(results[0])
    result["nodes"] = [r.get("node", "") for r in results]
    return Outcome(result)
