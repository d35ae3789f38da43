"""The files users write (jobs, cluster profiles): each kind described once, as data, and loaded
through one path: find the file (trainer.config.lookup), read it (trainer.config.yamlio), follow
`extends:` (mappings merge, the child wins), and read each file's former key names and relative
paths as today's (trainer.config.filepaths) before the merge.

A kind's description (`FileKind`) says everything that differs between jobs and profiles: the
folder its names are found in, the package that ships it, which keys hold paths, and which former
key names still read. So a profile (described in launcher.config.profile) loads here without this
wing calling back into the launcher. Validation into a dataclass is the schema's
(trainer.config.schema), after `--set` overrides are merged in by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config import filepaths, lookup, overrides
from trainer.config.schema import ConfigError, bad_value_error, field_problem


@dataclass(frozen=True)
class Renamed:
    """A former key name that still reads as today's key."""

    old: str
    new: str
    # A number under the former name gains this unit (`mem_per_task_gb: 64` reads as `mem_per_task: 64G`).
    unit: str = ""


@dataclass(frozen=True)
class FileKind:
    """One kind of file users write: what finding, reading and merging it needs to know."""

    kind: str  # "job", "profile": how messages name it, and the scope of its `--set` keys
    schema: type  # the dataclass it becomes (its fields are the keys `--set` may name)
    folder: str  # "jobs", "cluster_profiles": below the current directory and the user folder
    package: str  # the package whose wheel ships the folder as package data (setup.py)
    path_keys: tuple[str, ...] = ()  # paths: a relative one is read from the file that wrote it
    command_keys: tuple[str, ...] = ()  # a path when it holds a '/', else a command found on the node's PATH
    image_keys: tuple[str, ...] = ()  # a container image file (a path), else a registry reference
    bind_keys: tuple[str, ...] = ()  # lists of SRC[:DST[:MODE]] whose SRC is a path
    renamed: tuple[Renamed, ...] = ()

    @property
    def shipped(self) -> Path:
        return lookup.shipped_dir(self.package, self.folder)

    def find(self, name: str, relative_to: Path | None = None, here: Path | None = None) -> Path:
        """The file NAME stands for (trainer.config.lookup's order), or a ConfigError listing what exists."""
        return lookup.find(self.kind, self.folder, self.shipped, name, relative_to, here)

    def prepare(self, data: Mapping[str, Any], base: Path, source: str, scope: str = "") -> dict[str, Any]:
        """One mapping's own keys as today's (former names renamed) with its relative paths read from
        `base`: a file's folder, or the current directory for `--set` (`scope` "profile." there)."""
        out = renamed(self, data, source, scope)
        out = filepaths.relative_to(out, self.path_keys, base)
        for keys, rule in ((self.command_keys, filepaths.command), (self.image_keys, filepaths.image),
                           (self.bind_keys, filepaths.bind_sources)):
            for key in keys:
                if key in out:
                    out[key] = rule(out[key], base)
        return out


def renamed(kind: FileKind, data: Mapping[str, Any], source: str, scope: str = "") -> dict[str, Any]:
    """`data` with the kind's former key names read as today's; one mapping (one file, or the `--set`
    overrides) may not give both spellings."""
    out = dict(data)
    for old in kind.renamed:
        if old.old not in out:
            continue
        if old.new in out:
            raise ConfigError(f"{source}: both '{scope}{old.old}' and '{scope}{old.new}' are set; '{old.old}' is the "
                              f"former name of '{old.new}': keep only '{old.new}'")
        written = value = out.pop(old.old)
        if old.unit:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (number or value is None):
                raise bad_value_error(source, f"{scope}{old.old}", value,
                                      f"a number of {old.unit}B (or write {old.new}: 64{old.unit})")
            # A non-finite number is left as it is, for the new key's own check to name.
            value = f"{value}{old.unit}" if number and math.isfinite(value) else value
        # Checked here, where the key and value are still as the user wrote them (`mem_per_task_gb: -5`,
        # not `mem_per_task: '-5G'`) and the file or `--set` that wrote them is known.
        problem = field_problem(kind.schema, old.new, value)
        if problem is not None:
            raise bad_value_error(source, f"{scope}{old.old}", written, problem if not old.unit else
                                  f"a number of {old.unit}B that makes a valid {old.new} ({old.new}: {value!r} is "
                                  f"refused: expected {problem})")
        out[old.new] = value
    return out


