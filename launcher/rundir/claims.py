"""Which run of a runs folder is the run of a signature, and the claim that makes identical submissions
queue one run between them (docs/signatures.md, "Submitting what exists").

``<runs_dir>/.signatures/<signature>.json`` names the run folder of that signature (``{"run": NAME}``): the
index a new submission reads before it queues anything. ``<signature>.lock`` beside it is the claim: a
submission holds an exclusive ``flock`` on it from the moment it looks the signature up until what it decided is
queued (a new run, or a failed one continued), so that a second identical submission, from another terminal
or another machine on the same runs folder, waits for the first and then finds its run. The kernel drops the
lock of a process that dies (on NFS, the lock manager does), so a submitter killed before queueing never holds
a signature for ever; no stale-claim rule is needed. What holds the lock writes who it is into the lock file,
for the waiting message only.

``<runs_dir>/.signatures/points/<signature>.json`` names where each sweep point of that signature was run
(``{"run": NAME, "task": T}``): a new sweep looks its points up there (launcher.rundir.reused) and queues only
the ones no run has completed. A single run is its own point: the run index serves for it.

A runs folder that has runs but no index yet (its runs were made before there was one) gets one the first time
a submission looks: each signature its records hold names its newest run, so those runs are answered too; and
so does a runs folder without a point index, for its sweeps' points.

A claim that made nothing (refused by sbatch, interrupted) leaves nothing: the index as it was, and no lock file
or folder that was not there before. A lock file is removed only by its holder, and a taker checks, once it
holds the lock, that the file it locked is still the one at that path (else it locked a removed one, and
starts again): the usual protocol for lock files that come and go.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from launcher.rundir.layout import RUN_FILE, SIGNATURES_DIR

# How often a waiting submission tells that it waits.
WAIT_NOTE_S = 10.0
POINTS_DIR = "points"


class Claim:
    """A signature held by this process: the run its index names (None: none yet, or its folder is gone),
    and `names` to point the index at the run this process makes."""

    def __init__(self, folder: Path, signature: str, fd: int | None) -> None:
        self.folder, self.signature, self._fd = folder, signature, fd
        self.before = _read(self.index)  # the index as this claim found it, put back if what it named is gone

    @property
    def index(self) -> Path:
        return self.folder / f"{self.signature}.json"

    @property
    def lock(self) -> Path:
        return self.folder / f"{self.signature}.lock"

    def run(self) -> Path | None:
        """The run folder of this signature, if the index names one that still holds a run."""
        named = _named(self.folder, self.index)
        return None if named is None else named[0]

    def names(self, run_dir: Path, points: dict[int, str] | None = None) -> None:
        """From now on the signature's run is `run_dir` (a folder of this runs folder), and each of `points`
        (a sweep's task: its signature) is that run's task."""
        _write(self.index, json.dumps({"run": run_dir.name}).encode() + b"\n")
        if points:
            (self.folder / POINTS_DIR).mkdir(exist_ok=True)
        for task, signature in (points or {}).items():
            _write(_point_index(self.folder, signature), json.dumps({"run": run_dir.name, "task": task}).encode())

    def release(self) -> None:
        """Let the next identical submission look (once what this one decided is queued); what this claim made
        and left no run for is removed first."""
        if self._fd is None:
            return
        try:
            if self.run() is None:  # its run was removed (sbatch refused it), or none was made
                if self.before is not None:
                    _write(self.index, self.before)
                else:
                    self.index.unlink(missing_ok=True)
            if not self.index.exists():
                self.lock.unlink(missing_ok=True)
                with contextlib.suppress(OSError):  # (another submitter's lock file may be there)
                    self.folder.rmdir()
        finally:
            os.close(self._fd)  # (closing drops the flock)
            self._fd = None


def point(runs_root: Path, signature: str) -> tuple[Path, int] | None:
    """The run folder and task of the sweep point (or the single run) of `signature` that the index names, if its
    folder still holds a run (whether that task completed is the caller's question: launcher.rundir.reused)."""
    folder = runs_root / SIGNATURES_DIR
    return _named(folder, _point_index(folder, signature)) or _named(folder, folder / f"{signature}.json")


def _point_index(folder: Path, signature: str) -> Path:
    return folder / POINTS_DIR / f"{signature}.json"


def _named(folder: Path, index: Path) -> tuple[Path, int] | None:
    """What the index file `index` names: a run folder of the runs folder, and a task (0 for a run's own entry)."""
    try:
        said = json.loads(_read(index) or b"{}")
        name, task = said.get("run"), said.get("task", 0)
    except (ValueError, AttributeError):  # a damaged index: as if none
        return None
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        return None  # (an edited index names nothing outside the runs folder)
    if not isinstance(task, int) or isinstance(task, bool) or task < 0:
        return None
    found = folder.parent / name
    return (found, task) if (found / RUN_FILE).is_file() else None


@contextlib.contextmanager
def claim(runs_root: Path, signature: str, say: bool = True) -> Iterator[Claim]:
    """Hold `signature` in the runs folder `runs_root` until released or left: waits while another
    submission holds it (telling so on standard error every WAIT_NOTE_S)."""
    folder = runs_root / SIGNATURES_DIR
    made_root = not runs_root.exists()
    earlier = not made_root and not folder.exists()  # a runs folder from before the index: its runs named once
    fd = _take(folder, folder / f"{signature}.lock", say)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}).encode(), 0)
    points = not (folder / POINTS_DIR).is_dir()  # (and its sweeps' points, once, where it had no point index)
    if earlier or points:
        _name_earlier_runs(runs_root, folder, runs=earlier)
    held = Claim(folder, signature, fd)
    try:
        yield held
    finally:
        held.release()
        if made_root:  # a refused first submission leaves no runs folder either
            with contextlib.suppress(OSError):
                runs_root.rmdir()


