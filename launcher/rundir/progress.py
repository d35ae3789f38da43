"""How far a task has come, from its own files, read incrementally (what `watch` redraws from).

Each task's metrics.jsonl and events.jsonl are read from where the last refresh stopped
(trainer.rank.jsonlines.Tail), so a refresh of a 1,000-task sweep reads only what was appended. The
task's state and attempt are not read here: they are `status`'s (launcher.rundir.states).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.rundir.layout import EVENTS_FILE, METRICS_FILE
from trainer.rank import events
from trainer.rank.jsonlines import Tail

CURVE_POINTS = 24


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class TaskView:
    """What one task's folder told so far: its last metrics line, the target metric's curve, the
    newest step (a checkpoint resumed or a stop is one too), and the line before the last (the speed)."""

    metrics: Tail
    events: Tail
    last: dict[str, Any] = field(default_factory=dict)
    curve: deque[float] = field(default_factory=lambda: deque(maxlen=CURVE_POINTS))
    step: int | None = None
    previous: tuple[float, int] | None = None  # (time, step) of the line before the last

    @classmethod
    def of(cls, task_dir: Path) -> TaskView:
        return cls(Tail(task_dir / METRICS_FILE), Tail(task_dir / EVENTS_FILE))

    @property
    def bytes_read(self) -> int:
        return self.metrics.bytes_read + self.events.bytes_read

    def update(self, target: str) -> None:
        """Read what was appended since the last update; `target`: the metric whose curve is kept."""
        for row in self.metrics.read():
            if _is_number(row.get("time")) and isinstance(row.get("step"), int) and self.last:
                if _is_number(self.last.get("time")) and isinstance(self.last.get("step"), int):
                    self.previous = (self.last["time"], self.last["step"])
            self.last = row
            if _is_number(row.get(target)):
                self.curve.append(float(row[target]))
            if isinstance(row.get("step"), int):
                self.step = row["step"]
        for event in self.events.read():
            if events.well_formed(event) and isinstance(event.get("step"), int):
                self.step = max(self.step or 0, event["step"])

    def progress(self, epochs: Any) -> str:
        """`66/220 (epoch 3/10)`: steps, the total from the steps the epochs so far took."""
        epoch, step = self.last.get("epoch"), self.step
        if step is None:
            return "-"
        if isinstance(epoch, int) and epoch > 0 and isinstance(epochs, int) and isinstance(self.last.get("step"), int):
            total = self.last["step"] * epochs // epoch
            return f"{step}/{total} (epoch {epoch}/{epochs})"
        return f"step {step}"

    def speed(self) -> str:
        """Images per second where the recipe logs it, else steps per second between the last two lines."""
        if _is_number(self.last.get("images_per_second")):
            return f"{self.last['images_per_second']:.0f} img/s"
        if (self.previous and _is_number(self.last.get("time")) and isinstance(self.last.get("step"), int)
                and self.last["time"] > self.previous[0]):
            return f"{(self.last['step'] - self.previous[1]) / (self.last['time'] - self.previous[0]):.1f} step/s"
        return "-"
