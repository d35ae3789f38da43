"""The one rule for relative paths in jobs and profiles.

A path written in a job or profile file is relative to the folder of that file (a profile kept next
to its cluster's config means the same thing from any working directory); a path given on the
command line (`--set`, `--runs-dir`) is relative to the current directory, as shells do; `~` is
expanded in both. Defaults that no file sets (`data`, `runs`) are relative to the current directory.
Paths are made absolute when the file is read, so what the run folder records is what was used.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def absolute(value: str, base: Path) -> str:
    """`value` as an absolute path, reading a relative one from `base` (no symlinks resolved: the
    path stays the one the user wrote)."""
    path = Path(value).expanduser()
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
