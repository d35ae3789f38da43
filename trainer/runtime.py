"""Process-level setup: threads, device, process group. Each done once, before training starts."""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping

import torch
import torch.distributed as dist

from trainer.distenv import DistEnv


class GpuUnavailableError(RuntimeError):
    pass


# Read by OpenMP, MKL and OpenBLAS in any process this one starts (a download, a DataLoader worker).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def usable_cpus() -> int:
    """CPUs this process may run on: SLURM's task binding (cgroup or affinity mask) shows up here."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_count(requested: int, environ: Mapping[str, str], usable: int) -> int:
    """The profile's cpus_per_task, never more than SLURM granted (SLURM_CPUS_PER_TASK) or than the
    CPUs this process may use: more threads than cores made the seed 3x slower on two cores."""
    count = requested
    granted = environ.get("SLURM_CPUS_PER_TASK", "")
    if granted.isdigit() and int(granted) > 0:
        count = min(count, int(granted))
    return max(1, min(count, usable))


def set_threads(requested: int, environ: Mapping[str, str] | None = None) -> int:
    """Set this process's CPU threads, once, before torch does any work; returns the count.

    The one place in the project that sets threads. Called first thing in `trainer.train.run`.
    """
    count = thread_count(requested, os.environ if environ is None else environ, usable_cpus())
    for name in THREAD_VARIABLES:
        os.environ[name] = str(count)
    torch.set_num_threads(count)
    try:
        # Inter-op threads run independent ops concurrently; with one intra-op thread per core
        # already busy they would only oversubscribe.
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set in this process (e.g. a second in-process run): can only be set once
    return count


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
    # Fixed input shapes: let cuDNN pick the fastest convolution algorithms once; TF32 for any
    # float32 matmul left outside bf16 autocast.
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return torch.device("cuda", index)


def init_process_group(env: DistEnv, device: torch.device, init_timeout_s: int, collective_timeout_s: int) -> None:
    """Join the job's process group once per process (never in a parent that spawns children).

    Two timeouts: ranks may take a while to start (imports on a busy node), but once training runs
    a collective that waits longer than `collective_timeout_s` means a peer died, and every rank
    should give up rather than hang until the job's time limit.
    """
    if not env.distributed or dist.is_initialized():
        return
    # On GPUs, NCCL for CUDA tensors and gloo for the few CPU tensors (stop flags, data-ready flags):
    # an NCCL-only group rejects CPU tensors.
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=collective_timeout_s)
    device_id = device if device.type == "cuda" else None
    if env.launcher == "torchrun":
        # torchrun's agent already serves the rendezvous store on MASTER_PORT; env:// joins it.
        dist.init_process_group(backend=backend, init_method="env://", timeout=timeout, device_id=device_id)
        return
    store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, is_master=env.rank == 0,
                          timeout=datetime.timedelta(seconds=init_timeout_s), wait_for_workers=True)
    dist.init_process_group(backend=backend, store=store, rank=env.rank, world_size=env.world_size,
                            timeout=timeout, device_id=device_id)


def destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
