"""`submit.py watch [RUN] [--interval S] [--once]`: a live view of a run or a sweep, redrawn in place
(rich), until it ends. Per task: its state (pending with SLURM's reason, running, requeued, done, failed, ...), attempt,
progress (epoch and step from metrics.jsonl) and speed, its effective training time ratio (ettr), the last metrics, and a sparkline of the
target metric; a sweep's tasks sorted by that metric. States and attempts come from
launcher.rundir.states and the head line and pending reason from `status`'s own (operate), so the two
views never disagree; progress comes from each task's files, read from where the last refresh stopped
(launcher.rundir.progress), so a refresh of a 1,000-task sweep reads only what was appended. It writes nothing, and
leaving (q, Ctrl-C) leaves the run alone. Exit status: as `--wait`, 0 when every task completed,
else 1 (`--once` while the run is still going: 0). `rich` is imported here only.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

from launcher.commands.console import EXIT_FAILED, EXIT_OK, ArgumentParser, overrides_text, relative
from launcher.commands.operate import add_run_arguments, controller_note, find, head_line, task_ettr, waiting_text
from launcher.rundir import exclusions
from launcher.rundir.progress import TaskView
from launcher.rundir.record import load_run
from launcher.rundir.states import ACTIVE, TaskState, task_states

SPARK = "▁▂▃▄▅▆▇█"
# What the view calls our states (done reads better than completed in a live view).
SHOWN = {"completed": "done"}
COLOURS = {"done": "green", "running": "cyan", "pending": "yellow", "requeued": "magenta", "failed": "red",
           "cancelled": "red", "timeout": "red"}
HIDDEN_METRICS = ("epoch", "step", "time", "test_count", "epoch_time_s", "lr")
# The narrowest terminal that shows the ettr column (an 80-column one cut the progress column to make room for it).
ETTR_WIDTH = 100


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    return "".join(SPARK[round((v - low) / (high - low) * (len(SPARK) - 1)) if high > low else 0] for v in values)


class Watcher:
    """The run's states (from the scheduler and the folder) and its tasks' files, one refresh at a time."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.info = load_run(run_dir)
        self.views: dict[int, TaskView] = {}
        self.states: list[TaskState] = []

    def refresh(self) -> None:
        self.info = load_run(self.run_dir)  # a --resume adds job ids
        self.states = task_states(self.info)
        metric = self.info.target[0]
        for ts in self.states:
            view = self.views.get(ts.task)
            if view is None:
                view = self.views[ts.task] = TaskView.of(ts.task_dir)
            view.update(metric)

    @property
    def bytes_read(self) -> int:
        return sum(v.bytes_read for v in self.views.values())

    @property
    def ended(self) -> bool:
        return bool(self.states) and not any(ts.state in ACTIVE for ts in self.states)

    def exit_status(self) -> int:
        return EXIT_OK if all(ts.state == "completed" for ts in self.states) else EXIT_FAILED

    def ordered(self) -> list[TaskState]:
        """A sweep's tasks best first by the target metric's last value; then those without one, then
        the failed (cancelled, timed out) ones, whose last value is not a result."""
        metric, mode = self.info.target
        if not self.info.is_sweep:
            return self.states

        def key(ts: TaskState) -> tuple[int, float, int]:
            value = self.views[ts.task].last.get(metric)
            if ts.state not in ACTIVE + ("completed",):
                return (2, 0.0, ts.task)
            if not isinstance(value, (int, float)):
                return (1, 0.0, ts.task)
            return (0, -value if mode == "max" else value, ts.task)
        return sorted(self.states, key=key)

    def frame(self, width: int | None = None) -> Any:
        """The view, for a terminal `width` columns wide (None: any): below ETTR_WIDTH the ettr column is left out
        first, so that progress and the metric keep their room."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        metric, mode = self.info.target
        head = Text(head_line(self.info, self.states, SHOWN) + (f"; sorted by {metric} ({mode})" if self.info.is_sweep
                                                                else ""))
        table = Table(box=None, pad_edge=False, header_style="bold", expand=True)
        # The narrow columns keep their width on a small terminal; the overrides and last metrics share
        # what is left (ratio), cut with an ellipsis (rich would otherwise drop whole columns).
        ettr = width is None or width >= ETTR_WIDTH
        for column in ("task", "state", "attempt", "progress", "speed", *(["ettr"] if ettr else []), metric, "curve"):
            table.add_column(column, no_wrap=True)
        for column in [*(["overrides"] if self.info.is_sweep else []), "last metrics"]:
            table.add_column(column, no_wrap=True, overflow="ellipsis", ratio=1)
        epochs = self.info.job.get("epochs")
        for ts in self.ordered():
            view = self.views[ts.task]
            shown = SHOWN.get(ts.state, ts.state)
            value = view.last.get(metric)
            table.add_row(str(ts.task), Text(_state_text(ts, shown), style=COLOURS.get(shown, "")),
                          str(ts.attempt), view.progress(ts.overrides.get("epochs", epochs)), view.speed(),
                          *([_ettr_text(self.info, ts)] if ettr else []),
                          f"{value:.4f}" if isinstance(value, (int, float)) else "-", sparkline(list(view.curve)),
                          *([overrides_text(ts.overrides)] if self.info.is_sweep else []),
                          ts.error if ts.state not in ACTIVE + ("completed",) and ts.error
                          else _metrics_text(view.last, metric))
        silent = controller_note(self.states, "asking again every refresh")
        notes = [*exclusions.lines(self.run_dir), *([silent] if silent else [])]
        return Group(head, table, *(Text(line, style="yellow") for line in notes))


def _state_text(ts: TaskState, shown: str) -> str:
    """`pending (Resources, expected to start 15:20)`: SLURM's reason and expected start, as `status` says them."""
    return f"{shown} ({waiting_text(ts, '%H:%M')})" if ts.waiting else shown


