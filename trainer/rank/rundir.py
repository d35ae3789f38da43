"""The names of what the trainer writes into a run folder (a run's, or a sweep task's), in one place.

    events.jsonl     started/resumed/stopped/finished, appended by rank 0 (trainer.rank.events)
    metrics.jsonl    one line per `ctx.log`, by rank 0 (trainer.rank.reporting)
    checkpoints/     ckpt-<step>.pt, the newest K (trainer.rank.checkpoint); a folder ckpt-<step>/ where the
                     state is sharded across ranks (trainer.rank.sharded)
    model_final.pt   the built-in recipe's final weights (trainer.recipes.training)
    tensorboard/     TensorBoard event files, when the job asks for them
    startup/         each rank's start-up timing marks (trainer.rank.timing)
    script-stops/    how the tasks of a `script:` job agree on a stop (trainer.rank.handoff)
    errors/          rank-NNNNN.json: what your function raised on that rank (trainer.runners.failures)
    function.pkl     (the run folder's, not a sweep task's) your function pickled by value, when
                     it was handed over from Python and is not importable by name (trainer.runners.pickled)

The submitter's names (run.json, logs/, result.json, ...) are launcher.rundir.layout's, which reads
these from here. No torch: the submitter and the script runner use it.
"""

from __future__ import annotations

import re
from pathlib import Path

EVENTS_FILE = "events.jsonl"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"
MODEL_FILE = "model_final.pt"
TENSORBOARD_DIR = "tensorboard"
TIMING_DIR = "startup"
SCRIPT_STOPS_DIR = "script-stops"
ERRORS_DIR = "errors"
FUNCTION_FILE = "function.pkl"

# How each rank's log marks the start of an attempt (launcher.node.task writes it to both of a rank's logs, so
# that each file has it; the submitter's live view of a local run shows it once, launcher.waiting.echo).
ATTEMPT_BANNER = "===== [submit.py] attempt started"

# A pattern string: re compiles (and caches) it on first use.
_CHECKPOINT = r"^ckpt-(\d{9})(\.pt)?$"


def checkpoint_name(step: int, sharded: bool = False) -> str:
    """The file of the checkpoint of global step `step` (zero-padded: names sort as steps do), or its folder when
    the state is sharded across ranks."""
    return f"ckpt-{step:09d}" if sharded else f"ckpt-{step:09d}.pt"


def checkpoint_files(folder: Path) -> list[Path]:
    """The checkpoints in `folder` (a run folder's checkpoints/: files, or folders of sharded ones), oldest first;
    [] when there is none."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if re.match(_CHECKPOINT, p.name))


def error_file(run_dir: Path | str, rank: int) -> Path:
    """Where rank `rank` records what your function raised on it (a run's or a sweep task's folder)."""
    return Path(run_dir) / ERRORS_DIR / f"rank-{rank:05d}.json"


def has_checkpoint(run_dir: Path | str) -> bool:
    """Whether the run (or sweep task) in `run_dir` has a checkpoint to resume from."""
    return bool(checkpoint_files(Path(run_dir) / CHECKPOINTS_DIR))
