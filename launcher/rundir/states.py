"""What each task of a run is doing now: from the scheduler (sacct, else squeue) and the run folder.

A run folder records which job id ran each task (`run.json`: `job_ids`, and `task_jobs` once a task
was resubmitted by `--resume`). The state of a task comes from, in order:

1. `sacct` (accounting on): the job's record, with requeues counted from its duplicate records;
2. `squeue` (always asked when sacct does not know the job; the only scheduler source when
   accounting is off), which also knows the restart count of jobs still in the queue;
3. the run folder: submitit's result pickles (`logs/<id>/<id>_<rank>_result.pkl`: success or the
   rank's traceback), and the trainer's `events.jsonl` ("resumed" lines count restarts).

Local runs (submitit's LocalExecutor) have the controller's pid as job id; they are read from the
run folder and `/proc`. Nothing here imports torch.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher import runs

# Set to 1 to ignore sacct even where accounting is on (what a cluster without accounting sees).
NO_SACCT_ENV = "SUBMIT_NO_SACCT"
ACTIVE = ("pending", "running", "requeued")
FINAL = ("completed", "failed", "cancelled", "timeout")

# SLURM's job states (sacct/squeue) -> ours.
_SLURM_STATES = {
    "PENDING": "pending", "CONFIGURING": "running", "RUNNING": "running", "COMPLETING": "running",
    "SUSPENDED": "running", "STOPPED": "running", "RESIZING": "running", "SIGNALING": "running",
    "STAGE_OUT": "running",
    "COMPLETED": "completed",
    "FAILED": "failed", "OUT_OF_MEMORY": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed",
    "DEADLINE": "failed", "SPECIAL_EXIT": "failed",
    "CANCELLED": "cancelled", "REVOKED": "cancelled",
    "TIMEOUT": "timeout",
    "REQUEUED": "requeued", "REQUEUE_FED": "requeued", "REQUEUE_HOLD": "requeued", "PREEMPTED": "requeued",
    "RESV_DEL_HOLD": "pending",
}
# Records of these states in `sacct --duplicates` are earlier lives of a requeued job.
_RESTART_STATES = ("REQUEUED", "PREEMPTED", "NODE_FAIL", "TIMEOUT", "REQUEUE_FED", "REQUEUE_HOLD")


@dataclass
class SchedulerRecord:
    job_id: str
    state: str  # ours (see _SLURM_STATES)
    slurm_state: str
    start: float | None = None
    end: float | None = None
    elapsed_s: float | None = None
    exit_code: str = ""
    nodes: str = ""
    restarts: int = 0
    reason: str = ""


@dataclass
class TaskState:
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

    def as_json(self) -> dict[str, Any]:
        return {"task": self.task, "state": self.state, "restarts": self.restarts, "job_id": self.job_id,
                "source": self.source, "wall_time_s": _round(self.wall_time_s), "error": self.error or None,
                "failed_rank": self.failed_rank, "overrides": self.overrides, "task_dir": str(self.task_dir),
                "attempts": len(self.job_history)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


# ----- the run folder's record ---------------------------------------------------------------------

@dataclass
class RunInfo:
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
        return self.num_tasks > 1 or bool(self.record.get("sweep_overrides"))

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

    def task_dir(self, task: int) -> Path:
        return self.run_dir / f"task-{task:04d}" if self.is_sweep else self.run_dir

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
        return [[] for _ in range(self.num_tasks)]

    def slurm_env(self) -> dict[str, str]:
        """The environment for SLURM's commands: the profile's SLURM_CONF, if it names one."""
        env = dict(os.environ)
        conf = self.profile.get("slurm_conf")
        if conf:
            from launcher.resolve import project_path

            env["SLURM_CONF"] = str(project_path(conf))
        return env


def load_run(run_dir: Path) -> RunInfo:
    return RunInfo(run_dir, runs.read_record(run_dir))


# ----- SLURM ---------------------------------------------------------------------------------------

def base_id(job_id: str) -> str:
    return job_id.split("_", 1)[0]


def _run(argv: list[str], env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str] | None:
    """A SLURM command's output, or None where it is missing or fails (e.g. accounting disabled)."""
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        return None
    try:
        done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done if done.returncode == 0 else None


