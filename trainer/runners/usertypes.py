"""A user's config dataclass built from its `config:` mapping, with cattrs, and its errors as job files' are.

Types a user's dataclass may use, at any depth: nested dataclasses, `int`, `float`, `str`, `bool`, `Path`,
an `Enum` (by value or by name), `Literal`, `list`/`Sequence`, `tuple` (fixed `tuple[int, str]` and variadic
`tuple[int, ...]`), `set`, `dict`/`Mapping` of typed keys and values, `Optional`, `Any`, and unions whose
member is decided by the value (the first member, in the order written, that takes it; two dataclasses that
both take the same mapping are refused as ambiguous). Unknown keys are refused at any depth.

cattrs structures; the hooks here make it strict where its defaults convert (`int("3")`, `int(2.7)`, `str(5)`,
a string as a list of characters): YAML typed the value, and a conversion would train on what was not written. Its structured exceptions (an
exception group per class, a note naming the attribute or index) are walked to the first failure and
told as one line with the dotted key (`key 'config.model.depth' has invalid value 'x'; expected an
integer`). cattrs is imported only here, and this module only when a user's config is checked
(trainer.runners.entrypoints), so that the submitter's start-up for a built-in job does not pay for it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any, Literal, Union

import cattrs
import cattrs.cols
import cattrs.errors
import cattrs.gen
from cattrs.errors import BaseValidationError, ForbiddenExtraKeysError, IterableValidationNote
from cattrs.gen import AttributeValidationNote

from trainer.config.schema import INT64, ConfigError, FieldError, bad_value_error, unknown_key_error


class Rejected(Exception):
    """The user's dataclass (at `key`, built from `value`) raised `error` itself, e.g. in `__post_init__`."""

    def __init__(self, key: str, value: Any, cls: type, error: BaseException) -> None:
        super().__init__(key)
        self.key, self.value, self.cls, self.error = key, value, cls, error


class _Bad(TypeError):
    """A value of the wrong kind for its annotation; `expected` says what would do."""

    def __init__(self, value: Any, expected: str) -> None:
        super().__init__(expected)
        self.value, self.expected = value, expected


def build(cls: type, data: Any, source: str, prefix: str = "config") -> Any:
    """`cls` built from `data`; a ConfigError (one line, dotted key) or Rejected when it does not fit."""
    if not isinstance(data, Mapping):
        raise bad_value_error(source, prefix, data, expected(cls))
    try:
        return _converter().structure(dict(data), cls)
    except Exception as err:  # noqa: BLE001 - translated: ours are ConfigErrors, the user's own are Rejected
        raise _translate(err, source, prefix, data, cls) from None


def _first_failure(err: BaseException) -> tuple[BaseException, list[Any], str, type | None]:
    """The first leaf of cattrs' exception groups (one per class, list or mapping), the keys/indices that
    lead to it, as raw keys and as a dotted suffix (`.model.widths[1]`), and the class that holds it."""
    holder, path, dotted = getattr(err, "cl", None), [], ""
    while isinstance(err, BaseValidationError) and err.exceptions:
        holder = getattr(err, "cl", holder)
        err = err.exceptions[0]
        for note in getattr(err, "__notes__", []):
            if isinstance(note, AttributeValidationNote):
                path, dotted = path + [note.name], f"{dotted}.{note.name}"
            elif isinstance(note, IterableValidationNote):
                in_mapping = str(note).startswith("Structuring mapping")  # a value, or the key itself
                path, dotted = path + [note.index], dotted + (f".{note.index}" if in_mapping else f"[{note.index}]")
    return err, path, dotted, holder


def _value_at(data: Any, path: list[Any]) -> Any:
    for step in path:
        data = data[step] if isinstance(data, (Mapping, list)) and (step in data if isinstance(data, Mapping)
                                                                    else isinstance(step, int)) else None
    return data


