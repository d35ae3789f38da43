"""Unchanged files of a snapshot hard-linked from the previous run's copy instead of copied again.

A hard link to your own file would share it with your editor; a link to the previous run's copy
shares it only with other snapshots, which nothing writes in place: the tasks run in the directory
you submitted from, Python adds only new files (`__pycache__/`), and the copies are made read-only
(`a-w`; a writer gets an error rather than changing older runs). So at a submission, a file whose
source is unchanged since the newest snapshot of the same folder in the same runs folder is linked
from that snapshot; every other file is copied, as is everything when the link fails (another
file system, the previous run deleted).

"Unchanged" is the tool's one rule (launcher.filestamp, which the SSH sync's remembered content
hashes use too): a source's stamp is the one recorded when it was copied, and it had settled by then.
The previous copy must still have the size, mtime and inode recorded when it was made (checked on the
new link as the manifest is written): a copy written to anyway (as root, or after a chmod) is copied
afresh, not spread to the new run.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from launcher.filestamp import Entry, settled, source_stat, unchanged
from launcher.rundir.layout import NOTE_FILE, PROJECT_DIR, SNAPSHOT_DIR

LOOK = 50  # run folders looked at, newest first, for a snapshot of the same folder
# In RUN/code, per tree ("code", "project"): {"at": ..., "files": {name: [...]}}, per file the source's
# stamp at copy time (filestamp.source_stat), then the copy's size, mtime_ns, inode.
MANIFEST = "SNAPSHOT.{}-files.json"


def copy_stat(st: os.stat_result) -> Entry:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def previous(run_dir: Path, root: Path, tree: str) -> tuple[Path, dict[str, Entry]] | None:
    """The newest other snapshot of `root` beside `run_dir` and the files it may lend (unchanged, not racy).
    Run folders' names begin with their time, so the newest come first by name; no shared index to keep."""
    runs = run_dir.parent
    try:
        names = sorted((n for n in os.listdir(runs) if n != run_dir.name and not n.startswith(".")), reverse=True)
    except OSError:
        return None
    for name in names[:LOOK]:
        prev = runs / name
        try:
            note = json.loads((prev / SNAPSHOT_DIR / NOTE_FILE).read_text())
            taken_of = note.get("from") if tree == "code" else note.get("project", {}).get("root")
            if not taken_of or Path(taken_of).resolve() != root:
                continue
            manifest = json.loads((prev / SNAPSHOT_DIR / MANIFEST.format(tree)).read_text())
        except (OSError, ValueError, AttributeError):
            continue
        folder = prev / (SNAPSHOT_DIR if tree == "code" else PROJECT_DIR)
        return folder, {n: e for n, e in manifest["files"].items() if settled(e, manifest["at"])}
    return None


def plan(root: Path, files: list[str], stats: dict[str, Entry], lender: tuple[Path, dict[str, Entry]] | None
         ) -> tuple[list[str], list[str]]:
    """Split `files` into (to link, to copy); `stats` gets each source's stat, taken before any copying."""
    lend = lender[1] if lender else {}
    linked, copied = [], []
    top = str(root)
    for name in files:
        if name not in stats:
            try:
                stats[name] = source_stat(os.lstat(f"{top}/{name}"))
            except OSError:  # gone since it was listed: the copy reports it
                copied.append(name)
                continue
        old = lend.get(name)
        (linked if old is not None and unchanged(old, stats[name]) else copied).append(name)
    return linked, copied


def link(lender: Path, names: list[str], dest: Path, made: set[str]) -> list[str]:
    """Hard-link `names` from `lender` into `dest`; the names that could not be linked (to copy)."""
    failed: list[str] = []
    src, dst = str(lender), str(dest)  # (strings: pathlib's joins cost more than the links themselves)
    for i, name in enumerate(names):
        folder = os.path.dirname(name)
        if folder not in made:
            os.makedirs(f"{dst}/{folder}", exist_ok=True)
            made.add(folder)
        try:
            os.link(f"{src}/{name}", f"{dst}/{name}", follow_symlinks=False)
        except OSError as e:
            failed.append(name)
            if e.errno in (errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP):  # no link will work: copy the rest
                return failed + names[i + 1:]
    return failed


def read_only(path: str) -> os.stat_result:
    """Take write permission off a fresh copy (a symbolic link has none of its own); its stat."""
    st = os.lstat(path)
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o222:
        os.chmod(path, st.st_mode & ~0o222)
        st = os.lstat(path)
    return st


def record(entries: dict[str, Any], tree: str, stats: dict[str, Entry], at: float, dest: Path, names: list[str],
           lent: dict[str, Entry]) -> tuple[int, list[str]]:
    """Add `tree`'s manifest to `entries` (source stat + the copy's stat per file): the copy's bytes, and the
    linked files (`lent`) whose inode is no longer the recorded copy (written to since: to copy afresh).
    `at`: when the sources' stats were taken, before the copy read them (the racy window counts from there)."""
    files, size, stale, top = {}, 0, [], str(dest)
    for name in names:
        st = copy_stat(os.lstat(f"{top}/{name}"))
        if name in lent and lent[name][4:] != st:
            stale.append(name)
            continue
        size += st[0]
        if name in stats:
            files[name] = stats[name] + st
    entries[tree] = {"at": at, "files": files}
    return size, stale