def _time(text: str) -> float | None:
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _expand_array_id(job_id: str) -> list[str]:
    """`12_[3-5,7%2]` (an array's not yet started tasks) -> 12_3, 12_4, 12_5, 12_7."""
    match = re.fullmatch(r"(\d+)_\[([^\]%]+)(%\d+)?\]", job_id)
    if not match:
        return [job_id]
    out = []
    for part in match.group(2).split(","):
        lo, _, hi = part.partition("-")
        out += [f"{match.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def sacct_records(job_ids: list[str], env: dict[str, str],
                  since: float | None = None) -> dict[str, SchedulerRecord] | None:
    """The current record of each job (array tasks one by one); None where accounting is unavailable.

    `since` (the run's creation) keeps out older jobs with the same ids: a cluster whose controller
    state was reset numbers its jobs from 1 again while its accounting database remembers them."""
    if os.environ.get(NO_SACCT_ENV, "") not in ("", "0") or not job_ids:
        return None if job_ids else {}
    bases = ",".join(dict.fromkeys(base_id(j) for j in job_ids))
    window = ["-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))] if since else []
    done = _run(["sacct", "-X", "-D", "-P", "-n", "-j", bases, *window,
                 "--format=JobID,State,Start,End,ElapsedRaw,ExitCode,NodeList"], env)
    if done is None:
        return None
    records: dict[str, SchedulerRecord] = {}
    for line in done.stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 7:
            continue
        jid, raw_state, start, end, elapsed, exit_code, nodes = parts[:7]
        slurm_state = raw_state.split()[0] if raw_state.strip() else "PENDING"
        for one in _expand_array_id(jid):
            previous = records.get(one)
            # --duplicates lists a requeued job's earlier lives first, then its current record.
            restarts = (previous.restarts + (previous.slurm_state in _RESTART_STATES)) if previous else 0
            records[one] = SchedulerRecord(
                one, _SLURM_STATES.get(slurm_state, "failed"), slurm_state, _time(start), _time(end),
                float(elapsed) if elapsed.isdigit() else None, exit_code, nodes, restarts)
            if previous and previous.start is not None and records[one].start is not None:
                records[one].start = previous.start  # wall time spans every life of the job
    return records


def squeue_records(env: dict[str, str]) -> dict[str, SchedulerRecord] | None:
    """Jobs the controller still knows (queued, running, or ended less than MinJobAge ago)."""
    done = _run(["squeue", "-h", "-r", "-t", "all", "-O",
                 "JobArrayID:|,State:|,RestartCnt:|,StartTime:|,Reason:|,NodeList:"], env)
    if done is None:
        return None
    records: dict[str, SchedulerRecord] = {}
    for line in done.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 6:
            continue
        jid, slurm_state, restarts, start, reason, nodes = parts[:6]
        records[jid] = SchedulerRecord(jid, _SLURM_STATES.get(slurm_state, "failed"), slurm_state,
                                       _time(start), None, None, "", nodes,
                                       int(restarts) if restarts.isdigit() else 0, reason)
    return records


# ----- the run folder ------------------------------------------------------------------------------

def job_log_dir(run_dir: Path, job_id: str) -> Path:
    """submitit's folder for one job (or one array task): logs/<id>/, ids like 12 or 12_3."""
    return run_dir / "logs" / job_id


def log_path(run_dir: Path, job_id: str, rank: int, stream: str = "out") -> Path:
    return job_log_dir(run_dir, job_id) / f"{job_id}_{rank}_log.{stream}"


def read_outcomes(run_dir: Path, job_id: str) -> dict[int, tuple[str, Any]]:
    """Each rank's ("success", result) or ("error", traceback) from submitit's result pickles."""
    folder = job_log_dir(run_dir, job_id)
    out: dict[int, tuple[str, Any]] = {}
    if not folder.is_dir():
        return out
    for path in folder.glob(f"{job_id}_*_result.pkl"):
        rank = path.name[len(job_id) + 1:].split("_", 1)[0]
        try:
            with open(path, "rb") as fh:
                kind, value = pickle.load(fh)
        except Exception:  # noqa: BLE001, S112 - a half-written or foreign pickle tells us nothing
            continue
        if rank.isdigit():
            out[int(rank)] = (str(kind), value)
    return out


def _short_error(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1] if lines else "error"


def failure_of(outcomes: dict[int, tuple[str, Any]]) -> tuple[int, str] | None:
    """The failed rank and its one-line error, the root cause first (peers die of timeouts)."""
    from launcher.outcome import _root_cause_first

    failures = [(rank, _short_error(v), str(v)) for rank, (kind, v) in outcomes.items() if kind != "success"]
    if not failures:
        return None
    rank, short, _ = _root_cause_first(failures)[0]
    return rank, short


def count_resumes(task_dir: Path) -> int:
    """Restarts the task's own event log shows (requeues, preemptions, resumes after a failure)."""
    try:
        from launcher import restarts
    except ImportError:  # an older tree without the classified event log: count "resumed" lines
        pass
    else:
        return restarts.read(task_dir).count
    path = task_dir / "events.jsonl"
    if not path.exists():
        return 0
    count = 0
    for line in path.read_text().splitlines():
        try:
            count += json.loads(line).get("event") == "resumed"
        except (ValueError, AttributeError):
            continue
    return count


_LOG_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def log_times(run_dir: Path, job_id: str) -> tuple[float | None, float | None]:
    """Start (first submitit log line) and end (last log write) of a job, without a scheduler."""
    out = log_path(run_dir, job_id, 0, "out")
    err = log_path(run_dir, job_id, 0, "err")
    start = None
    for path in (err, out):  # the attempt's banner and submitit's first lines go to stderr
        if path.exists():
            with open(path, encoding="utf-8", errors="replace") as fh:
                match = _LOG_TIME.search(fh.read(4096))
            if match:
                start = datetime.datetime.fromisoformat(match.group(1)).timestamp()
                break
    files = [p for p in job_log_dir(run_dir, job_id).glob("*") if p.is_file()]
    end = max((p.stat().st_mtime for p in files), default=None)
    return start, end


def _local_alive(job_id: str, run_dir: Path) -> bool:
    """A local run's controller (submitit.local._local, job id = its pid) is still running."""
    if not job_id.isdigit():
        return False
    try:
        cmdline = Path(f"/proc/{job_id}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = Path(f"/proc/{job_id}/stat").read_text()
    except OSError:
        return False
    zombie = stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]
    return not zombie and "submitit.local._local" in cmdline and str(run_dir) in cmdline


def _submitted_at(info: RunInfo, job_id: str) -> float:
    """When `job_id` was queued: the run's creation, or the --resume that queued it."""
    for entry in info.record.get("resumes") or []:
        if job_id in entry.get("job_ids", []):
            return float(entry.get("time") or 0)
    return float(info.record.get("created") or 0)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None


def _recorded_outcome(info: RunInfo, task_dir: Path) -> tuple[str, dict[str, Any] | None, str] | None:
    """(state, result, error) from result.json / failure.json / run.json, where a submitter wrote them."""
    for name, state in (("result.json", "completed"), ("failure.json", "failed")):
        path = task_dir / name
        if path.exists():
            try:
                data = json.loads(path.read_text())
            except ValueError:
                continue
            return (state, data, "") if state == "completed" else (state, None, str(data.get("error", "failed")))
    if not info.is_sweep and str(info.record.get("state", "")).upper() == "FAILED":
        return "failed", None, str(info.record.get("error") or "failed")
    return None


# ----- putting it together -------------------------------------------------------------------------

def task_states(info: RunInfo, use_scheduler: bool = True) -> list[TaskState]:
    """The state of every task of the run (one for a single run)."""
    task_jobs = info.task_jobs
    current = [ids[-1] if ids else "" for ids in task_jobs]
    sacct: dict[str, SchedulerRecord] | None = None
    squeue: dict[str, SchedulerRecord] | None = None
    slurm = info.executor == "slurm" and use_scheduler
    if slurm:
        env = info.slurm_env()
        sacct = sacct_records([j for j in current if j], env, info.record.get("created"))
        if sacct is None or any(j and j not in sacct for j in current):
            squeue = squeue_records(env)
    overrides = info.overrides
    states = []
    for task, job_id in enumerate(current):
        states.append(_one_task(info, task, job_id, task_jobs[task], sacct, squeue,
                                overrides[task] if task < len(overrides) else {}))
    return states


def _one_task(info: RunInfo, task: int, job_id: str, history: list[str],
              sacct: dict[str, SchedulerRecord] | None, squeue: dict[str, SchedulerRecord] | None,
              overrides: dict[str, Any]) -> TaskState:
    task_dir = info.task_dir(task)
    ts = TaskState(task, job_id, "unknown", overrides=overrides, task_dir=task_dir, job_history=list(history))
    if not job_id:
        ts.state, ts.source, ts.error = "failed", "run folder", "never submitted"
        return ts
    outcomes = read_outcomes(info.run_dir, job_id)
    failure = failure_of(outcomes)
    record = (sacct or {}).get(job_id) or (squeue or {}).get(job_id)
    if record is not None:
        ts.source = "sacct" if sacct and job_id in sacct else "squeue"
        ts.state, ts.restarts = record.state, record.restarts
        ts.start, ts.end = record.start, record.end
        if record.state == "pending" and record.restarts:
            ts.state = "requeued"
        if record.state in FINAL and record.start and record.end:
            ts.wall_time_s = max(0.0, record.end - record.start)
        elif record.elapsed_s is not None and record.state in FINAL:
            ts.wall_time_s = record.elapsed_s
        if record.state not in ("completed",) + ACTIVE:
            ts.error = f"{record.slurm_state}" + (f" (exit {record.exit_code})" if record.exit_code else "")
    elif info.executor == "local" and _local_alive(job_id, info.run_dir):
        ts.state, ts.source = "running", "process"
    else:
        ts.source = "run folder"
        recorded = _recorded_outcome(info, task_dir)
        success = outcomes.get(0, ("", None))[0] == "success" and failure is None
        if success:
            ts.state = "completed"
        elif float(info.record.get("cancelled_at") or 0) >= _submitted_at(info, job_id) > 0:
            # Ranks killed by a cancel may leave errors (a peer's closed connection): not the cause.
            ts.state, ts.error = "cancelled", "cancelled with `submit.py cancel`"
            failure = None
        elif failure is not None:
            ts.state = "failed"
        elif recorded is not None:
            # What a submitter that waited wrote (the debug executor leaves no result pickles).
            ts.state, ts.result, ts.error = recorded
            ts.failed_rank = _int_or_none(info.record.get("failed_rank") if not info.is_sweep else None)
        elif info.executor in ("local", "debug"):
            ts.state, ts.error = "failed", "the process ended without a result (killed?)"
        else:
            # Neither the scheduler nor the folder knows it: cancelled before it started, or purged.
            ts.state, ts.error = "failed", "no result and not in the queue (cancelled or lost)"
    if ts.wall_time_s is None and ts.state in FINAL:
        start, end = log_times(info.run_dir, job_id)
        if start is not None and end is not None:
            ts.wall_time_s = max(0.0, end - start)
    if failure is not None and ts.state not in ACTIVE:
        ts.failed_rank, ts.error = failure
        if ts.state == "completed":
            ts.state = "failed"
    if ts.state == "completed" and outcomes.get(0, ("", None))[0] == "success":
        ts.result = outcomes[0][1] if isinstance(outcomes[0][1], dict) else None
    ts.restarts = max(ts.restarts + len(history) - 1, count_resumes(task_dir))
    return ts
