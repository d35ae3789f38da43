"""The local executor (submitit's LocalExecutor: a controller process that starts one process per
rank on this machine). A job id is the controller's pid; liveness and stopping go through /proc.
`LocalFailFast` ends a local run as soon as one of its ranks has failed (SLURM's srun does it there).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
from pathlib import Path
from typing import Any


def _stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses); [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return []


def alive(pid: int | str) -> bool:
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def controller_alive(job_id: str, run_dir: Path) -> bool:
    """A local run's controller (submitit.local._local, job id = its pid) is still running."""
    if not job_id.isdigit():
        return False
    try:
        cmdline = Path(f"/proc/{job_id}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return alive(job_id) and "submitit.local._local" in cmdline and str(run_dir) in cmdline


def launcher_alive(pid: int | str, run_dir: Path) -> bool:
    """A run's own launching process (the bash of a job step in an allocation held here) still runs."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return alive(pid) and str(run_dir) in cmdline


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat.parent.name)
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(stat.parent.name))
    return out


def stop(pid: int, grace_s: float = 10.0) -> None:
    """What submitit's LocalJob.cancel does (SIGINT to the controller, which stops its ranks), then
    SIGKILL for whatever is still alive after `grace_s` (ranks ignore SIGTERM under submitit)."""
    family = [pid] + children(pid)
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(alive(p) for p in family):
            return
        time.sleep(0.2)
    for p in family:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def rank_pids(controller: int) -> dict[int, int]:
    """The controller's rank processes now: rank -> pid (from SUBMITIT_LOCAL_GLOBALID in /proc)."""
    out = {}
    for pid in children(controller):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"SUBMITIT_LOCAL_GLOBALID="):
                rank = item.split(b"=", 1)[1]
                if rank.isdigit() and alive(pid):
                    out[int(rank)] = pid
    return out


class LocalFailFast:
    """On the local executor, end a run as soon as one rank has failed: a rank that dies before the
    process group forms would leave its peers waiting `init_timeout_s` in the rendezvous (SLURM has
    srun --kill-on-bad-exit for this). A rank failed when it left an error result, or when its
    process is gone without a result for `gone_s` while a peer still runs (a requeue ends every
    rank within moments and starts new ones, so it is not mistaken for a failure)."""

    def __init__(self, job: Any, tasks: list[Any], gone_s: float = 5.0) -> None:
        self.job, self.tasks, self.gone_s = job, tasks, gone_s
        self.gone: dict[int, float] = {}
        self.failed: int | None = None

    def check(self) -> bool:
        """True once a rank has failed and the run was stopped."""
        if self.failed is not None or len(self.tasks) < 2:
            return self.failed is not None
        now = time.monotonic()
        running = rank_pids(int(self.job.job_id))
        for rank, task in enumerate(self.tasks):
            result = Path(task.paths.result_pickle)
            if result.exists():
                if _is_error(result):
                    return self._stop(rank, running)
                continue
            if rank in running:
                self.gone.pop(rank, None)
            elif any(r != rank for r in running):  # (the controller starts all ranks at once)
                if now - self.gone.setdefault(rank, now) >= self.gone_s:
                    return self._stop(rank, running)
        return False

    def _stop(self, rank: int, running: dict[int, int]) -> bool:
        """Kill the surviving ranks (they wait for the dead one; nothing of theirs is lost): the
        controller then sees every task end and exits as after any failure."""
        self.failed = rank
        for pid in running.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return True


def _is_error(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)[0] != "success"
    except Exception:  # noqa: BLE001 - being written: the next poll reads it whole
        return False
