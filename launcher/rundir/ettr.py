"""A run's effective training time ratio (ETTR): the seconds its steps kept, over the wall time from its submission,
with the losses named (docs/failures-and-requeue.md#effective-training-time).

Read from the task's event log (trainer.rank.events), where each attempt's rank 0 writes "started" (the launcher),
"checkpointed" (each checkpoint: its step, the loop's stall, the attempt's step time so far) and "timed" (the
attempt's end: its step time, its stalls, when its first step began; the trainer's Context). Per attempt:

- queue: from the submission to the first attempt's start (`created` in run.json);
- start-up: from an attempt's start to its first step (imports, the process group, data, resuming);
- checkpoints: the time the loop stood still for them (with asynchronous checkpoints, the copy only);
- redone: an attempt's step time after the checkpoint the next attempt resumed from (lost, computed again);
- restart waits: from an attempt's end to the next one's start (the requeue, the queue again);
- other: what is left (evaluation outside steps, teardown, an attempt killed before it said how it spent its time).

productive = each attempt's step time up to the checkpoint its successor resumed from, and the last attempt's whole.
An attempt killed without its "timed" event (kill -9, a node lost) counts its step time up to its last checkpoint as
kept and the rest of it as other. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.rank import events, interval

LOSSES = ("queue_s", "startup_s", "checkpoint_s", "redone_s", "restart_wait_s", "other_s")


@dataclass
class Ettr:
    """Where a run's wall time from its submission went (seconds)."""

    wall_s: float
    productive_s: float
    queue_s: float = 0.0
    startup_s: float = 0.0
    checkpoint_s: float = 0.0
    redone_s: float = 0.0
    restart_wait_s: float = 0.0
    other_s: float = 0.0

    @property
    def ratio(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0

    def as_json(self) -> dict[str, float]:
        return {"ratio": round(self.ratio, 4), "wall_s": round(self.wall_s, 1), "productive_s": round(self.productive_s, 1),
                **{name: round(getattr(self, name), 1) for name in LOSSES}}

    @classmethod
    def from_json(cls, said: Any) -> Ettr | None:
        """`as_json`'s mapping read back (from a result.json: None where it is not one)."""
        if not isinstance(said, dict):
            return None
        values = {name: _number(said.get(name)) for name in ("wall_s", "productive_s", *LOSSES)}
        if any(value is None for value in values.values()):
            return None
        return cls(**{name: float(value or 0.0) for name, value in values.items()})

    def text(self) -> str:
        """`72 % of 2m10s from submission (productive 1m34s; queue 12s, start-up 15s, ...)`."""
        named = ", ".join(f"{name[:-2].replace('_', ' ').replace('startup', 'start-up')} {_short(getattr(self, name))}"
                          for name in LOSSES)
        return f"{self.ratio:.0%} of {_short(self.wall_s)} from submission (productive {_short(self.productive_s)}; {named})"


def _short(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def of_events(created: float, log: list[dict[str, Any]], now: float | None) -> Ettr | None:
    """The ETTR of a task whose event log is `log`, submitted at `created`; `now` ends a task still running (None:
    it has ended, at its last event). None: not measured (no attempt started, or one of a version that wrote no
    "timed" and "checkpointed" events)."""
    # (An event without a time says nothing here: `events.read` lets such lines through.)
    timed_log = [e for e in log if _number(e.get("time")) is not None]
    tries = [a for a in events.attempts(timed_log) if a and events.starts_attempt(a[0])]
    if not tries or not any(e["event"] in ("timed", "checkpointed") for e in timed_log):
        return None
    starts = [float(a[0]["time"]) for a in tries]
    ends, steps, kept_at = [], [], []
    startup = stalls = 0.0
    for attempt in tries:
        timed = next((e for e in reversed(attempt) if e["event"] == "timed"), None)
        checkpoints = [e for e in attempt if e["event"] == "checkpointed" and _number(e.get("productive_s")) is not None]
        ends.append(float((timed or attempt[-1])["time"]))
        first = _number(timed.get("first_step_at")) if timed else None
        if first is not None:
            startup += max(0.0, first - float(attempt[0]["time"]))
        stalls += (_number(timed.get("stalled_s")) or 0.0) if timed else sum(_number(e.get("stall_s")) or 0.0
                                                                              for e in checkpoints)
        steps.append(_number(timed.get("productive_s")) if timed else None)
        kept_at.append({e.get("step"): float(e["productive_s"]) for e in checkpoints})
    productive = redone = 0.0
    for i, total in enumerate(steps):
        if i == len(tries) - 1:  # the last attempt keeps all it did (or, killed, what its checkpoints kept)
            kept = total if total is not None else max(kept_at[i].values(), default=0.0)
        else:  # what its successor resumed from; a successor that resumed nothing kept none of it
            resumed = next((e for e in tries[i + 1] if e["event"] == "resumed"), None)
            kept = kept_at[i].get(resumed.get("step"), max(kept_at[i].values(), default=0.0)) if resumed else 0.0
        productive += kept
        redone += max(0.0, total - kept) if total is not None else 0.0
    end = now if now is not None and not any(e["event"] == "timed" for e in tries[-1]) else ends[-1]
    wall = max(0.0, end - created)
    waits = sum(max(0.0, starts[i + 1] - ends[i]) for i in range(len(tries) - 1))
    found = Ettr(wall, productive, queue_s=max(0.0, starts[0] - created), startup_s=startup, checkpoint_s=stalls,
                 redone_s=redone, restart_wait_s=waits)
    found.other_s = max(0.0, wall - productive - sum(getattr(found, name) for name in LOSSES))
    return found


def of_task(task_dir: Path, created: Any, now: float | None) -> Ettr | None:
    """The ETTR of the task in `task_dir` (its events.jsonl), submitted at `created` (run.json's); `now`: the task
    is still going on (None: it has ended)."""
    submitted = _number(created)
    return None if submitted is None else of_events(submitted, events.read(task_dir), now)


def interval_said(task_dir: Path) -> str:
    """The checkpoint interval rank 0 set last (`checkpoint_every_steps: auto`, trainer.rank.interval) and from
    what, as `status` says it; "" where none was set."""
    said = next((e for e in reversed(events.read(task_dir)) if _number(e.get("interval_s")) is not None), None)
    return interval.why(said) if said is not None else ""
