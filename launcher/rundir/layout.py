"""Every name in a run folder, in one place (the trainer's own from trainer.rank.rundir; the torchrun
shape's notes from launcher.reports.rank_notes, which the node writes).

    runs/20261129-184500-digits-local/
        run.json        what was submitted (profile, job, executor parameters, job ids, command)
        tasks.json      a sweep's tasks: each one's overrides and full job (what --resume rebuilds)
        profile.yaml    the resolved profile
        job.yaml        the resolved job (batch size per rank and global)
        code/           the code the tasks import, copied at submission (snapshot.py; SNAPSHOT.json)
        logs/<job id>/  submitit's logs, one stdout/stderr pair per task (rank), and result pickles
            torchrun/   `launch: torchrun`: each rank's note (rank-R.json: result, stop or error), stop flags
        metrics.jsonl   one line per epoch, written by rank 0
        events.jsonl    started/resumed/stopped/finished, written by rank 0 (restarts are read from it)
        checkpoints/    ckpt-<step>.pt, the newest K
        model_final.pt  the final weights (a state_dict)
        result.json     the final metrics, once the run has finished (failure.json if it failed)
        function.pkl    a function handed over from Python by value (trainer.runners.pickled), private
        errors/         what your function raised, one record per failing rank (trainer.runners.failures)
        curves.png      loss and accuracy per epoch
        task-NNNN/      a sweep's tasks, each laid out like a single run (without run.json)
            logs/       a pool's point: its ranks' output under each worker that ran it
        pool/           a pool's claim records, one folder per point (launcher.reports.pool_claims)
        summary.csv, summary.md, summary.png   a sweep's table and picture
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

from launcher.reports import pool_claims, rank_notes
from trainer.config.schema import ConfigError
from trainer.rank import rundir

RUN_FILE = "run.json"
TASKS_FILE = "tasks.json"
PROFILE_FILE = "profile.yaml"
JOB_FILE = "job.yaml"
RESULT_FILE = "result.json"
EXCLUDED_FILE = "excluded-nodes.json"  # the nodes a run leaves out (exclusions.py)
FAILURE_FILE = "failure.json"
# Written by the trainer (trainer.rank.rundir holds those names).
METRICS_FILE = rundir.METRICS_FILE
EVENTS_FILE = rundir.EVENTS_FILE
ATTEMPT_BANNER = rundir.ATTEMPT_BANNER  # how a rank's log marks an attempt's start
CURVES_FILE = "curves.png"
SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG = "summary.csv", "summary.md", "summary.png"
LOGS_DIR = "logs"
TORCHRUN_DIR = rank_notes.TORCHRUN_DIR  # in a job's logs: written on the node (launcher.reports.rank_notes)
POOL_DIR = pool_claims.POOL_DIR  # a pool's claims: written by its workers (launcher.reports.pool_claims)
point_log_path = pool_claims.point_log  # a pool point's log, under the worker (job id) that ran it
# The code snapshot (launcher.rundir.snapshot): the code the tasks import, your project's copy when it is
# not this tool's checkout, and the note in code/ naming what was copied.
SNAPSHOT_DIR, PROJECT_DIR, NOTE_FILE = "code", "project", "SNAPSHOT.json"
# In a runs folder, beside its runs: which run is the run of each signature, and its claims (claims.py).
SIGNATURES_DIR = ".signatures"


# Room left in a run folder's name for the "-N" suffix of a second run in the same second.
_SUFFIX_ROOM = 6
# What a run folder holds below its own name, at most (task-NNNN/logs/<array id>/<id>_<rank>_result.pkl).
_DEEPEST = 120


def new_run_dir(runs_root: Path, job_name: str, profile_name: str) -> Path:
    """A fresh, not yet existing folder name (created only when the run is submitted).

    A name longer than the file system allows (NAME_MAX, usually 255 bytes) would fail only when
    the folder is made, or, for the path as a whole (PATH_MAX), when a task writes its logs on
    the node: both are refused here as bad input naming job.name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{_safe(job_name)}-{_safe(profile_name)}"
    root = runs_root.expanduser().resolve()
    name_max, path_max = _limits(root)
    if len(name.encode()) + _SUFFIX_ROOM > name_max:
        raise ConfigError(f"job.name: {_short(job_name)} ({len(job_name.encode())} bytes) with profile "
                          f"{_short(profile_name)} makes the run folder name {len(name.encode())} bytes long; "
                          f"the file system allows {name_max - _SUFFIX_ROOM - len(stamp) - 2} for both together "
                          f"({name_max} per name); use a shorter job.name")
    if len(str(root / name).encode()) + _SUFFIX_ROOM + _DEEPEST > path_max:
        raise ConfigError(f"profile.runs_dir: {_short(str(root))} is too deep: the run folder's files would have "
                          f"paths longer than the {path_max} bytes the file system allows; use a shorter runs_dir")
    return next_free(root / name)


