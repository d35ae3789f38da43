"""Cluster profiles: where and how a job runs (executor, nodes, tasks, GPUs, limits, setup).

One task is one process is one rank. On GPU profiles that means one task per GPU
(`tasks_per_node == gpus_per_node`), which is what DDP with NCCL expects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Union

from launcher.config import cluster_keys, destination, retry_keys, runner_keys, units
from launcher.config.sbatch_options import check_sbatch_extra
from trainer.config import values
from trainer.config.files import FileKind, Renamed
from trainer.config.lookup import CODE_ROOT
from trainer.config.schema import require
from trainer.config.tracker_key import TrackerConfig


@dataclass
class Profile:
    """A cluster profile (cluster_profiles/*.yaml): where and with what resources a job runs."""

    name: str = ""
    # local: N processes on this machine; debug: in-process (pdb works); slurm: sbatch through submitit.
    executor: Literal["local", "debug", "slurm"] = "local"
    nodes: int = 1
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    gpus_per_node: int = 0
    # The GPU model as the site's GRES names it ("a100", "h100"; "": any GPU). The request then
    # reads --gres=gpu:a100:8 or --gpus-per-node=a100:8; the preflight refuses a type no node has.
    gpu_type: str = ""
    # GPUs bound to each task (0: not asked; the task sees its node's GPUs and takes LOCAL_RANK's).
    # 1 in the one-task-per-GPU shape makes SLURM bind each rank to its own device
    # (CUDA_VISIBLE_DEVICES holds that one GPU; srun --gpu-bind=single:1, see sbatch.gpu_srun_args).
    gpus_per_task: int = 0
    # How GPUs are asked for: "gpus" (--gpus-per-node / --gpus-per-task, SLURM >= 19.05's options)
    # or "gres" (--gres=gpu[:type]:N per node, what older sites and some 24.11 set-ups want).
    gpu_request: Literal["gpus", "gres"] = "gpus"
    # The launch shape: "tasks" (one SLURM task per rank, submitit's) or "torchrun" (one SLURM task
    # per node runs torchrun with tasks_per_node processes and a c10d rendezvous on the first node;
    # launcher/node/torchrun_task.py). The world size is nodes x tasks_per_node in both.
    launch: Literal["tasks", "torchrun"] = "tasks"
    # Memory per task in SLURM's spelling ("64G", "500M"; a bare number is MB); SLURM gets
    # tasks_per_node x this per node. null: the partition default. (`mem_per_task_gb: 64` still reads.)
    mem_per_task: Optional[Union[int, float, str]] = None
    # The time limit in SLURM's formats: 90 (minutes), "1:30:00", "1-12", "2-00:00:00" (former name: time_min).
    time: Union[int, str] = 60
    partition: str = ""
    account: str = ""
    # Which of the site's clusters runs the job (SLURM's -M, on every command: launcher.config.cluster_keys); "".
    clusters: Union[str, list[str]] = ""
    qos: str = ""
    constraint: str = ""
    # Shell lines run in the batch script before the tasks start, as written by the profile's author
    # (e.g. "module load cuda/12.4", 'eval "$(conda shell.bash hook)"', "conda activate train").
    setup: list[str] = field(default_factory=list)
    # The Python the tasks run: "" this submitter's interpreter (the active venv or conda env: the
    # same path must exist on the nodes); a path (relative: from this file); or a command name looked
    # up on the node's PATH after the setup lines (e.g. python3 after `conda activate`).
    python: str = ""
    # A container the tasks run in ("": none): an image file (.sif, .sqsh; relative: from this file)
    # or a registry reference (docker://..., nvcr.io/nvidia/pytorch:24.01-py3 for pyxis).
    container: str = ""
    # apptainer/singularity: `srun ... apptainer exec --bind ... IMAGE PYTHON`; pyxis: `srun --container-image=...`.
    container_runtime: Literal["apptainer", "singularity", "pyxis"] = "apptainer"
    # Folders to bind into the container, SRC[:DST[:ro]]; the run folder and the code are always bound.
    container_binds: list[str] = field(default_factory=list)
    # Copy the code the tasks import into the run folder at submission (RUN/code, launcher/rundir/
    # snapshot.py), so edits made while the job waits, and requeues or --resume, run the submitted code.
    snapshot: bool = True
    # Your project's snapshot (RUN/project) is refused above this size, naming its largest files;
    # globs (relative paths or file names: "data/*", "*.ckpt") it leaves out beside .gitignore.
    snapshot_max_mb: float = 100
    snapshot_exclude: list[str] = field(default_factory=list)
    # A function handed over from Python by value (launcher.client.submit(fn): a notebook cell's, a
    # closure) is refused above this size, naming what it captured, largest first.
    max_pickle_mb: float = 100
    # Environment variables exported to every task (values are quoted in the script).
    env: dict[str, str] = field(default_factory=dict)
    # The signal SLURM sends `signal_delay_s` s before the time limit (and on preemption); USR2: NCCL may swallow USR1.
    signal: Literal["USR1", "USR2", "TERM", "INT", "HUP", "URG"] = "USR2"
    signal_delay_s: int = 120
    # How many times a run may be requeued after hitting its time limit (preemptions are not capped).
    max_timeout_requeues: int = 3
    # How many times a SLURM run whose rank raised or died comes back by itself from its newest checkpoint
    # (without a node that failed; not the same bug twice); null: 2 on SLURM, 0 for local and debug.
    max_failures: Optional[int] = None
    # Regular expressions that mark a line of a failed rank's log as its node's fault, beside the shipped
    # CUDA/NCCL/ECC/Xid/bus-error ones (launcher.reports.fault_origin): that node is left out of later attempts.
    node_error_patterns: list[str] = field(default_factory=list)
    # Default checkpoint cadence for jobs that leave `checkpoint_every_steps` null (0: epoch ends only).
    checkpoint_every_steps: int = 0
    data_dir: str = "data"
    runs_dir: str = "runs"
    # Wait for the result (local and debug always do; SLURM returns after sbatch unless --wait).
    wait: bool = False
    array_parallelism: int = 16
    # How a sweep runs: "array" (one job array task per point) or "pool" (`pool_workers` allocations
    # whose ranks stay up and take the points one after another: launcher/node/pool_worker.py).
    sweep_runner: Literal["array", "pool"] = "array"
    pool_workers: int = 4
    # Run the ranks as job steps (srun) of the SLURM allocation this submitter runs in (salloc), not a new job.
    in_allocation: bool = False
    # Split job arrays into pieces of at most this many tasks (null: the cluster's MaxArraySize).
    max_array_size: Optional[int] = None
    # SLURM_CONF for the submitter's SLURM commands and the job (a relative path: from the profile file).
    slurm_conf: str = ""
    # Extra `#SBATCH --key=value` lines for options the profile has no field for.
    sbatch_extra: dict[str, str] = field(default_factory=dict)
    # Experiment trackers for every job run with this profile (a job's own `tracker:` wins, tracker by tracker).
    tracker: Optional[TrackerConfig] = None
    init_timeout_s: int = 180
    collective_timeout_s: int = 45
    # Submit from this machine to a cluster reached over SSH (docs/remote.md): an ssh destination as
    # `ssh` accepts it (a ~/.ssh/config alias, user@host, ssh://[user@]host[:port]). "": SLURM runs here.
    login: str = ""
    # Where code snapshots and run folders live on the cluster side (~/: the remote home).
    remote_dir: str = "~/ddp-submit"

    def __post_init__(self) -> None:
        for key, parse, formats in (("time", units.time_minutes, units.TIME_FORMATS),
                                    ("mem_per_task", units.memory_mb, units.MEMORY_FORMATS)):
            value = getattr(self, key)
            try:
                ok = value is None and key == "mem_per_task" or parse(value) > 0
            except ValueError:
                ok = False
            require(ok, key, value, f"{'a SLURM time limit' if key == 'time' else 'memory'} > 0: {formats}")
        for key in ("nodes", "tasks_per_node", "cpus_per_task", "array_parallelism",
                    "init_timeout_s", "collective_timeout_s"):
            require(getattr(self, key) > 0, key, getattr(self, key), "an integer > 0")
        require(self.snapshot_max_mb > 0, "snapshot_max_mb", self.snapshot_max_mb, "a number of MB > 0")
        require(self.max_pickle_mb > 0, "max_pickle_mb", self.max_pickle_mb, "a number of MB > 0")
        for key in ("gpus_per_node", "gpus_per_task", "signal_delay_s", "max_timeout_requeues", "checkpoint_every_steps"):
            require(getattr(self, key) >= 0, key, getattr(self, key), "an integer >= 0")
        for key, most in _UPPER_BOUNDS.items():
            value = getattr(self, key)
            require(value is None or value <= most, key, value, f"at most {most} ({_BOUND_WHY[most]})")
        # SLURM keeps a time limit in minutes and memory in MB as 32-bit fields.
        require(self.time_min <= 2**31 - 1, "time", self.time,
                f"at most {2**31 - 1} minutes ({_BOUND_WHY[2**31 - 1]})")
        require(self.mem_per_task_mb * self.tasks_per_node <= 2**31 - 1, "mem_per_task", self.mem_per_task,
                f"at most {2**31 - 1} MB per node ({_BOUND_WHY[2**31 - 1]})")
        require(self.max_array_size is None or self.max_array_size > 0, "max_array_size", self.max_array_size,
                "an integer > 0 or null")
        require(self.signal_delay_s < self.time_min * 60, "signal_delay_s", self.signal_delay_s,
                f"fewer seconds than the time limit ({self.time_min * 60} s)")
        _check_shape(self)
        for key in self.env:
            require(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) is not None, f"env.{key}", key,
                    "a shell variable name (letters, digits, underscore)")
        check_sbatch_extra(self.sbatch_extra)
        # Every value that reaches the batch script, srun's or apptainer's arguments, or a path: the
        # one rule (trainer.config.values), checked here so that the error names the file it came from.
        # (`name` too: `status` and `list` print it, and trackers get it.)
        for key, rule in (("name", values.text), ("python", values.argument), ("python", values.path),
                          ("container", values.argument), ("container", values.path), ("constraint", values.text),
                          ("data_dir", values.path), ("runs_dir", values.path), ("slurm_conf", values.path)):
            problem = rule(getattr(self, key))
            require(problem is None, key, getattr(self, key), problem or "")
        for key, rule, items in (("setup", values.text, enumerate(self.setup)),
                                 ("container_binds", values.bind, enumerate(self.container_binds)),
                                 ("env", values.text, self.env.items()),
                                 ("sbatch_extra", values.text, self.sbatch_extra.items())):
            for index, value in items:
                problem = rule(value)
                where = f"{key}[{index}]" if isinstance(index, int) else f"{key}.{index}"
                require(problem is None, where, value, problem or "")
        require(not (self.python or self.container) or self.executor != "debug", "python", self.python,
                "empty for the debug executor (it runs in this process)")
        require(not self.container or self.executor == "slurm", "container", self.container,
                "empty unless executor is slurm (containers start through srun)")
        if self.executor != "slurm":
            # Setup lines are shell commands for a batch script; on this machine there is none, and
            # running them here would change the submitter's own shell state for nothing.
            require(not self.setup, "setup", self.setup, f"[] for the {self.executor} executor (setup lines run "
                    f"only in SLURM batch scripts; prepare this machine in your shell, or use a slurm profile)")
        _check_login(self)
        runner_keys.check(self.executor, self.launch, self.login, self.sweep_runner, self.pool_workers,
                          self.in_allocation)
        retry_keys.check(self.executor, self.container, self.max_failures, self.node_error_patterns)
        cluster_keys.check(self.clusters, self.executor, self.in_allocation)
        for key in ("partition", "account", "qos"):
            value = getattr(self, key)
            require(re.fullmatch(r"[A-Za-z0-9_.-]*", value) is not None, key, value,
                    "a SLURM name (letters, digits, '_', '.', '-')")

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def failures_allowed(self) -> int:
        """`max_failures` with its default (retried by a SLURM batch script's retry step, not in a container)."""
        return retry_keys.allowed(self.executor, self.container, self.max_failures)

    @property
    def waits(self) -> bool:
        return self.wait or self.executor in ("local", "debug") or self.in_allocation

    @property
    def slurm_conf_file(self) -> str:
        """SLURM_CONF for the submitter's SLURM commands and the job ("": SLURM's own default)."""
        return slurm_conf_file(self.executor, self.slurm_conf)

    @property
    def time_min(self) -> int:
        """The time limit in whole minutes (what sbatch --time and the local executor get)."""
        return units.time_minutes(self.time)

    @property
    def mem_per_task_mb(self) -> int:
        return units.memory_mb(self.mem_per_task) if self.mem_per_task is not None else 0

    @property
    def mem_per_node_mb(self) -> int:
        """What SLURM is asked for per node (0: the partition's default)."""
        return self.mem_per_task_mb * self.tasks_per_node


# A profile file: found in ./cluster_profiles, the user folder, then the shipped profiles
# (trainer.config.lookup); relative paths are read from the file that wrote them
# (trainer.config.filepaths: `python` when it is a path, `container` when it is an image file, each
# bind's SRC); the former names `time_min` and `mem_per_task_gb` (a number of GB) still read.
PROFILE_FILES = FileKind("profile", Profile, "cluster_profiles", "launcher",
                         path_keys=("data_dir", "runs_dir", "slurm_conf"), command_keys=("python",), image_keys=("container",), bind_keys=("container_binds",),
                         renamed=(Renamed("time_min", "time"), Renamed("mem_per_task_gb", "mem_per_task", "G")))


# SLURM stores these in 16-bit fields (cpus per task, tasks per node, GRES counts, the --signal
# delay) or 32-bit ones (node counts, minutes); beyond them sbatch fails or silently wraps.
_UPPER_BOUNDS = {"nodes": 2**31 - 1, "tasks_per_node": 65535, "cpus_per_task": 65535, "gpus_per_node": 65535,
                 "gpus_per_task": 65535,
                 "signal_delay_s": 65535, "max_timeout_requeues": 2**31 - 1,
                 "checkpoint_every_steps": 2**31 - 1, "array_parallelism": 2**31 - 1, "pool_workers": 10_000,
                 "max_array_size": 2**31 - 1, "init_timeout_s": 2**31 - 1, "collective_timeout_s": 2**31 - 1}
_BOUND_WHY = {65535: "a 16-bit SLURM field", 2**31 - 1: "a 32-bit field", 10_000: "a sweep's most points"}

def _check_shape(profile: Profile) -> None:
    """The GPUs, the launch shape and the executor's limits: what the ranks of one node can be."""
    require(re.fullmatch(r"[A-Za-z0-9_.-]*", profile.gpu_type) is not None, "gpu_type", profile.gpu_type,
            "a GRES type name such as 'a100' (letters, digits, '_', '.', '-')")
    require(not profile.gpu_type or profile.gpus_per_node > 0, "gpu_type", profile.gpu_type,
            "empty unless gpus_per_node > 0 (a type names the GPUs asked for)")
    if profile.gpus_per_task:
        require(profile.gpus_per_node > 0 and profile.gpus_per_task * profile.tasks_per_node == profile.gpus_per_node,
                "gpus_per_task", profile.gpus_per_task, f"gpus_per_node / tasks_per_node = "
                f"{profile.gpus_per_node / profile.tasks_per_node:g} (every GPU of the node bound to one task), or 0")
        # --gres has no per-task form: there each task is bound with srun's --gpu-bind=single:1.
        require(profile.gpu_request == "gpus" or profile.gpus_per_task in (1, profile.gpus_per_node), "gpus_per_task",
                profile.gpus_per_task, f"1 or {profile.gpus_per_node} (gpus_per_node) with gpu_request 'gres' "
                f"(--gres is per node), or set gpu_request: gpus")
    if profile.launch == "torchrun":
        require(profile.executor == "slurm", "launch", profile.launch, f"'tasks' for the {profile.executor} executor "
                f"(torchrun per node is a SLURM shape; locally, run torchrun yourself: python -m trainer)")
        require(not profile.container, "launch", profile.launch, "'tasks' with a container (torchrun in a "
                "container is not supported yet)")
        require(profile.gpus_per_task == 0, "gpus_per_task", profile.gpus_per_task,
                "0 with launch: torchrun (its one task per node holds all the node's GPUs)")
    if profile.gpus_per_node:
        require(profile.tasks_per_node == profile.gpus_per_node, "tasks_per_node", profile.tasks_per_node,
                f"one task per GPU: {profile.gpus_per_node} (= gpus_per_node)")
    if profile.executor == "local":
        require(profile.nodes == 1, "nodes", profile.nodes, "1 for the local executor (use a slurm profile for more)")
    if profile.executor == "debug":
        require(profile.nodes == 1, "nodes", profile.nodes, "1 for the debug executor")
        require(profile.tasks_per_node == 1, "tasks_per_node", profile.tasks_per_node,
                "1 for the debug executor (it runs in this process)")


def _check_login(profile: Profile) -> None:
    """`login` reaches ssh's and rsync's argv (launcher.config.destination: either form OpenSSH takes)
    and `remote_dir` a remote shell line: refuse what would be read as an option or break the line
    (the remote side quotes the folder; `~/` is the remote home)."""
    problem = destination.problem(profile.login)
    require(problem is None, "login", profile.login, problem or "")
    require(not profile.login or profile.executor == "slurm", "login", profile.login,
            "empty unless executor is slurm (only SLURM runs are submitted over SSH)")
    require(profile.remote_dir != "" and re.search(r"[\x00-\x1f\x7f]", profile.remote_dir) is None
            and (profile.remote_dir.startswith(("/", "~/")) or profile.remote_dir == "~"), "remote_dir",
            profile.remote_dir, "an absolute folder on the cluster side, or one under ~/ (the remote home)")


def project_path(value: str) -> Path:
    """A recorded slurm_conf (run.json): profiles read today record absolute paths; a relative one
    comes from a run recorded before paths were read relative to their file, when they were
    relative to the project root."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else CODE_ROOT / path


def slurm_conf_file(executor: str, slurm_conf: str) -> str:
    """The absolute SLURM_CONF a (possibly recorded) profile names, "" where it names none."""
    return str(project_path(slurm_conf)) if executor == "slurm" and slurm_conf else ""
