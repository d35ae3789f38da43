"""Who runs which point of a pool (`sweep_runner: pool`): the claim records in the run folder, written by
the pool's workers on the nodes (launcher.node.pool_worker), read by `status`, `watch` and `--resume`
(launcher.rundir.pool_states) and written by `cancel RUN/task-NNNN`. Named and read once, here, below
the node that writes them and the run folder that reads them.

    RUN/pool/task-0003/1.json     the point's records, oldest first: the newest says where it stands
                       2.json     (held by a worker, given back, done with its outcome, or cancelled)
                       beat-2     the holder of record 2 rewrites it every HEARTBEAT_S while it runs the point
    RUN/task-0003/logs/12_1_0_log.out   what rank 0 of worker 12_1 printed while it ran the point (and .err)

A record is never changed once written: the next one is made with `os.link` of a finished file to the
next number, which fails if that number exists. So of two workers that read the same newest record and
both want the point, exactly one makes the next record and has it: claiming is atomic on any POSIX
file system, NFS included, and a point is never held twice. A worker that dies holding a point stops
beating; a worker that sees a record's beat unchanged for LEASE_S of its own clock (never a file time:
the nodes' clocks may differ) takes the point back, and a requeued worker takes back its previous
life's points at once. The point then resumes from its newest checkpoint, so none is lost.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POOL_DIR = "pool"
LOGS_DIR = "logs"  # in a point's folder: its ranks' output, one pair of files per worker that ran it
HEARTBEAT_S = 2.0
LEASE_S = 30.0
HELD, FREE, DONE, CANCELLED = "held", "free", "done", "cancelled"
FINAL = (DONE, CANCELLED)
MOST_TEXT = 20_000  # of a failed point's traceback, kept in its record


def point_dir(run_dir: Path | str, task: int) -> Path:
    return Path(run_dir) / POOL_DIR / f"task-{task:04d}"


def point_log(task_dir: Path | str, job_id: str, rank: int, stream: str = "out") -> Path:
    """A rank's log of a point, as a worker ran it (`task_dir`: the point's folder)."""
    return Path(task_dir) / LOGS_DIR / f"{job_id}_{rank}_log.{stream}"


@dataclass(frozen=True)
class Worker:
    """A pool worker as its records name it: the scheduler's job id (`A_T` for array task T, the local
    controller's pid) and this life of it (a requeued job is the same worker, a new life)."""

    job_id: str
    life: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{time.time():.3f}")


@dataclass(frozen=True)
class Record:
    """One claim record of a point."""

    number: int
    state: str
    data: dict[str, Any]

    @property
    def job_id(self) -> str:
        return str(self.data.get("job_id") or "")


