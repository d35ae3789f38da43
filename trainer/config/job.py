"""What a training job is: the model, the data and the recipe, validated when loaded.

Batch size is per rank (`batch_size_per_rank`): that is what each process holds in memory and what
the seed program meant by 64. The global batch is `batch_size_per_rank × world_size`, and the
resolved config written to the run folder shows both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union, get_args

from trainer.config import files, lookup, project, values
from trainer.config.schema import ConfigError, build, require
from trainer.config.tracker_key import TrackerConfig, merged

# Bounds on counts and sizes: beyond them torch (32-bit sizes in kernels), memory or the OS fail
# later, after queueing; refusing them here keeps the failure at submission time.
INT32_MAX = 2**31 - 1
SEED_MAX = 2**32 - 1
MAX_SYNTHETIC = 1_000_000
# The built-in recipe's models and datasets: the one list of their names (trainer.recipes.models and
# .components build them; a test holds the two together).
Model = Literal["lenet", "mlp", "resnet-small"]  # the one list of the built-in recipe's models
DIGITS_MODEL: Model = "mlp"  # the model for the 8x8 digits; the others take 32x32 images
Dataset = Literal["digits", "cifar10", "synthetic-cifar10"]


@dataclass
class JobConfig:
    """A job (jobs/*.yaml): what to train and how; every key is documented in docs/profiles-and-jobs.md."""

    name: str = "job"
    # Your own code instead of the built-in recipe: "package.module:function", called once per rank
    # with a trainer.api.Context (see docs/your-code.md). The recipe keys below
    # then only matter through what the function reads; `config:` is the function's own mapping.
    entrypoint: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    # Or your function handed over from Python (launcher.client.submit(fn)) when it is not importable by
    # name (a notebook cell, a script's __main__, a lambda, a closure, a partial): pickled by value into
    # the run folder (function.pkl, trainer.runners.pickled); this names it ("__main__:train"). Set by
    # the Python API, which also hands the submitter the pickle; called like an entrypoint, with `config:`.
    function: str = ""
    # Or a script run once per rank, unchanged, in torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
    # LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), with its command-line `args`.
    script: str = ""
    args: list[str] = field(default_factory=list)
    # Where the job file was (set by the submitter): the entrypoint's module and a relative script
    # are also looked up there.
    code_dir: str = ""
    # Your project's root (set by the submitter; trainer/config/project.py): what is snapshotted,
    # and where your code is imported from (docs/your-code.md#where-your-code-is-found).
    project_root: str = ""
    model: Model = "mlp"
    dataset: Dataset = "digits"
    # Where dataset files live; empty means the profile's data_dir.
    data_dir: str = ""
    # Only cifar10: fetch it when missing (one rank per node downloads, the others wait).
    download: bool = True
    # Only cifar10: check torchvision's MD5 sums. Copies made locally (tests, converted benchmark
    # images) have the same layout but other bytes, so they turn this off.
    verify_checksums: bool = True
    # Only synthetic-cifar10: how many images to make (real CIFAR-10 has 50000/10000).
    synthetic_train_size: int = 5000
    synthetic_test_size: int = 1000
    epochs: int = 10
    batch_size_per_rank: int = 64
    optimizer: Literal["sgd", "adamw"] = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    # constant: the seed's fixed lr; onecycle: linear warm-up then linear decay to 0 (per step).
    lr_schedule: Literal["constant", "onecycle", "cosine"] = "constant"
    warmup_fraction: float = 0.2
    label_smoothing: float = 0.0
    # Random crop (4-pixel padding) and horizontal flip, applied per batch on tensors.
    augment: bool = False
    seed: int = 0
    # Evaluate on the whole test set every N epochs (and always after the last one).
    eval_every_epochs: int = 1
    # Print a plain progress line every N steps in batch logs (a tqdm bar on a terminal).
    log_every_steps: int = 50
    # Checkpoint every N optimizer steps (0: only at epoch end; null: the profile decides; auto: from measurements,
    # trainer.rank.interval, within auto_checkpoint_min_s..auto_checkpoint_max_s seconds of steps).
    checkpoint_every_steps: Union[int, Literal["auto"], None] = None
    auto_checkpoint_min_s: float = 30.0
    auto_checkpoint_max_s: float = 3600.0
    keep_checkpoints: int = 3
    # Rank 0 writes each checkpoint in the background from a copy taken at the step boundary (false: the loop waits).
    async_checkpoints: bool = True
    # Bitwise reproducible runs on CPU (deterministic algorithms, fixed reduction order).
    deterministic: bool = True
    # bf16 autocast and torch.compile: GPU path only; channels_last: GPUs and CPUs (oneDNN prefers it too).
    amp_bf16: bool = True
    channels_last: bool = True
    compile: bool = False
    grad_accum_steps: int = 1
    # What a sweep sorts by and what "best" means.
    target_metric: str = "test_accuracy"
    target_mode: Literal["max", "min"] = "max"
    tensorboard: bool = False  # the former spelling of `tracker: {tensorboard: true}`
    # Experiment trackers rank 0 feeds (TensorBoard, MLflow, W&B): trainer.config.tracker_key; null: the profile's.
    tracker: Optional[TrackerConfig] = None
    # Stop early once test accuracy reaches this (0 disables); used by time-to-accuracy runs.
    stop_at_accuracy: float = 0.0
    # Testing aid: raise on this global step on this rank ("step:rank"), to exercise failure paths.
    fail_at: str = ""
    # Testing aid: rank 0 sends itself the stop signal on reaching these global steps ("12" or
    # "12,40"), to exercise checkpoint, requeue and exact resume at chosen steps (a resumed run
    # does not fire again at the step it resumed from).
    interrupt_at: int | str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in ("epochs", "batch_size_per_rank", "eval_every_epochs", "log_every_steps",
                    "keep_checkpoints", "grad_accum_steps", "synthetic_train_size", "synthetic_test_size"):
            require(getattr(self, key) > 0, key, getattr(self, key), "an integer > 0")
        for key in ("epochs", "batch_size_per_rank", "eval_every_epochs", "log_every_steps", "keep_checkpoints",
                    "grad_accum_steps"):
            require(getattr(self, key) <= INT32_MAX, key, getattr(self, key), f"an integer <= {INT32_MAX}")
        for key in ("synthetic_train_size", "synthetic_test_size"):
            require(getattr(self, key) <= MAX_SYNTHETIC, key, getattr(self, key),
                    f"an integer <= {MAX_SYNTHETIC} ({MAX_SYNTHETIC * 3072 // 10**9} GB of 32x32 images)")
        # numpy's legacy and torch's generators all take seeds in [0, 2**32); derived seeds stay in range.
        require(0 <= self.seed <= SEED_MAX, "seed", self.seed, f"an integer in [0, {SEED_MAX}]")
        require(self.lr > 0, "lr", self.lr, "a number > 0")
        require(0 <= self.momentum < 1, "momentum", self.momentum, "a number in [0, 1)")
        require(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a number >= 0")
        require(0 <= self.warmup_fraction < 1, "warmup_fraction", self.warmup_fraction, "a number in [0, 1)")
        require(0 <= self.label_smoothing < 1, "label_smoothing", self.label_smoothing, "a number in [0, 1)")
        require(0 <= self.stop_at_accuracy <= 1, "stop_at_accuracy", self.stop_at_accuracy, "a number in [0, 1]")
        require(self.checkpoint_every_steps in (None, "auto") or 0 <= self.checkpoint_every_steps <= INT32_MAX,
                "checkpoint_every_steps", self.checkpoint_every_steps, f"an integer in [0, {INT32_MAX}], auto or null")
        require(0 < self.auto_checkpoint_min_s <= self.auto_checkpoint_max_s <= 365 * 86400, "auto_checkpoint_min_s",
                self.auto_checkpoint_min_s, f"seconds > 0, at most auto_checkpoint_max_s ({self.auto_checkpoint_max_s}), "
                "which is at most a year")
        # A user's function may log or return any metric; the built-in recipe only these.
        require(bool(self.entrypoint or self.script or self.function) or self.target_metric in METRICS, "target_metric", self.target_metric,
                f"one of {', '.join(METRICS)} (any metric name with an entrypoint)")
        # Values that reach the batch script (the job name), python's argument vector or a path: the
        # one rule (trainer.config.values), so the error names the job file they came from.
        for key, rule in (("name", values.text), ("script", values.argument), ("script", values.path),
                          ("data_dir", values.path), ("code_dir", values.path),
                          ("project_root", values.path), ("target_metric", values.text), ("function", values.text)):
            problem = rule(getattr(self, key))
            require(problem is None, key, getattr(self, key), problem or "")
        for i, arg in enumerate(self.args):
            require(values.text(arg) is None, f"args[{i}]", arg, values.text(arg) or "")
        require(not self.script or self.script.endswith(".py"), "script", self.script,
                "a Python file (a path ending in .py)")
        require(not (self.entrypoint and self.script), "script", self.script,
                "empty when 'entrypoint' is set (a job runs one or the other)")
        require(not (self.function and (self.entrypoint or self.script)), "function", self.function,
                "empty when 'entrypoint' or 'script' is set (a job runs one of them)")
        # Read by nothing otherwise: refused rather than silently ignored.
        require(not self.config or bool(self.entrypoint or self.function), "config", self.config,
                "empty without an 'entrypoint' (only your function reads config:; the built-in recipe's keys are "
                "top-level, e.g. --set job.lr=0.1)")
        require(not self.args or bool(self.script), "args", self.args,
                "empty without a 'script' (only a script gets command-line args; an entrypoint reads config:)")
        require(self.entrypoint == "" or _is_entrypoint(self.entrypoint), "entrypoint", self.entrypoint,
                "'package.module:function'")
        require(self.fail_at == "" or _is_step_rank(self.fail_at), "fail_at", self.fail_at,
                "'' or 'STEP:RANK' with two integers")
        require(_is_step_list(self.interrupt_at), "interrupt_at", self.interrupt_at,
                "'' or global steps > 0 separated by commas, e.g. '12,40'")
        if self.model == DIGITS_MODEL:
            require(self.dataset == "digits", "model", self.model,
                    " or ".join(repr(m) for m in get_args(Model) if m != DIGITS_MODEL) + " for 32x32 images")
        elif self.dataset == "digits":
            require(False, "model", self.model, f"{DIGITS_MODEL!r} for the 8x8 digits data")


METRICS = ("test_accuracy", "test_loss", "train_loss", "images_per_second")


def _is_entrypoint(text: str) -> bool:
    module, sep, function = text.partition(":")
    return bool(sep) and all(p.isidentifier() for p in module.split(".")) and function.isidentifier()


def _is_step_rank(text: str) -> bool:
    parts = text.split(":")
    return len(parts) == 2 and all(p.strip().isdigit() for p in parts)


def _is_step_list(value: int | str) -> bool:
    return value == "" or all(p.strip().isdigit() and int(p) > 0 for p in str(value).split(","))


def interrupt_steps(job: JobConfig) -> set[int]:
    """The steps of `job.interrupt_at` as integers (empty when unset)."""
    return {int(p) for p in str(job.interrupt_at).split(",")} if job.interrupt_at != "" else set()


@dataclass
class RunSettings:
    """What the cluster profile and the submitter decide for one run (not part of the recipe)."""

    run_dir: str
    data_dir: str = "data"
    # The profile asked for GPUs: train on cuda:<local rank> with NCCL, or fail clearly without CUDA.
    use_gpus: bool = False
    # Threads per process: the CPUs SLURM or the profile gave the task (never more: oversubscription
    # cost the seed 3x on two cores).
    threads: int = 1
    # Checkpoint cadence when the job leaves it null (SLURM profiles turn it on).
    checkpoint_every_steps: int = 0
    init_timeout_s: int = 120
    # Collective timeout: a rank stuck waiting for a dead peer gives up after this long.
    collective_timeout_s: int = 45
    # Which signal asks for a checkpoint and a clean stop (preemption or pre-timeout).
    stop_signal: str = "USR2"
    # Show a tqdm bar (interactive local runs) instead of plain log lines.
    progress_bar: bool = False
    # The cap on time-out requeues (the profile's max_timeout_requeues): a script's TORCHELASTIC_MAX_RESTARTS.
    max_restarts: int = 0
    # The trackers to feed (the job's over the profile's, defaults filled in: trainer.config.tracker_key), and
    # what they are told about the run: the profile's name, the sweep (its run folder's name, "" for a
    # single run), this task's index and the keys its sweep point set.
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    profile: str = ""
    sweep: str = ""
    task: int = 0
    swept: dict[str, Any] = field(default_factory=dict)
    # The folders of runs before this one whose interruptions and checkpoint stalls count for `checkpoint_every_steps:
    # auto` (trainer.rank.interval): a sweep point's, the points of its sweep just before it.
    history: list[str] = field(default_factory=list)


def data_folder(job: JobConfig, default: str) -> str:
    """Where the job's dataset lives: the job's own `data_dir`, else `default` (the profile's
    `data_dir`, or `python -m trainer --data-dir`). The one rule, for the submitter's checks, the
    run's settings and the built-in recipe alike."""
    return job.data_dir or default


def task_places(job: JobConfig, data_dir: str, tracker: TrackerConfig | None, runs_dir: str,
                here: bool = True) -> tuple[str, TrackerConfig]:
    """What a profile decides for one task of `job`, by the one rules: its data folder (`data_folder`,
    the profile's `data_dir` the default) and its trackers (trackers.merged over the profile's), MLflow's
    store by default next to the run folders (`runs_dir`: every run there in one store, readable offline
    with `mlflow ui`). `here`: the paths are this machine's (made absolute); else the cluster side's
    over SSH, kept as written (they mean nothing here)."""
    folder, trackers = data_folder(job, data_dir), merged(job.tracker, tracker, job.tensorboard)
    if here:
        folder = str(Path(folder).expanduser().resolve())
    if trackers.mlflow and not trackers.mlflow.uri:  # (the runs folder resolved only for it: a dry run's cost)
        runs = str(Path(runs_dir).expanduser().resolve()) if here else runs_dir
        trackers.mlflow.uri = Path(runs, "mlruns").as_uri() if runs.startswith("/") else f"file:{runs}/mlruns"
    return folder, trackers


# A job file: found in ./jobs, the user folder, then the shipped jobs (trainer.config.lookup), with
# `data_dir` relative to the file that wrote it (trainer.config.filepaths).
JOB_FILES = files.FileKind("job", JobConfig, "jobs", "trainer", path_keys=("data_dir",))


def job_mapping(loaded: files.Loaded) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A loaded job file's job keys, and its `sweep:` section (None: not a sweep). Your own code
    (`entrypoint:`, `script:`) is also looked up next to the job file: its folder is `code_dir`."""
    data = dict(loaded.data)
    sweep = data.pop("sweep", None)
    if sweep is not None and not isinstance(sweep, dict):
        raise ConfigError(f"{loaded.source}: key 'sweep' must be a mapping with 'grid' and/or 'tasks'")
    if data.get("entrypoint") or data.get("script") or data.get("function"):
        data.setdefault("code_dir", str(loaded.path.resolve().parent))
        data.setdefault("project_root", str(project.root_for(loaded.path, Path.cwd(), found_by_name(loaded.path))))
    return data, sweep


def found_by_name(path: Path) -> bool:
    """A job file from the shipped ones or the user folder: its project is the current directory's."""
    where = path.resolve()
    return any(project.inside(where, folder.resolve()) for folder in (JOB_FILES.shipped, lookup.user_dir() / "jobs"))


def load_job(name: str) -> JobConfig:
    """Load a job file (following `extends:`) for `python -m trainer`; a sweep file's base job
    trains as itself. The submitter resolves jobs with `--set` on top (launcher.config.resolve)."""
    loaded = files.load(JOB_FILES, name)
    return build(JobConfig, job_mapping(loaded)[0], loaded.source)
