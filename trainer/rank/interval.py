"""The checkpoint interval from measurements (`checkpoint_every_steps: auto`), by Young and Daly's rule: the time of
steps between checkpoints that loses least is about sqrt(2 x mean time between interruptions x the stall of one
checkpoint), here kept within the job's bounds (`auto_checkpoint_min_s`, `auto_checkpoint_max_s`).

Both measurements come from the run's own event log (trainer.rank.events), which every attempt extends: the mean
time between interruptions is the time since the first attempt started over the attempts that were interrupted
(preemptions, time limits, failures: each new attempt is one), and the stall is the median of the newest
checkpoints' stalls (the "checkpointed" events: with asynchronous checkpoints, the in-memory copy). Before there is
any, a prior stands in and says so: a day between interruptions, a second per checkpoint. Rank 0 decides by its
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

    @property
    def seconds(self) -> float:
        return min(self.max_s, max(self.min_s, math.sqrt(2 * self.mtbi_s * self.stall_s)))

    def as_event(self) -> dict[str, Any]:
        return {"interval_s": round(self.seconds, 3), "mtbi_s": round(self.mtbi_s, 1),
                "interruptions": self.interruptions, "interval_stall_s": round(self.stall_s, 4),
                "interval_min_s": self.min_s, "interval_max_s": self.max_s}

    def measured(self, stall_s: float) -> None:
        """A checkpoint of this attempt stalled the loop `stall_s`: the newest measurement counts most."""
        self.stall_s = stall_s if not self.stalls_measured else (self.stall_s + stall_s) / 2
        self.stalls_measured += 1


def from_history(run_dir: Path | str, min_s: float, max_s: float, now: float) -> Interval:
    """The interval for an attempt starting now, from the run's event log so far."""
    log = [e for e in events.read(run_dir) if isinstance(e.get("time"), (int, float))]
    starts = [float(e["time"]) for e in log if events.starts_attempt(e)]
    interruptions = max(0, len(starts) - 1)
    mtbi = (now - starts[0]) / interruptions if interruptions and now > starts[0] else PRIOR_MTBI_S
    stalls = [float(e["stall_s"]) for e in log if e["event"] == "checkpointed"
              and isinstance(e.get("stall_s"), (int, float)) and not isinstance(e.get("stall_s"), bool)]
    stall = statistics.median(stalls[-NEWEST_STALLS:]) if stalls else PRIOR_STALL_S
    return Interval(min_s, max_s, mtbi, interruptions, stall, len(stalls))


def why(event: dict[str, Any]) -> str:
    """`status`'s line from the newest event that says the interval (None-safe: a field missing says less)."""
    mtbi, stall = event.get("mtbi_s"), event.get("interval_stall_s")
    interrupted = event.get("interruptions")
    told = (f"about {event.get('interval_s')} s of steps = sqrt(2 x mean time between interruptions {mtbi} s"
            + (" (none yet: the prior)" if interrupted == 0 else f" ({interrupted} interruption(s))")
            + f" x stall {stall} s), within {event.get('interval_min_s')}..{event.get('interval_max_s')} s")
    return told
