"""The one typed, bounded reading of a run folder's records (run.json, tasks.json, result.json,
failure.json; remote.json, the local record of a run submitted over SSH, has its own reader in
launcher.remote.ssh_record).

A record is written by the submitter or a rank, but read back later by `status`, `logs`, `cancel`,
`list`, `--resume` and `--after`, possibly after an edit, a crash mid-write on an old version, or
a hostile hand. Each key those commands read has a shape here: its type, and bounds where a value
drives work (a task count makes `status` visit that many folders: an enormous one would run
without end and grow in memory). A record that does not fit is one ConfigError naming the file and
the field (the command prints it as one `error:` line); keys no command reads are not looked at.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.cluster import jobids
from trainer.config.schema import ConfigError
from trainer.config.sweep import MAX_SWEEP_TASKS

# A check answers None when the value fits, else (where inside it, what was expected).
Check = Callable[[Any], "tuple[str, str] | None"]
# Job ids per task over its requeues and resumes, and job ids of a run: bounded like the tasks.
MOST_ATTEMPTS = 10_000
MOST_TEXT = 1 << 20  # an error message, a name: a MB of text is already more than any terminal shows


def number(value: Any) -> tuple[str, str] | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return None if ok else ("", "a finite JSON number")


def integer(low: int, high: int) -> Check:
    def check(value: Any) -> tuple[str, str] | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        return None if ok else ("", f"an integer in [{low}, {high}]")
    return check


def text(value: Any) -> tuple[str, str] | None:
    return None if isinstance(value, str) and len(value) <= MOST_TEXT else ("", "a JSON string")


def job_id(value: Any) -> tuple[str, str] | None:
    """A job id as the executors record them (launcher.cluster.jobids.RECORDED): SLURM's "123" or "123_4" (an
    array task), a local run's process id, a debug run's "DEBUG_123"; "" for a task never queued. Read back into
    a dependency or a scancel, anything else ("4711?afterany:1") would change what they say."""
    ok = (isinstance(value, str) and len(value) <= 64 and jobids.recorded(value)) or \
        (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
    return None if ok else ("", "a job id (a string such as '123' or '123_4', empty for a task never queued)")


def signature(value: Any) -> tuple[str, str] | None:
    """A run's or task's signature (launcher.request.signature): hex digits, as `list --same-as` compares them."""
    ok = isinstance(value, str) and 0 < len(value) <= 64 and all(c in "0123456789abcdef" for c in value)
    return None if ok else ("", "a signature (lowercase hex digits)")


def optional(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


def list_of(item: Check, most: int) -> Check:
    def check(value: Any) -> tuple[str, str] | None:
        if not isinstance(value, list) or len(value) > most:
            return "", f"a JSON list of at most {most} items"
        for i, entry in enumerate(value):
            problem = item(entry)
            if problem is not None:
                return f"[{i}]{problem[0]}", problem[1]
        return None
    return check


def mapping(keys: dict[str, Check] | None = None, required: tuple[str, ...] = ()) -> Check:
    def check(value: Any) -> tuple[str, str] | None:
        if not isinstance(value, dict):
            return "", "a JSON object"
        for key in required:
            if key not in value:
                return f".{key}", "a value (it is missing)"
        for key, inner in (keys or {}).items():
            problem = inner(value[key]) if key in value else None
            if problem is not None:
                return f".{key}{problem[0]}", problem[1]
        return None
    return check


def check(path: Path, record: dict[str, Any], shape: dict[str, Check]) -> dict[str, Any]:
    """`record` (read from `path`) if every key of `shape` it has fits; else a ConfigError naming both."""
    for key, inner in shape.items():
        if key in record:
            problem = inner(record[key])
            if problem is not None:
                where, expected = problem
                shown = repr(record[key])
                shown = shown if len(shown) <= 80 else shown[:80] + "..."
                raise ConfigError(f"{path}: field '{key}{where}' has invalid value {shown}; expected {expected}")
    return record


_TASKS = integer(1, MAX_SWEEP_TASKS)
_NAMED = mapping({"name": text, "executor": text, "slurm_conf": text, "target_metric": text, "target_mode": text})

# run.json: what `status`, `logs`, `cancel`, `list`, `--resume` and `--after` read of it.
RUN = {
    "executor": text, "tasks": _TASKS, "created": number, "world_size": integer(1, 2**31 - 1),
    "job_ids": optional(list_of(job_id, MAX_SWEEP_TASKS * 4)),
    "task_jobs": optional(list_of(list_of(job_id, MOST_ATTEMPTS), MAX_SWEEP_TASKS)),
    "sweep_overrides": optional(list_of(mapping(), MAX_SWEEP_TASKS)), "profile": _NAMED, "job": _NAMED,
    "resumes": optional(list_of(mapping({"job_ids": list_of(job_id, MAX_SWEEP_TASKS * 4), "time": number}), MOST_ATTEMPTS)),
    "state": optional(text), "error": optional(text), "failed_rank": optional(integer(0, 2**31 - 1)),
    "cancelled_at": optional(number), "best": optional(mapping()), "runner": optional(text),
    "allocation": optional(mapping({"job_id": job_id, "pid": integer(1, 2**31 - 1), "host": text})),
    "signature": optional(signature), "task_signatures": optional(list_of(signature, MAX_SWEEP_TASKS)),
    "signature_parts": optional(mapping({"code": signature, "python": text})),
    "reused_points": optional(mapping()),
}

# tasks.json: every task's full job, which --resume rebuilds.
_TASK_ENTRY = mapping({"task": integer(0, MAX_SWEEP_TASKS - 1), "job": mapping(), "overrides": optional(mapping()),
                       "run_dir": text}, required=("task", "job"))
TASKS = {"tasks": list_of(_TASK_ENTRY, MAX_SWEEP_TASKS)}

# result.json: a task's final metrics and how it ended.
RESULT = {key: optional(number) for key in ("test_accuracy", "test_loss", "train_loss", "images_per_second",
                                            "epochs", "world_size", "restarts", "wall_time_s", "steps")}
RESULT.update({"state": text, "job_id": job_id, "task": optional(integer(0, MAX_SWEEP_TASKS - 1)), "overrides": optional(mapping())})
FAILURE = {"rank": optional(integer(0, 2**31 - 1)), "error": optional(text)}



def run_record(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """run.json checked, and held together: per-task lists as long as the run's task count."""
    check(path, record, RUN)
    tasks = record.get("tasks") or 1
    for key in ("task_jobs", "sweep_overrides"):
        if record.get(key) and len(record[key]) != tasks:
            raise ConfigError(f"{path}: field '{key}' has {len(record[key])} entries; expected one per task "
                              f"({tasks}, the field 'tasks')")
    return record
