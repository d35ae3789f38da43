"""Where jobs and profiles are found, in one documented order.

A NAME is looked up in, first to last:
  1. an explicit path (absolute, relative to the current directory, or, for `extends:`, relative
     to the file that extends it);
  2. `./jobs/NAME.yaml`, `./cluster_profiles/NAME.yaml` in the current directory;
  3. the user folder: `$DDP_SUBMIT_CONFIG_DIR`, else `$XDG_CONFIG_HOME/ddp-submit`, else
     `~/.config/ddp-submit` (with `jobs/` and `cluster_profiles/` inside);
  4. the shipped ones (package data of an installed copy, or the checkout's folders).
The first match wins; `ddp-submit list-jobs` / `list-profiles` show every folder and what it holds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from trainer.config import values
from trainer.config.schema import ConfigError

TOOL = "ddp-submit"
CONFIG_DIR_VAR = "DDP_SUBMIT_CONFIG_DIR"
# The folder that holds the packages `trainer/` and `launcher/` (and, in a checkout, `submit.py`,
# `jobs/`, `cluster_profiles/`): the checkout's top level, or site-packages when installed. The one
# place the project derives it (the code snapshot, the tasks' PYTHONPATH and container binds use it).
CODE_ROOT = Path(__file__).resolve().parents[2]


def user_dir() -> Path:
    explicit = os.environ.get(CONFIG_DIR_VAR)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser() / TOOL


def shipped_dir(package: str, folder: str) -> Path:
    """The shipped `folder` ("jobs", "cluster_profiles"): package data inside `package` when
    installed from a wheel (setup.py), else the checkout's top-level folder (`python submit.py`,
    editable installs)."""
    inside = CODE_ROOT / package / folder
    return inside if inside.is_dir() else CODE_ROOT / folder


class Place(NamedTuple):
    """A folder searched for a name. A NamedTuple, not a frozen dataclass: every submission builds
    this class, and a tuple's class costs a fraction of a dataclass's generated methods."""

    label: str  # "current directory", "user folder", "shipped"
    folder: Path


def places(folder: str, shipped: Path, here: Path | None = None) -> list[Place]:
    """The folders searched for a name, in order; one folder seen twice (the checkout's own
    cluster_profiles/ as the current directory's) is listed once, at its first place. `here`: the
    submitter's folder when it is not this process's current directory (launcher.client's `cwd=`)."""
    out: list[Place] = []
    for place in (Place("current directory", (here or Path.cwd()) / folder), Place("user folder", user_dir() / folder),
                  Place("shipped", shipped)):
        if all(os.path.realpath(p.folder) != os.path.realpath(place.folder) for p in out):
            out.append(place)
    return out


def find(kind: str, folder: str, shipped: Path, name: str, relative_to: Path | None = None,
         here: Path | None = None) -> Path:
    """The file NAME stands for (see the module's order), or a ConfigError listing what exists; `here` as
    for `places`."""
    problem = values.file_name(name)
    if problem is not None:
        shown = values.shown_name(name)
        raise ConfigError(f"{kind} {shown}: expected the name or path of a {kind} file: {problem}")
    candidates = [(here or Path()) / Path(name).expanduser()]
    if relative_to is not None:
        candidates.append(relative_to / name)
    for place in places(folder, shipped, here):
        candidates += [place.folder / f"{name}.yaml", place.folder / name]
    for path in candidates:
        if _is_file(path):
            return path
    found = [f"{p.folder} ({', '.join(sorted(n for n in names(p.folder))) or 'none'})"
             for p in places(folder, shipped, here)]
    raise ConfigError(f"{kind} '{name}' not found: not a file, and not a name in: {'; '.join(found)}")


def _is_file(path: Path) -> bool:
    """Whether `path` is a file; False for a name the file system cannot hold (NAME_MAX once `.yaml`
    is added to a name that fit): that candidate is not there, and the next one is tried."""
    try:
        return path.is_file()
    except OSError:
        return False


def names(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def catalog(folder: str, shipped: Path) -> list[tuple[Place, str, Path, bool]]:
    """Every (place, name, file, used) found, in lookup order; `used` is False for a file that an
    earlier place's file of the same name hides."""
    seen: set[str] = set()
    rows = []
    for place in places(folder, shipped):
        for name in names(place.folder):
            rows.append((place, name, place.folder / f"{name}.yaml", name not in seen))
            seen.add(name)
    return rows
