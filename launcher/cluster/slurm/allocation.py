"""The SLURM allocation the submitter runs in (`salloc`, an interactive allocation), for `--in-allocation`
(profile key `in_allocation`): what it holds, read from the variables SLURM gave its shell, checked
against what the profile asks for before anything starts, and the job step's own srun options.

The ranks then run as a job step of that allocation (srun), with no new job and no queue wait; the step's
srun is told the profile's geometry itself (the allocation's own SLURM_* would otherwise shape it), and
named after the run so that `cancel` finds that step and no other of yours.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from collections.abc import Mapping

from launcher.cluster.jobids import is_slurm
from launcher.cluster.slurm.accounting import query
from trainer.config.schema import ConfigError

# What a shell inside an allocation has that describes the allocation itself (srun finds its allocation
# through them); the inputs of srun, sbatch and salloc (SRUN_*, SLURM_NTASKS, ...) are left out, and so is a
# step's own description (the submitter may run inside `srun --pty bash`).
_STEP = ("SLURM_STEP", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASK_PID", "SLURM_GTIDS",
         "SLURM_LAUNCH_NODE", "SLURM_SRUN_COMM", "SLURM_PTY", "SLURM_UMASK", "SLURM_CPU_BIND", "SLURM_DISTRIBUTION")
_REQUEST = ("SLURM_NTASKS", "SLURM_NPROCS", "SLURM_CPUS_PER_TASK", "SLURM_MEM_PER", "SLURM_NTASKS_PER",
            "SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_TASK", "SLURM_CONF")


@dataclass(frozen=True)
class Allocation:
    """The allocation as its shell's variables describe it."""

    job_id: str
    nodes: int
    cpus_per_node: list[int]  # per node, largest first
    gpus_per_node: int | None  # None: SLURM said nothing of GPUs
    nodelist: str = ""
    variables: dict[str, str] = field(default_factory=dict)  # what srun needs to find it


