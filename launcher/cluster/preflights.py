"""Each scheduler's preflight, found by executor name, the way torchx finds its schedulers.

A preflight asks the live cluster whether a request can ever run, before anything is queued, and
returns the array chunk size (`launcher.cluster.slurm.limits.check`). The table names it as
"module:function" and loads it only when a submission uses that scheduler: a local or debug run
(and its `--dry-run`, what users wait for most: benchmarks/submitter.py) never loads the SLURM
modules, their scontrol/sacctmgr calls and the subprocess machinery they need.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

PREFLIGHTS = {"slurm": "launcher.cluster.slurm.limits:check"}


def scheduler_preflight(executor: str) -> Callable[..., int | None] | None:
    """The preflight of `executor`, or None where there is nothing to ask (local, debug)."""
    target = PREFLIGHTS.get(executor)
    if target is None:
        return None
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]
