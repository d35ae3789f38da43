"""The `tracker:` key (a job's or a profile's): which experiment trackers rank 0 feeds, validated when loaded.

    tracker:
      tensorboard: true                       # RUN/tensorboard/ (as `tensorboard: true` always did)
      mlflow: {}                              # default: a file store, RUNS_DIR/mlruns, works offline
      wandb: {project: digits, mode: offline} # offline: RUN/wandb/, no network

Any of them, or several, at once. The libraries are optional extras (`pip install 'ddp-submit[mlflow]'`,
`[wandb]`): `missing_libraries` says which one is absent before anything is queued, without importing it
(importing mlflow or wandb costs seconds; only rank 0 of a run that asks for one pays it).
Torch-free, like the rest of trainer.config.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, replace
from typing import Literal, Optional

from trainer.config import values
from trainer.config.schema import require

# What a tracking URI may start with: MLflow's own stores, or an absolute path (a file store).
MLFLOW_SCHEMES = ("file", "http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks")
# W&B's rule for project and entity names (no slashes, hashes, question marks, percents or colons).
_WANDB_NAME = r"^[^/\\#?%:]{1,128}$"


def _one_line(config: object, *keys: str) -> None:
    """Names a tracker is given: one line of text, as every value that reaches a process or a file
    (trainer.config.values), checked where the job or profile is loaded."""
    for key in keys:
        problem = values.text(getattr(config, key))
        require(problem is None, key, getattr(config, key), problem or "")


@dataclass
class MlflowConfig:
    """`tracker.mlflow`: where the MLflow runs go."""

    # "" (default): file:RUNS_DIR/mlruns, next to the run folders, filled in at submission.
    uri: str = ""
    # The MLflow experiment; "" (default): the job's name.
    experiment: str = ""

    def __post_init__(self) -> None:
        _one_line(self, "uri", "experiment")  # (rank 0 hands both to MLflow, which puts them in files and URLs)
        scheme = self.uri.split(":", 1)[0] if ":" in self.uri else ""
        require(self.uri == "" or self.uri.startswith("/") or scheme in MLFLOW_SCHEMES, "uri", self.uri,
                "'' (a file store next to the run folders), an absolute path, or a URI starting with "
                + ", ".join(f"{s}:" for s in MLFLOW_SCHEMES))


@dataclass
class WandbConfig:
    """`tracker.wandb`: the W&B project the runs go to."""

    project: str = ""  # "": the job's name
    entity: str = ""  # "": the API key's default entity
    # offline: written under RUN/wandb/ only (`wandb sync` uploads them later); no network is used.
    mode: Literal["online", "offline", "disabled"] = "online"

    def __post_init__(self) -> None:
        _one_line(self, "project", "entity")
        for key in ("project", "entity"):
            value = getattr(self, key)
            require(value == "" or bool(re.match(_WANDB_NAME, value)), key, value,
                    "a W&B name: 1-128 characters without / \\ # ? % :")


@dataclass
class TrackerConfig:
    """`tracker:` in a job or a profile (the job's wins, key by key: trainer.config.tracker_key.merged)."""

    tensorboard: bool = False
    mlflow: Optional[MlflowConfig] = None
    wandb: Optional[WandbConfig] = None

    def names(self) -> list[str]:
        return [n for n in ("tensorboard", "mlflow", "wandb") if getattr(self, n)]


# Each tracker's module and the extra that installs it.
LIBRARIES = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}


def merged(job: TrackerConfig | None, profile: TrackerConfig | None, legacy_tensorboard: bool = False) -> TrackerConfig:
    """The trackers a run feeds: the profile's, with the job's on top (a tracker the job names wins),
    and the job's former `tensorboard: true`."""
    job, profile = job or TrackerConfig(), profile or TrackerConfig()
    mlflow, wandb = job.mlflow or profile.mlflow, job.wandb or profile.wandb
    # Copies: the submitter fills in defaults per run, never into the job or profile they came from.
    return TrackerConfig(tensorboard=job.tensorboard or profile.tensorboard or legacy_tensorboard,
                         mlflow=replace(mlflow) if mlflow else None, wandb=replace(wandb) if wandb else None)


def missing_libraries(trackers: TrackerConfig) -> list[tuple[str, str]]:
    """(tracker, extra) for each configured tracker whose library is not installed here."""
    return [(name, LIBRARIES[name][1]) for name in trackers.names()
            if importlib.util.find_spec(LIBRARIES[name][0]) is None]
