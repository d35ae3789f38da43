"""The run folder's records: `run.json` (what was submitted and which job ran each task),
`tasks.json` (a sweep's tasks), `result.json`/`failure.json` (how a task ended); and finding runs.

Every record is written whole under a temporary name and renamed, so a reader never sees half of
one. A record that cannot be read (truncated, not JSON, not the right shape) is a ConfigError
naming the file, so `status`, `logs`, `cancel` and `--resume` answer with one line, not a traceback.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from launcher.config.profile import slurm_conf_file
from launcher.rundir import record_types as shapes
from launcher.rundir.layout import (
    FAILURE_FILE,
    JOB_FILE,
    PROFILE_FILE,
    RESULT_FILE,
    RUN_FILE,
    TASKS_FILE,
    task_dir,
)
from trainer.config import values
from trainer.config.schema import ConfigError


def write_json(path: Path, data: Any, indent: int | None = 1) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=indent, default=str))
    tmp.replace(path)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; ConfigError naming the file if it is unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it ({err.strerror})") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid JSON (truncated or overwritten?): {err}") from None
    except RecursionError:  # json's decoder recurses once per level: a record nested without end
        raise ConfigError(f"{path}: not a record the submitter writes (JSON nested too deeply)") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    # Each record's fields checked against their one shape (launcher.rundir.record_types), whoever reads it.
    return shapes.check(path, data, _SHAPES.get(path.name, {}))


_SHAPES = {RUN_FILE: shapes.RUN, TASKS_FILE: shapes.TASKS, RESULT_FILE: shapes.RESULT, FAILURE_FILE: shapes.FAILURE}


def read_optional(path: Path) -> dict[str, Any] | None:
    """Like read_json, but None for a missing or unreadable file (results being written, say)."""
    try:
        return read_json(path) if path.exists() else None
    except ConfigError:
        return None


# ----- run.json ------------------------------------------------------------------------------------

def create(run_dir: Path, description: dict[str, Any], argv: list[str]) -> None:
    """The records of a new run, in the folder just claimed for it (layout.claim)."""
    (run_dir / PROFILE_FILE).write_text(yaml.safe_dump(description["profile"], sort_keys=False))
    job = dict(description["job"])
    job["global_batch_size"] = description["global_batch_size"]  # shown, not read back
    (run_dir / JOB_FILE).write_text(yaml.safe_dump(job, sort_keys=False))
    write_json(run_dir / RUN_FILE, {**description, "created": time.time(), "argv": [sys.executable, *argv],
                                    "job_ids": []})


def read_run_record(run_dir: Path) -> dict[str, Any]:
    return read_json(run_dir / RUN_FILE)


def update_record(run_dir: Path, **fields: Any) -> dict[str, Any]:
    record = read_run_record(run_dir)
    record.update(fields)
    write_json(run_dir / RUN_FILE, record)
    return record


# ----- how a task ended ----------------------------------------------------------------------------

def write_result(folder: Path, result: dict[str, Any], **fields: Any) -> None:
    """`result.json` in a run's or a task's folder: the final metrics and how the run ended."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / RESULT_FILE, {**result, "state": "COMPLETED", **fields})


def read_result(path: Path) -> dict[str, Any]:
    """A result.json, its metrics checked to be numbers (ConfigError naming the file and field otherwise)."""
    return read_json(path)


def write_failure(folder: Path, rank: int | None, error: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / FAILURE_FILE, {"rank": rank, "error": error})


def clear_outcome(folder: Path) -> None:
    """Before a task runs again: a stale failure must not outlive the retry."""
    (folder / FAILURE_FILE).unlink(missing_ok=True)


# ----- tasks.json ----------------------------------------------------------------------------------

def write_tasks(run_dir: Path, tasks: list[dict[str, Any]]) -> None:
    """Every task's full job (after its overrides), so `--resume` can rebuild exactly that task.
    Each entry: {"task", "overrides", "job", "run_dir"}."""
    # One line: json's C encoder writes it (an indented dump is pure Python, 4x slower: a 1,000-task
    # sweep waited 30 ms for it); the file is for --resume, not for reading.
    write_json(run_dir / TASKS_FILE, {"tasks": sorted(tasks, key=lambda e: e["task"])}, indent=None)


def read_tasks(run_dir: Path) -> dict[int, dict[str, Any]]:
    path = run_dir / TASKS_FILE
    data = read_json(path)
    if not isinstance(data.get("tasks"), list):
        raise ConfigError(f"{path}: key 'tasks' must be a list of {{task, overrides, job, run_dir}} objects")
    return {e["task"]: e for e in data["tasks"]}


# ----- a run, as recorded --------------------------------------------------------------------------

