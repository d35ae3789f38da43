"""Loaded by every interpreter tests/mutation.py starts (its PYTHONPATH names this folder, after mutants/).

mutmut runs the fast tests in its own processes, against the mutated copy in mutants/. A test may also start
processes: the Python client's handles ask the command line (`python -m launcher`), a local run's ranks
(`-m submitit.core._submit`). Those import the project as it is (the checkout in place of its copy), not the mutated one:
mutmut traces and tests only what runs in the test process (the handles themselves), its mutated functions
would cost every call in the ranks' loop a trampoline, and a subprocess has no mutmut state for them to
report to (while mutmut traces the tests, the first such call fails looking for its configuration).
"""

import os
import sys

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_COPY = os.path.join(_CHECKOUT, "mutants")
_RUNNERS = ("mutmut", "pytest", "multiprocessing")  # mutmut, the tests, mutmut's fork server: the copy



def _program(argv: list[str]) -> str:
    """What the interpreter runs: the module after -m, the code after -c, else the script (its arguments, a
    test's folder under /tmp/pytest-of-root say, do not count)."""
    i = 1
    while i < len(argv):
        if argv[i] in ("-m", "-c"):
            return argv[i + 1] if i + 1 < len(argv) else ""
        if not argv[i].startswith("-"):
            return argv[i]
        i += 2 if argv[i] in ("-X", "-W") else 1
    return ""


if not any(runner in _program(getattr(sys, "orig_argv", sys.argv)) for runner in _RUNNERS):
    sys.path[:] = [_CHECKOUT if os.path.abspath(p or ".") == _COPY else p for p in sys.path]
