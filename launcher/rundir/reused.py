"""Sweep points that other runs already computed (docs/signatures.md, "Sweeps run only what they lack").

A new sweep (one whose own signature the runs folder does not know) looks each of its points up before it queues
anything (launcher.commands.reuse.completed_points): in the point index, which names the run and task of each point
signature, and in the run index (a single run of the same values is the same point; launcher.rundir.claims keeps
both). A point whose run says it completed is brought into the new sweep's folder: its result.json (saying where it came from), its metrics and curves, and
its final weights, hard-linked. run.json's `reused_points` records it, and only the other points are queued (one
array, or one pool). From then on `status`, `watch`, the summary, `--wait`, `--resume` and `results()` read such a
point from its folder like any completed task (`state_of`), without asking the scheduler about it.

A point still pending or running in another run, or one that failed there, is run again here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.rundir.layout import CURVES_FILE, METRICS_FILE, RESULT_FILE, task_dir
from launcher.rundir.record import RecordedRun, read_optional, write_result
from launcher.rundir.task_state import TaskState
from trainer.rank.rundir import MODEL_FILE

RECORD_KEY = "reused_points"  # in run.json: {task: {"run": NAME, "task": T, "job_id": J}}
# What a reused point's own folder holds of its source's: its metrics (and their picture); result.json is written.
COPIED = (METRICS_FILE, CURVES_FILE)


@dataclass(frozen=True)
class Found:
    """A completed point of another run: that run's folder name and task, the job that computed it, and its state
    there (its result and wall time)."""

    run: str
    task: int
    state: TaskState

    @property
    def origin(self) -> str:
        """Where it was computed, as `status` names it (a point that was itself reused names its first run)."""
        return self.state.reused or f"{self.run}/task-{self.task:04d}"

    def entry(self) -> dict[str, Any]:
        run, _, task = self.origin.rpartition("/task-")
        return {"run": run, "task": int(task), "job_id": self.state.job_id}


def bring(run_dir: Path, task: int, found: Found, overrides: dict[str, Any]) -> dict[str, Any]:
    """The point `found` made task `task` of the sweep `run_dir`: its folder holds what `state_of` and the summary
    read; returns its run.json entry."""
    here, there = task_dir(run_dir, task, True), found.state.task_dir
    here.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(there / name, here / name)
    with contextlib.suppress(FileNotFoundError):
        _link(there / MODEL_FILE, here / MODEL_FILE)
    ts = found.state
    result = {k: v for k, v in (ts.result or read_optional(there / RESULT_FILE) or {}).items()
              if k not in ("reused_from", "run_dir")}
    entry = found.entry()
    # (Its run_dir is its folder here, which holds its files, as a point run here names its own.)
    write_result(here, result, run_dir=str(here), job_id=ts.job_id, restarts=ts.restarts, task=task,
                 overrides=overrides, wall_time_s=ts.wall_time_s, reused_from=found.origin)
    return entry


def _link(source: Path, target: Path) -> None:
    """The same bytes under a second name, taking no space (a copy where the file system has no hard links)."""
    try:
        os.link(source, target)
    except FileNotFoundError:
        raise
    except OSError:
        shutil.copyfile(source, target)


def state_of(info: RecordedRun, task: int, overrides: dict[str, Any]) -> TaskState:
    """A reused point's state, from its own folder (its result.json says where it came from)."""
    came = info.reused[task]
    folder = info.task_dir(task)
    job_id = str(came.get("job_id") or "")
    origin = f"{came.get('run')}/task-{int(came.get('task') or 0):04d}"
    ts = TaskState(task, job_id, "completed", source="reused", overrides=overrides, task_dir=folder,
                   job_history=[job_id] if job_id else [], recorded=True, reused=origin)
    result = read_optional(folder / RESULT_FILE)
    if result is None:  # (removed by hand: `--resume` runs the point here)
        ts.state, ts.error = "failed", f"its result, reused from {origin}, is gone from {folder / RESULT_FILE}"
        return ts
    ts.result = result
    wall = result.get("wall_time_s")
    ts.wall_time_s = float(wall) if isinstance(wall, (int, float)) else None
    restarts = result.get("restarts")
    ts.restarts = restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else 0
    return ts