def _translate(err: BaseException, source: str, prefix: str, data: Any, cls: type) -> Exception:
    leaf, path, dotted, holder = _first_failure(err)
    key = prefix + dotted
    if isinstance(leaf, _Bad):
        return bad_value_error(source, key, leaf.value, leaf.expected)
    if isinstance(leaf, ConfigError):
        return leaf
    if isinstance(leaf, ForbiddenExtraKeysError):
        names = [f.name for f in dataclasses.fields(leaf.cl)]
        return unknown_key_error(source, f"{key}.{sorted(leaf.extra_fields)[0]}", names)
    if isinstance(leaf, KeyError) and path and leaf.args == (path[-1],):  # cattrs: a required field absent
        return ConfigError(f"{source}: missing required key(s): {key}")
    if isinstance(leaf, cattrs.errors.StructureHandlerNotFoundError):
        return ConfigError(f"{source}: key '{key}' has a type this tool cannot read from YAML ({leaf.type!r}); "
                           f"use a dataclass, int, float, str, bool, Path, an Enum, Literal, list, tuple, dict, "
                           f"Optional or a union of these")
    # Anything else came from building a dataclass itself: a nested one's is noted under its parent's
    # attribute; the top one's has no note (cattrs calls cls(**fields) outside its per-field checks).
    target = holder if holder is not None and path == [] else _type_at(cls, path)
    if isinstance(leaf, FieldError):
        return bad_value_error(source, f"{key}.{leaf.key}", leaf.value, leaf.expected)
    return Rejected(key, _value_at(data, path), target if isinstance(target, type) else cls, leaf)


def _type_at(cls: Any, path: list[Any]) -> Any:
    for step in path:
        if dataclasses.is_dataclass(cls) and isinstance(step, str):
            cls = typing.get_type_hints(cls).get(step, cls)
            if _is_union(cls):  # Optional[Model]: the dataclass arm is the one that was built
                cls = next((a for a in typing.get_args(cls) if dataclasses.is_dataclass(a)), cls)
    return cls


def expected(tp: Any) -> str:
    """What a value for `tp` looks like, in a job file's words."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return "any value"
    if tp is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(expected(a) for a in args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    if dataclasses.is_dataclass(tp):
        return f"a mapping with keys {', '.join(f.name for f in dataclasses.fields(tp))}"
    if origin is tuple and args and args[-1] is not Ellipsis:
        return f"a list of {len(args)} items ({', '.join(expected(a) for a in args)})"
    if origin is not None and cattrs.cols.is_mapping(tp):
        return f"a mapping of {expected(args[0])} to {expected(args[1])}" if args else "a mapping"
    if origin is not None and (cattrs.cols.is_sequence(tp) or cattrs.cols.is_any_set(tp)):
        return f"a list, each item {expected(args[0])}" if args else "a list"
    if isinstance(tp, type) and issubclass(tp, PurePath):
        return "a path (a string)"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, repr(tp))


def _int(value: Any, tp: type) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if not -INT64 <= value < INT64:  # as job files: wider than any C integer torch or the OS reads
            raise _Bad(value, "an integer that fits in 64 bits")
        return value
    raise _Bad(value, "an integer")


def _float(value: Any, tp: type) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise _Bad(value, "a finite number")
        return float(value)
    raise _Bad(value, "a number")


def _exact(kind: type, what: str) -> Any:
    def hook(value: Any, tp: type) -> Any:
        if isinstance(value, kind):
            return value
        raise _Bad(value, what)
    return hook


def _path(value: Any, tp: type) -> PurePath:
    if isinstance(value, str) and value:
        return tp(value)
    raise _Bad(value, "a path (a non-empty string)")


def _enum(value: Any, tp: type[enum.Enum]) -> enum.Enum:
    for member in tp:  # YAML gives the value (`mode: fast`); the member's name is accepted too (`FAST`)
        if value == member.value and type(value) is type(member.value):
            return member
    if isinstance(value, str) and value in tp.__members__:
        return tp.__members__[value]
    raise _Bad(value, expected(tp))


def _literal(value: Any, tp: Any) -> Any:
    for allowed in typing.get_args(tp):
        if value == allowed and type(value) is type(allowed):  # `true` is not 1, `1` is not 1.0
            return allowed
    raise _Bad(value, expected(tp))


def _shape_fits(value: Any, tp: Any) -> bool:
    """Could `value` be meant for `tp` by its shape alone: a mapping for a dataclass or dict, a list for a list."""
    if dataclasses.is_dataclass(tp) or (typing.get_origin(tp) is not None and cattrs.cols.is_mapping(tp)):
        return isinstance(value, Mapping)
    if typing.get_origin(tp) is not None and (cattrs.cols.is_sequence(tp) or cattrs.cols.is_any_set(tp)):
        return isinstance(value, list)
    return not isinstance(value, (Mapping, list))


def _union_factory(tp: Any, conv: cattrs.Converter) -> Any:
    arms = [a for a in typing.get_args(tp) if a is not type(None)]
    optional = len(arms) < len(typing.get_args(tp))

    def hook(value: Any, _: Any) -> Any:
        if value is None:
            if optional:
                return None
            raise _Bad(value, expected(tp))
        fitting = [a for a in arms if _shape_fits(value, a)]
        if len(fitting) == 1:  # decided by shape: the arm's own error (a typo inside it) is the one to show
            return conv.structure(value, fitting[0])
        taken = []
        for arm in fitting:
            try:
                taken.append((arm, conv.structure(value, arm)))
            except Exception:  # noqa: BLE001 - this arm does not take it; the next may
                continue
            if not dataclasses.is_dataclass(arm):
                break  # scalars: the first member, in the order written, that takes the value
        if len(taken) > 1:
            raise _Bad(value, f"a mapping that fits only one of {', '.join(a.__name__ for a, _ in taken)} "
                              f"(it fits each; add a key that tells them apart)")
        if taken:
            return taken[0][1]
        raise _Bad(value, expected(tp))
    return hook


def _checked(factory: Any, kinds: tuple[type, ...]) -> Any:
    """cattrs' factory for a container, after checking the value is that container (a string is not a list)."""
    def make(tp: Any, conv: cattrs.Converter) -> Any:
        base = factory(tp, conv)

        def hook(value: Any, _: Any) -> Any:
            if not isinstance(value, kinds):
                raise _Bad(value, expected(tp))
            return base(value, tp)
        return hook
    return make


