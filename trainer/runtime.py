"""Process-level setup: threads, device, process group. Each done once, before training starts."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from trainer.distenv import DistEnv


class GpuUnavailableError(RuntimeError):
    pass


def set_threads(threads: int) -> None:
    """Use exactly the CPUs the task was given: more threads than cores made the seed 3x slower."""
    os.environ["OMP_NUM_THREADS"] = str(threads)  # for any subprocess (e.g. data download)
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(max(1, min(threads, 2)))
    except RuntimeError:
        pass  # already set: interop threads can only be set before the first parallel work


def pick_device(use_gpus: bool, env: DistEnv) -> torch.device:
    if not use_gpus:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise GpuUnavailableError(
            f"the profile asks for GPUs but CUDA is not available on node {env.node or 'localhost'} "
            f"(rank {env.rank}); use a CPU profile or set --set profile.gpus_per_node=0")
    count = torch.cuda.device_count()
    # SLURM may hide all but the task's own GPU(s) with CUDA_VISIBLE_DEVICES.
    index = env.local_rank % count
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init_process_group(env: DistEnv, device: torch.device, init_timeout_s: int, collective_timeout_s: int) -> None:
    """Join the job's process group once per process (never in a parent that spawns children).

    Two timeouts: ranks may take a while to start (imports on a busy node), but once training runs
    a collective that waits longer than `collective_timeout_s` means a peer died, and every rank
    should give up rather than hang until the job's time limit.
    """
    if not env.distributed or dist.is_initialized():
        return
    store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, is_master=env.rank == 0,
                          timeout=datetime.timedelta(seconds=init_timeout_s), wait_for_workers=True)
    dist.init_process_group(
        backend="nccl" if device.type == "cuda" else "gloo",
        store=store,
        rank=env.rank,
        world_size=env.world_size,
        timeout=datetime.timedelta(seconds=collective_timeout_s),
        device_id=device if device.type == "cuda" else None,
    )


def destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
