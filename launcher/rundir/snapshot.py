"""The code a run imports, copied into its run folder when it is submitted.

Editing the code while a job waits in the queue must not change what it runs, and a requeued or
resumed job must continue with the code it started with. So the submitter copies
  - this tool's packages (`launcher/`, `trainer/`, with their package data) into `RUN/code/`, and
  - for a job that runs your code (`entrypoint:`, `script:`), your project (its root:
    trainer/config/project.py) into `RUN/project/`; when the project is this tool's own checkout,
    the whole checkout goes into `RUN/code/` once and serves as both.
The tasks import from there (PYTHONPATH, PYTHONSAFEPATH: launcher/request/send.py) and run in the
directory you submitted from (docs/your-code.md#where-your-code-is-found).

In a git work tree the files are the ones git would ship (`git ls-files --cached --others
--exclude-standard`: tracked and new files, `.gitignore` honoured); elsewhere a walk that leaves out
caches, virtual environments and `.git`. The profile's `snapshot_exclude` globs and its run folders
are left out too, and a project over `snapshot_max_mb` is refused before anything is queued, naming
its largest files (`survey`, run by the check). Files are copied, never hard-linked: a hard link
shares the file, and an editor or `>>` writing in place would change the snapshot
(docs/performance.md has the cost). `RUN/code/SNAPSHOT.json` notes commit, dirty state, files, bytes,
seconds, the project root and the submit directory. `--resume` and requeues reuse the snapshot
already in the run folder; `snapshot: false` turns it off (the tasks import the live code).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from launcher.rundir.layout import RUN_FILE
from trainer.config.lookup import CODE_ROOT
from trainer.config.schema import ConfigError

SNAPSHOT_DIR = "code"
PROJECT_DIR = "project"
NOTE_FILE = "SNAPSHOT.json"
PACKAGES = ("launcher", "trainer")
# Left out of a walk (no git to say what is ignored): caches, environments and other tools' state.
WALK_SKIPS = {".git", "__pycache__", ".venv", "venv", "env", "node_modules", ".mypy_cache", ".pytest_cache",
              ".ruff_cache", ".ipynb_checkpoints", ".tox", ".nox", ".idea", ".vscode", "wandb", "mlruns"}
WALK_SKIP_SUFFIXES = (".pyc", ".pyo", ".egg-info")
TAR_FROM = 300  # files: from here on one tar pipe copies faster than a loop here


@dataclass
class Survey:
    """What a snapshot of `root` would hold: its files (relative), their bytes, and git's view."""

    root: Path
    files: list[str]
    bytes: int
    git: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    # Each file's (size, mtime_ns, inode) as the listing found them: a submission over SSH hashes by
    # them (launcher.commands.remote_sync) without a second lstat per file.
    stamps: dict[str, tuple[int, int, int]] = field(default_factory=dict)


def snapshot_dir(run_dir: Path) -> Path:
    return run_dir / SNAPSHOT_DIR


def project_dir(run_dir: Path, project_root: str) -> Path:
    """Where the run's copy of the project is (RUN/code when the project is this checkout)."""
    same = project_root and Path(project_root).resolve() == CODE_ROOT.resolve()
    return snapshot_dir(run_dir) if same else run_dir / PROJECT_DIR


def taken(run_dir: Path) -> bool:
    return (snapshot_dir(run_dir) / NOTE_FILE).is_file()


def survey(root: Path, excludes: list[str], max_mb: float, source: str, skip: list[Path] = ()) -> Survey:
    """The files of `root` to snapshot, or a ConfigError when they are over `max_mb` (exit 2, nothing queued)."""
    start, cap = time.perf_counter(), max_mb * 2**20
    skipped = [str(p.resolve().relative_to(root)) + os.sep for p in skip if root in p.resolve().parents]
    # The profile's globs, matched against the path in the project and against the file's name.
    wanted = lambda f: not any(f.startswith(s) for s in skipped) and not any(  # noqa: E731
        fnmatch.fnmatch(f, g) or fnmatch.fnmatch(os.path.basename(f), g) for g in excludes)
    files, git = _git_files(root, ())
    sizes: dict[str, int] = {}
    stamps: dict[str, tuple[int, int, int]] = {}
    total = 0
    for name in (files if files is not None else _walk(root)):
        if not wanted(name):
            continue
        try:
            info = os.lstat(root / name)
        except OSError:  # listed by git, gone since (a deleted file not yet staged)
            continue
        sizes[name], total = info.st_size, total + info.st_size
        stamps[name] = (info.st_size, info.st_mtime_ns, info.st_ino)
        if total > cap and files is None:
            break  # a walk of a large folder (a home directory) stops at the cap, not at its end
    if total > cap:
        largest = sorted(sizes, key=sizes.__getitem__, reverse=True)[:5]
        counted = f"{total / 2**20:.1f} MB in {len(sizes)} files" if files is not None else \
            f"over {max_mb:g} MB (counting stopped there)"
        raise ConfigError(f"{source}: key 'snapshot_max_mb' has invalid value {max_mb:g}; the project {root} holds "
                          f"{counted} to snapshot, the largest "
                          + ", ".join(f"{n} ({sizes[n] / 2**20:.1f} MB)" for n in largest)
                          + "; leave them out with the profile key snapshot_exclude (globs, e.g. ['data/*', "
                          "'*.ckpt']) or .gitignore, or raise snapshot_max_mb")
    return Survey(root, list(sizes), total, git, time.perf_counter() - start, stamps)


