"""What one sbatch asks for (`SlurmRequest`, in SLURM's terms) and the same in submitit's parameter
names: pure data, no SLURM call. `launcher.request` builds the request from a profile.

The profile's `setup` lines are shell lines written by the profile's author and run as written
(`eval "$(conda shell.bash hook)"` works); they are only checked with `bash -n` (by the preflight, `limits.check`) so that a
typo is an error at submission, not in the job's log. Every other value that comes from a profile, a job or
`--set` (job names, env values, the interpreter, the container and its binds) is quoted before it
reaches the batch script, and values written into `#SBATCH --key=value` lines must stay on their
line. Errors name the profile key the value came from.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from launcher.cluster.slurm import healing
from launcher.cluster.slurm.release import Release
from launcher.cluster.slurm.srun import SRUN_ARGS
from trainer.config.schema import ConfigError
from trainer.distributed import threads

# A pattern string: re compiles (and caches) it on first use, so a local submission never pays for it.
_CONTROL = r"[\x00-\x1f\x7f]"

# Exported by the batch script of a run sent into a held allocation (launcher.cluster.slurm.allocation): its
# tasks then never ask SLURM to requeue (an allocation cannot be; launcher.node.task), and a stop ends the
# run for `--resume`.
STEP_VARIABLE = "DDP_SUBMIT_IN_ALLOCATION"


@dataclass(frozen=True)
class SlurmRequest:
    """One job's (or each array task's) allocation and script, as a profile asks for it."""

    job_name: str
    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    time_min: int
    gpus_per_node: int = 0
    gpu_type: str = ""  # the GRES type ("": any GPU)
    gpus_per_task: int = 0  # 0: not asked
    gpu_request: str = "gpus"  # "gpus": --gpus-per-node/--gpus-per-task; "gres": --gres=gpu[:type]:N
    mem_per_node_mb: int = 0  # 0: the partition's default
    partition: str = ""
    account: str = ""
    qos: str = ""
    constraint: str = ""
    signal: str = "USR2"
    signal_delay_s: int = 120
    array_parallelism: int = 16
    env: dict[str, str] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    sbatch_extra: dict[str, str] = field(default_factory=dict)
    slurm_conf: str = ""  # SLURM_CONF for the job's own SLURM calls (scontrol requeue)
    cluster: str = ""  # the profile's `clusters:`, "a,b" for several ("": the SLURM_CONF's own cluster)
    after: list[str] = field(default_factory=list)  # dependencies: "afterok:12", "afternotok:13" (a bare id: afterok)
    python: str = ""  # the interpreter on the nodes ("": the submitter's)
    container: str = ""  # image ("": none)
    container_runtime: str = "apptainer"  # apptainer, singularity or pyxis
    container_binds: list[str] = field(default_factory=list)  # SRC[:DST[:ro]], the run folder and code included
    # Each rank's CPU threads (the profile's cpus_per_task; 0: cpus_per_task here, one rank per task). In
    # the torchrun shape one task holds a node's ranks, so its cpus_per_task is theirs together.
    rank_threads: int = 0
    # A job step of the allocation the submitter runs in (`in_allocation`), named so ("": a job of its own).
    step_name: str = ""
    # The batch script's retry step (launcher.cluster.slurm.healing; "": none, e.g. a probe's job).
    run_dir: str = ""
    max_failures: int = 0
    node_error_patterns: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)  # the run's left-out nodes (sbatch --exclude)


def setup_lines(req: SlurmRequest) -> list[str]:
    """The batch script's setup: exports first (setup commands may read them), then the profile's
    setup lines as written. Exported values are quoted: nothing from env is interpreted by the shell."""
    # The thread variables: libraries that start thread pools before the trainer sets its thread count
    # (torch reads OMP_NUM_THREADS at import) use one rank's CPUs, not the task's or the whole node's.
    # On another cluster the job's SLURM calls read that cluster's own SLURM_CONF, which its slurmd sets.
    conf = {"SLURM_CONF": req.slurm_conf} if req.slurm_conf and not req.cluster else {}
    env = {**conf, "SUBMITIT_PREEMPT_SIGNAL": req.signal,
           **({STEP_VARIABLE: req.step_name} if req.step_name else {}),
           **threads.variables(req.rank_threads or req.cpus_per_task), **req.env}
    lines = [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    # The submitter's SLURM_CLUSTERS (the profile's clusters, exported with the rest): the job's own SLURM calls
    # (srun, the retry step, the requeue) must reach its own cluster, as its slurm.conf says, whichever was listed first.
    lines += ["unset SLURM_CLUSTERS"] if req.cluster else []
    lines += req.setup  # as written, once the preflight's `bash -n` accepted them (limits.check_setup_lines)
    return lines


def python_command(req: SlurmRequest) -> str | None:
    """What srun starts on each task, before `-u -m submitit.core._submit FOLDER` (quoted words;
    None: submitit's default, the submitter's own interpreter). In an apptainer/singularity
    container the interpreter is the image's `python3` unless the profile names one."""
    if req.container and req.container_runtime in ("apptainer", "singularity"):
        binds = [word for bind in req.container_binds for word in ("--bind", bind)]
        gpus = ["--nv"] if req.gpus_per_node else []  # the host's NVIDIA driver inside the container
        return shlex.join([req.container_runtime, "exec", *gpus, *binds, req.container, req.python or "python3"])
    if req.container:  # pyxis: srun itself enters the container (container_srun_args)
        return shlex.quote(req.python or "python3")
    return shlex.quote(req.python) if req.python else None


