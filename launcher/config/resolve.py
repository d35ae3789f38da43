"""Load a profile and a job, apply `--set` overrides, and validate both into dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.config.profile import PROFILE_FILES, Profile
from trainer.config import files, yamlio
from trainer.config.files import deep_merge
from trainer.config.job import JOB_FILES, JobConfig
from trainer.config.schema import ConfigError, build, field_names, type_hints, unknown_key_error

SCOPES = ("job", "profile")


@dataclass
class Resolved:
    """A profile and a job after `extends`, `--set` and validation, with the files they came from."""

    profile: Profile
    job: JobConfig
    profile_source: str
    job_source: str
    # The merged job mapping (file chain + --set) that sweep points are applied to.
    job_data: dict[str, Any]
    # A sweep's grid and/or list of overrides (None for a plain job).
    sweep: dict[str, Any] | None = None


def _string_fields(cls: type) -> set[str]:
    return {name for name, tp in type_hints(cls).items() if tp is str}


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """`--set job.epochs=3` -> {"job": {"epochs": 3}}; values are read as a job or profile file would
    read them (YAML 1.2 scalars: `1e-3` is a number, `1:30:00` a string), except for string fields,
    which take the text as written (`--set job.name=123` names the job "123")."""
    strings = {"job": _string_fields(JobConfig), "profile": _string_fields(Profile)} if items else {}
    out: dict[str, dict[str, Any]] = {"job": {}, "profile": {}}
    for item in items:
        key, sep, raw = item.partition("=")
        scope, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise ConfigError(f"--set {item}: expected KEY=VALUE with KEY as job.FIELD or profile.FIELD "
                              f"(for example --set job.epochs=3)")
        if scope not in SCOPES:
            raise ConfigError(f"--set {item}: '{scope}' is not a scope; use one of: job, profile")
        if any(not part for part in name.split(".")):
            raise ConfigError(f"--set {item}: '{key}' has an empty part; write KEY as job.FIELD or "
                              f"profile.FIELD[.NAME]")
        if name in strings[scope]:
            _set_dotted(out[scope], name, raw, item)
            continue
        try:
            value = yamlio.scalar(raw)
        except yamlio.YamlError as err:
            raise ConfigError(f"--set {item}: value {raw!r} is not a valid YAML scalar ({err})") from None
        if isinstance(value, (dict, list)) and name not in ("setup", "env", "sbatch_extra", "extra", "container_binds",
                                                            "args"):
            raise ConfigError(f"--set {item}: value must be a single scalar, got {type(value).__name__}")
        _set_dotted(out[scope], name, value, item)
    return out


def _set_dotted(target: dict[str, Any], dotted: str, value: Any, item: str) -> None:
    """Set one `--set` key. Two `--set`s that disagree on whether a key is a mapping (`env=x` and
    `env.A=1`, in either order) are refused: one would silently undo the other."""
    parts = dotted.split(".")
    for depth, part in enumerate(parts[:-1]):
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            scalar_key = ".".join(parts[:depth + 1])
            raise ConfigError(f"--set {item}: '{scalar_key}' was already set to the value {target!r} by another "
                              f"--set, so it cannot also hold '{parts[depth + 1]}'; give one or the other")
    if isinstance(target.get(parts[-1]), dict):
        raise ConfigError(f"--set {item}: '{dotted}' already holds keys set by other --set options "
                          f"({', '.join(target[parts[-1]])}); give one or the other")
    target[parts[-1]] = value


def _check_keys(overrides: dict[str, Any], cls: type, scope: str) -> None:
    valid = field_names(cls)
    for name in overrides:
        if name not in valid:
            raise unknown_key_error("--set", f"{scope}.{name}", valid)


def _described(source: str, overrides: dict[str, Any], scope: str) -> str:
    if not overrides:
        return source
    return f"{source} with --set " + " ".join(f"{scope}.{k}" for k in _dotted(overrides))


def _dotted(overrides: dict[str, Any], prefix: str = "") -> list[str]:
    """The keys as --set wrote them: `config.lr`, not `config` (nested mappings come from dotted keys)."""
    keys: list[str] = []
    for key, value in overrides.items():
        keys.extend(_dotted(value, f"{prefix}{key}.") if isinstance(value, dict) and value else [f"{prefix}{key}"])
    return keys


def load_profile(name: str, overrides: dict[str, Any] | None = None) -> tuple[Profile, str]:
    """The profile NAME (or path), `extends:` followed, with `--set profile.*` overrides; and its source."""
    overrides = profile_overrides(overrides or {})
    loaded = files.load(PROFILE_FILES, name)
    loaded.data.setdefault("name", loaded.path.stem)
    # Merged, not replaced: `--set profile.env.A=1` adds A to the file's env instead of dropping the rest.
    data = deep_merge(loaded.data, overrides)
    source = _described(loaded.source, overrides, "profile")
    return build(Profile, data, source), source


def profile_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """`--set profile.*` as keys of today's Profile: former names read as today's, paths relative to
    the current directory (trainer.config.filepaths); unknown keys refused."""
    out = PROFILE_FILES.prepare(overrides, Path.cwd(), "--set", "profile.")
    _check_keys(out, Profile, "profile")
    return out


def resolve(profile_name: str, job_name: str, sets: list[str]) -> Resolved:
    overrides = parse_overrides(sets)
    profile, profile_source = load_profile(profile_name, overrides["profile"])
    loaded = files.load(JOB_FILES, job_name)
    job_data, job_source = loaded.data, loaded.source
    sweep = job_data.pop("sweep", None)
    job_data.setdefault("name", loaded.path.stem)
    if job_data.get("entrypoint") or job_data.get("script"):  # may live next to the job file (trainer.runners.entrypoints)
        job_data.setdefault("code_dir", str(loaded.path.resolve().parent))
    _check_keys(overrides["job"], JobConfig, "job")
    # Merged, not replaced: `--set job.config.lr=0.1` changes one key of the function's config.
    job_data = deep_merge(job_data, JOB_FILES.prepare(overrides["job"], Path.cwd(), "--set", "job."))
    job_source = _described(job_source, overrides["job"], "job")
    job = build(JobConfig, job_data, job_source)
    if sweep is not None and not isinstance(sweep, dict):
        raise ConfigError(f"{job_source}: key 'sweep' must be a mapping with 'grid' and/or 'tasks'")
    return Resolved(profile, job, profile_source, job_source, job_data, sweep)


def runs_dir(profile_name: str, explicit: str | None = None) -> Path:
    """Where a profile's runs are: `--runs-dir` if given, else the profile's `runs_dir`."""
    return Path(explicit if explicit else load_profile(profile_name)[0].runs_dir).expanduser()
