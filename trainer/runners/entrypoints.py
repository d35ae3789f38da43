"""Finding and calling a job's `entrypoint: "package.module:function"`.

Where the module is looked up, in order: Python's own path (the project itself when run from it,
installed packages, PYTHONPATH), then the current directory, then the folder of the job file
(`job.code_dir`, set by the submitter). The same lookup runs before queueing (`check`: a missing
module or function, or a `config:` key the function's config dataclass does not accept, is a
ConfigError: exit 2, nothing queued) and on every rank (`call`).

The function is called as `fn(ctx)` or `fn(ctx, config)`. When its config parameter is annotated
with a dataclass, `config:` is validated against it (the same one-line errors as job files) and the
function receives the dataclass; otherwise it receives the mapping.

No torch at import time: the submitter imports this to check a job (importing the user's module
may import torch itself: that is the check's cost).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import sys
import typing
from collections.abc import Callable
from typing import Any

from trainer.config.schema import ConfigError, build


def _search_path(code_dir: str) -> list[str]:
    extra = [os.getcwd()] + ([code_dir] if code_dir else [])
    return [p for p in extra if p not in sys.path]


def load(spec: str, code_dir: str = "", source: str = "job") -> Callable[..., Any]:
    """The function `spec` names, or a ConfigError saying what is missing and where it looked."""
    module_name, _, function_name = spec.partition(":")
    sys.path.extend(_search_path(code_dir))  # appended: the project and installed packages win
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name) and (module_name == err.name
                                                              or module_name.startswith(err.name + ".")):
            where = ", ".join(["the Python path", "the current directory"] + (["the job file's folder"]
                                                                              if code_dir else []))
            raise ConfigError(f"{source}: key 'entrypoint' has invalid value {spec!r}; no module named "
                              f"'{err.name}' (looked in {where})") from None
        raise  # the user's module exists but imports something missing: their traceback says what
    function = getattr(module, function_name, None)
    if not callable(function):
        names = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
                       and v.__module__ == module.__name__)
        raise ConfigError(f"{source}: key 'entrypoint' has invalid value {spec!r}; module '{module_name}' has no "
                          f"function '{function_name}' (its functions: {', '.join(names) or 'none'})")
    return function


def config_class(function: Callable[..., Any]) -> type | None:
    """The dataclass the function's second parameter is annotated with, if any."""
    params = list(inspect.signature(function).parameters.values())
    if len(params) < 2:
        return None
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - unresolvable annotations: no validation, the mapping is passed
        return None
    hint = hints.get(params[1].name)
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def arity(function: Callable[..., Any], spec: str, source: str) -> int:
    params = [p for p in inspect.signature(function).parameters.values()
              if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) not in (1, 2):
        raise ConfigError(f"{source}: key 'entrypoint' has invalid value {spec!r}; the function must take "
                          f"(ctx) or (ctx, config), it takes ({', '.join(p.name for p in params)})")
    return len(params)


def prepare(spec: str, config: dict[str, Any], code_dir: str, source: str) -> tuple[Callable[..., Any], int, Any]:
    """The function, how many arguments it takes, and its config (validated when it is a dataclass)."""
    function = load(spec, code_dir, source)
    count = arity(function, spec, source)
    cls = config_class(function)
    value = build(cls, config, source, prefix="config.") if cls is not None else dict(config)
    return function, count, value


def check(spec: str, config: dict[str, Any], code_dir: str, source: str) -> None:
    """Before queueing: the module imports, the function exists and takes (ctx[, config]), the config fits."""
    prepare(spec, config, code_dir, source)