def container_srun_args(req: SlurmRequest) -> list[str]:
    """pyxis's srun options (https://github.com/NVIDIA/pyxis): the image and the mounts (SRC:DST)."""
    if not req.container or req.container_runtime != "pyxis":
        return []
    mounts = [bind if ":" in bind else f"{bind}:{bind}" for bind in req.container_binds]
    return [f"--container-image={req.container}", *([f"--container-mounts={','.join(mounts)}"] if mounts else [])]


def check_one_line(values: dict[str, str]) -> None:
    """Values written into `#SBATCH --key=value` lines must stay on their line: submitit quotes them
    for sbatch, but a newline would end the directive and start a shell command in the script."""
    for key, value in values.items():
        found = re.search(_CONTROL, value)
        if found:
            raise ConfigError(f"{key}: {value!r} contains the control character {found.group()!r}; "
                              f"SLURM options are single-line text")


def gpu_parameters(req: SlurmRequest) -> dict[str, Any]:
    """The GPU lines in the request style the profile chose (sites differ in which they accept):
    `--gres=gpu[:type]:N` per node, or `--gpus-per-node=[type:]N` and `--gpus-per-task=[type:]N`."""
    if not req.gpus_per_node:
        return {}
    typed = f"{req.gpu_type}:" if req.gpu_type else ""
    if req.gpu_request == "gres":
        return {"gres": f"gpu:{typed}{req.gpus_per_node}"}
    out: dict[str, Any] = {"gpus_per_node": f"{typed}{req.gpus_per_node}" if typed else req.gpus_per_node}
    if req.gpus_per_task:
        out["gpus_per_task"] = f"{typed}{req.gpus_per_task}" if typed else req.gpus_per_task
    return out


def gpu_srun_args(req: SlurmRequest) -> list[str]:
    """One GPU per task made explicit on srun. SLURM 22.05 drops a typed `--gpus-per-task=a100:1` when
    srun inherits it from the batch step (the tasks get no CUDA_VISIBLE_DEVICES at all), and --gres
    has no per-task form; `--gpu-bind=single:1` binds each task to its own GPU in both styles."""
    return ["--gpu-bind=single:1"] if req.gpus_per_node and req.gpus_per_task == 1 else []


def step_args(req: SlurmRequest) -> list[str]:
    """srun's own options for a job step of an allocation the submitter holds (`in_allocation`): the
    request's geometry, GPUs, memory and warning signal, which an sbatch job's srun inherits from the job
    and a step of someone's `salloc` would take from that allocation instead. [] for a job of its own."""
    if not req.step_name:
        return []
    args = [f"--job-name={req.step_name}", f"--nodes={req.nodes}", f"--ntasks={req.nodes * req.tasks_per_node}",
            f"--ntasks-per-node={req.tasks_per_node}", f"--cpus-per-task={req.cpus_per_task}",
            f"--signal={req.signal}@{req.signal_delay_s}"]
    args += [f"--{key.replace('_', '-')}={value}" for key, value in gpu_parameters(req).items()]
    return args + ([f"--mem={req.mem_per_node_mb}M"] if req.mem_per_node_mb else [])


