"""`--set SCOPE.KEY=VALUE`: overrides as users type them on the command line, read as a file would
read them (trainer.config.yamlio), checked against the dataclass of their scope, and named in
errors as written (`--set job.config.lr`). Merged on top of a file by trainer.config.files.load.

A value YAML would not read as written (yamlio.not_as_written: a ` #` comment it would drop, an
anchor `&a`, a tag `!x`, a block scalar `|`, a `---`, a `KEY: VALUE` that makes a mapping) never
changes silently: a string field (`job.name`) or one entry of a mapping of strings (`profile.env.NOTE`,
`profile.sbatch_extra.comment`, `job.extra.k`) takes the text literally (`run #3`); any other key
refuses it in one line that says what YAML would do and how to quote it.
"""

from __future__ import annotations

from typing import Any

from trainer.config import yamlio
from trainer.config.schema import ConfigError, field_names, shown, type_hints, unknown_key_error


def _string_fields(cls: type) -> set[str]:
    return {name for name, tp in type_hints(cls).items() if tp is str}


def _holds_text(cls: type, name: str) -> bool:
    """`name` is one entry of a mapping of strings (`env.NOTE`): its value is text, whatever YAML says."""
    head, dot, rest = name.partition(".")
    return bool(dot) and "." not in rest and type_hints(cls).get(head) == dict[str, str]


def parse(items: list[str], scopes: dict[str, type]) -> dict[str, dict[str, Any]]:
    """`--set job.epochs=3` -> {"job": {"epochs": 3}} for `scopes` {"job": JobConfig, ...}; values are
    read as a job or profile file would read them (YAML 1.2 scalars: `1e-3` is a number, `1:30:00` a
    string), except for string fields, which take the text as written (`--set job.name=123` names
    the job "123")."""
    strings = {scope: _string_fields(cls) for scope, cls in scopes.items()} if items else {}
    out: dict[str, dict[str, Any]] = {scope: {} for scope in scopes}
    for whole in items:
        key, sep, raw = whole.partition("=")
        # As messages quote it: a hostile megabyte cut short (trainer.config.schema.shown).
        item = whole if len(whole) <= 200 else f"{key[:100]}={raw[:100]}... ({len(raw)} characters)"
        scope, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise ConfigError(f"--set {item}: expected KEY=VALUE with KEY as job.FIELD or profile.FIELD "
                              f"(for example --set job.epochs=3)")
        if scope not in scopes:
            raise ConfigError(f"--set {item}: '{scope}' is not a scope; use one of: {', '.join(scopes)}")
        if any(not part for part in name.split(".")):
            raise ConfigError(f"--set {item}: '{key}' has an empty part; write KEY as job.FIELD or "
                              f"profile.FIELD[.NAME]")
        if name in strings[scope]:
            _set_dotted(out[scope], name, raw, item)
            continue
        reason = yamlio.not_as_written(raw)
        if reason and _holds_text(scopes[scope], name):
            _set_dotted(out[scope], name, raw, item)
            continue
        if reason:
            quoted = "'" + raw.replace("'", "''") + "'" if len(raw) <= 200 else "'...'"
            raise ConfigError(f"--set {item}: YAML would not read the value {shown(raw)} as written: {reason}; write it "
                              f"without that, or quote it to keep it as text (--set \"{key}={quoted}\")")
        try:
            value = yamlio.scalar(raw)
        except yamlio.YamlError as err:
            raise ConfigError(f"--set {item}: value {shown(raw)} is not a valid YAML scalar ({err})") from None
        # A user's `config.` may hold lists and mappings at any depth (its dataclass checks them).
        if isinstance(value, (dict, list)) and name not in ("setup", "env", "sbatch_extra", "extra", "container_binds",
                                                            "args", "node_error_patterns") \
                and not name.startswith("config."):
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


def check_keys(overrides: dict[str, Any], cls: type, scope: str) -> None:
    """Every `--set SCOPE.KEY` names a field of `cls` (an unknown one lists the valid keys)."""
    valid = field_names(cls)
    for name in overrides:
        if name not in valid:
            raise unknown_key_error("--set", f"{scope}.{name}", valid)


def described(source: str, overrides: dict[str, Any], scope: str) -> str:
    """How errors name a file's values with `--set` on top: `jobs/a.yaml with --set job.lr job.config.x`."""
    if not overrides:
        return source
    return f"{source} with --set " + " ".join(f"{scope}.{k}" for k in dotted_keys(overrides))


def dotted_keys(overrides: dict[str, Any], prefix: str = "") -> list[str]:
    """The keys as --set wrote them: `config.lr`, not `config` (nested mappings come from dotted keys)."""
    keys: list[str] = []
    for key, value in overrides.items():
        keys.extend(dotted_keys(value, f"{prefix}{key}.") if isinstance(value, dict) and value
                    else [f"{prefix}{key}"])
    return keys
