"""The profile keys that say how a run uses its allocations, checked at load: `sweep_runner` and
`pool_workers` (a sweep as a pool of workers that take the points in turn: launcher/node/pool_worker.py)
and `in_allocation` (the ranks as job steps of the allocation the submitter runs in)."""

from __future__ import annotations

from trainer.config.schema import require


def check(executor: str, launch: str, login: str, sweep_runner: str, pool_workers: int, in_allocation: bool) -> None:
    """Each key's value against the profile's other keys (a FieldError naming the key, as every profile check)."""
    require(pool_workers > 0, "pool_workers", pool_workers, "an integer > 0")
    if sweep_runner == "pool":
        # debug runs every task in this process, one after another: a pool of one, which it already is.
        require(executor in ("local", "slurm"), "sweep_runner", sweep_runner,
                f"'array' for the {executor} executor (a pool's workers are local or SLURM processes)")
        # Each node's torchrun forms the group of the ranks it starts: a worker cannot hold one across points.
        require(launch == "tasks", "sweep_runner", sweep_runner, "'array' with launch: torchrun (a pool's "
                "worker holds its process group across points: launch: tasks)")
    if in_allocation:
        require(executor == "slurm", "in_allocation", in_allocation,
                f"false for the {executor} executor (it runs inside a SLURM allocation you hold)")
        require(not login, "in_allocation", in_allocation, "false with login: (the allocation is the submitter's "
                "own, here; over SSH run the submitter inside an allocation there)")
