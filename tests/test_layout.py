"""The layout's rules, read from the code's own imports (as torchtitan freezes its surface with a test):
which wing may import which, that the trainer never imports the launcher or submitit (it also runs
under torchrun), that only `submit.py` enters the command line's wing, that the configuration wing
stays torch-free, that no modules import each other in a loop, and that no module grows past what
one sitting can read. docs/architecture.md draws the same map."""

from __future__ import annotations

import ast
import functools
import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

# Each wing (a folder of a package, or a top-level module) and the wings it may import. Arrows point
# one way: down this table's order, never back up.
ALLOWED: dict[str, set[str]] = {
    "submit": {"launcher.commands"},
    "launcher.__main__": {"launcher.commands"},  # `python -m launcher`: submit.py's twin, for wheels
    "launcher.commands": {"launcher.request", "launcher.waiting", "launcher.remote", "launcher.rundir", "launcher.node", "launcher.cluster",
                          "launcher.reports", "launcher.config", "trainer.config", "trainer.runners"},
    "launcher.request": {"launcher.remote", "launcher.rundir", "launcher.node", "launcher.cluster", "launcher.reports",
                         "launcher.config", "launcher.submitit_private", "trainer.config", "trainer.runners"},
    # waiting for what was sent: not the request (which is done once this starts)
    "launcher.waiting": {"launcher.rundir", "launcher.cluster", "launcher.reports", "trainer.runners"},
    "launcher.remote": {"launcher.cluster", "launcher.reports", "launcher.config", "launcher.filestamp",
                        "trainer.config"},
    "launcher.rundir": {"launcher.cluster", "launcher.reports", "launcher.config", "launcher.filestamp",
                        "trainer.config", "trainer.rank", "trainer.runners"},
    "launcher.node": {"launcher.cluster", "launcher.reports", "launcher.submitit_private", "trainer.config",
                      "trainer.distributed", "trainer.rank", "trainer.runners"},
    "launcher.heal": {"launcher.rundir", "launcher.cluster", "launcher.reports", "trainer.config", "trainer.distributed",
                      "trainer.rank"},  # the batch script's retry step (`python -m launcher.heal`)
    # (the schedulers and the configuration read nothing the nodes leave: reports/ stands beside them)
    "launcher.cluster": {"trainer.config", "trainer.distributed"},
    "launcher.config": {"trainer.config", "trainer.runners", "trainer.distributed"},
    "launcher.submitit_private": set(),
    "launcher.filestamp": set(),  # "unchanged since last time": the snapshot's links and the SSH sync
    # what nodes and ranks leave for the submitter and the retry step, and what a failure means
    "launcher.reports": set(),
    # The API: it starts the command line (`python -m launcher`); it reads a profile (is it `debug`?) and
    # the one lookup rule (is a function importable by name?) itself.
    # (launcher.commands: the engine calls the command line's main for a debug profile's run, in the caller's process)
    "launcher.client": {"launcher.config", "launcher.rundir", "launcher.remote", "trainer.config", "launcher.commands"},
    "launcher.devcluster": set(),  # a product tool that stands alone
    "trainer.__main__": {"trainer.config", "trainer.rank", "trainer.runners"},
    "trainer.runners": {"trainer.recipes", "trainer.rank", "trainer.distributed", "trainer.config"},
    "trainer.recipes": {"trainer.api", "trainer.rank", "trainer.distributed", "trainer.config"},
    "trainer.api": {"trainer.rank", "trainer.distributed"},
    "trainer.rank": {"trainer.distributed"},
    "trainer.distributed": set(),
    "trainer.config": set(),
}
# Third-party packages the configuration wing may import: it is what `--help`, `--dry-run` and
# `status` load, so never torch.
CONFIG_THIRD_PARTY = {"yaml"}
MAX_LINES = 300


def modules() -> dict[str, Path]:
    found = {"submit": ROOT / "submit.py"}
    for path in [*ROOT.glob("trainer/**/*.py"), *ROOT.glob("launcher/**/*.py")]:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def wing(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in ("trainer", "launcher") and len(parts) > 1 else parts[0]


def imports(path: Path) -> list[tuple[str, int]]:
    """Every module `path` imports (at the top or inside a function), with its line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
            out += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return out


def ours(name: str, known: dict[str, Path]) -> str | None:
    """The project module an import names (`from trainer.rank import events` names trainer.rank.events)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def test_every_wing_imports_only_the_wings_below_it() -> None:
    known = modules()
    wrong = []
    for module, path in known.items():
        mine = wing(module)
        assert mine in ALLOWED or mine in ("trainer", "launcher"), f"{path}: a wing the layout does not know"
        for name, line in imports(path):
            target = ours(name, known)
            if target is None or wing(target) in (mine, "trainer", "launcher"):
                continue
            if wing(target) not in ALLOWED.get(mine, set()):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert wrong == []


def test_the_trainer_never_imports_the_launcher_or_submitit() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {name}" for module, path in modules().items()
             if module.startswith("trainer") for name, line in imports(path)
             if name.split(".")[0] in ("launcher", "submitit")]
    assert wrong == []


