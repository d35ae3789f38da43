"""Your function pickled by value: handed over from Python (`launcher.client.submit(fn)`) when the ranks
cannot import it by name (defined in a notebook cell or a script's `__main__`, a lambda, a closure, a
functools.partial). The submitter writes it once into the run folder (`function.pkl`, private like the
rest of the folder); every rank of every attempt, requeue and `--resume` reads that same file.

cloudpickle wrote it; the standard pickle module reads it (cloudpickle need only be importable, and it
is wherever submitit is). What the function refers to by reference (modules of your project, installed
packages) is imported through the one lookup rule (trainer.config.project), inside the run's snapshot on
a rank, exactly as an entrypoint's module is. Unpickling runs code: a file that someone else could have
written (not yours, or writable by group or others, or in such a folder) is refused.

No torch at import time: the submitter checks a pickled function with this module (unpickling imports
what the function names, torch among them: the check's cost, as importing an entrypoint's module is).
"""

from __future__ import annotations

import functools
import linecache
import os
import pickle
import stat
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.config import project
from trainer.config.schema import ConfigError
from trainer.rank import rundir
from trainer.runners import entrypoints

FILE = rundir.FUNCTION_FILE  # in the run folder (a sweep's: beside its task folders)
KEY = "function"  # the job key that names a pickled function ("__main__:train"), in errors


def run_root(run_dir: str, sweep: str) -> Path:
    """The run folder that holds function.pkl, from a rank's folder: its own, or a sweep task's parent."""
    folder = Path(run_dir)
    return folder.parent if sweep else folder


def read(path: Path, source: str, name: str) -> bytes:
    """The pickled function at `path`, after checking that only you could have written it."""
    try:
        for where in (path, path.parent):
            info = os.stat(where)
            if info.st_uid not in (os.geteuid(), 0) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise ConfigError(f"{source}: key '{KEY}' has invalid value {name!r}; {where} is writable by others "
                                  f"(mode {stat.filemode(info.st_mode)}, owner uid {info.st_uid}), and unpickling "
                                  f"runs code: refusing to load it (resume only your own runs)")
        return path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{source}: key '{KEY}' has invalid value {name!r}; its pickled function {path} cannot be "
                          f"read ({err.strerror}); a run of a function handed over from Python keeps it in its "
                          f"run folder") from None


def write(run_dir: Path, blob: bytes) -> None:
    """The submitter, once the run folder exists: `blob` as the run's function.pkl, private (0600) and
    whole or not at all."""
    path = run_dir / FILE
    partial = path.with_name(f".{path.name}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as fh:
        fh.write(blob)
    partial.replace(path)


def stored(run_dir: Path, source: str, name: str) -> bytes:
    """The pickled function a run folder holds (`--resume`: the one its attempts ran)."""
    return read(run_dir / FILE, source, name)


def load(blob: bytes, name: str, source: str, folders: list[str]) -> Any:
    """The function `blob` holds, unpickled with the rule's folders first on sys.path.

    launcher.client pickles {"function": fn, "file": where it was defined, "lines": that file's text}:
    cloudpickle names the code of a function pickled by value "<dynamic-code>", so the file and its lines
    are put back here, and a traceback on a rank shows your cell's or script's lines as it would there."""
    project.activate(folders)
    try:
        held = pickle.loads(blob)
    except ModuleNotFoundError as err:
        where = ", ".join(folders + ["PYTHONPATH and installed packages"])
        raise entrypoints.user_error(
            f"{source}: key '{KEY}' has invalid value {name!r}; it refers to module '{err.name}', which is not "
            f"importable here (looked in {where}); keep your modules in your project, or install them", err) from None
    except Exception as err:  # noqa: BLE001 - what unpickling the user's objects raises is theirs
        raise entrypoints.user_error(f"{source}: key '{KEY}' has invalid value {name!r}; unpickling it failed: "
                                     f"{type(err).__name__}: {err}", err) from None
    if not (isinstance(held, dict) and "function" in held):
        return held
    file, lines = str(held.get("file") or ""), held.get("lines")
    if file and isinstance(lines, list) and lines:
        linecache.cache[file] = (sum(map(len, lines)), None, lines, file)
    return _placed(held["function"], file) if file else held["function"]


def _placed(function: Any, file: str) -> Any:
    """`function` (or a partial's) with its dynamic code named after `file` again."""
    if isinstance(function, functools.partial):
        _placed(function.func, file)
    elif isinstance(function, types.FunctionType):
        function.__code__ = _renamed(function.__code__, file)
    return function


def _renamed(code: types.CodeType, file: str) -> types.CodeType:
    if code.co_filename != "<dynamic-code>":
        return code
    consts = tuple(_renamed(c, file) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=file, co_consts=consts)


def prepare(name: str, config: dict[str, Any], run_dir: str, sweep: str, code_dir: str, project_root: str,
            source: str, snapshot: str | None) -> tuple[Callable[..., Any], int, Any]:
    """On a rank: the run's pickled function, checked and with its config built as an entrypoint's."""
    path = run_root(run_dir, sweep) / FILE
    blob = read(path, source, name)
    function = load(blob, name, source, entrypoints.search_path(code_dir, project_root, snapshot))
    return entrypoints.checked(function, name, config, source, KEY)


def captured(function: Any, most: int = 5) -> list[tuple[str, int]]:
    """What pickling `function` by value takes along, largest first, at most `most`: (name, bytes) for
    each global it reads, each variable it closes over, its defaults and a partial's arguments."""
    import cloudpickle  # only when a pickle was refused as too large: to say why

    found: dict[str, Any] = {}
    while isinstance(function, functools.partial):
        found.update({f"partial argument {i}": a for i, a in enumerate(function.args)})
        found.update({f"partial argument {k}": v for k, v in function.keywords.items()})
        function = function.func
    code = getattr(function, "__code__", None)
    if isinstance(code, types.CodeType):
        scope = getattr(function, "__globals__", {})
        found.update({n: scope[n] for n in _global_names(code) if n in scope})
        for n, cell in zip(code.co_freevars, getattr(function, "__closure__", None) or ()):
            try:
                found[n] = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned after the function was made)
                continue
        found.update({f"default of {n}": v for n, v in (getattr(function, "__kwdefaults__", None) or {}).items()})
        found.update({f"default {i}": v for i, v in enumerate(getattr(function, "__defaults__", None) or ())})
    sizes = []
    for name, value in found.items():
        if isinstance(value, types.ModuleType):  # pickled by name: a few bytes
            continue
        try:
            sizes.append((name, len(cloudpickle.dumps(value))))
        except Exception:  # noqa: BLE001, S112 - unpicklable alone: it did not make the pickle large
            continue
    return sorted(sizes, key=lambda item: -item[1])[:most]


def _global_names(code: types.CodeType) -> list[str]:
    """The global names `code` and the functions nested in it read (what cloudpickle takes along)."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_names(const)
    return list(dict.fromkeys(names))