def heal_policy(req: SlurmRequest) -> healing.RetryPolicy | None:
    """What the batch script's retry step needs of the request (launcher.cluster.slurm.healing); None: no
    such step (a job without a run folder, e.g. a probe's; a container, whose image rarely has scontrol;
    a job step of an allocation the submitter holds, which cannot requeue itself: `--resume` it)."""
    if not req.run_dir or req.container or req.step_name:
        return None
    return healing.RetryPolicy(
        run=req.run_dir, max_failures=req.max_failures, patterns=tuple(req.node_error_patterns),
        partition=req.partition, nodes=req.nodes, tasks_per_node=req.tasks_per_node,
        cpus_per_task=req.cpus_per_task, mem_per_node_mb=req.mem_per_node_mb, gpus_per_node=req.gpus_per_node,
        gpu_type=req.gpu_type, pinned=req.sbatch_extra.get("nodelist", ""), stop_signal=req.signal)


def parameters(req: SlurmRequest) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters (SLURM's names) for `req`."""
    check_one_line({"job.name": req.job_name, "profile.constraint": req.constraint,
                    **{f"profile.sbatch_extra.{k}": v for k, v in req.sbatch_extra.items()}})
    before, after = healing.lines(heal_policy(req), python_command(req))
    params: dict[str, Any] = {
        "job_name": req.job_name, "time": req.time_min, "nodes": req.nodes,
        "ntasks_per_node": req.tasks_per_node, "cpus_per_task": req.cpus_per_task,
        "signal_delay_s": req.signal_delay_s, "setup": setup_lines(req) + before,
        "srun_args": [*SRUN_ARGS, *gpu_srun_args(req), *container_srun_args(req), *step_args(req)],
        "array_parallelism": req.array_parallelism,
        "stderr_to_stdout": False,
        # --hold: SLURM 22.05 does not make the folder of --output, and submitit makes logs/<job id>/ (and
        # moves an array task's pickle there) only after sbatch returns; a job the scheduler starts in those
        # milliseconds dies unlogged ("Could not open stdout file", signal 53). The submitter releases the job
        # once its files are in place (launcher.request.send). A step of an allocation is never queued.
        "additional_parameters": {"requeue": True, **({} if req.step_name else {"hold": True}), **req.sbatch_extra},
        **({"teardown": after} if after else {}),
    }
    exclude = healing.exclude_value(req.sbatch_extra.get("exclude", ""), req.exclude)
    if exclude:
        params["additional_parameters"]["exclude"] = exclude
    if req.cluster:  # (in the script, where --dry-run shows it; the submitter's commands say it through SLURM_CLUSTERS)
        params["additional_parameters"]["clusters"] = req.cluster
    params.update(gpu_parameters(req))
    if req.mem_per_node_mb:
        params["mem"] = f"{req.mem_per_node_mb}M"
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(req, key):
            params[key] = getattr(req, key)
    if req.after:
        params["dependency"] = dependency(req.after)
        # A condition that can never hold (afternotok on a run that succeeded): SLURM cancels the job
        # instead of keeping it pending for ever (reason DependencyNeverSatisfied).
        params["additional_parameters"]["kill_on_invalid_dep"] = "yes"
    return params


def for_release(params: dict[str, Any], release: Release) -> dict[str, Any]:
    """`params` as the cluster's release decides them (launcher.cluster.slurm.release): --requeue=expedite
    where SLURM has it. A user's own sbatch_extra requeue stays as written."""
    extra = params.get("additional_parameters") or {}
    if not release.requeue or extra.get("requeue") is not True:
        return params
    return {**params, "additional_parameters": {**extra, "requeue": release.requeue}}


def dependency(after: list[str]) -> str:
    """SLURM's --dependency from items like "afterok:12" (a bare id: afterok), one group per type, all
    required: afterok:12:13,afternotok:14."""
    grouped: dict[str, list[str]] = {}
    for item in after:
        kind, _, job_id = item.rpartition(":")
        grouped.setdefault(kind or "afterok", []).append(job_id)
    return ",".join(f"{kind}:{':'.join(ids)}" for kind, ids in grouped.items())
