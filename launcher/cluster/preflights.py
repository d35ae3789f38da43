"""Each scheduler's preflight, found by executor name, the way torchx finds its schedulers.

A preflight asks the live cluster whether a request can ever run, before anything is queued, and
answers what the submission needs to know of it (`Answer`: the array chunk size, the scheduler's
release; `launcher.cluster.slurm.clusters.check`, which asks `limits.check` of each cluster). The table names it as
"module:function" and loads it only when a submission uses that scheduler: a local or debug run
(and its `--dry-run`, what users wait for most: benchmarks/submitter.py) never loads the SLURM
modules, their scontrol/sacctmgr calls and the subprocess machinery they need.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from launcher.cluster.slurm.release import Release

PREFLIGHTS = {"slurm": "launcher.cluster.slurm.clusters:check"}


@dataclass(frozen=True)
class Answer:
    """What a preflight found out: the most tasks one job array may hold (None: no limit, or no array),
    and the scheduler's release (SLURM's; unread: `Release()`, decided as for the oldest supported)."""

    chunk: int | None = None
    release: Release = field(default_factory=Release)


def scheduler_preflight(executor: str) -> Callable[..., Answer] | None:
    """The preflight of `executor`, or None where there is nothing to ask (local, debug)."""
    target = PREFLIGHTS.get(executor)
    if target is None:
        return None
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]
