"""The one rule for relative paths in jobs and profiles.

A path written in a job or profile file is relative to the folder of that file (a profile kept next
to its cluster's config means the same thing from any working directory); a path given on the
command line (`--set`, `--runs-dir`) is relative to the current directory, as shells do; `~` is
expanded in both. Defaults that no file sets (`data`, `runs`) are relative to the current directory.
Paths are made absolute when the file is read, so what the run folder records is what was used.

Some keys hold a path only sometimes: an interpreter is a path when it has a '/' (a bare name is a
command looked up on the node's PATH), a container is an image file or a registry reference, and a
bind's SRC is a path while its DST lives inside the container. Each rule is a function here; which
keys follow which rule is said by each kind of file (trainer.config.files.FileKind).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Container image files (apptainer/singularity, enroot/pyxis); anything else is a registry reference.
IMAGE_FILES = (".sif", ".simg", ".sqsh", ".squashfs", ".img")


def absolute(value: str, base: Path) -> str:
    """`value` as an absolute path, reading a relative one from `base` (no symlinks resolved: the
    path stays the one the user wrote)."""
    path = Path(os.path.expanduser(value))  # `~nosuch/x` stays as written, for trainer.config.values to refuse
    if value.startswith("~") and str(path) == value:
        return value
    return os.path.normpath(path if path.is_absolute() else base.absolute() / path)


def relative_to(data: Mapping[str, Any], keys: Iterable[str], base: Path) -> dict[str, Any]:
    """`data` with each non-empty string under `keys` made absolute from `base` (other values are
    left for validation to report)."""
    out = dict(data)
    for key in keys:
        value = out.get(key)
        if isinstance(value, str) and value:
            out[key] = absolute(value, base)
    return out


def command(value: Any, base: Path) -> Any:
    """An interpreter: absolute when it is a path (has a '/'); a bare name stays a command."""
    return absolute(value, base) if isinstance(value, str) and "/" in value else value


def image(value: Any, base: Path) -> Any:
    """A container: absolute when it is an image file (by its ending, or written as a relative path);
    a registry reference (`docker://...`, `nvcr.io/nvidia/pytorch:24.08-py3`) stays as written."""
    if isinstance(value, str) and "://" not in value and (value.endswith(IMAGE_FILES)
                                                          or value.startswith(("./", "../", "~"))):
        return absolute(value, base)
    return value


def bind_sources(value: Any, base: Path) -> Any:
    """Container binds `SRC[:DST[:MODE]]`: each SRC made absolute, DST and MODE as written."""
    if not isinstance(value, list):
        return value
    # An empty SRC (`:/x`) stays empty, for validation to refuse: read from `base` it would bind that folder.
    return [":".join([absolute(b.split(":")[0], base), *b.split(":")[1:]]) if isinstance(b, str) and b
            and not b.startswith(":") else b for b in value]
