"""What an attempt left in the run folder, read on the batch host: which job this is, where its part of
each log starts, how each rank ended (launcher.reports.fault_origin.RankEnd) and whether it took a step.

submitit appends every attempt of a job to the same log files, so `before` notes each file's size at
the start of an attempt (`<job id>_attempt.json` beside them); `after` reads from there.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.cluster.slurm.healing import RERUN_VARIABLE
from launcher.cluster.slurm.srun import task_failures
from launcher.reports.fault_origin import RankEnd
from launcher.reports import rank_notes
from launcher.rundir.layout import job_log_dir, log_name
from launcher.rundir.outcomes import read_outcomes
from trainer.distributed import environment, hostlist
from trainer.rank.rundir import TIMING_DIR

# The retry step's own lines in rank 0's log (the batch script's output goes there): never evidence.
OWN_PREFIX = "[heal]"


def job_id(environ: Mapping[str, str]) -> str:
    """This job's id as submitit names its folder: 12, or 12_3 for task 3 of array 12."""
    return environment.scheduler_job_id(environ)


def restart_count(environ: Mapping[str, str]) -> int:
    return environment.restart_count(environ)


def rerun(environ: Mapping[str, str]) -> int:
    """How many times this attempt's batch script has run itself again in its allocation (the retry step)."""
    value = environ.get(RERUN_VARIABLE, "0")
    return int(value) if value.isdigit() else 0


def marks_path(run_root: Path, job: str) -> Path:
    return job_log_dir(run_root, job) / f"{job}_attempt.json"


def note_start(run_root: Path, job: str, restart: int) -> dict[str, Any]:
    """Record where this attempt's part of each log starts (and when it started); returns the previous
    attempt's record ({} on the first)."""
    folder = job_log_dir(run_root, job)
    path = marks_path(run_root, job)
    previous = read_marks(path)
    sizes = {}
    if folder.is_dir():
        for entry in os.scandir(folder):
            if entry.name.endswith(("_log.out", "_log.err")):
                sizes[entry.name] = entry.stat().st_size
        path.write_text(json.dumps({"restart": restart, "time": time.time(), "sizes": sizes}))
    return previous


def read_marks(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def since(path: Path, marks: dict[str, Any], until: dict[str, int] | None = None) -> str:
    """The part of a log file written since `marks` (up to the sizes `until`, if given), without the
    retry step's own lines."""
    start = int((marks.get("sizes") or {}).get(path.name, 0))
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            size = None if until is None else max(0, int(until.get(path.name, start)) - start)
            text = fh.read() if size is None else fh.read(size)
    except OSError:
        return ""
    return "\n".join(line for line in text.decode(errors="replace").splitlines() if not line.startswith(OWN_PREFIX))


def placement(environ: Mapping[str, str]) -> list[str]:
    """The node of each SLURM task of this job, by task index (srun's default block distribution)."""
    nodes = hostlist.expand(environ.get("SLURM_JOB_NODELIST", "")) if environ.get("SLURM_JOB_NODELIST") else []
    per_node = environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0]
    count = int(per_node) if per_node.isdigit() and int(per_node) > 0 else 1
    return [node for node in nodes for _ in range(count)]


def rank_ends(run_root: Path, job: str, environ: Mapping[str, str], marks: dict[str, Any],
              until: dict[str, int] | None = None) -> tuple[list[RankEnd], int | None]:
    """How each task of the attempt that began at `marks` ended, and the rank srun reported first."""
    folder = job_log_dir(run_root, job)
    started = float(marks.get("time") or 0)
    places = placement(environ)
    written = rank_notes.places(folder, started)  # where each task said it runs (else srun's block placement)
    ntasks = int(environ.get("SLURM_NTASKS", "0") or 0) or len(places) or 1
    outcomes = {rank: value for rank, value in read_outcomes(run_root, job).items()
                if _written_since(folder / f"{job}_{rank}_result.pkl", started)}
    srun_lines = task_failures(since(folder / log_name(job, 0, "err"), marks, until))
    reported = {rank: line for rank, line in reversed(srun_lines)}
    ends = []
    for rank in range(ntasks):
        log = "\n".join(since(folder / log_name(job, rank, s), marks, until) for s in ("err", "out"))
        node = written.get(rank) or (places[rank] if rank < len(places) else "")
        kind, value = outcomes.get(rank, ("none", ""))
        outcome = "success" if kind == "success" else "error" if kind == "error" else "none"
        ends.append(RankEnd(rank, node, outcome, str(value) if outcome == "error" else "", log,
                            reported.get(rank, "")))
    return ends, (srun_lines[0][0] if srun_lines else None)


def _written_since(path: Path, started: float) -> bool:
    """A result pickle of this attempt, not a stale one of an earlier attempt whose rank died too early
    to remove it (launcher.node.task.drop_stale_result)."""
    try:
        return path.stat().st_mtime >= started - 1
    except OSError:
        return False


def reached_first_step(task_dir: Path, started: float) -> bool:
    """Whether some rank of the attempt that began at `started` took a training step (the trainer's
    start-up marks, trainer.rank.timing: a `script:` that does not use trainer.api leaves none)."""
    for path in (task_dir / TIMING_DIR).glob("rank-*.json"):
        try:
            mark = json.loads(path.read_text()).get("first_step")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(mark, (int, float)) and mark >= started - 1:
            return True
    return False


def task_of(run_root: Path, job: str) -> tuple[Path, str]:
    """(the task's folder, the run folder --resume takes) from submitit's pickle of the submitted task."""
    path = job_log_dir(run_root, job) / f"{job}_submitted.pkl"
    try:
        with open(path, "rb") as fh:
            submitted = pickle.load(fh)  # noqa: S301 - our own pickle, in the run's private folder
        task = submitted.function
        return Path(task.settings.run_dir), str(getattr(task, "run_root", run_root))
    except Exception:  # noqa: BLE001 - a single run's folder is the run folder itself
        return run_root, str(run_root)
