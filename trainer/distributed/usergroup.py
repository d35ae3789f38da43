"""A user's own `init_process_group` / `destroy_process_group` calls while their function runs.

Code written for submitit or torchrun forms the process group itself (`dist.init_process_group(backend=
"nccl")`, often after `submitit.helpers.TorchDistributedEnvironment().export()`). Inside an entrypoint
the tool has already formed it (trainer.runners.functions), and torch refuses a second default group
("trying to initialize the default process group twice"). While the function runs, a request for the
same world (the same world size and rank, given or read from env:// variables, and a backend the
group has) returns at once with one line in the rank's log; a request for another world is an error
that says what the job's group is. Destroying the default group is deferred the same way: the tool
tears it down after the function returns (a barrier first, trainer.distributed.process), which a
group already destroyed would break. Both functions are restored when the function returns.

Only calls through the module attribute (`dist.init_process_group`, `torch.distributed.init_process_group`)
are seen: a name bound earlier by `from torch.distributed import init_process_group` keeps torch's own.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d


class IncompatibleGroupError(RuntimeError):
    """The function asked for a process group other than the job's: another world size, rank or backend."""


def _wanted(bound: inspect.BoundArguments) -> tuple[int, int]:
    """The world size and rank the call asks for; -1 where it leaves them to env:// (read from there)."""
    args = bound.arguments
    world, rank = args.get("world_size", -1), args.get("rank", -1)
    init_method = args.get("init_method")
    if args.get("store") is None and (init_method is None or str(init_method).startswith("env://")):
        world = int(os.environ.get("WORLD_SIZE", world)) if world == -1 else world
        rank = int(os.environ.get("RANK", rank)) if rank == -1 else rank
    return int(world), int(rank)


def _describe(bound: inspect.BoundArguments) -> str:
    shown = {k: v for k, v in bound.arguments.items() if k in ("backend", "init_method", "world_size", "rank")}
    return "init_process_group(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


@contextlib.contextmanager
def kept_for_the_tool(log: Callable[[str], None]) -> Iterator[None]:
    """For the block: a second init_process_group for this world is a no-op, a destroy is deferred."""
    original_init, original_destroy = dist.init_process_group, dist.destroy_process_group
    signature = inspect.signature(original_init)

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        if not dist.is_initialized():  # a single-rank job forms no group: the function's own is its own
            return original_init(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        world, rank = _wanted(bound)
        have_world, have_rank, have_backend = dist.get_world_size(), dist.get_rank(), str(dist.get_backend())
        backend = bound.arguments.get("backend")
        wanted_backends = [] if backend is None else [part.rpartition(":")[2] for part in str(backend).split(",")]
        missing = [b for b in wanted_backends if b and b.lower() not in have_backend.lower()]
        if (world not in (-1, have_world)) or (rank not in (-1, have_rank)) or missing:
            raise IncompatibleGroupError(
                f"{_describe(bound)} asks for another process group than the job's, which this rank already "
                f"joined (world size {have_world}, rank {have_rank}, backend {have_backend}); ask for that one "
                f"(or leave the arguments out), or change the profile's nodes/tasks_per_node/gpus")
        log(f"{_describe(bound)}: this rank is already in the job's process group (world size {have_world}, "
            f"rank {have_rank}, backend {have_backend}); kept it")

    def destroy_process_group(group: Any = None) -> None:
        if group is None or group is dist.group.WORLD:
            log("destroy_process_group(): the job's process group is kept until the function returns; "
                "the tool tears it down then")
            return
        original_destroy(group)

    targets = (dist, distributed_c10d)  # `dist.x` and `torch.distributed.distributed_c10d.x` alike
    saved = [(t, name, getattr(t, name)) for t in targets for name in ("init_process_group", "destroy_process_group")]
    for target in targets:
        target.init_process_group = init_process_group  # type: ignore[assignment]
        target.destroy_process_group = destroy_process_group  # type: ignore[assignment]
    try:
        yield
    finally:
        for target, name, value in saved:
            setattr(target, name, value)