def counts(value: str) -> list[int]:
    """SLURM's per-node counts, `4(x2),2` -> [4, 4, 2]."""
    out: list[int] = []
    for part in filter(None, value.split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match:
            out += [int(match.group(1))] * int(match.group(2) or 1)
    return out


def current(environ: Mapping[str, str]) -> Allocation | None:
    """The allocation this process runs in (None: SLURM_JOB_ID is not set), its variables parsed here, where
    they enter: one that is not what SLURM writes is a ConfigError naming it (the job id names the step and
    reaches scancel; the counts decide what is asked of the allocation)."""
    job_id = environ.get("SLURM_JOB_ID", "")
    if not job_id:
        return None
    if not is_slurm(job_id) or "_" in job_id:
        raise _bad("SLURM_JOB_ID", job_id, "a SLURM job id (digits)")
    name = "SLURM_JOB_NUM_NODES" if environ.get("SLURM_JOB_NUM_NODES") else "SLURM_NNODES"
    written = environ.get(name) or "1"
    if not written.isdigit() or not 1 <= int(written) <= 2**31 - 1:
        raise _bad(name, written, "a node count (a whole number from 1)")
    nodes = int(written)
    per_node = environ.get("SLURM_JOB_CPUS_PER_NODE", "")
    if per_node and not re.fullmatch(r"\d{1,9}(\(x\d{1,9}\))?(,\d{1,9}(\(x\d{1,9}\))?)*", per_node):
        raise _bad("SLURM_JOB_CPUS_PER_NODE", per_node, "CPU counts per node as SLURM writes them (e.g. 4(x2),2)")
    cpus = sorted(counts(per_node), reverse=True) or [0] * nodes
    gpus = environ.get("SLURM_GPUS_PER_NODE") or environ.get("SLURM_GPUS_ON_NODE") or ""
    gpu_count = int(gpus.rsplit(":", 1)[-1]) if gpus.rsplit(":", 1)[-1].isdigit() else None
    if gpu_count is None and environ.get("SLURM_JOB_GPUS"):
        gpu_count = len(environ["SLURM_JOB_GPUS"].split(","))
    kept = {k: v for k, v in environ.items()
            if k.startswith("SLURM_") and not k.startswith(_STEP) and not k.startswith(_REQUEST)}
    return Allocation(job_id, nodes, cpus, gpu_count, environ.get("SLURM_JOB_NODELIST", ""), kept)


def _bad(name: str, value: str, expected: str) -> ConfigError:
    shown = value if len(value) <= 60 else value[:57] + "..."
    return ConfigError(f"--in-allocation (profile.in_allocation): {name}={shown!r} in this shell's environment is "
                       f"not {expected}; run it in the shell `salloc` gives you, with SLURM's variables as it set them")


def held(environ: Mapping[str, str], tasks: int, nodes: int, tasks_per_node: int, cpus_per_task: int,
         gpus_per_node: int) -> Allocation:
    """The allocation this submitter runs in (`environ`: its variables), checked to hold a run of `tasks` task(s)
    of the profile's shape (`in_allocation`), or one ConfigError that says why not."""
    if tasks > 1:  # one job step at a time; an array needs jobs of its own
        raise ConfigError(f"--in-allocation (profile.in_allocation): a sweep's {tasks} tasks do not run inside an "
                          f"allocation; submit the sweep without it (an array, or sweep_runner: pool)")
    alloc = current(environ)
    check(alloc, nodes, tasks_per_node, cpus_per_task, gpus_per_node)
    assert alloc is not None  # (check refuses None)
    return alloc


def check(alloc: Allocation | None, nodes: int, tasks_per_node: int, cpus_per_task: int, gpus_per_node: int) -> None:
    """The profile's request fits the allocation, or one ConfigError that says what it holds (exit 2)."""
    if alloc is None:
        raise ConfigError("--in-allocation (profile.in_allocation): this shell is not inside a SLURM allocation "
                          "(SLURM_JOB_ID is not set); run it in the shell `salloc -N NODES` gives you, or drop it "
                          "to queue a job of its own")
    has = f"allocation {alloc.job_id} holds {alloc.nodes} node(s)" + (f" ({alloc.nodelist})" if alloc.nodelist else "")
    if nodes > alloc.nodes:
        raise ConfigError(f"profile.nodes: {nodes} is more than the {has}; ask for at most {alloc.nodes} "
                          f"(--set profile.nodes={alloc.nodes}) or salloc -N {nodes}")
    needed = tasks_per_node * cpus_per_task
    fitting = alloc.cpus_per_node[:nodes]
    if fitting and min(fitting) < needed:
        raise ConfigError(f"profile.tasks_per_node: {tasks_per_node} task(s) x {cpus_per_task} CPU(s) per node need "
                          f"{needed} CPUs on each of {nodes} node(s); the {has} with {','.join(map(str, fitting))} "
                          f"CPU(s): lower tasks_per_node or cpus_per_task, or salloc --ntasks-per-node="
                          f"{tasks_per_node} --cpus-per-task={cpus_per_task}")
    if gpus_per_node and (alloc.gpus_per_node or 0) < gpus_per_node:
        raise ConfigError(f"profile.gpus_per_node: {gpus_per_node} GPU(s) per node, but the {has} with "
                          f"{alloc.gpus_per_node or 'no'} GPU(s) each; salloc --gpus-per-node={gpus_per_node}")


def step_name(run_name: str) -> str:
    """The job step's name: the run's, so that `cancel` ends this step and no other."""
    return f"ddp-submit:{run_name}"


def steps_named(job_id: str, name: str, env: dict[str, str]) -> list[str]:
    """The ids (`A.S`) of the allocation's running steps called `name` (squeue --steps)."""
    listed = query(["squeue", "--steps", "-j", job_id, "-h", "-o", "%i|%j"], env) or ""
    return [line.split("|", 1)[0] for line in listed.splitlines() if line.partition("|")[2] == name]


def step_state(bash: subprocess.Popen[bytes]) -> str:
    """A run sent into the allocation (launcher.request.in_allocation), as `--wait` reads it: its batch script's
    bash stands for the job, since the allocation runs on after it. "" while that bash runs, else how it ended,
    as SLURM's job states read."""
    code = bash.poll()
    return "" if code is None else ("COMPLETED" if code == 0 else "FAILED")
