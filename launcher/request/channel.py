"""What a submission tells a program that started it, as data: `--events FD` names a file descriptor
(a pipe: launcher.client opens it) that gets one JSON object per line, as things happen:

    {"event": "run_dir", "run_dir": "/abs/runs/20260101-120000-train-local"}   the run folder exists
    {"event": "queued", "run_dir": ..., "job_ids": ["1234"]}                  sbatch (or the executor) took it
    {"event": "refused", "error": "...", "details": "..."}                    bad input: nothing queued (exit 2)
    {"event": "failed", "error": "..."}                                       it could not be sent whole (exit 1)
    {"event": "result", "payload": {...}}                                     what `--json` prints last

Over SSH (launcher.request.over_ssh) the laptop tells the same events: `run_dir` is the local record
(with `remote_run_dir`, the run folder there), `queued` and `result` come from the cluster side's last
line, and so does `refused` when the cluster side refuses (its error, as data: launcher.commands.receive).
The human output is unchanged beside it, so the caller never parses words meant for people. Without
`--events` every call here does nothing.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any

from trainer.config.schema import ConfigError

_STREAM: list[IO[str]] = []


def open_events(fd: int | None) -> None:
    """Start telling on descriptor `fd` (None: nobody asked)."""
    close()
    if fd is not None:
        try:
            _STREAM.append(os.fdopen(fd, "w", encoding="utf-8", closefd=True))
        except OSError as err:
            raise ConfigError(f"--events {fd}: not an open file descriptor ({err.strerror})") from None


def tell(event: str, **fields: Any) -> None:
    """One event, written whole and flushed at once (the caller waits on it)."""
    for stream in _STREAM:
        try:
            stream.write(json.dumps({"event": event, **fields}, default=str) + "\n")
            stream.flush()
        except (OSError, ValueError):  # the caller went away: the submission goes on without it
            _STREAM.clear()


def close() -> None:
    """At the end of the command (the caller reads to the end of the pipe)."""
    while _STREAM:
        try:
            _STREAM.pop().close()
        except OSError:
            pass
