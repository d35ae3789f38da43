"""What your function raised on a rank, kept as data: `errors/rank-NNNNN.json` in the run's (or sweep
task's) folder, with the exception's type, its message and the traceback through your own frames (none
of this tool's). `status --json` shows the failing rank's record, and `launcher.client`'s `RunFailed`
is made from it: the notebook shows your exception, not a parse of a log.

Each rank removes its own record before it calls the function, so a record stands for the attempt
that wrote it (an attempt that fails after a requeue replaces the earlier one's).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from trainer.rank import rundir
from trainer.runners.entrypoints import user_traceback

# A message or traceback longer than this is cut (a record is read by status on every call).
MOST = 20_000


def clear(run_dir: str, rank: int) -> None:
    """Before this rank calls the function: an earlier attempt's record no longer stands."""
    try:
        rundir.error_file(run_dir, rank).unlink(missing_ok=True)
    except OSError:
        pass


def write(run_dir: str, rank: int, function: str, err: BaseException) -> None:
    """Record `err`, raised by `function` on `rank` (never raises: the rank is failing already)."""
    kind = type(err)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    record = {"rank": rank, "function": function, "type": name, "message": _cut(str(err)),
              "traceback": _cut(user_traceback(err)), "time": time.time()}
    path = rundir.error_file(run_dir, rank)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(record, default=str))
        partial.replace(path)  # whole or not at all: a reader never sees half a record
    except OSError:
        pass


def read(path: Path | str) -> dict[str, Any] | None:
    """The record `write` left at `path`; None where there is none or it cannot be read (a hand-damaged
    one): the commands that show it then show the rest of what they know."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _cut(text: str) -> str:
    return text if len(text) <= MOST else f"{text[:MOST // 2]}\n... ({len(text) - MOST} characters cut) ...\n" \
                                          f"{text[-MOST // 2:]}"

