"""A profile and a job as one submission asks for them: both files loaded with `--set` on top
(trainer.config.files, .overrides), validated into dataclasses, and a sweep expanded into its
points (trainer.config.sweep)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.config.profile import PROFILE_FILES, Profile
from trainer.config import files, overrides, sweep, values
from trainer.config.job import JOB_FILES, JobConfig, job_mapping
from trainer.config.schema import ConfigError, build

# What `--set SCOPE.KEY=VALUE` may name.
SCOPES: dict[str, type] = {"job": JobConfig, "profile": Profile}


@dataclass
class Resolved:
    """A profile and a job after `extends`, `--set` and validation, with the files they came from."""

    profile: Profile
    job: JobConfig
    profile_source: str
    job_source: str
    # Every task to run: (its job, the sweep overrides that made it); one ({}) for a plain job.
    points: list[tuple[JobConfig, dict[str, Any]]]
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


def resolve(profile_name: str, job_name: str, sets: list[str]) -> Resolved:
    given = parse_overrides(sets)
    profile, profile_source = load_profile(profile_name, given["profile"])
    loaded = files.load(JOB_FILES, job_name, given["job"])
    job_data, spec = job_mapping(loaded)
    job = build(JobConfig, job_data, loaded.source)
    points = sweep.expand(job_data, spec, loaded.source) if spec is not None else [(job, {})]
    return Resolved(profile, job, profile_source, loaded.source, points, spec is not None)


def job_data(job_name: str, sets: list[str]) -> dict[str, Any]:
    """The job file's mapping after `extends:` and `--set job.*` (what a submission over SSH ships)."""
    return dict(files.load(JOB_FILES, job_name, parse_overrides(sets)["job"]).data)


def runs_dir(profile_name: str, explicit: str | None = None) -> Path:
    """Where a profile's runs are: `--runs-dir` if given, else the profile's `runs_dir`."""
    if explicit is not None:  # checked where it enters: an empty one would silently mean the profile's
        problem = "a folder (leave --runs-dir out for the profile's runs_dir)" if explicit == "" else values.file_name(explicit)
        if problem is not None:
            shown = values.shown_name(explicit)
            raise ConfigError(f"--runs-dir {shown}: expected {problem}")
    return Path(explicit if explicit else load_profile(profile_name)[0].runs_dir).expanduser()
