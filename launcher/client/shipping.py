"""Your function as the API hands it over: by reference (`"module:function"`, the snapshot holds its
module) when the ranks can import it by that name, else pickled by value with cloudpickle.

By reference: a function defined at the top of a module (`__module__` is not `__main__`, its qualified
name has no `<locals>` or dots, and `getattr(module, name) is fn`) whose module lies where the ranks look
it up: your project's search path (trainer.config.project, the one rule the check and every rank use),
PYTHONPATH, or the installed packages. Anything else is pickled by value: a function defined in a
notebook cell or in a script's `__main__`, a lambda, a closure, a functools.partial, a method, or a
function of a module that is importable here only (a folder you put on sys.path yourself; that module
is pickled by value too). The names such a function refers to in your project's modules stay references:
the ranks import them from the run's snapshot.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import pickle
import site
import sys
import types
from pathlib import Path
from typing import Any

from trainer.config import project


def reference(function: Any, workdir: Path, pythonpath: str) -> str | None:
    """"module:function" when the ranks import `function` by that name; None: pickle it by value."""
    if not inspect.isfunction(function):
        return None
    name, module_name = function.__qualname__, function.__module__
    if not module_name or module_name == "__main__" or not name.isidentifier():
        return None
    module = sys.modules.get(module_name)
    if module is None or getattr(module, name, None) is not function:
        return None
    return f"{module_name}:{name}" if importable(module, workdir, pythonpath) else None


def importable(module: types.ModuleType, workdir: Path, pythonpath: str) -> bool:
    """Whether the ranks find `module` under its name: its file below a folder they search, at the place
    its dotted name says."""
    file = getattr(module, "__file__", None)
    if not file or module.__name__ == "__main__":
        return False
    path = Path(file).resolve()
    parts = module.__name__.split(".")
    depth = len(parts) if path.name == "__init__.py" else len(parts) - 1
    base = path.parents[depth]
    if path.relative_to(base).with_suffix("").parts[:len(parts)] != tuple(parts):
        return False
    root = project.root_for(None, workdir)
    folders = [*project.search_path(root, workdir, workdir), *map(Path, filter(None, pythonpath.split(os.pathsep))),
               *map(Path, site.getsitepackages()), Path(site.getusersitepackages())]
    return base in {folder.resolve() for folder in folders if folder.is_dir()} or \
        any(part in ("site-packages", "dist-packages") for part in base.parts)


def by_value(function: Any, workdir: Path, pythonpath: str) -> bytes:
    """`function` pickled by value (cloudpickle), with its own module's code too when the ranks could not
    import that module (a notebook's is pickled by value anyway)."""
    import cloudpickle  # (installed with submitit)

    inner = function
    while isinstance(inner, functools.partial):
        inner = inner.func
    module = sys.modules.get(getattr(inner, "__module__", "") or "")
    registered = module is not None and module.__name__ != "__main__" and not importable(module, workdir, pythonpath)
    if registered:
        cloudpickle.register_pickle_by_value(module)
    # Where it was defined, and that file's lines (a notebook cell's are in linecache): cloudpickle names
    # its code "<dynamic-code>"; the ranks put the name back, so tracebacks show your lines (trainer.runners.pickled).
    code = getattr(inner, "__code__", None)
    file = code.co_filename if isinstance(code, types.CodeType) else ""
    held = {"function": function, "file": file, "lines": linecache.getlines(file) if file else []}
    try:
        return cloudpickle.dumps(held, protocol=pickle.DEFAULT_PROTOCOL)
    except Exception as err:  # noqa: BLE001 - whatever the pickler raises for what it cannot carry
        raise TypeError(unpicklable(function, err, cloudpickle.dumps)) from None
    finally:
        if registered:
            cloudpickle.unregister_pickle_by_value(module)


def unpicklable(function: Any, err: Exception, dumps: Any) -> str:
    """Why `function` cannot travel to the ranks, naming it and the first thing it carries that cannot be
    pickled: a captured variable, a global it reads, a partial's argument (the pickler's own words name
    neither)."""
    carried: list[tuple[str, Any]] = []
    inner = function
    while isinstance(inner, functools.partial):
        carried += [(f"argument {i} of the partial", a) for i, a in enumerate(inner.args)]
        carried += [(f"argument {k}= of the partial", v) for k, v in inner.keywords.items()]
        inner = inner.func
    if inspect.isfunction(inner):
        found = inspect.getclosurevars(inner)
        carried += [(f"the captured variable '{k}'", v) for k, v in found.nonlocals.items()]
        carried += [(f"the global '{k}'", v) for k, v in found.globals.items()]
    for what, value in carried:
        try:
            dumps(value)
        except Exception as inner_err:  # noqa: BLE001
            return (f"function={shown(function)}: cannot be pickled to travel to the ranks: {what} holds "
                    f"{type(value).__name__} {short(value)}, which cannot be pickled ({type(inner_err).__name__}: "
                    f"{inner_err}); make it inside the function, or pass what it is made from in config")
    return (f"function={shown(function)}: cannot be pickled to travel to the ranks ({type(err).__name__}: {err}); "
            f"define it at the top of a module of your project, which the ranks import by name")


def short(value: Any) -> str:
    """`value`'s repr, cut to 60 characters, for an error line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def shown(function: Any) -> str:
    """How errors and logs name it: "__main__:train", "mymod:make.<locals>.train", "partial(__main__:train)"."""
    if isinstance(function, functools.partial):
        return f"partial({shown(function.func)})"
    module = getattr(function, "__module__", None) or "?"
    return f"{module}:{getattr(function, '__qualname__', type(function).__name__)}"


def default_name(function: Any) -> str:
    """The job's name when none is given: the function's own ("train"; a lambda's "lambda")."""
    while isinstance(function, functools.partial):
        function = function.func
    name = getattr(function, "__name__", None) or type(function).__name__
    return name.strip("<>") or "function"
