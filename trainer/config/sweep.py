"""Sweeps: a base job plus a grid and/or an explicit list of overrides, expanded into array tasks.

    # jobs/digits-lr-sweep.yaml
    extends: digits
    sweep:
      grid:            # every combination (cartesian product), in the order written
        lr: [0.01, 0.05, 0.1]
        batch_size_per_rank: [16, 32]
      tasks:           # and/or explicit points, each a mapping of job keys
        - {lr: 0.2, epochs: 5}
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

from trainer.config.files import deep_merge
from trainer.config.job import JobConfig
from trainer.config.schema import ConfigError, build, field_names, unknown_key_error

SWEEP_KEYS = ("grid", "tasks")
# The most tasks one sweep may have (docs/operating-runs.md, "Sweeps"). Bounded so that a typo in a grid fails at
# once instead of building millions of jobs; the live preflight then checks the cluster's limits.
MAX_SWEEP_TASKS = 10_000


def expand(job_data: dict[str, Any], sweep: dict[str, Any], source: str) -> list[tuple[JobConfig, dict[str, Any]]]:
    """Every sweep point as a validated job and the overrides that made it."""
    unknown = [k for k in sweep if k not in SWEEP_KEYS]
    if unknown:
        raise unknown_key_error(source, f"sweep.{unknown[0]}", list(SWEEP_KEYS))
    grid = sweep.get("grid") or {}
    listed = sweep.get("tasks") or []
    if not isinstance(grid, dict):
        raise ConfigError(f"{source}: key 'sweep.grid' must map job keys to lists of values")
    if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
        raise ConfigError(f"{source}: key 'sweep.tasks' must be a list of mappings of job keys to values")
    valid = field_names(JobConfig)
    for key, values in grid.items():
        if _top(key) not in valid:
            raise unknown_key_error(source, f"sweep.grid.{key}", valid)
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{source}: key 'sweep.grid.{key}' must be a non-empty list of values, got {values!r}")
    # Counted before anything is built: a grid of a few short lists can name billions of points.
    size = math.prod(len(v) for v in grid.values()) if grid else 0
    if size + len(listed) > MAX_SWEEP_TASKS:
        shape = " x ".join(str(len(v)) for v in grid.values()) or "0"
        raise ConfigError(f"{source}: key 'sweep' defines {size + len(listed)} tasks (grid {shape} = {size}, plus "
                          f"{len(listed)} listed); a sweep may have at most {MAX_SWEEP_TASKS}: split it, or narrow "
                          f"the grid")
    points = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())] if grid else []
    points += [dict(t) for t in listed]
    if not points:
        raise ConfigError(f"{source}: key 'sweep' defines no tasks; give 'grid' and/or 'tasks'")
    jobs = []
    seen: dict[str, int] = {}
    for index, overrides in enumerate(points):
        for key in overrides:
            if _top(key) not in valid:
                raise unknown_key_error(source, f"sweep.tasks[{index}].{key}", valid)
        data = deep_merge(job_data, _nested(overrides))
        job = build(JobConfig, data, f"{source} (sweep task {index}: {overrides})")
        # The same job twice trains the same thing twice (bitwise, with deterministic: true) and makes
        # the summary's rows ambiguous; a repeat on purpose differs in its seed.
        key = json.dumps(vars(job), sort_keys=True, default=str)
        if key in seen:
            raise ConfigError(f"{source}: key 'sweep': task {index} {overrides} is the same job as task "
                              f"{seen[key]} {points[seen[key]]}; each point once (vary 'seed' to repeat a run)")
        seen[key] = index
        jobs.append((job, overrides))
    return jobs


def _top(key: str) -> str:
    """`config.lr` (a key of an entrypoint's config) belongs to the job key `config`."""
    return key.split(".", 1)[0]


def _nested(overrides: dict[str, Any]) -> dict[str, Any]:
    """{"config.lr": 0.1} -> {"config": {"lr": 0.1}} (the summary keeps the dotted names)."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        target = out
        *parents, last = key.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return out


def swept_keys(points: list[dict[str, Any]]) -> list[str]:
    keys: list[str] = []
    for point in points:
        keys += [k for k in point if k not in keys]
    return keys
