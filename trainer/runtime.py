"""Process-level setup: threads, device, process group. Each done once, before training starts."""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator, Mapping

import torch
import torch.distributed as dist

# Imported before any process group exists, on purpose: torch.distributed.nn binds `group.WORLD`
# into function defaults when it is imported, and torch._dynamo imports it, which the first
# optimizer and DDP import lazily. Imported after init_process_group, it would hold the live group
# for good: destroy_process_group could never free it, and its threads would outlive the interpreter.
import torch.distributed.nn  # noqa: F401

from trainer.distenv import DistEnv
from trainer.stopping import StopRequested


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
        # torchrun's agent already serves the rendezvous store on MASTER_PORT; env:// joins it.
        dist.init_process_group(backend=backend, init_method="env://", timeout=timeout, device_id=device_id)
        return None
    store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, is_master=env.rank == 0,
                          timeout=datetime.timedelta(seconds=init_timeout_s), wait_for_workers=True)
    dist.init_process_group(backend=backend, store=store, rank=env.rank, world_size=env.world_size,
                            timeout=timeout, device_id=device_id)
    return store


@contextlib.contextmanager
def process_group(env: DistEnv, device: torch.device, init_timeout_s: int,
                  collective_timeout_s: int) -> Iterator[None]:
    """The job's process group for the length of the block, gone (threads joined) when it ends.

    The block must let go of what holds the group (DDP's reducer) before it ends. A block that ends
    normally or with StopRequested (every rank stops at the same step) leaves in step with the
    other ranks; one that raises anything else leaves at once: a barrier would wait for ranks
    that may never come.
    """
    store = init_process_group(env, device, init_timeout_s, collective_timeout_s)
    together = False
    try:
        yield
        together = True
    except StopRequested:
        together = True
        raise
    finally:
        destroy_process_group(together)
        # Rank 0's store serves the other ranks from a thread of its own: released with the group,
        # that thread is joined now instead of running on into interpreter exit.
        del store


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
