"""Waiting for submitted jobs and turning what the ranks returned into one result (or a failure).

The failure shown first is the root cause: the rank that raised, or the rank that srun saw die
first (killed, or exited with an error); its peers only die of the consequences (closed
connections, collective timeouts, srun's kill-on-bad-exit) and are listed after it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Outcome:
    result: dict[str, Any] | None
    # (rank, short error, traceback text) for every rank that failed, the root cause first.
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


SYMPTOMS = ("timed out", "Timeout", "Connection closed", "Connection reset", "Broken pipe",
            "killed", "SIGTERM", "has not completed", "UncompletedJobError", "ended without a result")


def _root_cause_first(failures: list[tuple[int, str, str]],
                      first_dead: int | None = None) -> list[tuple[int, str, str]]:
    """Ranks that died of a peer's failure report timeouts or closed connections; show the cause first.

    `first_dead` is the rank srun reported first (it outranks symptoms: a rank killed by a signal
    leaves no traceback of its own)."""
    def key(f: tuple[int, str, str]) -> tuple[int, int]:
        if f[0] == first_dead:
            return (0 if not any(s in f[2] for s in SYMPTOMS) else 1, f[0])
        return (0 if not any(s in f[2] for s in SYMPTOMS) else 2, f[0])

    return sorted(failures, key=key)


# srun's report of a task that ended badly, e.g. "srun: error: cpu2: task 1: Killed" or
# "srun: error: cpu2: task 1: Exited with exit code 1". The ones before "Terminating StepId"
# happened first; the others are srun's own kill-on-bad-exit.
_SRUN_TASK = re.compile(r"^srun: error: (?P<node>\S+): tasks? (?P<ranks>[\d,-]+): (?P<what>.+)$")


def srun_task_failures(log_text: str) -> list[tuple[int, str]]:
    """(rank, srun's line) for every task srun reported as failed, in the order it reported them."""
    out: list[tuple[int, str]] = []
    for line in log_text.splitlines():
        match = _SRUN_TASK.match(line.strip())
        if not match:
            continue
        for part in match.group("ranks").split(","):
            lo, _, hi = part.partition("-")
            for rank in range(int(lo), int(hi or lo) + 1):
                out.append((rank, line.strip()))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _missing_result(rank: int, task: Any, state: str, srun: dict[int, str]) -> tuple[int, str, str]:
    """The failure of a rank that left no result: srun's line for it, and the end of its log."""
    short = srun.get(rank) or f"rank {rank} ended without a result (job state {state})"
    tail = "\n".join(_read(Path(task.paths.stderr)).rstrip().splitlines()[-25:])
    text = (f"rank {rank} ended without a result (job state {state}); "
            f"{srun.get(rank, 'no srun report')}\n--- end of {task.paths.stderr} ---\n{tail}")
    return rank, short, text


def _is_scheduled(job: Any) -> bool:
    """SLURM and local jobs run elsewhere and leave result files; debug jobs run when asked."""
    from submitit.local.debug import DebugJob

    return not isinstance(job, DebugJob)


def _ended(job: Any, force: bool) -> str:
    """The job's final state once it has ended ("" while it runs, is pending or requeued)."""
    from submitit.local.local import LocalJob

    if isinstance(job, LocalJob):
        return "FINISHED" if job.done() else ""  # the controller has exited (all its tasks have)
    if not force:
        return ""
    return str(job.watcher.get_state(job.job_id, mode="cache")) if job.watcher.is_done(job.job_id, mode="force") else ""


def wait(job: Any, poll_s: float = 1.0, force_every_s: float = 5.0, grace_s: float = 3.0) -> Outcome:
    """Wait for every task of a submitit job; rank 0's result, with all ranks' node names.

    Ends as soon as every rank left a result file, or the scheduler says the job ended (asked every
    `force_every_s`, not on submitit's backoff of up to 10 minutes); ranks with no result then get
    `grace_s` for their file to appear before they are reported from srun's lines and their log.
    """
    num_tasks = getattr(job, "num_tasks", 1)
    tasks = [job] if num_tasks <= 1 else [job.task(k) for k in range(num_tasks)]
    state = ""
    if _is_scheduled(job):
        last_force = 0.0
        while not all(Path(t.paths.result_pickle).exists() for t in tasks):
            now = time.time()
            force = now - last_force >= force_every_s
            last_force = now if force else last_force
            state = _ended(job, force)
            if state:
                deadline = time.time() + grace_s  # results written just before the end may lag on NFS
                while time.time() < deadline and not all(Path(t.paths.result_pickle).exists() for t in tasks):
                    time.sleep(0.5)
                break
            time.sleep(poll_s)
    results: list[dict[str, Any]] = []
    failures: list[tuple[int, str, str]] = []
    srun_lines = srun_task_failures(_read(Path(tasks[0].paths.stderr))) if _is_scheduled(job) else []
    srun = {rank: line for rank, line in reversed(srun_lines)}  # the first report of each rank wins
    for rank, task in enumerate(tasks):
        if _is_scheduled(job) and not Path(task.paths.result_pickle).exists():
            failures.append(_missing_result(rank, task, state or "unknown", srun))
            continue
        try:
            results.append(task.result())
        except Exception as err:  # noqa: BLE001 - any task failure is reported, not raised
            short, text = _error_text(err)
            failures.append((rank, short, text))
    if failures:
        first_dead = srun_lines[0][0] if srun_lines else None
        return Outcome(None, _root_cause_first(failures, first_dead))
    result = dict(results[0])
    result["nodes"] = [r.get("node", "") for r in results]
    return Outcome(result)
