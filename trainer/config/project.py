"""Your project and the one lookup rule: where your entrypoint's module and your script are found
(`search_path`, `script_places`).

The project root (decided once, at submission, by `root_for`):
  - the git work tree that holds the job file; for a job found by name among the shipped ones, or
    given with no job file, the git work tree that holds the current directory;
  - without git: the current directory when it holds the job file (or there is none), else the
    job file's own folder.

The search path (`search_path`, the one function the check before queueing and every rank use):
the project root, its `src/` when that holds a package (a src layout), the directory you submitted
from when it lies inside the project root, and the job file's folder (`code_dir`; outside the project
it is searched where it is, uncopied), in that order and ahead of installed packages. On the ranks the same folders are taken inside the run's snapshot of
the project (`on_snapshot`): they import the code as it was submitted. The ranks' working
directory is the directory you submitted from, so relative paths in `args`, `config` and job keys
mean what they meant there; the working directory itself is not searched (PYTHONSAFEPATH, and
`activate` removes it here), so the check cannot find a module the ranks would miss.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Set by the submitter in the tasks' environment: the run's copy of the project root (RUN/project,
# or RUN/code when the project is this tool's own checkout). Absent: the live project is run.
SNAPSHOT_VAR = "TRAINER_PROJECT_SNAPSHOT"
# Set when the submitter added PYTHONSAFEPATH=1 (the caller had not): a script's child drops it
# again, since `python script.py` under torchrun has the script's folder first on sys.path.
ADDED_SAFEPATH_VAR = "TRAINER_ADDED_SAFEPATH"


def git_top(start: Path) -> Path | None:
    """The git work tree holding `start` (a `.git` folder, or a worktree's `.git` file), without running git."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def root_for(job_file: Path | None, cwd: Path, shipped: bool = False) -> Path:
    """The project root for a job file (None: none; `shipped`: found by name among the tool's own)."""
    cwd = cwd.resolve()
    folder = job_file.resolve().parent if job_file is not None and not shipped else cwd
    top = git_top(folder)
    if top is not None:
        return top
    if folder == cwd or cwd in folder.parents:
        return cwd
    return folder


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def has_src_layout(root: Path) -> bool:
    """`src/` holds a package (a folder with `__init__.py`): its packages import as `mypkg`, not `src.mypkg`."""
    src = root / "src"
    try:
        return src.is_dir() and any((child / "__init__.py").is_file() for child in src.iterdir())
    except OSError:
        return False


def search_path(root: Path, submit_dir: Path, job_dir: Path | None) -> list[Path]:
    """The folders your code is imported from, first to last (see the module's rule)."""
    out: list[Path] = [root]
    if has_src_layout(root):
        out.append(root / "src")
    for extra, outside_too in ((submit_dir, False), (job_dir, True)):
        # The job file's folder outside the project (a job file elsewhere naming `code_dir`) is still
        # searched, where it is: it is not in the snapshot (on_snapshot leaves it unchanged).
        if extra is not None and (outside_too or inside(extra.resolve(), root)) and extra.resolve() not in out:
            out.append(extra.resolve())
    return out


def script_places(script: str, submit_dir: Path, job_dir: str, root: str) -> list[Path]:
    """Where a job's `script:` is looked for, first to last: as given when absolute; else in the directory
    you submitted from, next to the job file (`job_dir`) and in the project root. The check before
    queueing makes it absolute by this rule (the ranks run that file, in the snapshot), and `probe` reads it."""
    if Path(script).is_absolute():
        return [Path(script)]
    return [submit_dir / script, *(Path(folder) / script for folder in dict.fromkeys((job_dir, root)) if folder)]


def find_script(script: str, submit_dir: Path, job_dir: str, root: str) -> Path | None:
    """The script by `script_places`' rule, resolved; None: it is in none of them."""
    return next((path.resolve() for path in script_places(script, submit_dir, job_dir, root) if path.is_file()), None)


def on_snapshot(path: Path, root: Path, snapshot: str | None) -> Path:
    """`path` (inside the live project `root`) as it lies in the run's snapshot; unchanged without one."""
    if not snapshot or not inside(path, root):
        return path
    return Path(snapshot) / path.relative_to(root)


def rank_path(project_root: str, job_dir: str, submit_dir: str, snapshot: str | None) -> list[str]:
    """The search path as a rank uses it: the rule's folders, inside the snapshot when there is one."""
    if not project_root:
        return []
    root = Path(project_root)
    return [str(on_snapshot(p, root, snapshot))
            for p in search_path(root, Path(submit_dir), Path(job_dir) if job_dir else None)]


def activate(folders: list[str]) -> None:
    """Put the rule's folders first on sys.path, and take the working directory off it (as
    PYTHONSAFEPATH does on the ranks), here and on a rank alike."""
    cwd = os.getcwd()
    # PYTHONPATH reaches the ranks too (after the snapshot): a working directory named there stays.
    given = set(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    keep = [p for p in sys.path if p not in folders and (p not in ("", cwd) or p in given)]
    sys.path[:] = [*folders, *keep]
