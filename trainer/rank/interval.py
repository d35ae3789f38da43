"""The checkpoint interval from measurements (`checkpoint_every_steps: auto`), by Young and Daly's rule: the time of
steps between checkpoints that loses least is about sqrt(2 x mean time between interruptions x the stall of one
checkpoint), here kept within the job's bounds (`auto_checkpoint_min_s`, `auto_checkpoint_max_s`).

Both measurements come from event logs (trainer.rank.events): the run's own, which every attempt extends, and its
predecessors' (`RunSettings.history`: a sweep point's, the points of its sweep before it, which ran the same code on
the same cluster). The mean time between interruptions is the time since each log's first attempt started (a
predecessor's: until its last event) over the attempts that were interrupted (preemptions, time limits, failures:
each new attempt is one), all logs pooled; the stall is the median of the newest checkpoints' stalls (the
"checkpointed" events: with asynchronous checkpoints, the in-memory copy), the run's own once it has any. Before
there is any, a prior stands in and says so: a day between interruptions, a second per checkpoint. Rank 0 decides by its
clock and the ranks agree at the step boundary (trainer.rank.stopping). No torch here.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.rank import events

PRIOR_MTBI_S = 24 * 3600.0
PRIOR_STALL_S = 1.0
NEWEST_STALLS = 5


@dataclass
class Interval:
    """The interval now, and what it was made of (for the "checkpointed" events and `status`)."""

    min_s: float
    max_s: float
    mtbi_s: float
    interruptions: int
    stall_s: float
    stalls_measured: int
    predecessors: int = 0  # the other logs read (their interruptions are among `interruptions`)

    @property
    def seconds(self) -> float:
        return min(self.max_s, max(self.min_s, math.sqrt(2 * self.mtbi_s * self.stall_s)))

    def as_event(self) -> dict[str, Any]:
        return {"interval_s": round(self.seconds, 3), "mtbi_s": round(self.mtbi_s, 1),
                "interruptions": self.interruptions, "interval_stall_s": round(self.stall_s, 4),
                "interval_min_s": self.min_s, "interval_max_s": self.max_s, "predecessors": self.predecessors}

    def measured(self, stall_s: float) -> None:
        """A checkpoint of this attempt stalled the loop `stall_s`: the newest measurement counts most."""
        self.stall_s = stall_s if not self.stalls_measured else (self.stall_s + stall_s) / 2
        self.stalls_measured += 1


def from_history(run_dir: Path | str, min_s: float, max_s: float, now: float,
                 predecessors: list[str] | tuple[str, ...] = ()) -> Interval:
    """The interval for an attempt starting now, from the run's event log so far and its predecessors' logs."""
    span, interruptions, stalls = _history(events.read(run_dir), now)
    earlier: list[float] = []
    read = 0
    for folder in predecessors:
        log = events.read(folder)
        if log:
            more = _history(log, None)
            span, interruptions, earlier, read = span + more[0], interruptions + more[1], earlier + more[2], read + 1
    mtbi = span / interruptions if interruptions and span > 0 else PRIOR_MTBI_S
    measured = stalls or earlier  # (the run's own, once it has any: its state, its file system)
    stall = statistics.median(measured[-NEWEST_STALLS:]) if measured else PRIOR_STALL_S
    return Interval(min_s, max_s, mtbi, interruptions, stall, len(measured), read)


def _history(log: list[dict[str, Any]], now: float | None) -> tuple[float, int, list[float]]:
    """One log's time from its first start (until `now`, or its last event for a log that is not this attempt's),
    its interruptions and its checkpoints' stalls."""
    log = [e for e in log if isinstance(e.get("time"), (int, float))]
    starts = [float(e["time"]) for e in log if events.starts_attempt(e)]
    end = now if now is not None else max((float(e["time"]) for e in log), default=0.0)
    span = max(0.0, end - starts[0]) if starts else 0.0
    stalls = [float(e["stall_s"]) for e in log if e["event"] == "checkpointed"
              and isinstance(e.get("stall_s"), (int, float)) and not isinstance(e.get("stall_s"), bool)]
    return span, max(0, len(starts) - 1), stalls


def why(event: dict[str, Any]) -> str:
    """`status`'s line from the newest event that says the interval (None-safe: a field missing says less)."""
    mtbi, stall = event.get("mtbi_s"), event.get("interval_stall_s")
    interrupted = event.get("interruptions")
    told = (f"about {event.get('interval_s')} s of steps = sqrt(2 x mean time between interruptions {mtbi} s"
            + (" (none yet: the prior)" if interrupted == 0 else f" ({interrupted} interruption(s))")
            + (f" over this run and {event['predecessors']} earlier point(s)" if event.get("predecessors") else "")
            + f" x stall {stall} s), within {event.get('interval_min_s')}..{event.get('interval_max_s')} s")
    return told