def ensure(run_dir: Path, project: Survey | None = None, submit_dir: Path | None = None,
           code_root: Path = CODE_ROOT) -> Path:
    """RUN/code (and RUN/project) with the code to run: the snapshot already there (--resume), else a new copy."""
    target = snapshot_dir(run_dir)
    if (target / NOTE_FILE).is_file():
        return target
    start = time.perf_counter()
    note: dict[str, Any] = {}
    same = project is not None and project.root.resolve() == code_root.resolve()
    if project is not None and not same:
        started = time.perf_counter()
        _copy(project.root, project.files, run_dir / PROJECT_DIR)
        note["project"] = _describe(project, started)
    files, git = (project.files, project.git) if same else tool_files(code_root)
    partial = target.with_name(f".{SNAPSHOT_DIR}.partial")
    size = _copy(code_root, files, partial, rename=False)
    if same:
        note["project"] = {**_describe(project, start), "in": str(target)}
    tool = {"from": str(code_root), "files": len(files), "bytes": size,
            "seconds": round(time.perf_counter() - start, 4), **git}
    if project is not None:
        note["project"].update(root=str(project.root), submit_dir=str(submit_dir or Path.cwd()))
    (partial / NOTE_FILE).write_text(json.dumps({**tool, **note}, indent=1) + "\n")
    os.replace(partial, target)  # complete or absent: never a half-copied snapshot
    return target


def tool_files(code_root: Path = CODE_ROOT) -> tuple[list[str], dict[str, Any]]:
    """This tool's files a snapshot copies (launcher/, trainer/; git's list in a checkout) and git's view."""
    files, git = _git_files(code_root, PACKAGES)
    return (files if files is not None else _package_files(code_root)), git


def _describe(project: Survey, started: float) -> dict[str, Any]:
    return {"files": len(project.files), "bytes": project.bytes, "listing_seconds": round(project.seconds, 4),
            "seconds": round(time.perf_counter() - started, 4), **project.git}


def _copy(root: Path, files: list[str], dest: Path, rename: bool = True) -> int:
    """Copy `files` of `root` into `dest` (through a `.partial` folder when `rename`); their bytes."""
    partial = dest.with_name(f".{dest.name}.partial") if rename else dest
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    tar = shutil.which("tar")
    # Copies, not links (the module's docstring). One tar pipe copies 20,000 files 4x faster than a
    # Python loop (docs/performance.md). Modes come from the submitter's umask (077: run folders are
    # private), not from the checkout's 0644; symbolic links stay links.
    # (A few hundred files copy faster in this process than two tar processes start.)
    if tar is None or len(files) < TAR_FROM or not _tar_copy(tar, root, files, partial):
        made: set[str] = set()
        for name in files:
            folder = os.path.dirname(name)
            if folder not in made:
                os.makedirs(partial / folder, exist_ok=True)
                made.add(folder)
            shutil.copyfile(root / name, partial / name, follow_symlinks=False)
    size = sum(os.lstat(partial / name).st_size for name in files)
    if rename:
        os.replace(partial, dest)
    return size


def _tar_copy(tar: str, root: Path, files: list[str], dest: Path) -> bool:
    """GNU tar, reading the names NUL-separated and verbatim (a name may start with '-'); False: not done."""
    pack = subprocess.Popen([tar, "--null", "--verbatim-files-from", "-T", "-", "-cf", "-"], cwd=root,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    unpack = subprocess.Popen([tar, "--no-same-permissions", "--no-same-owner", "-xf", "-"], cwd=dest,
                              stdin=pack.stdout, stderr=subprocess.DEVNULL)
    assert pack.stdin is not None and pack.stdout is not None
    pack.stdout.close()  # the unpacking tar holds it: a failure of either ends the other
    try:
        pack.stdin.write("\0".join(files).encode("utf-8", "surrogateescape"))
    except BrokenPipeError:
        pass
    pack.stdin.close()
    ok = pack.wait() == 0 and unpack.wait() == 0
    if not ok:  # (a tar without --verbatim-files-from): start again, in Python
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
    return ok


def read_note(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((snapshot_dir(run_dir) / NOTE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _git_files(root: Path, paths: tuple[str, ...]) -> tuple[list[str] | None, dict[str, Any]]:
    """`paths` of `root` (all: empty) as git would ship them, with the commit and dirty state; None without git."""
    if shutil.which("git") is None or not (root / ".git").exists():
        return None, {}
    run = lambda *args: subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)  # noqa: E731
    listed = run("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths)
    if listed.returncode != 0:
        return None, {}
    files = [f for f in listed.stdout.split("\0") if f and (os.path.islink(root / f) or os.path.isfile(root / f))]
    commit = run("rev-parse", "HEAD").stdout.strip()
    dirty = bool(run("status", "--porcelain", "--", *paths).stdout.strip())
    what = "the packages" if paths else "the project"
    return files, {"git_commit": commit, "git_dirty": dirty,
                   "note": f"{what} differ from that commit (uncommitted edits); this copy is what ran"
                   if dirty else f"{what} are exactly that commit"}


def _walk(root: Path) -> Iterator[str]:
    """The files of a folder without git, leaving out WALK_SKIPS and run folders (they hold run.json)."""
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in WALK_SKIPS and not d.endswith(WALK_SKIP_SUFFIXES)
                         and not os.path.isfile(os.path.join(folder, d, RUN_FILE)))
        rel = os.path.relpath(folder, root)
        for name in sorted(names):
            if not name.endswith(WALK_SKIP_SUFFIXES) and os.path.isfile(os.path.join(folder, name)):
                yield name if rel == "." else os.path.join(rel, name)


def _package_files(root: Path) -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out.append(str(path.relative_to(root)))
    return out
