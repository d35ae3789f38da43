"""What each rank under a node's torchrun leaves for the others (the `launch: torchrun` shape): the
notes folder in submitit's folder of the job, each rank's note (its result, its stop, or its error with
the time it failed), a node's stop flag and its ranks' `probe` reports, named once here, and the one
reader of the notes. And, in both shapes, where each SLURM task of an attempt runs (`write_place`,
`places`), which the batch script's retry step reads instead of the attempt banner's words.

submitit keys a job's outcomes by SLURM task, which in that shape is a node, not a rank: the node's
torchrun task (launcher.node.torchrun_task) names the failed rank from these notes, and so do `status`
and `--wait` (launcher.rundir.outcomes, launcher.waiting.ends), never from a message's text. Here,
below both the node's code that writes them and the run folder's that reads them.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from launcher.reports.root_cause import Failure

TORCHRUN_DIR = "torchrun"
PLACES_DIR = "places"  # in submitit's folder of a job: which node each SLURM task of its attempt runs on
_NOTE = re.compile(r"rank-(\d+)\.json")
_PLACE = re.compile(r"task-(\d+)\.json")


def write_place(job_folder: Path | str, task: int, host: str) -> None:
    """A SLURM task's node as it starts an attempt (launcher.node.task.announce): data, so that the retry step
    (launcher.heal) reads where each task ran without parsing the attempt banner. Written whole, then renamed."""
    folder = Path(job_folder) / PLACES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".task-{task}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"task": task, "host": host, "time": time.time()}), encoding="utf-8")
    os.replace(tmp, folder / f"task-{task}.json")


def places(job_folder: Path | str, since: float) -> dict[int, str]:
    """Each SLURM task's node, as its attempt that began at `since` (or later) wrote it; {} for none."""
    folder = Path(job_folder) / PLACES_DIR
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    found: dict[int, str] = {}
    for name in names:
        if (match := _PLACE.fullmatch(name)) is None:
            continue
        try:
            note = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(note, dict) and isinstance(note.get("host"), str) and \
                isinstance(note.get("time"), (int, float)) and note["time"] >= since - 1:
            found[int(match.group(1))] = note["host"]
    return found


def notes_dir(job_folder: Path | str) -> Path:
    """Where a `launch: torchrun` job's ranks leave their notes (in submitit's folder of the job)."""
    return Path(job_folder) / TORCHRUN_DIR


def rank_note(notes: Path, rank: int | str) -> Path:
    """A rank's note: its result, its stop, or its error (launcher.node.torchrun_worker writes it; rank
    "*": a pattern for every rank's)."""
    return notes / f"rank-{rank}.json"


def stop_flag(notes: Path, node: int) -> Path:
    """Where a node's task notes that the stop signal came (its torchrun workers read it once they catch it)."""
    return notes / f"stop-{node}"


def requeue_note(notes: Path) -> Path:
    """Where node task 0 leaves what its requeue request answered: the other nodes' tasks wait for it before they end
    (launcher.node.torchrun_task)."""
    return notes / "requeue.json"


def probe_note(notes: Path, node: int, rank: int | str) -> Path:
    """A rank's `probe` report (rank "*": a pattern for all of the node's)."""
    return notes / f"probe-{node}-{rank}.json"


def rank_notes(job_folder: Path | str) -> dict[int, dict[str, Any]]:
    """A `launch: torchrun` job's notes, by rank ({} in the tasks shape)."""
    folder = notes_dir(job_folder)
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    notes = {}
    for name in names:
        if (match := _NOTE.fullmatch(name)) is not None:
            try:
                note = json.loads((folder / name).read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):  # being written, or not ours
                continue
            if isinstance(note, dict):
                notes[int(match.group(1))] = note
    return notes


def rank_failures(notes: dict[int, dict[str, Any]]) -> tuple[list[Failure], dict[int, float]]:
    """The ranks whose note says they failed, each (rank, one-line error, traceback), and when each failed
    (for failures.root_cause_first)."""
    failed = {rank: note for rank, note in notes.items() if isinstance(note.get("error"), str)}
    failures = [(rank, note["error"], str(note.get("traceback") or note["error"])) for rank, note in failed.items()]
    times = {rank: float(note["time"]) for rank, note in failed.items()
             if isinstance(note.get("time"), (int, float)) and not isinstance(note.get("time"), bool)}
    return failures, times
