"""docs/architecture.md's "One home for each concept" table holds: every file it names exists, every name it gives
is defined there (a function, class, constant, or `Class.attribute`, `module.name`), and the usual leaks of a
concept out of its home are caught across launcher/ and trainer/ (the dev cluster stands alone and is left out):

* SLURM's array and restart variables read outside the environment module (trainer/distributed/environment.py);
* SLURM's commands run outside the scheduler wing (launcher/cluster/slurm/), and sacct outside its accounting;
* a run folder's file names written outside the modules that name them.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = (ROOT / "docs" / "architecture.md").read_text().split("## One home for each concept")[1]
SOURCES = sorted(p for wing in ("launcher", "trainer") for p in (ROOT / wing).rglob("*.py")
                 if "devcluster" not in p.parts)
VERBS = {"status", "watch", "probe", "logs", "cancel", "list"}  # the command line's verbs, named as users type them
_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\(\))?(?:\.([A-Za-z_][A-Za-z0-9_]*))?")


def rows() -> list[tuple[str, str]]:
    out = []
    for line in TABLE.splitlines():
        if line.startswith("| ") and not line.startswith("| concept"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            out.append((cells[0], cells[-1]))
    assert len(out) >= 30, out
    return out


@cache
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@cache
def defined(path: Path) -> frozenset[str]:
    """Module-level names of `path`, and `Class.member` for each class's members."""
    names: set[str] = set()
    for node in tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}.{member.name}")
                elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    names.add(f"{node.name}.{member.target.id}")
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return frozenset(names)


def module_named(stem: str) -> list[Path]:
    return [p for p in SOURCES if p.stem == stem]


def found(token: str, files: list[Path]) -> bool:
    match = _NAME.fullmatch(token)
    assert match, token
    first, attr = match.group(1), match.group(2)
    if attr is None:
        return first in VERBS or bool(module_named(first)) or any(first in defined(f) for f in files)
    if any(attr in defined(m) for m in module_named(first)):  # module.name
        return True
    return any(f"{first}.{attr}" in defined(p) for p in SOURCES)  # Class.member, wherever the class lives


def test_every_home_the_table_names_exists_and_defines_what_it_names() -> None:
    missing = []
    for concept, home in rows():
        tokens = re.findall(r"`([^`]+)`", home)
        files = [ROOT / t for t in tokens if t.endswith(".py")]
        missing += [f"{concept}: no file {f.relative_to(ROOT)}" for f in files if not f.is_file()]
        names = [t for t in tokens if _NAME.fullmatch(t) and not re.search(r"\.(py|json|jsonl|yaml|pkl)$", t)]
        missing += [f"{concept}: {t!r} is defined in none of {[str(f.relative_to(ROOT)) for f in files]}"
                    for t in names if not found(t, [f for f in files if f.is_file()])]
    assert missing == []


def strings(path: Path) -> list[tuple[int, str]]:
    return [(n.lineno, n.value) for n in ast.walk(tree(path)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_slurms_array_and_restart_variables_are_read_in_the_environment_module_only() -> None:
    home = "trainer/distributed/environment.py"
    variables = {"SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT"}
    leaks = [f"{rel(p)}:{line} {value}" for p in SOURCES if rel(p) != home for line, value in strings(p)
             if value in variables]
    assert leaks == [], f"read them through {home} (scheduler_job_id, restart_count)"


def test_slurms_commands_run_in_the_scheduler_wing_and_sacct_in_its_accounting() -> None:
    commands = {"sacct", "squeue", "scontrol", "scancel", "sinfo", "sbatch", "sstat", "salloc", "srun"}
    leaks = []
    for path in SOURCES:
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant) \
                    and node.elts[0].value in commands:
                command, where = node.elts[0].value, rel(path)
                if not where.startswith("launcher/cluster/slurm/") or \
                        (command == "sacct" and where != "launcher/cluster/slurm/accounting.py"):
                    leaks.append(f"{where}:{node.lineno} {command}")
    assert leaks == []


def test_a_run_folders_file_names_are_written_where_they_are_named() -> None:
    homes = {"launcher/rundir/layout.py", "trainer/rank/rundir.py", "launcher/remote/ssh_record.py"}
    names = {"run.json", "tasks.json", "result.json", "failure.json", "events.jsonl", "metrics.jsonl",
             "excluded-nodes.json", "summary.csv", "summary.md", "summary.png", "function.pkl", "model_final.pt",
             "remote.json"}
    leaks = [f"{rel(p)}:{line} {value}" for p in SOURCES if rel(p) not in homes for line, value in strings(p)
             if value in names]
    assert leaks == []


def test_product_code_replaces_nothing_of_the_process_it_runs_in() -> None:
    """A debug profile's run is the user's own process (launcher.client calls the command line's `main` there): no
    attribute of a module of ours is replaced, `sys.argv` and `sys.stdin` stay the user's, and the client changes
    no working directory. (`python -m ...` entry points own their process: their `__main__.py` may.)"""
    leaks = []
    for path in SOURCES:
        if path.name == "__main__.py":
            continue
        ours = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree(path))
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("launcher", "trainer")
                or isinstance(node, ast.Import) for alias in node.names
                if isinstance(node, ast.ImportFrom) or alias.name.split(".")[0] in ("launcher", "trainer")}
        for node in ast.walk(tree(path)):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                base = target.value if isinstance(target, ast.Subscript) else target
                if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and \
                        (base.value.id in ours or ast.unparse(base) in ("sys.argv", "sys.stdin")):
                    leaks.append(f"{rel(path)}:{node.lineno} {ast.unparse(target)}")
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.chdir", "setattr") and \
                    (rel(path).startswith("launcher/client/") or ast.unparse(node.func) == "setattr"
                     and isinstance(node.args[0], ast.Name) and node.args[0].id in ours):
                leaks.append(f"{rel(path)}:{node.lineno} {ast.unparse(node)}")
    assert leaks == []
