"""A profile and a job as one submission asks for them: both files loaded with `--set` on top
(trainer.config.files, .overrides), validated into dataclasses, a sweep expanded into its points
(trainer.config.sweep), and for each point what the profile decides for it by the one rules
(trainer.config.job.task_places): its data folder (data_folder) and its trackers (trackers.merged).
Planning hands its data down: resolve calls trainer.config's readers in turn and returns everything
the checks and the submission need."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.config.profile import PROFILE_FILES, Profile
from trainer.config import files, overrides, sweep, values
from trainer.config.job import JOB_FILES, JobConfig, job_mapping, task_places
from trainer.config.schema import ConfigError, build
from trainer.config.tracker_key import TrackerConfig

# What `--set SCOPE.KEY=VALUE` may name.
SCOPES: dict[str, type] = {"job": JobConfig, "profile": Profile}


@dataclass
class Point:
    """One task to run: its index in the run (its folder), its job, the sweep overrides that made it,
    where the job came from as errors name it (the job file with its --set keys, or the run record
    `--resume` rebuilt it from), and what the profile decides for it: its data folder and trackers."""

    task: int
    job: JobConfig
    overrides: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    data_dir: str = ""
    tracker: TrackerConfig = field(default_factory=TrackerConfig)


def point(profile: Profile, task: int, job: JobConfig, changes: dict[str, Any] | None = None, source: str = "",
          runs_dir: str | None = None, here: bool = True) -> Point:
    """Task `task` running `job` with `profile`, its run folder under `runs_dir` (default: the profile's).
    `here`: the paths are this machine's; else the cluster side's over SSH (launcher.remote.cluster_side)."""
    places = task_places(job, profile.data_dir, profile.tracker, profile.runs_dir if runs_dir is None else runs_dir,
                         here)
    return Point(task, job, dict(changes or {}), source, *places)


@dataclass
class Resolved:
    """A profile and a job after `extends`, `--set` and validation, with the files they came from."""

    profile: Profile
    job: JobConfig
    profile_source: str
    job_source: str
    # Every task to run; one (no overrides) for a plain job.
    points: list[Point]
    is_sweep: bool = False


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """`--set job.epochs=3 --set profile.nodes=2` -> {"job": {"epochs": 3}, "profile": {"nodes": 2}}."""
    return overrides.parse(items, SCOPES)


def load_profile(name: str, sets: dict[str, Any] | None = None) -> tuple[Profile, str]:
    """The profile NAME (or path), `extends:` followed, with `--set profile.*` values; and its source."""
    loaded = files.load(PROFILE_FILES, name, sets)
    return build(Profile, loaded.data, loaded.source), loaded.source


def profile_overrides(sets: dict[str, Any]) -> dict[str, Any]:
    """`--set profile.*` as keys of today's Profile (for a recorded profile: `--resume`)."""
    return files.set_values(PROFILE_FILES, sets)


def resolve(profile_name: str, job_name: str, sets: list[str], wait: bool = False) -> Resolved:
    """The profile and job as named, with `--set`; `wait`: `--wait` (the profile's `wait: true`). Each
    step is trainer.config's own (the files, the overrides, the sweep, each point's places), called from
    here in turn: the data goes down and comes back, and nothing climbs back up into this module."""
    given = overrides.parse(sets, SCOPES)
    loaded = files.load(PROFILE_FILES, profile_name, given["profile"])
    profile, profile_source = build(Profile, loaded.data, loaded.source), loaded.source
    if wait:
        profile.wait = True
    loaded = files.load(JOB_FILES, job_name, given["job"])
    job_data, spec = job_mapping(loaded)
    job = build(JobConfig, job_data, loaded.source)
    expanded = sweep.expand(job_data, spec, loaded.source) if spec is not None else [(job, {})]
    points = [Point(i, one, swept, loaded.source + (f" (sweep task {i})" if spec is not None else ""),
                    *task_places(one, profile.data_dir, profile.tracker, profile.runs_dir))
              for i, (one, swept) in enumerate(expanded)]
    return Resolved(profile, job, profile_source, loaded.source, points, spec is not None)


def runs_dir(profile_name: str, explicit: str | None = None) -> Path:
    """Where a profile's runs are: `--runs-dir` if given, else the profile's `runs_dir`."""
    if explicit is not None:  # checked where it enters: an empty one would silently mean the profile's
        problem = "a folder (leave --runs-dir out for the profile's runs_dir)" if explicit == "" else values.file_name(explicit)
        if problem is not None:
            shown = values.shown_name(explicit)
            raise ConfigError(f"--runs-dir {shown}: expected {problem}")
    return Path(explicit if explicit else load_profile(profile_name)[0].runs_dir).expanduser()
