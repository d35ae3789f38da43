"""Finding and calling a job's `entrypoint: "package.module:function"`.

Where the module is looked up: the one rule of trainer/config/project.py (your project root, its
`src/`, the directory you submitted from and the job file's folder, inside the project; then
PYTHONPATH and installed packages), on the ranks inside the run's snapshot of the project. The
same lookup runs before queueing (`check`: a missing module or function, or a `config:` key the
function's config dataclass does not accept, is a ConfigError: exit 2, nothing queued) and on
every rank (`prepare`), so a check that passes means the ranks find the same function.

Errors from the user's own code are the user's: a module that raises, has a syntax error,
imports a missing package or calls sys.exit() while being imported, and a config dataclass whose
`__post_init__` raises, are each one ConfigError line naming the job file and the module or key, with
`details`: the user's own traceback frames (none of this project's or importlib's), which the command
line prints after the line. A traceback through the submitter would say the submitter failed.

What is named must be a function (a `def`, a lambda, a method, or a functools.partial of one): a class,
or another callable object, is refused. `checked` is the one check for a function found by name here
and for one unpickled from a run folder (trainer.runners.pickled).

The function is called as `fn(ctx, config)` when its signature takes two positional arguments
(`(ctx, config)`, `(*args, **kwargs)`, `(ctx, config=None)`), else as `fn(ctx)` (`(ctx)`,
`(ctx, *rest)`). When its config parameter is annotated with a dataclass, `config:` is validated
against it at any depth (trainer.runners.usertypes: nested dataclasses, Path, Enum, tuple, ...; the
same one-line errors as job files) and the function receives the dataclass; otherwise it receives
the mapping.

No torch at import time: the submitter imports this to check a job (importing the user's module
may import torch itself: that is the check's cost).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import os
import traceback
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.config import project
from trainer.config.lookup import CODE_ROOT
from trainer.config.schema import ConfigError

# Frames from these are the submitter's, not the user's: left out of what a user error shows.
_OURS = tuple(str(CODE_ROOT / wing) + os.sep for wing in ("trainer", "launcher"))
_IMPORTLIB = os.path.dirname(importlib.__file__) + os.sep
_CATTRS = os.sep + "cattrs" + os.sep  # the library that builds a config dataclass (trainer.runners.usertypes)


def _theirs(filename: str) -> bool:
    if filename.startswith("<"):  # "<frozen importlib._bootstrap>", a dataclass's generated "<string>" __init__,
        return not (filename.startswith(("<frozen importlib", "<cattrs")) or filename == "<string>")  # cattrs' code
    path = os.path.abspath(filename)
    return not (path.startswith(_OURS) or path.startswith(_IMPORTLIB) or _CATTRS in path)


def _drop_our_frames(te: traceback.TracebackException) -> None:
    seen: set[int] = set()
    while te is not None and id(te) not in seen:  # the exception, then what it was raised from or during
        seen.add(id(te))
        te.stack = traceback.StackSummary.from_list([f for f in te.stack if _theirs(f.filename)])
        te = te.__cause__ or te.__context__  # type: ignore[assignment]


def user_traceback(err: BaseException) -> str:
    """`err`'s traceback through the user's frames only (none of this project's, importlib's or cattrs')."""
    te = traceback.TracebackException.from_exception(err)
    _drop_our_frames(te)
    return "".join(te.format()).rstrip("\n")


def user_error(message: str, err: BaseException) -> ConfigError:
    """A ConfigError whose `details` are `err`'s traceback through the user's frames only."""
    error = ConfigError(message)
    error.details = user_traceback(err)  # type: ignore[attr-defined]  # (launcher.commands.main)
    return error


def search_path(code_dir: str, project_root: str, snapshot: str | None) -> list[str]:
    """The rule's folders (trainer.config.project), for the check (no snapshot) and a rank alike."""
    root = project_root or str(project.root_for(None, Path.cwd()))
    return project.rank_path(root, code_dir, os.getcwd(), snapshot)


def load(spec: str, code_dir: str = "", source: str = "job", project_root: str = "",
         snapshot: str | None = None) -> Callable[..., Any]:
    """The function `spec` names, or a ConfigError saying what is missing and where it looked.
    `snapshot`: on a rank, the run's copy of the project (None: the live project, as the check)."""
    module_name, _, function_name = spec.partition(":")
    folders = search_path(code_dir, project_root, snapshot)
    project.activate(folders)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name) and (module_name == err.name
                                                              or module_name.startswith(err.name + ".")):
            where = ", ".join(folders + ["PYTHONPATH and installed packages"])
            raise ConfigError(f"{source}: key 'entrypoint' has invalid value {spec!r}; no module named "
                              f"'{err.name}' (looked in {where})") from None
        raise _import_failed(spec, module_name, source, err) from None  # their module imports something missing
    except SystemExit as err:
        code = "" if err.code is None else repr(err.code)
        raise user_error(f"{source}: key 'entrypoint' has invalid value {spec!r}; module '{module_name}' called "
                         f"sys.exit({code}) while being imported", err) from None
    except Exception as err:  # noqa: BLE001 - anything the user's module raises at import is theirs
        raise _import_failed(spec, module_name, source, err) from None
    function = getattr(module, function_name, None)
    if inspect.isclass(function) or (function is not None and callable(function) and not is_function(function)):
        raise not_a_function(source, "entrypoint", spec, function)
    if not callable(function):
        names = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
                       and v.__module__ == module.__name__)
        raise ConfigError(f"{source}: key 'entrypoint' has invalid value {spec!r}; module '{module_name}' has no "
                          f"function '{function_name}' (its functions: {', '.join(names) or 'none'})")
    return function