def _names(base: Path) -> Iterator[Path]:
    """`base`, `base-2`, `base-3`, ...: a run folder's name, then those of runs made in the same second."""
    yield base
    for n in itertools.count(2):
        yield base.with_name(f"{base.name}-{n}")


def next_free(base: Path) -> Path:
    """The first of `base`, `base-2`, ... not taken yet (what a dry run shows; `claim` makes it)."""
    return next(path for path in _names(base) if not path.exists())


def claim(base: Path) -> Path:
    """Make the run folder `base`, or the first of `base-2`, ... that no other submitter made meanwhile
    (two runs of one job started in the same second): `mkdir` is the claim, so two never share one. The
    one way every creator of a run folder (a submission here or on the cluster side, `probe`, the local
    record of one over SSH) makes it; private (0700) whatever the umask: it will hold pickles that get
    loaded. Returns the folder."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for path in _names(base):
        try:
            path.mkdir()
        except FileExistsError:
            continue
        path.chmod(0o700)
        return path
    raise AssertionError("not reached: the names never end")


def _limits(root: Path) -> tuple[int, int]:
    """NAME_MAX and PATH_MAX where the run folder will be (asked of the nearest existing folder)."""
    probe = root
    while not _exists(probe) and probe != probe.parent:
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 255, 4096


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long to even look up
        return False


def _short(text: str, most: int = 40) -> str:
    return repr(text if len(text) <= most else text[:most] + "...")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "run"


def task_dir(run_dir: Path, task: int, is_sweep: bool) -> Path:
    """Where task `task` trains: the run folder itself for a single run, task-NNNN/ in a sweep."""
    return run_dir / f"task-{task:04d}" if is_sweep else run_dir


def log_dir(run_dir: Path) -> Path:
    return run_dir / LOGS_DIR


def drop_log_template(run_dir: Path) -> None:
    """submitit's local controller makes its folder template (logs/%j/) literally, next to the real
    logs/<pid>/; it stays empty. rmdir removes only an empty folder."""
    try:
        (log_dir(run_dir) / "%j").rmdir()
    except OSError:
        pass


def job_log_dir(run_dir: Path, job_id: str) -> Path:
    """submitit's folder for one job (or one array task): logs/<id>/, ids like 12 or 12_3."""
    return log_dir(run_dir) / job_id


def log_name(job_id: str, rank: int, stream: str = "out") -> str:
    return f"{job_id}_{rank}_log.{stream}"


def log_path(run_dir: Path, job_id: str, rank: int, stream: str = "out") -> Path:
    return job_log_dir(run_dir, job_id) / log_name(job_id, rank, stream)


def job_files(run_dir: Path, job_id: str) -> dict[str, os.DirEntry[str]]:
    """The entries of a job's log folder by name, from one listing ({} if there is none). `status`
    of a large sweep reads thousands of these folders: one listing each serves both the result
    pickles and the log times (a glob per job also compiled a new pattern each time)."""
    try:
        with os.scandir(job_log_dir(run_dir, job_id)) as entries:
            return {entry.name: entry for entry in entries}
    except OSError:  # missing, or not a folder
        return {}


def result_pickle_names(job_id: str, files: dict[str, os.DirEntry[str]]) -> list[str]:
    """The names of the result pickles in a job folder's listing: `<job id>_<rank>_result.pkl`, each
    rank's success or traceback."""
    prefix, suffix = f"{job_id}_", "_result.pkl"
    return [name for name in files
            if name.startswith(prefix) and name.endswith(suffix) and len(name) >= len(prefix) + len(suffix)]
