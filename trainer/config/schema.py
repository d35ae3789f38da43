"""Turn plain mappings (parsed YAML) into validated, typed dataclasses.

Every error names the file, the key, the bad value and what would be valid, so that the command
line can print one line and exit 2 instead of a traceback. Shared by jobs (trainer.config.job),
cluster profiles (launcher.config.profile) and a user's config dataclass (trainer.runners.entrypoints).
Reading the files themselves is trainer.config.files'.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")
INT64 = 1 << 63


class ConfigError(ValueError):
    """Bad user input: printed as one line by the command line, which then exits with status 2."""


class _OutOfRange(ConfigError):
    """A number of the right type but unusable (non-finite, too large): reported as is, also inside a union."""


class FieldError(ValueError):
    """Raised by a dataclass's `__post_init__`; `build` adds the file and key and re-raises ConfigError."""

    def __init__(self, key: str, value: Any, expected: str) -> None:
        super().__init__(key)
        self.key, self.value, self.expected = key, value, expected


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def unknown_key_error(source: str, key: str, valid: list[str]) -> ConfigError:
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], valid, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"{source}: unknown key '{key}'{hint}; valid keys: {', '.join(sorted(valid))}")


def shown(value: Any, most: int = 200) -> str:
    """`value`'s repr for an error line, cut short past `most` characters: a megabyte of a hostile
    value would otherwise be the whole terminal, before the words that say what is valid."""
    text = repr(value)
    return text if len(text) <= most else f"{text[:most // 2]}... ({len(text)} characters)"


def bad_value_error(source: str, key: str, value: Any, expected: str, noun: str = "key") -> ConfigError:
    err = ConfigError(f"{source}: {noun} '{key}' has invalid value {shown(value)}; expected {expected}")
    # (field_problem reads what was expected; `build` with another noun, all three)
    err.key, err.value, err.expected = key, value, expected  # type: ignore[attr-defined]
    return err


def field_problem(cls: type, key: str, value: Any) -> str | None:
    """What field `key` of `cls` expects, when `value` is refused by the field on its own (its type or
    its own checks, the other fields at their defaults); None when the field takes it. For a value
    under a former key name, checked where the user's spelling is still known (trainer.config.files)."""
    try:
        cls(**{key: _coerce(value, type_hints(cls)[key], "", key)})
    except FieldError as err:
        return err.expected if err.key == key else None  # another field's check: the whole profile's
    except ConfigError as err:
        inner = err.args[0] if err.args and isinstance(err.args[0], ConfigError) else err  # an _OutOfRange
        return str(getattr(inner, "expected", inner))
    return None


def build(cls: type[T], data: Mapping[str, Any], source: str, prefix: str = "", noun: str = "key") -> T:
    """Create `cls` from `data`, checking keys and types; `source` names the file(s) for errors, which
    call each entry a `noun` (a record's are fields, as launcher.rundir.record_types calls them)."""
    if noun != "key":
        try:
            return build(cls, data, source, prefix)
        except ConfigError as err:
            bad = err.args[0] if err.args and isinstance(err.args[0], ConfigError) else err  # (an _OutOfRange)
            if not hasattr(bad, "key"):
                raise
            raise bad_value_error(source, bad.key, bad.value, bad.expected, noun) from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping of keys to values, got {type(data).__name__}")
    hints = type_hints(cls)
    valid = field_names(cls)
    kwargs = {}
    for key, value in data.items():
        if key not in valid:
            raise unknown_key_error(source, f"{prefix}{key}", valid)
        kwargs[key] = _coerce(value, hints[key], source, f"{prefix}{key}")
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
    ]
    if missing:
        raise ConfigError(f"{source}: missing required key(s): {', '.join(prefix + m for m in missing)}")
    try:
        return cls(**kwargs)
    except FieldError as err:
        raise bad_value_error(source, f"{prefix}{err.key}", err.value, err.expected) from None


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    # Resolving string annotations compiles each one: a 1,000-point sweep would pay it 1,000 times,
    # and `--set` parsing asks for the same classes' hints (launcher.config.resolve).
    return typing.get_type_hints(cls)


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return "a mapping with keys " + ", ".join(field_names(tp))
    if origin is list:
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    if origin is dict:
        return "a mapping" if typing.get_args(tp)[1] is Any else "a mapping of names to strings"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false",
            Path: "a path", PurePath: "a path", bytes: "base64 text"}.get(tp, str(tp))


def _coerce(value: Any, tp: Any, source: str, key: str) -> Any:
    """Check `value` against the annotation `tp`; ints are accepted where floats are expected."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, source, key)
            except _OutOfRange:
                raise
            except ConfigError:
                continue
        raise bad_value_error(source, key, value, _describe(tp))
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise bad_value_error(source, key, value, _describe(tp))
    if tp is type(None):
        if value is None:
            return None
        raise bad_value_error(source, key, value, "null")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        # A nested section (a job's `tracker:`): its own keys and checks, its errors named `key.sub`, and
        # reported as they are from inside a union (not as "expected null or a mapping").
        if not isinstance(value, Mapping):
            raise bad_value_error(source, key, value, _describe(tp))
        try:
            return build(tp, value, source, f"{key}.")
        except _OutOfRange:
            raise
        except ConfigError as err:
            raise _OutOfRange(err) from None
    if origin is list:
        if not isinstance(value, list):
            raise bad_value_error(source, key, value, _describe(tp))
        (item,) = typing.get_args(tp)
        return [_coerce(v, item, source, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise bad_value_error(source, key, value, _describe(tp))
        if typing.get_args(tp)[1] is Any:  # free-form (a user's `config:`): checked by its own dataclass
            return {str(k): v for k, v in value.items()}
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or isinstance(v, (dict, list)) or v is None:
                raise bad_value_error(source, f"{key}.{k}", v, "a string, number or boolean")
            out[k] = str(v).lower() if isinstance(v, bool) else str(v)
        return out
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            # Wider than any C integer torch, SLURM or the OS reads; fields set tighter bounds.
            if not -INT64 <= value < INT64:
                raise _OutOfRange(bad_value_error(source, key, value, "an integer that fits in 64 bits"))
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # .inf/.nan pass every `> 0` check and then break training or SLURM's request.
            if isinstance(value, float) and not math.isfinite(value):
                raise _OutOfRange(bad_value_error(source, key, value, "a finite number"))
            if isinstance(value, int) and not -INT64 <= value < INT64:
                raise _OutOfRange(bad_value_error(source, key, value, "a number that fits in 64 bits"))
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is PurePath or tp is Path:  # a path written as text (a record, a submission sent as JSON)
        if isinstance(value, str) and value:
            return tp(value)
    elif tp is bytes:  # bytes written as base64 text (a submission sent as JSON: launcher.request.wire)
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except binascii.Error:
                pass
    raise bad_value_error(source, key, value, _describe(tp))


def require(condition: bool, key: str, value: Any, expected: str) -> None:
    """For `__post_init__`: one-line range checks that `build` turns into ConfigError."""
    if not condition:
        raise FieldError(key, value, expected)