def _import_failed(spec: str, module_name: str, source: str, err: Exception) -> ConfigError:
    # str(SyntaxError) carries its file and line: "'(' was never closed (train.py, line 2)".
    return user_error(f"{source}: key 'entrypoint' has invalid value {spec!r}; importing module '{module_name}' "
                      f"failed: {type(err).__name__}: {err}", err)


def is_function(value: Any) -> bool:
    """What may be called once per rank: a function (a `def` or a lambda), a method, or a functools.partial
    of one. A class would be constructed (its instance is no result), and another callable object hides
    the signature the check reads."""
    return inspect.isroutine(value) or (isinstance(value, functools.partial) and is_function(value.func))


def not_a_function(source: str, key: str, spec: str, value: Any) -> ConfigError:
    kind = "a class" if inspect.isclass(value) else f"an object of type {type(value).__name__}"
    return ConfigError(f"{source}: key '{key}' has invalid value {spec!r}; it names {kind}, not a function (an "
                       f"entrypoint is a function taking (ctx) or (ctx, config); a class would be constructed, "
                       f"not called)")


def not_called_for_a_result(function: Callable[..., Any]) -> str | None:
    """What `function` is when calling it does not run it (a generator or a coroutine function), else None."""
    inner = function
    while isinstance(inner, functools.partial):
        inner = inner.func
    if inspect.isasyncgenfunction(inner):
        return "an async generator function (async def with yield)"
    if inspect.iscoroutinefunction(inner):
        return "a coroutine function (async def)"
    if inspect.isgeneratorfunction(inner):
        return "a generator function (a def with yield)"
    return None


def config_class(function: Callable[..., Any]) -> type | None:
    """The dataclass the function's second parameter is annotated with, if any."""
    params = list(inspect.signature(function).parameters.values())
    if len(params) < 2 or params[1].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                 inspect.Parameter.POSITIONAL_OR_KEYWORD):
        return None
    try:
        hints = typing.get_type_hints(getattr(function, "func", function))  # (a partial: its function's)
    except Exception:  # noqa: BLE001 - unresolvable annotations: no validation, the mapping is passed
        return None
    hint = hints.get(params[1].name)
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def arity(function: Callable[..., Any], spec: str, source: str, key: str = "entrypoint") -> int:
    """2 when the function can be called as fn(ctx, config), else 1 when as fn(ctx), else a ConfigError."""
    signature = inspect.signature(function)
    for count in (2, 1):
        try:
            signature.bind(*([None] * count))
            return count
        except TypeError:
            pass
    bare = signature.replace(parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                             return_annotation=signature.empty)  # (the names and kinds are what is wrong)
    raise ConfigError(f"{source}: key '{key}' has invalid value {spec!r}; the function must take "
                      f"(ctx) or (ctx, config), its signature is {bare}")


def prepare(spec: str, config: dict[str, Any], code_dir: str, source: str, project_root: str = "",
            snapshot: str | None = None) -> tuple[Callable[..., Any], int, Any]:
    """The function, how many arguments it takes, and its config (validated when it is a dataclass)."""
    return checked(load(spec, code_dir, source, project_root, snapshot), spec, config, source)


def checked(function: Callable[..., Any], spec: str, config: dict[str, Any], source: str,
            key: str = "entrypoint") -> tuple[Callable[..., Any], int, Any]:
    """`function` (found by name, or unpickled: trainer.runners.pickled) checked: a function, taking
    (ctx) or (ctx, config), its config built (validated when it declares a dataclass)."""
    if not is_function(function):
        raise not_a_function(source, key, spec, function)
    if (kind := not_called_for_a_result(function)) is not None:
        raise ConfigError(f"{source}: key '{key}' has invalid value {spec!r}; it is {kind}: calling it returns "
                          f"{'a generator' if 'generator' in kind else 'a coroutine'}, not the run's result, and "
                          f"runs none of its body; make it a plain `def` that returns the metrics")
    count = arity(function, spec, source, key)
    cls = config_class(function)
    if cls is None:
        return function, count, dict(config)
    from trainer.runners import usertypes  # cattrs: loaded only when a user's config is checked (start-up time)
    try:
        value = usertypes.build(cls, config, source, prefix="config")
    except usertypes.Rejected as err:  # the dataclass's own __post_init__ refused: the user's message
        raise user_error(f"{source}: key '{err.key}' has invalid value {err.value!r}; {err.cls.__name__} rejected "
                         f"it: {type(err.error).__name__}: {err.error}", err.error) from None
    return function, count, value


def check(spec: str, config: dict[str, Any], code_dir: str, source: str, project_root: str = "") -> None:
    """Before queueing: the module imports, the function exists and takes (ctx[, config]), the config fits."""
    prepare(spec, config, code_dir, source, project_root)