@dataclass(frozen=True)
class Loaded:
    """A file with the files it `extends:` merged in, and how messages name that chain."""

    data: dict[str, Any]
    source: str  # "jobs/a.yaml" or "jobs/a.yaml (extending jobs/base.yaml)"
    path: Path  # the file itself (the first of the chain)


def load(kind: FileKind, name: str, sets: Mapping[str, Any] | None = None) -> Loaded:
    """The file NAME stands for, merged with the files it `extends:` (recursively: the child wins,
    mappings merge; each file's former names and relative paths are read before the merge), its
    `name` defaulting to the file's, with the `--set` values `sets` (trainer.config.overrides) on top."""
    # `--job -`: the file is read from standard input (launcher.client passes a generated job this
    # way, so no file is left behind); it stands in the current directory, so relative paths and
    # the lookup of your code start there.
    path = Path.cwd() / STDIN if name == "-" else kind.find(name)
    chain: list[Path] = []
    merged: dict[str, Any] = {}
    current: Path | None = path
    while current is not None:
        if current.resolve() in [p.resolve() for p in chain]:
            names = " -> ".join(str(p) for p in chain + [current])
            raise ConfigError(f"{path}: 'extends' forms a cycle: {names}")
        chain.append(current)
        data = read_stdin() if current is path and name == "-" else read_yaml(current)
        parent = data.pop("extends", None)
        merged = deep_merge(kind.prepare(data, current.parent, str(current)), merged)
        if parent is None:
            current = None
        elif not isinstance(parent, str) or not parent:
            raise bad_value_error(str(current), "extends", parent, "the name or path of another file")
        else:
            try:
                current = kind.find(parent, current.parent)
            except ConfigError as err:  # named from the file that wrote `extends:`, not only by the name it gave
                raise ConfigError(f"{current}: key 'extends': {err}") from None
    source = str(chain[0]) if len(chain) == 1 else f"{chain[0]} (extending {', '.join(map(str, chain[1:]))})"
    merged.setdefault("name", path.stem)
    if sets:
        given = set_values(kind, sets)
        # Merged, not replaced: `--set profile.env.A=1` adds A to the file's env instead of dropping the
        # rest, and `--set job.config.lr=0.1` changes one key of an entrypoint's config.
        # Named as typed (`--set profile.time_min`, not the `time` it reads as).
        merged, source = deep_merge(merged, given), overrides.described(source, sets, kind.kind)
    return Loaded(merged, source, path)


def set_values(kind: FileKind, sets: Mapping[str, Any]) -> dict[str, Any]:
    """`--set` values for this kind as its fields: former names read as today's, paths from the
    current directory, unknown keys refused."""
    given = kind.prepare(sets, Path.cwd(), "--set", f"{kind.kind}.")
    overrides.check_keys(given, kind.schema, kind.kind)
    return given


STDIN = "<stdin>"
_stdin: list[bytes] = []  # read once: a submission may load the job more than once


def use_stdin(job: bytes | None) -> None:
    """What `--job -` reads in this command's run: `job` (launcher.client hands a debug run's job to the
    command line it runs in its own process, whose standard input stays the user's: pdb reads it), or
    None: this process's standard input, read when first asked."""
    _stdin[:] = [] if job is None else [job]


def read_stdin() -> dict[str, Any]:
    """The YAML mapping on standard input (`--job -`), read with the same rules as a file."""
    import sys

    if not _stdin:
        _stdin.append(sys.stdin.buffer.read())
    return read_yaml(Path(STDIN), _stdin[0])


def read_yaml(path: Path, text: bytes | None = None) -> dict[str, Any]:
    """One YAML mapping read with the project's one loader (trainer.config.yamlio: YAML 1.2 scalars,
    so `1e-3` is a number and `1:30:00` a string); malformed YAML, an empty file or a non-mapping is
    a ConfigError naming the file."""
    from trainer.config import yamlio  # PyYAML: imported here so that `--help` does not pay for it

    try:
        if text is None:
            with open(path, "rb") as fh:
                text = fh.read()
        data = yamlio.load_bytes(text)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a YAML file") from None
    except OSError as err:  # unreadable (permissions, I/O error: /proc/self/mem)
        raise ConfigError(f"{path}: cannot read it ({err.strerror or err})") from None
    except yamlio.YamlError as err:
        raise ConfigError(f"{path}: {err}") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty; expected a mapping of keys to values "
                          f"(e.g. 'extends: local' and the keys that differ)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys to values, got {type(data).__name__}")
    return data


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `override` on top: mappings merge key by key, anything else is replaced (the
    rule of `extends:` and of `--set`)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
