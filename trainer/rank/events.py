"""The run's event log, `events.jsonl`: one JSON object per line, appended by rank 0.

It is the run's memory across restarts: every attempt writes "started" (the launcher's task, on
rank 0, before training); the trainer adds "resumed" (which checkpoint, which step, which bad
checkpoints it skipped), "stopped" (a stop signal: the step, the signal, whether the job requeued
itself and why) and "finished". An attempt is what follows one "started" (`attempts`); the
submitter's `restarts`, `status` and `watch` read them back (launcher.rundir.restarts), and a rank knows
its attempt number from them (`attempt_number`, the one count of attempts).

No torch here: the submitter reads this file too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.rank import jsonlines
from trainer.rank.rundir import EVENTS_FILE


def append(run_dir: Path | str, event: str, **fields: Any) -> dict[str, Any]:
    """Append one event (with the wall-clock time) and flush it to disk before returning.

    Small appends of whole lines: readers see each line complete or not at all, and a kill right
    after a stop decision cannot lose the line that explains the restart.
    """
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"event": event, "time": time.time(), **fields}
    with open(folder / EVENTS_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return record


def read(run_dir: Path | str) -> list[dict[str, Any]]:
    """All events in order; a torn or foreign line is skipped, not fatal (trainer.rank.jsonlines)."""
    return [record for record in jsonlines.read(os.path.join(run_dir, EVENTS_FILE)) if well_formed(record)]


# The fields readers use, with the types they use them as (launcher.rundir.restarts): a line with
# another shape (hand-edited, another tool's) is skipped like a torn one, never a traceback later.
_FIELDS = {"time": (int, float), "step": (int, type(None)), "job_id": (str, int, type(None)), "requeued": (bool,),
           "reason": (str, type(None)), "signal": (str, int, type(None))}


def well_formed(record: dict[str, Any]) -> bool:
    """An event line of the shape readers use (`_FIELDS`); `watch` skips the others as `read` does."""
    return isinstance(record.get("event"), str) and all(
        isinstance(record[key], kinds) and not (isinstance(record[key], bool) and bool not in kinds)
        for key, kinds in _FIELDS.items() if key in record)


def starts_attempt(event: dict[str, Any]) -> bool:
    """Whether `event` begins an attempt: the launcher's "started" (a "resumed" is part of one)."""
    return event.get("event") == "started"


def attempts(log: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The events split into attempts: each "started" begins one (events before the first, of a
    run the launcher did not start, form an attempt of their own)."""
    out: list[list[dict[str, Any]]] = []
    for event in log:
        if starts_attempt(event) or not out:
            out.append([])
        out[-1].append(event)
    return out


def attempt_of(started: int, scheduler_restarts: int = 0) -> int:
    """The one rule for an attempt's number (1 for the first; the ranks, the trackers, `status`, `watch`): one per
    "started" event the run's log holds, or the scheduler's restarts plus one where it says more: an attempt it
    has begun (requeued, pending again) before a rank of it wrote "started"."""
    return max(started, scheduler_restarts + 1, 1)


def attempt_number(run_dir: Path | str, environ: Mapping[str, str] | None = None) -> int:
    """This attempt's number, 1 for the first: the run's "started" events as the launcher recorded
    them; for a run the launcher did not start (torchrun by hand, plain python), torchrun's restart
    count plus one. `status`, `watch`, the trackers and a script's rank all count with this."""
    started = sum(1 for e in read(run_dir) if starts_attempt(e))
    if started:
        return attempt_of(started)
    restarts = (os.environ if environ is None else environ).get("TORCHELASTIC_RESTART_COUNT", "")
    return int(restarts) + 1 if restarts.isdigit() else 1