def test_only_its_doors_import_the_command_line() -> None:
    """submit.py, `python -m launcher`, and the Python client's engine, which runs it (a child process; a debug
    profile's run in the caller's own process, where it calls `main`)."""
    doors = ("submit", "launcher.__main__", "launcher.commands", "launcher.client.engine")
    wrong = [f"{path.relative_to(ROOT)}:{line}" for module, path in modules().items()
             if wing(module) not in doors and module not in doors for name, line in imports(path)
             if name == "launcher.commands" or name.startswith("launcher.commands.")]
    assert wrong == []


def test_the_config_wing_imports_no_torch_and_nothing_of_ours_outside_it() -> None:
    wrong = []
    for module, path in modules().items():
        if wing(module) != "trainer.config":
            continue
        for name, line in imports(path):
            top = name.split(".")[0]
            if top in ("trainer", "launcher"):
                if not name.startswith("trainer.config"):
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
            elif top not in sys.stdlib_module_names and top not in CONFIG_THIRD_PARTY:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert wrong == []


def test_loading_every_config_module_loads_no_torch() -> None:
    """The same, as Python sees it: importing the whole wing (and the submitter's --help) loads no torch."""
    names = sorted(m for m in modules() if wing(m) == "trainer.config")
    code = f"import sys; import {', '.join(names)}; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_no_modules_import_each_other_in_a_loop() -> None:
    """Module-level imports only: an import inside a function runs later and cannot loop at import."""
    known = modules()
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            graph[module] |= {t for n in names if (t := ours(n, known)) and t != module}
    loops = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            here = todo.pop()
            if here == start:
                loops.append(start)
                break
            if here not in seen:
                seen.add(here)
                todo += graph[here]
    assert loops == []


def test_no_two_modules_share_a_name() -> None:
    """A reader who meets `layout` or `failures` in a traceback or an import knows which one it is. (The
    door, `submit.py`, and the verb it opens onto, `launcher/commands/submit.py`, are one thing.)"""
    names: dict[str, list[str]] = {}
    for module, path in modules().items():
        if path.stem not in ("__init__", "__main__") and module != "submit":
            names.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def hidden_imports(path: Path) -> list[str]:
    """Names a function of `path` binds (a parameter, an assignment, a loop) that its module imports."""
    tree = parsed(path)
    imported = {(alias.asname or alias.name).split(".")[0] for node in tree.body
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    found = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        name = (node.arg if isinstance(node, ast.arg) else
                node.id if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) else None)
        if in_function and name in imported:
            found.add(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return sorted(found)


def test_no_function_hides_a_module_its_file_imports() -> None:
    """A local named like an imported module hides it in the whole function: after a module rename
    (remote/layout -> folders), `folders.MADE_FIRST` in a function whose parameter was already called
    `folders` broke every submission over SSH, and only the SSH tests could tell."""
    files = [*modules().values(), *ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/**/*.py"),
             *ROOT.glob("examples/**/*.py")]
    assert [hit for path in files for hit in hidden_imports(path)] == []


MAX_FUNCTION_LINES = 80


def test_no_function_is_longer_than_a_screen_and_a_half() -> None:
    """A function is read whole: past 80 lines it holds more than one decision (profile.__post_init__ was 93)."""
    files = [*modules().values(), *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("examples/**/*.py")]
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)" for path in files
            for node in ast.walk(parsed(path)) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES]
    assert long == []


MAX_FLOORS = 5


def test_no_wing_stands_on_more_than_five_floors_of_its_own() -> None:
    """A module's floor in its wing: one above the highest module of the same wing it imports (at the top
    or inside a function). Deeper than five, a reader following one value down a wing loses the thread."""
    known = modules()
    below: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        below[module] = {t for name, _ in imports(path) if (t := ours(name, known)) and t != module
                         and t != wing(t) and wing(t) == wing(module)}

    @functools.cache
    def floor(module: str) -> int:
        return 1 + max((floor(m) for m in below[module]), default=0)

    # The dev cluster, a tool standing alone, is one straight line from its settings to its command line
    # (paths, releases, config, daemons, commands, cli, __main__): read top down, not followed through.
    deep = sorted(f"{m} on floor {floor(m)}" for m in known
                  if m != wing(m) and wing(m) != "launcher.devcluster" and floor(m) > MAX_FLOORS)
    assert deep == []


