"""The local executor (submitit's LocalExecutor: a controller process that starts one process per
rank on this machine). A job id is the controller's pid; liveness and stopping go through /proc.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


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
