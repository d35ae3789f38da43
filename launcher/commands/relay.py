"""Show rank 0's output live while the submitter waits for a local run on a terminal.

The local executor writes each rank's stdout/stderr to log files, so rank 0's tqdm bar and its log
lines would otherwise only be visible with `submit.py logs`. A thread copies what rank 0 appends
to those files to this terminal until the run ends.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import IO, Any


class Relay:
    def __init__(self, pairs: list[tuple[Path, IO[str]]], interval_s: float = 0.2) -> None:
        self.pairs, self.interval_s = pairs, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-relay", daemon=True)

    def __enter__(self) -> "Relay":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        offsets = {path: 0 for path, _ in self.pairs}
        while True:
            stopping = self._stop.is_set()
            for path, out in self.pairs:
                offsets[path] = _copy_new(path, offsets[path], out)
            if stopping:
                return
            self._stop.wait(self.interval_s)


def _copy_new(path: Path, offset: int, out: IO[str]) -> int:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            fh.seek(offset)
            chunk = fh.read()
            offset = fh.tell()
    except OSError:
        return offset  # not created yet
    if chunk:
        out.write(chunk)
        out.flush()
    return offset


def for_local_run(job: Any) -> Relay | None:
    """A relay of rank 0's logs for an interactive local run, else None (batch use stays quiet)."""
    if not (sys.stderr.isatty() and sys.stdout.isatty()) or not hasattr(job, "task"):
        return None
    paths = job.task(0).paths if getattr(job, "num_tasks", 1) > 1 else job.paths
    return Relay([(paths.stdout, sys.stdout), (paths.stderr, sys.stderr)])