@dataclass
class RecordedRun:
    """A run folder and its run.json, as `status`, `logs`, `cancel` and `--resume` find it."""

    run_dir: Path
    record: dict[str, Any]

    @property
    def executor(self) -> str:
        return str(self.record.get("executor", ""))

    @property
    def num_tasks(self) -> int:
        return int(self.record.get("tasks") or 1)

    @property
    def is_sweep(self) -> bool:
        """Whether the run is a sweep, as the submission said (launcher.request.submission.Submission.is_sweep:
        a sweep records its points' overrides, one point's too); a run of several tasks is one whatever it says."""
        return self.num_tasks > 1 or self.record.get("sweep_overrides") is not None

    @property
    def is_pool(self) -> bool:
        """A sweep run by a pool of workers (`sweep_runner: pool`): its job ids are the workers'."""
        return self.record.get("runner") == "pool"

    @property
    def depends(self) -> bool:
        """Submitted with `--after` (SLURM's dependency on other runs' jobs)."""
        return bool(dict(self.record.get("executor_parameters") or {}).get("dependency"))

    @property
    def step(self) -> dict[str, Any]:
        """A run that ran as a job step of an allocation held where it was submitted (`in_allocation`):
        that allocation's job id, and the host and pid of the bash that stands for the job; {} otherwise."""
        return dict(self.record.get("allocation") or {})

    @property
    def signature(self) -> str:
        """What the run is (launcher.request.signature); "" for a run recorded before signatures."""
        return str(self.record.get("signature") or "")

    def task_signature(self, task: int) -> str:
        """A task's signature: a sweep point's own, a single run's the run's."""
        each = self.record.get("task_signatures") or []
        return str(each[task]) if 0 <= task < len(each) else self.signature

    @property
    def overrides(self) -> list[dict[str, Any]]:
        return list(self.record.get("sweep_overrides") or [{}] * self.num_tasks)

    @property
    def job(self) -> dict[str, Any]:
        return dict(self.record.get("job") or {})

    @property
    def profile(self) -> dict[str, Any]:
        return dict(self.record.get("profile") or {})

    @property
    def target(self) -> tuple[str, str]:
        return str(self.job.get("target_metric", "test_accuracy")), str(self.job.get("target_mode", "max"))

    @property
    def slurm_conf(self) -> str:
        return slurm_conf_file(self.executor, str(self.profile.get("slurm_conf") or ""))

    @property
    def cluster(self) -> str:
        """The SLURM cluster the run's jobs went to: the one SLURM picked among the profile's `clusters:` (run.json's
        `cluster`), or the one it named; "": the SLURM_CONF's own."""
        landed, named = self.record.get("cluster"), self.profile.get("clusters") or ""
        if isinstance(landed, str) and landed:
            return landed
        return str(named[0] if isinstance(named, list) and len(named) == 1 else named if isinstance(named, str) else "")

    def task_dir(self, task: int) -> Path:
        return task_dir(self.run_dir, task, self.is_sweep)

    @property
    def reused(self) -> dict[int, dict[str, Any]]:
        """A sweep's points that other runs had computed (launcher.rundir.reused), by task: where each came from
        (`run`, `task`) and the job that computed it (`job_id`)."""
        return {int(task): dict(came) for task, came in (self.record.get("reused_points") or {}).items()
                if str(task).isdigit() and isinstance(came, dict)}

    @property
    def task_jobs(self) -> list[list[str]]:
        """For each task, the job ids it ran under (oldest first); [] for a task never submitted."""
        recorded = self.record.get("task_jobs")
        if recorded:
            return [[str(j) for j in ids] for ids in recorded]
        ids = [str(j) for j in self.record.get("job_ids") or []]
        if len(ids) == self.num_tasks:
            return [[j] for j in ids]
        if self.num_tasks == 1 and ids:
            return [ids[:1]]
        # A submission interrupted part-way: the arrays sbatch accepted cover the first tasks.
        return [[ids[t]] if t < len(ids) else [] for t in range(self.num_tasks)]


def load_run(run_dir: Path) -> RecordedRun:
    """A run folder's run.json, every field the commands read checked (launcher.rundir.record_types)."""
    return RecordedRun(run_dir, shapes.run_record(run_dir / RUN_FILE, read_run_record(run_dir)))


def _is(value: Any, kind: type) -> bool:
    if kind is float:  # a JSON number: 1767000000 or 1767000000.5, not true
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


# ----- finding runs --------------------------------------------------------------------------------

def run_folders(runs_dir: Path) -> list[Path]:
    """Run folders under `runs_dir`, newest first: by the creation time their run.json recorded when
    they were made (never a file's change time: `status` and `cancel` rewrite run.json), then by name."""
    check_path("--runs-dir", str(runs_dir))
    if not runs_dir.is_dir():
        return []
    found = [p.resolve() for p in runs_dir.iterdir() if (p / RUN_FILE).is_file()]
    return sorted(found, key=lambda p: (created_at(p), p.name), reverse=True)


def created_at(run_dir: Path) -> float:
    """When the run was made: run.json's `created`; for a record without a readable one (broken, or
    written before it was recorded), the folder name's YYYYMMDD-HHMMSS prefix; else 0 (oldest)."""
    record = read_optional(run_dir / RUN_FILE) or {}
    if _is(record.get("created"), float) and math.isfinite(record["created"]):
        return float(record["created"])
    try:
        return time.mktime(time.strptime(run_dir.name[:15], "%Y%m%d-%H%M%S"))
    except (ValueError, OverflowError):
        return 0.0


def find_run(name: str | None, runs_dir: Path) -> Path:
    """A run by folder path, or by name under `runs_dir`; None: the newest run there."""
    if name is not None:
        check_path("RUN", name)
    if name is None:
        found = run_folders(runs_dir)
        if not found:
            raise ConfigError(f"no runs in {str(runs_dir)!r} (give a run folder, --runs-dir or --profile)")
        return found[0]
    for path in (Path(name), runs_dir / name):
        if (path / RUN_FILE).is_file():
            return path.resolve()
    raise ConfigError(f"run {name!r}: not a run folder (no {RUN_FILE} there or in {runs_dir}/)")


def check_path(what: str, value: str) -> None:
    """A run folder or runs folder given on the command line, checked where it enters (one line,
    names the file system can hold: trainer.config.values) instead of an OSError on first use."""
    problem = values.file_name(value)
    if problem is not None:
        shown = values.shown_name(value)
        raise ConfigError(f"{what} {shown}: expected {problem}")
