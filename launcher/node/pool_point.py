"""One sweep point as a pool worker runs it (launcher.node.pool_worker): its ranks' output in the point's own
log files, the holder's heartbeat on its claim, and how the point ended, as every rank reports it.

A point's logs are where an array task's would be read from by `logs RUN --task N` (the point's folder,
`logs/<worker job id>_<rank>_log.out|err`: launcher.reports.pool_claims.point_log), one pair per worker
that ran it; the worker's own log keeps a line per point."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from launcher.reports import pool_claims
from launcher.reports.root_cause import last_line, root_cause_first
from launcher.reports.pool_claims import Claims, Record
from trainer.rank.stopping import StopRequested, StopSignals

# What a point's ranks may have made of it: every rank says, rank 0 records (`ended`).
OK, STOPPED, FAILED = "ok", "stopped", "failed"


@contextlib.contextmanager
def own_logs(task_dir: str, job_id: str, rank: int) -> Iterator[None]:
    """This rank's standard output and error (the file descriptors: children and C code too) appended to
    the point's log files for the block, then back to the worker's."""
    folder = Path(task_dir) / pool_claims.LOGS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    opened: list[int] = []
    try:  # (every descriptor opened here is closed, even when the second log cannot be opened)
        for stream in ("out", "err"):
            opened.append(os.open(pool_claims.point_log(task_dir, job_id, rank, stream),
                                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        os.dup2(opened[0], 1)
        os.dup2(opened[1], 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + opened:
            os.close(fd)


class Heartbeat:
    """On the holder (rank 0): the claim's beat every HEARTBEAT_S while the point runs; a record written
    after its claim (a cancel, or the point taken back from a worker thought dead) stops the point at its
    next step boundary, as SLURM's own ending would (`StopSignals.request`)."""

    def __init__(self, claims: Claims, task: int, record: Record, stops: StopSignals) -> None:
        self.claims, self.task, self.record, self.stops = claims, task, record, stops
        self.superseded: Record | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pool-beat-{task}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.claims.beat(self.task, self.record, 0)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        count = 0
        while not self._done.wait(pool_claims.HEARTBEAT_S):
            count += 1
            try:
                self.claims.beat(self.task, self.record, count)
                newer = pool_claims.superseded(self.claims.run_dir, self.task, self.record)
            except OSError:  # a file system hiccup: the next beat tries again (the lease is many beats)
                continue
            if newer is not None and self.superseded is None:
                self.superseded = newer
                self.stops.request("CANCEL" if newer.state == pool_claims.CANCELLED else "TAKEN")


def outcome_of(run: Any) -> dict[str, Any]:
    """What this rank reports of the point: `run()`'s result, its stop, or its failure (traceback in its log)."""
    try:
        return {"kind": OK, "result": run()}
    except StopRequested as stop:
        return {"kind": STOPPED, "step": stop.step, "signal": stop.signal_name, "stop_kind": stop.kind,
                "info": stop.info}
    except Exception:  # noqa: BLE001 - the point failed; the worker goes on to the next one
        text = traceback.format_exc()
        print(text, file=sys.stderr, flush=True)
        return {"kind": FAILED, "text": text}


def ended(ends: list[dict[str, Any]], wall_time_s: float) -> dict[str, Any]:
    """The point's outcome from every rank's report, as its done record keeps it: its result (rank 0's,
    with every rank's node), or the rank whose failure is the cause (launcher.reports.root_cause)."""
    failures = [(rank, last_line(e["text"], "error"), e["text"]) for rank, e in enumerate(ends) if e["kind"] == FAILED]
    failures = failures or [(rank, f"rank {rank} {e['kind']} while rank 0 {ends[0]['kind']}: the ranks did not end "
                             f"the point alike", "") for rank, e in enumerate(ends) if e["kind"] != ends[0]["kind"]]
    if failures:
        rank, short, text = root_cause_first(failures)[0]
        return {"outcome": "failed", "rank": rank, "error": short, "text": text, "wall_time_s": wall_time_s}
    result = dict(ends[0]["result"])
    result["nodes"] = [str((e.get("result") or {}).get("node", "")) for e in ends]
    return {"outcome": "completed", "result": result, "wall_time_s": wall_time_s}
