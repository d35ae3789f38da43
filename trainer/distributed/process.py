"""This process's set-up for training: its CPU threads, its device, and joining (and leaving) the
job's process group. Each done once per process, before training starts."""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping

import torch
import torch.distributed as dist

# Imported before any process group exists, on purpose: torch.distributed.nn binds `group.WORLD`
# into function defaults when it is imported, and torch._dynamo imports it, which the first
# optimizer and DDP import lazily. Imported after init_process_group, it would hold the live group
# for good: destroy_process_group could never free it, and its threads would outlive the interpreter.
import torch.distributed.nn  # noqa: F401

from trainer.distributed import environment, threads
from trainer.distributed.environment import DistEnv


class GpuUnavailableError(RuntimeError):
    pass


def set_threads(requested: int, environ: Mapping[str, str] | None = None) -> int:
    """Set this process's CPU threads, once, before torch does any work; returns the count
    (trainer.distributed.threads: the profile's cpus_per_task, capped by what SLURM and the CPU mask allow).

    Called first thing by the dispatcher (trainer.runners.dispatch) and by `trainer.api.init()`.
    """
    count = threads.count(requested, os.environ if environ is None else environ)
    os.environ.update(threads.variables(count))
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
    index = environment.gpu_index(env.local_rank, count)
    torch.cuda.set_device(index)
    gpu_defaults()
    return torch.device("cuda", index)


def gpu_defaults() -> None:
    """The GPU math settings every run starts with. Set again before each run of a process that runs
    several (a pool worker's points): a function that changed them must not change the next point's
    results, which must equal the same point's as a fresh array task."""
    # Fixed input shapes: let cuDNN pick the fastest convolution algorithms once; TF32 for any
    # float32 matmul left outside bf16 autocast.
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def init_process_group(env: DistEnv, device: torch.device, init_timeout_s: int,
                       collective_timeout_s: int) -> dist.Store | None:
    """Join the job's process group once per process (never in a parent that spawns children);
    returns the rendezvous store this process made (None: torchrun's agent serves it, or no group).

    Two timeouts: ranks may take a while to start (imports on a busy node), but once training runs
    a collective that waits longer than `collective_timeout_s` means a peer died, and every rank
    should give up rather than hang until the job's time limit.
    """
    if not env.distributed or dist.is_initialized():
        return None
    # On GPUs, NCCL for CUDA tensors and gloo for the few CPU tensors (stop flags, data-ready flags):
    # an NCCL-only group rejects CPU tensors.
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=collective_timeout_s)
    device_id = device if device.type == "cuda" else None
    if env.launcher == "torchrun":
        # env:// joins the store torchrun's agent serves on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True),
        # or, without it (a `script:` rank: trainer.runners.scripts), rank 0 serves it there itself.
        dist.init_process_group(backend=backend, init_method="env://", timeout=timeout, device_id=device_id)
        return None
    store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, is_master=env.rank == 0,
                          timeout=datetime.timedelta(seconds=init_timeout_s), wait_for_workers=True)
    dist.init_process_group(backend=backend, store=store, rank=env.rank, world_size=env.world_size,
                            timeout=timeout, device_id=device_id)
    return store


def destroy_process_group(together: bool = True) -> None:
    """Tear the group down while the interpreter is fully alive.

    A group left for process exit keeps its gloo worker and socket threads (and, on rank 0, the
    store's server thread) running while Python finalizes and C++ static objects are destroyed:
    successful SLURM jobs sometimes aborted at exit ("terminate called without an active
    exception") and were reported FAILED. `together`: first meet at a barrier, so that no rank
    closes its connections while another still has a collective in flight with it.
    """
    if not dist.is_initialized():
        return
    try:
        if together:
            dist.barrier()
    finally:
        dist.destroy_process_group()
