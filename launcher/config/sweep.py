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
from typing import Any

from trainer.config import JobConfig
from trainer.schema import ConfigError, build, deep_merge, field_names, unknown_key_error

SWEEP_KEYS = ("grid", "tasks")


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
    points = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())] if grid else []
    points += [dict(t) for t in listed]
    if not points:
        raise ConfigError(f"{source}: key 'sweep' defines no tasks; give 'grid' and/or 'tasks'")
    jobs = []
    for index, overrides in enumerate(points):
        for key in overrides:
            if _top(key) not in valid:
                raise unknown_key_error(source, f"sweep.tasks[{index}].{key}", valid)
        data = deep_merge(job_data, _nested(overrides))
        jobs.append((build(JobConfig, data, f"{source} (sweep task {index}: {overrides})"), overrides))
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