def _ettr_text(info: Any, ts: TaskState) -> str:
    """The task's effective training time ratio so far (launcher.rundir.ettr; `status` says its parts): read from its
    result once it ended, from its events while it runs, nothing while it waits."""
    if ts.state not in ACTIVE + ("completed",) or ts.state == "pending":
        return "-"
    found = task_ettr(info, ts)
    return f"{found['ratio']:.0%}" if found else "-"


def _metrics_text(last: dict[str, Any], metric: str) -> str:
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in last.items()
                     if k not in HIDDEN_METRICS and k != metric and k != "images_per_second")


def watch_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="submit.py watch", description="A live view of a run or sweep, redrawn in place "
                            "until it ends (exit status as --wait); q or Ctrl-C leaves it running.")
    add_run_arguments(parser, required=False)
    parser.add_argument("--interval", type=_seconds, default=2.0, help="seconds between refreshes (default 2)")
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    return parser


def watch(args: argparse.Namespace) -> int:
    from rich.console import Console

    watcher = Watcher(find(args))
    watcher.refresh()
    console = Console()
    if args.once:
        console.print(watcher.frame(console.width))
        return watcher.exit_status() if watcher.ended else EXIT_OK
    return _live(watcher, console, max(0.1, args.interval))


MOST_INTERVAL_S = 3600


def _seconds(text: str) -> float:
    """--interval: a number of seconds in (0, an hour]; inf or 1e308 would overflow sleep's time_t."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MOST_INTERVAL_S:  # (nan fails it too)
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, {MOST_INTERVAL_S}]")
    return value


def _live(watcher: Watcher, console: Any, interval: float) -> int:
    from rich.live import Live

    keys = _Keys()
    try:
        with keys, Live(watcher.frame(console.width), console=console, auto_refresh=False, transient=False) as live:
            while not watcher.ended:
                if keys.quit_within(interval):
                    break
                watcher.refresh()
                live.update(watcher.frame(console.width), refresh=True)
    except KeyboardInterrupt:
        pass
    if watcher.ended:
        return watcher.exit_status()
    print(f"stopped watching; the run goes on (`status {relative(watcher.run_dir)}`)", file=sys.stderr)
    return EXIT_OK


class _Keys:
    """`q` on a terminal's stdin ends the view: the terminal reads keys one by one meanwhile."""

    def __init__(self) -> None:
        self.saved: Any = None
        self.fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None

    def __enter__(self) -> _Keys:
        if self.fd is not None:
            import termios
            import tty

            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def quit_within(self, seconds: float) -> bool:
        if self.fd is None:
            time.sleep(seconds)
            return False
        ready, _, _ = select.select([self.fd], [], [], seconds)
        return bool(ready) and os.read(self.fd, 32).lower().count(b"q") > 0
