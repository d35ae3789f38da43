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
its largest files (`survey`, run by the check). Your files are copied, never hard-linked to: a hard
link shares the file, and an editor or `>>` writing in place would change the snapshot. A file
unchanged since the previous snapshot of the same folder in the same runs folder is hard-linked to
that snapshot's copy instead, which nothing writes (snapshot_links.py has the rule and why it is safe;
docs/performance.md the cost). `RUN/code/SNAPSHOT.json` notes commit, dirty state, files, bytes,
files linked, seconds, the project root and the submit directory. `--resume` and requeues reuse the snapshot
already in the run folder; `snapshot: false` turns it off (the tasks import the live code).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from launcher import filestamp
from launcher.rundir import snapshot_links as links
from launcher.rundir.layout import NOTE_FILE, PROJECT_DIR, RUN_FILE, SNAPSHOT_DIR
from trainer.config.lookup import CODE_ROOT
from trainer.config.schema import ConfigError

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
    # name: its stamp as listed (filestamp.source_stat): the copy and a submission over SSH (which hashes
    # by them, launcher.remote.sync) need no second lstat per file.
    stats: dict[str, filestamp.Entry] = field(default_factory=dict)
    stat_at: float = 0.0  # when listing began: the stats are no older than this


def snapshot_dir(run_dir: Path) -> Path:
    return run_dir / SNAPSHOT_DIR


def project_dir(run_dir: Path, project_root: str, code_root: Path = CODE_ROOT) -> Path:
    """Where the run's copy of the project is (RUN/code when the project is the tool's own checkout)."""
    same = project_root and Path(project_root).resolve() == code_root.resolve()
    return snapshot_dir(run_dir) if same else run_dir / PROJECT_DIR


def taken(run_dir: Path) -> bool:
    return (snapshot_dir(run_dir) / NOTE_FILE).is_file()


def survey(root: Path, excludes: list[str], max_mb: float, source: str, skip: list[Path] = ()) -> Survey:
    """The files of `root` to snapshot, or a ConfigError when they are over `max_mb` (exit 2, nothing queued)."""
    start, cap, stat_at = time.perf_counter(), max_mb * 2**20, time.time()
    skipped = [str(p.resolve().relative_to(root)) + os.sep for p in skip if root in p.resolve().parents]
    # The profile's globs, matched against the path in the project and against the file's name.
    wanted = lambda f: not any(f.startswith(s) for s in skipped) and not any(  # noqa: E731
        fnmatch.fnmatch(f, g) or fnmatch.fnmatch(os.path.basename(f), g) for g in excludes)
    files, git = _git_files(root, ())()
    sizes: dict[str, int] = {}
    top, stats = str(root), {}  # type: tuple[str, dict[str, filestamp.Entry]]  # kept for the copy (snapshot_links.py)
    total = 0
    for name in (files if files is not None else _walk(root)):
        if not wanted(name):
            continue
        try:
            st = os.lstat(f"{top}/{name}")
        except OSError:  # listed by git, gone since (a deleted file not yet staged)
            continue
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            continue  # a submodule's folder
        sizes[name], stats[name], total = st.st_size, filestamp.source_stat(st), total + st.st_size
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
    return Survey(root, list(sizes), total, git, time.perf_counter() - start, stats, stat_at)


def ensure(run_dir: Path, project: Survey | None = None, submit_dir: Path | None = None,
           code_root: Path = CODE_ROOT, origin: dict[str, Any] | None = None) -> Path:
    """RUN/code (and RUN/project) with the code to run: the snapshot already there (--resume), else a new
    copy of `code_root` (the tool) and `project`. `origin`: what the note also says of where each came
    from ({"code": {...}, "project": {...}}: over SSH, the laptop's commit and folders)."""
    target = snapshot_dir(run_dir)
    if (target / NOTE_FILE).is_file():
        return target
    start = time.perf_counter()
    note: dict[str, Any] = {}
    manifest: dict[str, Any] = {}  # links.MANIFEST: what the next snapshot of the same folders may link
    same = project is not None and project.root.resolve() == code_root.resolve()
    packages = None if same else _git_files(code_root, PACKAGES)  # (runs while the project is copied)
    if project is not None and not same:
        started = time.perf_counter()
        _, linked = _copy(project.root, project.files, run_dir / PROJECT_DIR, "project", manifest, project)
        note["project"] = {**_describe(project, started), "linked": linked}
    files, git = (project.files, project.git) if same else tool_files(code_root, packages)
    partial = target.with_name(f".{SNAPSHOT_DIR}.partial")
    size, linked = _copy(code_root, files, partial, "code", manifest, project if same else None, rename=False)
    if same:
        note["project"] = {**_describe(project, start), "in": str(target)}
    tool = {"from": str(code_root.resolve()), "files": len(files), "bytes": size, "linked": linked,
            "seconds": round(time.perf_counter() - start, 4), **git}
    if project is not None:
        note["project"].update(root=str(project.root), submit_dir=str(submit_dir or Path.cwd()),
                               **(origin or {}).get("project", {}))
    (partial / NOTE_FILE).write_text(json.dumps({**tool, **(origin or {}).get("code", {}), **note}, indent=1) + "\n")
    for tree, files_of in manifest.items():
        (partial / links.MANIFEST.format(tree)).write_text(json.dumps(files_of, separators=(",", ":")))
    os.replace(partial, target)  # complete or absent: never a half-copied snapshot
    return target


