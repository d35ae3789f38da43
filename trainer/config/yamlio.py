"""YAML as users write it: one loader for job files, profile files and `--set` values.

PyYAML implements YAML 1.1, whose implicit typing surprises people: `1e-3` is a string, `1:30:00`
is the base-60 integer 5400, `no`/`on`/`y` are booleans, `017` is octal and `2026-01-01` a date.
This loader resolves plain scalars by YAML 1.2's core schema instead (what users expect and what
most other tools read): numbers as written (`1e-3`, `.5`, `5e4`, `0x1f`, `.inf`), booleans only
from true/false, null from null/~/nothing; everything else stays a string for the field that
reads it (e.g. a SLURM time limit "1:30:00").

It also refuses what a careless or hostile file could do to the submitter: duplicate keys (where
the last one would silently win), alias expansion bombs, deep nesting, and text that is not UTF-8.
Every refusal is a ValueError with a one-line message; the caller adds the file name.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# Generous for real configs, small enough that a crafted file cannot blow up memory or recursion.
MAX_ALIASES = 100
MAX_DEPTH = 32
MAX_BYTES = 1 << 20  # 1 MiB: profiles and jobs are a few hundred bytes
# Values once aliases are expanded (what json.dumps or a deep copy would walk).
MAX_EXPANDED = 100_000
MERGE_TAG = "tag:yaml.org,2002:merge"

_CORE_RESOLVERS = [
    (MERGE_TAG, r"^(?:<<)$", ["<"]),  # `<<: *base` merges a mapping, as in YAML 1.1 (a widespread extension)
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    ("tag:yaml.org,2002:float",
     r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
     list("-+0123456789.")),
]


class YamlError(ValueError):
    """The text is not YAML we accept; the message is one line (position included where known)."""


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars and the limits above."""

    yaml_implicit_resolvers: dict[Any, Any] = {}

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise YamlError(f"more than {MAX_ALIASES} aliases (*name): refused, as an alias bomb would be")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:  # merged keys may be overridden by the mapping's own
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (dict, list)):
                raise YamlError(f"line {key_node.start_mark.line + 1}: a key must be a plain value, not a "
                                f"{type(key).__name__}")
            if key in seen:
                raise YamlError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r} (each key once; "
                                f"the second would silently replace the first)")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> int:
        text = str(self.construct_scalar(node))
        if text.startswith(("0o", "0x")):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text, 10)

    def construct_yaml_float(self, node: Any) -> float:
        text = str(self.construct_scalar(node)).lower()
        sign = -1.0 if text.startswith("-") else 1.0
        bare = text.lstrip("+-")
        if bare == ".inf":
            return sign * float("inf")
        if bare == ".nan":
            return float("nan")
        return float(text)


for _tag, _pattern, _first in _CORE_RESOLVERS:
    _Loader.add_implicit_resolver(_tag, re.compile(_pattern), _first)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)


def loads(text: str) -> Any:
    """Parse one YAML document with the rules above."""
    if len(text) > MAX_BYTES:
        raise YamlError(f"{len(text)} characters: larger than the {MAX_BYTES} a config may have")
    try:
        # The reader checks the characters as the loader is made (control characters are refused).
        loader = _Loader(text)
    except yaml.YAMLError as err:
        raise YamlError(f"malformed YAML ({str(err).splitlines()[0]})") from None
    try:
        data = loader.get_single_data()
        _check_expanded_size(data)
        return data
    except YamlError:
        raise
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise YamlError(f"malformed YAML ({where}{problem})") from None
    except RecursionError:
        raise YamlError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def _check_expanded_size(data: Any) -> None:
    """Aliases share one object; count values as if every alias were copied out, once per object."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, (dict, list)):
            return 1
        if id(value) not in sizes:
            sizes[id(value)] = 0  # a self-referencing alias counts once
            children = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
            total = 1
            for _, child in children:
                total += size(child)
                if total > MAX_EXPANDED:
                    break
            sizes[id(value)] = total
        return sizes[id(value)]

    if size(data) > MAX_EXPANDED:
        raise YamlError(f"more than {MAX_EXPANDED} values once its aliases (*name) are expanded: refused, as an "
                        f"alias bomb would be")


UTF8_BOM = b"\xef\xbb\xbf"


def load_bytes(raw: bytes) -> Any:
    """Parse a file's bytes: UTF-8 text only (a byte-order mark is allowed)."""
    # The mark is stripped here rather than by the "utf-8-sig" codec: that codec is one more module to
    # load on every submission, and its error offsets would not count the mark's 3 bytes.
    skip = len(UTF8_BOM) if raw.startswith(UTF8_BOM) else 0
    try:
        text = raw[skip:].decode("utf-8")
    except UnicodeDecodeError as err:
        at = skip + err.start  # in the file as written
        raise YamlError(f"not UTF-8 text (byte {at}: {raw[at:at + 1]!r})") from None
    return loads(text)


def not_as_written(text: str) -> str | None:
    """Why YAML would not read `text` (a `--set` value) as it is written, in words: part of it dropped (a
    comment), or read as YAML syntax (an anchor, a tag, a block scalar, a document marker, a block
    mapping or list); None when it reads as written (a plain or quoted scalar, a flow [list] or
    {mapping}) or is not valid YAML at all (`scalar` names that error)."""
    stripped = text.strip()
    try:
        events = list(yaml.parse(text, Loader=_Loader)) if stripped else []
    except yaml.YAMLError:
        return None
    if any(isinstance(e, yaml.DocumentStartEvent) and e.explicit for e in events):
        return "'---' starts a YAML document"
    body = [e for e in events if isinstance(e, (yaml.NodeEvent, yaml.CollectionEndEvent))]
    if stripped and not body:
        return f"{_short(stripped)} is a YAML comment (a '#' first or after a space), which YAML drops"
    for event in body:
        if getattr(event, "anchor", None) and not isinstance(event, yaml.AliasEvent):
            return f"'&{event.anchor}' is a YAML anchor, which YAML drops"
        if getattr(event, "tag", None):
            return "a '!' there starts a YAML tag, which YAML drops"
        if isinstance(event, yaml.ScalarEvent) and event.style in ("|", ">"):
            return f"'{event.style}' starts a YAML block scalar"
    if not body:
        return None
    first, last = body[0], body[-1]
    if isinstance(first, yaml.CollectionStartEvent) and not first.flow_style:
        return "'KEY: VALUE' or '- ITEM' makes it a YAML mapping or list"
    rest = text[last.end_mark.index:].strip()
    if rest.startswith("#"):
        return f"{_short(rest)} is a YAML comment (a '#' first or after a space), which YAML drops"
    if rest:
        return f"YAML stops reading before {_short(rest)}"
    if isinstance(first, yaml.ScalarEvent) and first.style is None and first.value != stripped:
        return "YAML joins its lines into one"
    return None


def _short(text: str) -> str:
    """A quoted part of a `--set` value for a message: a hostile megabyte cut short."""
    return repr(text) if len(text) <= 100 else f"{text[:50]!r}... ({len(text)} characters)"


def scalar(text: str) -> Any:
    """A `--set` value: the scalar the same text would be in a file (`1e-3` a number, `1:30:00` a string)."""
    value = loads(text) if text.strip() else ""
    return "" if value is None and not text.strip() else value