def _name_earlier_runs(runs_root: Path, folder: Path, runs: bool) -> None:
    """Name in the index the runs that `runs_root` held before it had one (their records have signatures: `list
    --same-as` finds them; `runs`: False where the run index exists, and only the points are named), the newest
    of each signature, so that submitting one of them again answers with it; and each sweep point of those
    records, so that a new sweep finds it. Each entry is made whole or not at all, and one that another
    submitter made meanwhile is kept."""
    from launcher.rundir.record import load_run, run_folders  # (only once per runs folder)
    from launcher.rundir.record_types import signature as malformed

    named: set[Path] = set()
    for run_dir in run_folders(runs_root):  # newest first
        try:
            info = load_run(run_dir)
        except (OSError, ValueError, KeyError, TypeError):  # (an unreadable record names nothing; `list` shows it)
            continue
        # (A debug run is never answered, as a submission to the debug executor never looks: it is where you stop.)
        if info.executor == "debug":
            continue
        entries = [(folder / f"{info.signature}.json", info.signature, {"run": run_dir.name})] if runs else []
        if info.is_sweep and info.record.get("task_signatures"):
            entries += [(_point_index(folder, info.task_signature(task)), info.task_signature(task),
                         {"run": run_dir.name, "task": task}) for task in range(info.num_tasks)]
        for index, signature, entry in entries:
            if not signature or index in named or malformed(signature) is not None:
                continue
            named.add(index)
            _create(index, json.dumps(entry).encode() + b"\n")
    if next(folder.glob("*.json"), None) is not None:  # (looked once: an index folder that is only this claim's
        (folder / POINTS_DIR).mkdir(exist_ok=True)      # lock stays removable, as a claim that made nothing must)


def _create(index: Path, data: bytes) -> None:
    """`index` written whole with `data`, unless it exists (another submitter made it meanwhile)."""
    index.parent.mkdir(exist_ok=True)
    partial = index.with_name(f".{index.name}.{os.getpid()}")
    partial.write_bytes(data)
    try:
        os.link(partial, index)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: replaced instead, unless made meanwhile
        if not index.exists():
            _write(index, data)
    finally:
        partial.unlink(missing_ok=True)


def _take(folder: Path, lock: Path, say: bool) -> int:
    """An open descriptor of `lock`, locked, and still the file at that path."""
    note_at = time.monotonic()
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # its holder removed the folder between the two calls
            continue
        if not _lock(fd):  # no locks on this file system: said once, and go on unserialised
            return fd
        while not _try(fd):
            if say and time.monotonic() >= note_at:
                print(f"an identical submission is being made ({_holder(fd)}): waiting for it", file=sys.stderr,
                      flush=True)
                note_at = time.monotonic() + WAIT_NOTE_S
            time.sleep(0.2)
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # it locked a file its holder had removed: again, with the file there now


def _lock(fd: int) -> bool:
    """Whether this file system locks at all (asked without waiting)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        pass
    except OSError as err:
        if err.errno in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            print(f"warning: the runs folder's file system has no locks ({err.strerror}): two identical "
                  f"submissions at the same moment may both run", file=sys.stderr, flush=True)
            return False
        raise
    return True


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _holder(fd: int) -> str:
    try:
        said = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"process {said['pid']} on {said['host']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: a reader never sees half a name."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(path)
