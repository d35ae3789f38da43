"""The code a run imports, copied into its run folder when it is submitted.

Editing the project while a job waits in the queue must not change what it runs, and a requeued or
resumed job must continue with the code it started with. So the submitter copies the packages the
tasks import (`launcher/`, `trainer/`: the trainer and the node side, with their package data) into
`RUN/code/`, and the tasks start there: PYTHONPATH and the working directory are that folder
(`launcher/request/send.py`), so `python -m submitit.core._submit` imports the copy first.

In a git checkout the files are the ones git would ship (tracked and new files, `.gitignore`
honoured: no caches, no run folders); the commit and whether the tree differed from it are noted in
`RUN/code/SNAPSHOT.json`. An installed copy (a wheel) has no git: its package files are copied.
`--resume` and requeues reuse the snapshot already in the run folder. The profile key
`snapshot: false` turns it off (the tasks then import the live code, as before).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from trainer.config.lookup import CODE_ROOT

SNAPSHOT_DIR = "code"
NOTE_FILE = "SNAPSHOT.json"
PACKAGES = ("launcher", "trainer")
# The folder holding the packages the tasks import (the checkout, or site-packages when installed).


def snapshot_dir(run_dir: Path) -> Path:
    return run_dir / SNAPSHOT_DIR


def ensure(run_dir: Path, code_root: Path = CODE_ROOT) -> Path:
    """RUN/code with the code to run: the snapshot already there (--resume), else a new copy."""
    target = snapshot_dir(run_dir)
    if (target / NOTE_FILE).is_file():
        return target
    start = time.perf_counter()
    files, git = _git_files(code_root)
    if files is None:
        files = _package_files(code_root)
    partial = target.with_name(f".{SNAPSHOT_DIR}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    size = 0
    for name in files:
        source, dest = code_root / name, partial / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        # Contents only: the copy's mode comes from the submitter's umask (077: run folders are
        # private), not from the checkout's 0644.
        shutil.copyfile(source, dest)
        size += dest.stat().st_size
    note = {"from": str(code_root), "files": len(files), "bytes": size,
            "seconds": round(time.perf_counter() - start, 4), **git}
    (partial / NOTE_FILE).write_text(json.dumps(note, indent=1) + "\n")
    os.replace(partial, target)  # complete or absent: never a half-copied snapshot
    return target


def read_note(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((snapshot_dir(run_dir) / NOTE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _git_files(root: Path) -> tuple[list[str] | None, dict[str, Any]]:
    """The packages' files as git would ship them, with the commit and dirty state; None without git."""
    if shutil.which("git") is None or not (root / ".git").exists():
        return None, {}
    run = lambda *args: subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)  # noqa: E731
    listed = run("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *PACKAGES)
    if listed.returncode != 0:
        return None, {}
    files = [f for f in listed.stdout.split("\0") if f and (root / f).is_file()]
    commit = run("rev-parse", "HEAD").stdout.strip()
    dirty = bool(run("status", "--porcelain", "--", *PACKAGES).stdout.strip())
    return files, {"git_commit": commit, "git_dirty": dirty,
                   "note": "the packages differ from that commit (uncommitted edits); this copy is what ran"
                   if dirty else "the packages are exactly that commit"}


def _package_files(root: Path) -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out.append(str(path.relative_to(root)))
    return out
