"""Where this process sits in the job: one pure function of an environment mapping.

Launchers describe ranks with their own variables. We read them through one table per launcher
(as submitit's JobEnvironment does) and return a single `DistEnv`. Precedence, most specific first:

1. torchrun (TORCHELASTIC_RUN_ID, RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT): torchrun may
   itself run inside a SLURM allocation, and then its variables describe the processes it made.
2. submitit's local executor (SUBMITIT_LOCAL_*): it may run inside a SLURM allocation too.
3. a SLURM job step (SLURM_STEP_ID with SLURM_PROCID): `srun` sets these per task. A batch script
   without srun has SLURM_JOB_ID but no step, and is one process.
4. nothing: one process.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from trainer.distributed import hostlist

# Ports in [PORT_BASE, PORT_BASE + PORT_SPAN) are below Linux's ephemeral range (32768+), so a
# derived port does not collide with ports the kernel hands out to outgoing connections.
PORT_BASE = 12000
PORT_SPAN = 20000

TABLES: dict[str, dict[str, str]] = {
    "torchrun": {"rank": "RANK", "world_size": "WORLD_SIZE", "local_rank": "LOCAL_RANK",
                 "local_world_size": "LOCAL_WORLD_SIZE", "job_id": "TORCHELASTIC_RUN_ID",
                 "node_rank": "GROUP_RANK", "num_nodes": "GROUP_WORLD_SIZE"},
    "local": {"rank": "SUBMITIT_LOCAL_GLOBALID", "world_size": "SUBMITIT_LOCAL_NTASKS",
              "local_rank": "SUBMITIT_LOCAL_LOCALID", "local_world_size": "SUBMITIT_LOCAL_NTASKS",
              "job_id": "SUBMITIT_LOCAL_JOB_ID", "node_rank": "SUBMITIT_LOCAL_NODEID",
              "num_nodes": "SUBMITIT_LOCAL_JOB_NUM_NODES"},
    "slurm": {"rank": "SLURM_PROCID", "world_size": "SLURM_NTASKS", "local_rank": "SLURM_LOCALID",
              "local_world_size": "SLURM_NTASKS_PER_NODE", "job_id": "SLURM_JOB_ID",
              "node_rank": "SLURM_NODEID", "num_nodes": "SLURM_NNODES"},
}


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the run (rank, world size, rendezvous), derived from its environment."""

    launcher: str  # "torchrun", "local", "slurm" or "single"
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    job_id: str
    node: str
    array_job_id: str = ""
    array_task_id: str = ""
    node_rank: int = 0  # this node's index among the job's nodes (torchrun's GROUP_RANK)
    num_nodes: int = 1  # the job's node count (torchrun's GROUP_WORLD_SIZE)

    @property
    def scheduler_job_id(self) -> str:
        """The id the scheduler, run.json, `status` and sacct name this job by: `A_T` for task T of
        array A (its own SLURM_JOB_ID is another number), else the job id."""
        return f"{self.array_job_id}_{self.array_task_id}" if self.array_job_id and self.array_task_id else self.job_id

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def scheduler_job_id(env: Mapping[str, str]) -> str:
    """The scheduler's id of the job `env` belongs to, from SLURM's job variables alone (also where no rank runs:
    the batch script's retry step): `A_T` for task T of array A, else SLURM_JOB_ID; "" outside SLURM."""
    array, index = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{index}" if array and index else env.get("SLURM_JOB_ID", "")


def restart_count(env: Mapping[str, str]) -> int:
    """How many times SLURM has requeued the job `env` belongs to (SLURM_RESTART_COUNT; 0 outside SLURM)."""
    value = env.get("SLURM_RESTART_COUNT", "0")
    return int(value) if value.isdigit() else 0


def detect_launcher(env: Mapping[str, str]) -> str:
    if "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "WORLD_SIZE" in env and "SLURM_STEP_ID" not in env):
        return "torchrun"
    if "SUBMITIT_LOCAL_JOB_ID" in env:
        return "local"
    if "SLURM_STEP_ID" in env and "SLURM_PROCID" in env:
        return "slurm"
    return "single"


