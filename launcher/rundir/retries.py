"""Whether a failed attempt comes back by itself from its newest checkpoint (the profile's `max_failures`).

The retry step of a SLURM job (launcher.heal) asks `decide` after each attempt that failed, and records
its answer as a "failure" event in the task's events.jsonl (what `status`, `--json` and `restart_causes`
read back). A failure that is the user's bug must not burn GPU hours:

* a node's failure (launcher.reports.fault_origin) is retried, without that node;
* a rank killed by the profile's stop signal before it could take it (at start-up) is retried: a stop;
* the code's failure is not retried when it happened before the first step of the run's first
  attempt (an import error, a wrong shape, a missing file), nor when it is the same exception from the
  same place (`signature`) as the failure of an earlier attempt;
* never more than `max_failures` times per submission (a `--resume` starts a new count).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.rundir import exclusions
from launcher.rundir.restarts import FAILURE_EVENT
from launcher.reports.fault_origin import Verdict
from trainer.rank import events


@dataclass(frozen=True)
class Decision:
    retry: bool
    why: str


def failures(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failure events of a task's event log, oldest first."""
    return [e for e in log if e.get("event") == FAILURE_EVENT]


def decide(verdict: Verdict, log: list[dict[str, Any]], job_id: str, max_failures: int, *, first_attempt: bool,
           reached_first_step: bool) -> Decision:
    """Retry the attempt that ended with `verdict`? `log`: the task's events before this decision."""
    earlier = failures(log)
    retried = sum(1 for e in earlier if e.get("retry") and str(e.get("job_id")) == job_id)
    if max_failures <= 0:
        return Decision(False, "not retried: max_failures is 0")
    if retried >= max_failures:
        return Decision(False, f"not retried: retried {retried} time(s) already (max_failures {max_failures})")
    if verdict.origin == "node":
        return Decision(True, f"retry {retried + 1} of {max_failures}: a node failure ({', '.join(verdict.nodes)})")
    if verdict.origin == "stop":  # SLURM's warning came at start-up: what a stop does, a requeue
        return Decision(True, f"retry {retried + 1} of {max_failures}: the stop signal came before the ranks "
                              "could take it")
    if first_attempt and not reached_first_step:
        return Decision(False, "not retried: it failed before the first step of the run's first attempt "
                               "(a bug in the code or its input, not worth retrying)")
    same = next((e for e in reversed(earlier) if e.get("origin") == "code"), None)
    if same is not None and verdict.signature and same.get("signature") == verdict.signature:
        return Decision(False, f"not retried: the same {verdict.signature} as on an earlier attempt")
    return Decision(True, f"retry {retried + 1} of {max_failures}: from the newest checkpoint")


def last_words(task_dir: Path, run_root: Path | None = None, task: int | None = None) -> list[str]:
    """What the retry step said about the task's last failure, and the nodes the run left out: the lines
    a failed run's report ends with."""
    return notes(run_root or task_dir, [(task, task_dir)])


def notes(run_root: Path, failed: list[tuple[int | None, Path]]) -> list[str]:
    """`status`'s lines: the last failure of each failed task (where it came from, retried or why not),
    then every node the run left out and why."""
    out = []
    for task, task_dir in failed:
        found = failures(events.read(task_dir))
        if found:
            last = found[-1]
            out.append(f"{'' if task is None else f'task {task}: '}the last failure came from the "
                       f"{last.get('origin')} ({last.get('error')}); {last.get('why')}")
    return out + exclusions.lines(run_root)
