"""What rank 0 shows and keeps of a run: log lines, metrics.jsonl, events.jsonl, TensorBoard files,
the MLflow and W&B runs (trainer.rank.trackers) and the progress bar. On the other ranks every method does nothing, so callers need not ask.

TensorBoard (torch.utils.tensorboard) is imported only when the job asks for it: its import costs a
second or more per rank.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from tqdm import tqdm

from trainer.distributed.environment import DistEnv
from trainer.rank import events
from trainer.rank.rundir import METRICS_FILE, TENSORBOARD_DIR
from trainer.rank.trackers import TrackerRun, Trackers


class Reporter:
    """Owns what it opens (the TensorBoard writer, the tracker runs): `close()` it when the run ends, however
    it ends."""

    def __init__(self, run_dir: Path, env: DistEnv, tensorboard: bool, progress_bar: bool,
                 log_every_steps: int, trackers: Trackers | None = None) -> None:
        self.run_dir, self.job_id, self.main = run_dir, env.job_id, env.is_main
        self.tensorboard, self.progress_bar, self.log_every_steps = tensorboard, progress_bar, log_every_steps
        self._writer: Any = None  # torch.utils.tensorboard.SummaryWriter, opened at the first epoch
        self._trackers = trackers if self.main else None  # rank 0's MLflow/W&B runs (trainer.rank.trackers)

    @property
    def tracker_runs(self) -> dict[str, TrackerRun]:
        return dict(self._trackers.runs) if self._trackers else {}

    def log(self, message: str) -> None:
        if self.main:
            print(f"[trainer] {message}", flush=True)

    def event(self, event: str, **fields: Any) -> None:
        """Starts, resumes, stops and the finish go to events.jsonl (what `status` and `restarts` read)."""
        if self.main:
            events.append(self.run_dir, event, job_id=self.job_id, **fields)

    def epoch(self, metrics: dict[str, Any], step: int) -> None:
        """One epoch's metrics: a line in metrics.jsonl and in the log, and TensorBoard scalars."""
        if not self.main:
            return
        with open(self.run_dir / METRICS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(metrics) + "\n")
        # One line per epoch that fits a terminal: 4 significant digits, no count of test images.
        self.log(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                           for k, v in metrics.items() if k not in ("time", "test_count")))
        if self.tensorboard:
            self._scalars(metrics, step)
        if self._trackers is not None:
            self._trackers.log(metrics, step)

    def _scalars(self, metrics: dict[str, Any], step: int) -> None:
        """Mirror the metrics into run_dir/tensorboard/ at the global step, flushed so that
        `tensorboard --logdir` sees them while the run goes on."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter  # only for jobs with tensorboard: true

            self._writer = SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR))
        for key, value in metrics.items():
            if key not in ("epoch", "step", "time") and isinstance(value, (int, float)):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def progress(self, desc: str, total: int, done: int) -> Progress:
        """`total` steps, e.g. one epoch's (`done` of them already done: a resumed epoch)."""
        bar = None
        if self.progress_bar and self.main:
            bar = tqdm(total=total, initial=done, desc=desc, unit="step", leave=False, file=sys.stderr)
        return Progress(self, bar)

    def close(self, outcome: str = "finished") -> None:
        """`outcome`: finished, stopped (a requeue follows) or failed, as the trackers record it."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._trackers is not None:
            trackers, self._trackers = self._trackers, None
            trackers.close(outcome)


class Progress:
    """A tqdm bar (interactive runs), or else a plain log line every `log_every_steps` steps."""

    def __init__(self, reporter: Reporter, bar: Any) -> None:
        self.reporter, self.bar = reporter, bar

    def step(self, global_step: int, describe: Callable[[], str]) -> None:
        """One step done; `describe` is called only for a log line (it may wait for the device)."""
        if self.bar is not None:
            self.bar.update(1)
        elif self.reporter.main and global_step % self.reporter.log_every_steps == 0:
            self.reporter.log(describe())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()  # tqdm's close is idempotent: a stop closes the bar before the block ends

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
