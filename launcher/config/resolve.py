"""Load a profile and a job, apply `--set` overrides, and validate both into dataclasses."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.profile import Profile, find_profile_file
from trainer.config import JobConfig, find_job_file
from trainer.schema import ConfigError, build, field_names, load_with_extends, unknown_key_error

SCOPES = ("job", "profile")


@dataclass
class Resolved:
    profile: Profile
    job: JobConfig
    profile_source: str
    job_source: str
    # The merged job mapping (file chain + --set) that sweep points are applied to.
    job_data: dict[str, Any]
    # A sweep's grid and/or list of overrides (None for a plain job).
    sweep: dict[str, Any] | None = None


def _string_fields(cls: type) -> set[str]:
    hints = typing.get_type_hints(cls)
    return {name for name, tp in hints.items() if tp is str}


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """`--set job.epochs=3` -> {"job": {"epochs": 3}}; values are YAML scalars, except for string
    fields, which take the text as written (YAML would read "5:1" as the number 301)."""
    import yaml

    strings = {"job": _string_fields(JobConfig), "profile": _string_fields(Profile)}

    out: dict[str, dict[str, Any]] = {"job": {}, "profile": {}}
    for item in items:
        key, sep, raw = item.partition("=")
        scope, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise ConfigError(f"--set {item}: expected KEY=VALUE with KEY as job.FIELD or profile.FIELD "
                              f"(for example --set job.epochs=3)")
        if scope not in SCOPES:
            raise ConfigError(f"--set {item}: '{scope}' is not a scope; use one of: job, profile")
        if name in strings[scope]:
            _set_dotted(out[scope], name, raw)
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            raise ConfigError(f"--set {item}: value {raw!r} is not a valid YAML scalar") from None
        if isinstance(value, (dict, list)) and name not in ("setup", "env", "sbatch_extra", "extra"):
            raise ConfigError(f"--set {item}: value must be a single scalar, got {type(value).__name__}")
        _set_dotted(out[scope], name, value)
    return out


def _set_dotted(target: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value


def _check_keys(overrides: dict[str, Any], cls: type, scope: str) -> None:
    valid = field_names(cls)
    for name in overrides:
        if name not in valid:
            raise unknown_key_error("--set", f"{scope}.{name}", valid)


def _described(source: str, overrides: dict[str, Any], scope: str) -> str:
    if not overrides:
        return source
    return f"{source} with --set " + " ".join(f"{scope}.{k}" for k in overrides)


def resolve(profile_name: str, job_name: str, sets: list[str]) -> Resolved:
    overrides = parse_overrides(sets)
    _check_keys(overrides["profile"], Profile, "profile")
    profile_path = find_profile_file(profile_name)
    profile_data, profile_source = load_with_extends(profile_path, lambda p, rel: find_profile_file(p, rel))
    profile_data.setdefault("name", profile_path.stem)
    profile_data.update(overrides["profile"])
    profile_source = _described(profile_source, overrides["profile"], "profile")
    profile = build(Profile, profile_data, profile_source)

    job_path = find_job_file(job_name)
    job_data, job_source = load_with_extends(job_path, lambda p, rel: find_job_file(p, rel))
    sweep = job_data.pop("sweep", None)
    job_data.setdefault("name", job_path.stem)
    _check_keys({k: v for k, v in overrides["job"].items()}, JobConfig, "job")
    job_data.update(overrides["job"])
    job_source = _described(job_source, overrides["job"], "job")
    job = build(JobConfig, job_data, job_source)
    if sweep is not None and not isinstance(sweep, dict):
        raise ConfigError(f"{job_source}: key 'sweep' must be a mapping with 'grid' and/or 'tasks'")
    return Resolved(profile, job, profile_source, job_source, job_data, sweep)


def project_path(value: str) -> Path:
    """Relative paths in profiles are relative to the project root, so any cwd works."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(__file__).resolve().parent.parent / path