def port_for_job(job_id: str) -> int:
    """A port every rank of a job derives alike, different for jobs that may share a node."""
    # CRC-32, not hash(): the same on every node and in every process (hash() of a str is salted
    # per process). zlib rather than hashlib, which loads OpenSSL: this module is on the submitter's
    # start-up path (launcher.cluster.slurm.env).
    return PORT_BASE + zlib.crc32(job_id.encode()) % PORT_SPAN


def resolve(env: Mapping[str, str]) -> DistEnv:
    """The distributed environment described by `env` (usually `os.environ`). Pure: no I/O."""
    launcher = detect_launcher(env)
    if launcher == "single":
        return DistEnv("single", 0, 1, 0, 1, env.get("MASTER_ADDR", "127.0.0.1"),
                       int(env.get("MASTER_PORT", port_for_job(str(env.get("SLURM_JOB_ID", "single"))))),
                       env.get("SLURM_JOB_ID", ""), env.get("SLURMD_NODENAME", "localhost"))
    table = TABLES[launcher]

    def num(key: str, default: int | None = None) -> int:
        raw = env.get(table[key])
        if raw is None:
            if default is None:
                raise ValueError(f"{table[key]} is not set, but other {launcher} variables are")
            return default
        # SLURM_NTASKS_PER_NODE may read "2(x3)" on heterogeneous allocations: the count is first.
        return int(raw.split("(")[0].split(",")[0])

    rank, world_size = num("rank"), num("world_size")
    local_rank = num("local_rank", rank)
    local_world_size = num("local_world_size", world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world size {world_size}")
    job_id = env.get(table["job_id"], "")
    if launcher == "slurm":
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", "")
        master_addr = env.get("MASTER_ADDR") or hostlist.first_host(nodelist)
        node = env.get("SLURMD_NODENAME", "")
    else:
        master_addr = env.get("MASTER_ADDR", "127.0.0.1")
        node = env.get("SLURMD_NODENAME") or env.get("HOSTNAME", "localhost")
    master_port = int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else port_for_job(f"{launcher}:{job_id}")
    return DistEnv(
        launcher=launcher, rank=rank, world_size=world_size, local_rank=local_rank,
        local_world_size=local_world_size, master_addr=master_addr, master_port=master_port,
        job_id=job_id, node=node,
        array_job_id=env.get("SLURM_ARRAY_JOB_ID", "") if launcher == "slurm" else "",
        array_task_id=env.get("SLURM_ARRAY_TASK_ID", "") if launcher == "slurm" else "",
        node_rank=num("node_rank", 0), num_nodes=num("num_nodes", 1),
    )


# Variables a process inherits from a job it was started in, that would describe that job instead
# of the one being submitted. The submitter removes them before it starts or submits a new job.
# SRUN_*/SBATCH_*/SALLOC_* are the input variables of srun/sbatch/salloc (e.g. SBATCH_PARTITION,
# SRUN_CPUS_PER_TASK): an enclosing job's would silently change the new job's request. submitit's
# own clean_env strips the same families.
INHERITED_PREFIXES = ("SLURM_", "SLURMD_", "SRUN_", "SBATCH_", "SALLOC_", "SUBMITIT_", "TORCHELASTIC_")
INHERITED_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                   "MASTER_PORT", "SLURMD_NODENAME")
KEEP = ("SLURM_CONF",)


def gpu_index(local_rank: int, visible: int) -> int:
    """The CUDA device index a rank trains on among the `visible` GPUs it sees: its own GPU in every
    shape. SLURM either binds each task to one GPU (CUDA_VISIBLE_DEVICES holds one: index 0) or shows
    every task the node's GPUs (index LOCAL_RANK)."""
    return local_rank % visible


def own_gpu(local_rank: int, cuda_visible_devices: str | None) -> str | None:
    """The GPU (its id in CUDA_VISIBLE_DEVICES) a rank trains on; None where no list is set."""
    ids = [d for d in (cuda_visible_devices or "").split(",") if d.strip()]
    return ids[gpu_index(local_rank, len(ids))] if ids else None


def scrubbed(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without the variables of an enclosing job (pure; used before submitting a new job)."""
    return {
        k: v for k, v in env.items()
        if k in KEEP or not (k.startswith(INHERITED_PREFIXES) or k in INHERITED_NAMES)
    }