def tool_files(code_root: Path = CODE_ROOT, started: Callable[[], tuple[list[str] | None, dict[str, Any]]] | None = None
               ) -> tuple[list[str], dict[str, Any]]:
    """This tool's files a snapshot copies (launcher/, trainer/; git's list in a checkout: its files and
    links) and git's view; `started`: that listing, begun earlier (_git_files)."""
    files, git = (started or _git_files(code_root, PACKAGES))()
    if files is None:
        return _package_files(code_root), git
    return [f for f in files if os.path.islink(code_root / f) or os.path.isfile(code_root / f)], git


def _describe(project: Survey, started: float) -> dict[str, Any]:
    return {"files": len(project.files), "bytes": project.bytes, "listing_seconds": round(project.seconds, 4),
            "seconds": round(time.perf_counter() - started, 4), **project.git}


def _copy(root: Path, files: list[str], dest: Path, tree: str, manifest: dict[str, Any],
          listed: Survey | None = None, rename: bool = True) -> tuple[int, int]:
    """Copy `files` of `root` into `dest` (through a `.partial` folder when `rename`), linking those unchanged
    since the previous snapshot (snapshot_links.py); their bytes and how many were linked."""
    partial = dest.with_name(f".{dest.name}.partial") if rename else dest
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    # The listing's stats where it made them (on another machine, a listing over SSH has none: stat here).
    stats, at = (dict(listed.stats), listed.stat_at) if listed is not None and listed.stats else ({}, time.time())
    lender = links.previous(dest.parent, root.resolve(), tree)
    linked, copied = links.plan(root, files, stats, lender)
    made: set[str] = set()
    failed = links.link(lender[0], linked, partial, made) if lender and linked else []
    if failed:
        linked, copied = [n for n in linked if n not in set(failed)], copied + failed
    tar = shutil.which("tar")
    # One tar pipe copies 20,000 files 4x faster than a Python loop (docs/performance.md). Modes come
    # from the submitter's umask (077: run folders are private), not from the checkout's 0644, less
    # write permission (snapshot_links.py: snapshots are never written); symbolic links stay links.
    # (A few hundred files copy faster in this process than two tar processes start.)
    if tar is None or len(copied) < TAR_FROM or not _tar_copy(tar, root, copied, partial):
        _copy_here(root, copied, partial, made)
    lent = {n: lender[1][n] for n in linked} if lender else {}
    size, stale = links.record(manifest, tree, stats, at, partial, files, lent)
    if stale:  # linked to a copy written since: copied afresh
        for name in stale:
            os.unlink(partial / name)
        _copy_here(root, stale, partial, made)
        size += links.record(manifest, "stale", stats, at, partial, stale, {})[0]
        manifest[tree]["files"].update(manifest.pop("stale")["files"])
    if rename:
        os.replace(partial, dest)
    return size, len(linked) - len(stale)


def _copy_here(root: Path, names: list[str], dest: Path, made: set[str]) -> None:
    top, into = str(root), str(dest)
    for name in names:
        folder = os.path.dirname(name)
        if folder not in made:
            os.makedirs(f"{into}/{folder}", exist_ok=True)
            made.add(folder)
        shutil.copyfile(f"{top}/{name}", f"{into}/{name}", follow_symlinks=False)
        links.read_only(f"{into}/{name}")


def _tar_copy(tar: str, root: Path, files: list[str], dest: Path) -> bool:
    """GNU tar, reading the names NUL-separated and verbatim (a name may start with '-'); False: not done."""
    pack = subprocess.Popen([tar, "--null", "--verbatim-files-from", "--mode=a-w", "-T", "-", "-cf", "-"], cwd=root,
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
    if not ok:  # (a tar without --verbatim-files-from): start again, in Python (the links stay)
        for name in files:
            try:
                os.unlink(dest / name)
            except OSError:
                pass
    return ok


def read_note(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((snapshot_dir(run_dir) / NOTE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _git_files(root: Path, paths: tuple[str, ...]) -> Callable[[], tuple[list[str] | None, dict[str, Any]]]:
    """`paths` of `root` (all: empty) as git would ship them (files, links and folders: the caller keeps files
    and links), with the commit and dirty state; None without git. The three git commands start at once
    and run while the caller goes on (`git status` alone takes as long as the listing); calling the
    returned function collects them."""
    if shutil.which("git") is None or not (root / ".git").exists():
        return lambda: (None, {})
    start = lambda *args: subprocess.Popen(["git", *args], cwd=root, stdout=subprocess.PIPE,  # noqa: E731
                                           stderr=subprocess.DEVNULL, text=True)
    listing = start("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths)
    commit, status = start("rev-parse", "HEAD"), start("status", "--porcelain", "--", *paths)

    def collect() -> tuple[list[str] | None, dict[str, Any]]:
        listed, head, changes = (p.communicate()[0] for p in (listing, commit, status))
        if listing.returncode != 0:
            return None, {}
        dirty = bool(changes.strip())
        what = "the packages" if paths else "the project"
        return [f for f in listed.split("\0") if f], {
            "git_commit": head.strip(), "git_dirty": dirty,
            "note": f"{what} differ from that commit (uncommitted edits); this copy is what ran"
            if dirty else f"{what} are exactly that commit"}
    return collect


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