@pytest.mark.parametrize("folder", ["trainer", "launcher", "benchmarks", "examples"])
def test_no_module_is_longer_than_one_sitting(folder: str) -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / folder).glob("**/*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_every_module_says_what_it_owns() -> None:
    """An opening docstring in every module of the two packages (a wing's __init__ says what the wing owns)."""
    missing = [str(path.relative_to(ROOT)) for module, path in modules().items()
               if module != "submit" and not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))]
    assert missing == []


def test_the_public_per_rank_api_is_frozen() -> None:
    """What users import from trainer.api: adding a name is a decision, removing one breaks their code."""
    import trainer.api

    assert sorted(trainer.api.__all__) == ["Context", "ResumableSampler", "StopRequested", "epoch_and_skip",
                                           "init", "steps_per_epoch"]
    assert all(hasattr(trainer.api, name) for name in trainer.api.__all__)


def test_the_allowed_table_has_no_arrow_back_up() -> None:
    """The table itself: no two wings allow each other."""
    for a, b in itertools.permutations(ALLOWED, 2):
        if b in ALLOWED[a]:
            assert a not in ALLOWED[b], (a, b)


# ----- docs/architecture.md: the map, held to the code ---------------------------------------------

MAP = ROOT / "docs" / "architecture.md"


def _table(heading: str) -> dict[str, str]:
    """The two-column table under `## heading` in the map: first cell (its backticked name) -> second cell."""
    text = MAP.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if len(cells) == 2:
            rows[cells[0].strip("`")] = cells[1]
    return rows


def test_the_map_names_every_module_in_its_wings_row() -> None:
    """Every module of launcher/ and trainer/ is named (`path/below/the/wing`) in its wing's row of
    docs/architecture.md, and every row is a wing that is there: the map cannot drift from the code."""
    rows = _table("The wings")
    missing = []
    for path in [*ROOT.glob("launcher/**/*.py"), *ROOT.glob("trainer/**/*.py")]:
        rel = path.relative_to(ROOT)
        if rel.name == "__init__.py" and len(rel.parts) == 2:
            continue  # a package root: its own docstring says what is in it (the test below)
        wing = f"{rel.parts[0]}/{rel.parts[1]}/" if len(rel.parts) > 2 else str(rel)
        if wing not in rows:
            missing.append(f"{rel}: no row for its wing {wing}")
        elif len(rel.parts) > 2 and rel.name != "__init__.py":
            name = str(Path(*rel.parts[2:]).with_suffix(""))
            if f"`{name}`" not in rows[wing] and f"`{name}` " not in rows[wing]:
                missing.append(f"{rel}: not named as `{name}` in the row of {wing}")
    stale = [wing for wing in rows if not (ROOT / wing).exists()]
    assert missing == [] and stale == []


def test_the_maps_arrows_are_the_layout_tests() -> None:
    """The map's arrows table and ALLOWED are one table: a wing or an arrow in one and not the other fails."""
    drawn = {wing: set() if "nothing of ours" in cell else set(re.findall(r"`([\w.]+)`", cell))
             for wing, cell in _table("The allowed arrows").items()}
    assert drawn == ALLOWED


def test_every_package_docstring_names_what_is_in_it() -> None:
    """Each package's __init__ docstring names each of its modules and sub-packages (in backticks)."""
    missing = []
    for init in [*ROOT.glob("launcher/**/__init__.py"), *ROOT.glob("trainer/**/__init__.py")]:
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        named = set(re.findall(r"`+([\w./]+?)/?`+", doc))
        children = [p.stem for p in init.parent.glob("*.py") if p.name != "__init__.py"]
        children += [p.parent.name for p in init.parent.glob("*/__init__.py")]
        missing += [f"{init.relative_to(ROOT)}: {child}" for child in children if child not in named]
    assert missing == []


def test_the_nodes_environment_check_needs_only_the_standard_library() -> None:
    """launcher/node/envcheck.py runs in the nodes' bare interpreter, before submitit, to say what is missing."""
    path = ROOT / "launcher" / "node" / "envcheck.py"
    assert [name for name, _ in imports(path) if name.split(".")[0] not in sys.stdlib_module_names] == []


def test_the_remote_wing_never_prints() -> None:
    """launcher/remote/ returns data or raises; the verbs say what happened (docs/remote.md)."""
    said = []
    for path in (ROOT / "launcher" / "remote").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = node.func if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Name) and func.id == "print" or (
                    isinstance(func, ast.Attribute) and func.attr == "write" and isinstance(func.value, ast.Attribute)
                    and func.value.attr in ("stdout", "stderr")):
                said.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert said == []