def records(run_dir: Path | str, task: int) -> list[Record]:
    """The point's records, oldest first ([]: never claimed). A record being linked is there whole or not at all."""
    folder = point_dir(run_dir, task)
    try:
        names = [int(name[:-5]) for name in os.listdir(folder) if name.endswith(".json") and name[:-5].isdigit()]
    except OSError:
        return []
    out = []
    for number in sorted(names):
        try:
            data = json.loads((folder / f"{number}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("state"), str):
            out.append(Record(number, data["state"], data))
    return out


def newest(run_dir: Path | str, task: int) -> Record | None:
    found = records(run_dir, task)
    return found[-1] if found else None


def _append(run_dir: Path | str, task: int, after: Record | None, state: str, **data: Any) -> Record | None:
    """The point's next record after `after` (None: its first), or None if another writer made that one first."""
    folder = point_dir(run_dir, task)
    folder.mkdir(parents=True, exist_ok=True)
    number = (after.number if after else 0) + 1
    record = {"state": state, "time": time.time(), **data}
    tmp = folder / f".{number}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(record, default=str), encoding="utf-8")
    try:
        os.link(tmp, folder / f"{number}.json")  # fails if it exists: the one atomic step
    except FileExistsError:
        return None
    finally:
        tmp.unlink(missing_ok=True)
    return Record(number, state, record)


class Claims:
    """What one worker (its rank 0) does with the points of its pool: take the next, beat while it runs
    it, give it back, or record its end. `stale` watches other workers' beats with this process's clock."""

    def __init__(self, run_dir: Path | str, worker: Worker, lease_s: float = LEASE_S) -> None:
        self.run_dir, self.worker, self.lease_s = Path(run_dir), worker, lease_s
        self.final: set[int] = set()  # points seen done or cancelled: never looked at again
        self._seen: dict[int, tuple[int, str, float]] = {}  # point -> (record, beat, when it last changed)

    def take(self, points: list[int]) -> tuple[int, Record, bool] | None:
        """The first point of `points` this worker may have, held now: (point, its record, taken back
        from a worker that died); None when there is none to take at the moment."""
        for task in points:
            if task in self.final:
                continue
            record = newest(self.run_dir, task)
            if record is not None and record.state in FINAL:
                self.final.add(task)
                continue
            taken_back = record is not None and record.state == HELD
            if taken_back and not self._dead(task, record):
                continue
            mine = _append(self.run_dir, task, record, HELD, job_id=self.worker.job_id, life=self.worker.life,
                           taken_back=taken_back)
            if mine is not None:
                return task, mine, taken_back
        return None

    def unfinished(self, points: list[int]) -> bool:
        """Whether any of `points` is not done or cancelled yet (held by another worker, or free)."""
        for task in points:
            if task not in self.final:
                record = newest(self.run_dir, task)
                if record is not None and record.state in FINAL:
                    self.final.add(task)
                else:
                    return True
        return False

    def _dead(self, task: int, record: Record) -> bool:
        """A holder that is this worker's previous life (requeued), or whose beat has not changed for the lease."""
        if record.job_id == self.worker.job_id and record.data.get("life") != self.worker.life:
            return True
        beat = _read(point_dir(self.run_dir, task) / f"beat-{record.number}")
        now = time.monotonic()
        seen = self._seen.get(task)
        if seen is None or seen[:2] != (record.number, beat):
            self._seen[task] = (record.number, beat, now)
            return False
        return now - seen[2] >= self.lease_s

    def beat(self, task: int, record: Record, count: int) -> None:
        """The holder's sign of life (written whole: a reader sees the old count or the new one)."""
        path = point_dir(self.run_dir, task) / f"beat-{record.number}"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(str(count), encoding="utf-8")
        tmp.replace(path)

    def give_back(self, task: int, record: Record, why: str) -> None:
        """The point is free again (a stop: preemption, the time limit, SLURM ending the worker)."""
        _append(self.run_dir, task, record, FREE, job_id=self.worker.job_id, why=why)

    def finish(self, task: int, record: Record, outcome: dict[str, Any]) -> bool:
        """Record the point's end (False: it was cancelled or taken from this worker meanwhile, and the
        newer record stands)."""
        if "text" in outcome:
            outcome = {**outcome, "text": str(outcome["text"])[-MOST_TEXT:]}
        done = _append(self.run_dir, task, record, DONE, job_id=self.worker.job_id, **outcome)
        if done is not None:  # (else the newer record's holder ends it; this worker must not count it as ended)
            self.final.add(task)
        return done is not None


def superseded(run_dir: Path | str, task: int, record: Record) -> Record | None:
    """The record written after `record` (a cancel, or the point taken back from a holder thought dead)."""
    newer = newest(run_dir, task)
    return newer if newer is not None and newer.number > record.number else None


def cancel(run_dir: Path | str, task: int) -> Record | None:
    """`cancel RUN/task-NNNN`: the point is not run (again); its holder stops it at its next step boundary.
    None: it had already ended (done or cancelled)."""
    while True:
        record = newest(run_dir, task)
        if record is not None and record.state in FINAL:
            return None
        made = _append(run_dir, task, record, CANCELLED, job_id=record.job_id if record else "")
        if made is not None:
            return made


def reopen(run_dir: Path | str, task: int) -> None:
    """`--resume`: a failed or cancelled point may be taken again."""
    record = newest(run_dir, task)
    if record is not None and record.state != FREE:
        _append(run_dir, task, record, FREE, job_id=record.job_id, why="resumed")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""