def _tuple_factory(tp: Any, conv: cattrs.Converter) -> Any:
    args = typing.get_args(tp)
    if not args or args[-1] is Ellipsis:
        return _checked(cattrs.cols.homogenous_tuple_structure_factory, (list, tuple))(tp, conv)
    base = conv.gen_structure_hetero_tuple(tp)  # cattrs' fixed tuple: each item its own type, notes per index

    def hook(value: Any, _: Any) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise _Bad(value, expected(tp))
        return base(value, tp)
    return hook


def _set_factory(tp: Any, conv: cattrs.Converter) -> Any:
    (item,) = typing.get_args(tp) or (Any,)
    as_list = _checked(cattrs.cols.list_structure_factory, (list,))(list[item], conv)
    kind = frozenset if typing.get_origin(tp) is frozenset else set
    return lambda value, _: kind(as_list(value, tp))


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _is_mapping(tp: Any) -> bool:
    return tp in (dict, Mapping) or (typing.get_origin(tp) is not None and cattrs.cols.is_mapping(tp))


def _is_list(tp: Any) -> bool:  # list, Sequence, MutableSequence (tuples are _tuple_factory's)
    return tp is list or (typing.get_origin(tp) not in (None, tuple) and cattrs.cols.is_sequence(tp))


_CONVERTER: cattrs.Converter | None = None


def _converter() -> cattrs.Converter:
    global _CONVERTER
    if _CONVERTER is None:
        conv = cattrs.Converter(forbid_extra_keys=True)  # detailed validation is its default
        conv.register_structure_hook(int, _int)
        conv.register_structure_hook(float, _float)
        conv.register_structure_hook(str, _exact(str, "a string"))
        conv.register_structure_hook(bool, _exact(bool, "true or false"))
        for kind in (PurePath, Path):  # singledispatch: subclasses (PosixPath) too
            conv.register_structure_hook(kind, _path)
        conv.register_structure_hook_factory(  # a dataclass from a mapping only (3 is not a model)
            dataclasses.is_dataclass, _checked(lambda t, c: cattrs.gen.make_dict_structure_fn(t, c), (Mapping,)))
        conv.register_structure_hook_func(lambda t: isinstance(t, type) and issubclass(t, enum.Enum), _enum)
        conv.register_structure_hook_func(lambda t: typing.get_origin(t) is Literal, _literal)
        conv.register_structure_hook_factory(_is_union, _union_factory)
        conv.register_structure_hook_factory(lambda t: typing.get_origin(t) is tuple, _tuple_factory)
        conv.register_structure_hook_factory(_is_mapping, _checked(cattrs.cols.mapping_structure_factory, (Mapping,)))
        conv.register_structure_hook_factory(
            lambda t: typing.get_origin(t) is not None and cattrs.cols.is_any_set(t), _set_factory)
        conv.register_structure_hook_factory(_is_list, _checked(cattrs.cols.list_structure_factory, (list,)))
        _CONVERTER = conv
    return _CONVERTER

