"""Where a task landed on its node, and what the scheduler gave it: `submit.py probe` runs
`probe_task` once per task (the tasks shape) or once per rank under the node's torchrun (the torchrun
shape). Torch-free: it reads the environment only.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from trainer.distributed import environment

# What SLURM tells a task about its GPUs (which variables are set depends on the cluster's gres.conf:
# a count-only GRES sets SLURM_GPUS_ON_NODE but no device list).
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE")
# Shown too: what the submitter promised the job's environment.
OTHER_VARIABLES = ("SLURM_JOB_ID", "SLURM_CPUS_PER_TASK", "SUBMITIT_PREEMPT_SIGNAL", "OMP_NUM_THREADS")


def probe_task() -> dict[str, Any]:
    """`submit.py probe`, once per task on the node: where am I, and what did SLURM give me? (torch-free)"""
    where = environment.resolve(os.environ)
    report: dict[str, Any] = {
        "rank": where.rank, "world_size": where.world_size, "local_rank": where.local_rank,
        "launcher": where.launcher,  # who started this process: "slurm" (srun's task) or "torchrun"
        "node": os.environ.get("SLURMD_NODENAME", socket.gethostname()),
        "master_addr": where.master_addr, "master_port": where.master_port,
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": sys.executable,
    }
    for name in GPU_VARIABLES + OTHER_VARIABLES:
        report[name] = os.environ.get(name)
    # The GPU this rank's trainer would take (trainer.distributed.process.pick_device's choice).
    report["gpu"] = environment.own_gpu(where.local_rank, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return report
