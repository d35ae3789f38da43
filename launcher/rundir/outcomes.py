"""How each rank of a job ended, from submitit's result pickles (in the torchrun shape, from the ranks'
own notes: launcher.cluster.rank_notes), and which failure is the cause (the one rule:
launcher.cluster.failures.root_cause_first)."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path
from typing import Any

from launcher.cluster.failures import last_line, root_cause_first, traceback_body
from launcher.cluster.rank_notes import rank_failures, rank_notes
from launcher.rundir.layout import job_files, job_log_dir, result_pickle_names
from trainer.config.schema import ConfigError
from trainer.runners.envelope import RANK_NODES


def error_text(text: str, default: str = "error") -> tuple[str, str]:
    """(the one-line error, the full text) of a rank's failure as submitit reports it: the traceback
    between "-----" rules, then a list of log paths; the traceback's last line is the exception."""
    return last_line(traceback_body(str(text)), default), str(text).strip()


def read_outcomes(run_dir: Path, job_id: str,
                  files: dict[str, os.DirEntry[str]] | None = None) -> dict[int, tuple[str, Any]]:
    """Each rank's ("success", result) or ("error", traceback) from submitit's result pickles
    (`files`: the job folder's listing, layout.job_files, if the caller has it)."""
    out: dict[int, tuple[str, Any]] = {}
    files = job_files(run_dir, job_id) if files is None else files
    names = result_pickle_names(job_id, files)
    if names:
        check_private(run_dir, job_log_dir(run_dir, job_id))
    for name in names:
        rank = name[len(job_id) + 1:].split("_", 1)[0]
        try:
            with open(files[name].path, "rb") as fh:
                kind, value = pickle.load(fh)
        except Exception:  # noqa: BLE001, S112 - a half-written or foreign pickle tells us nothing
            continue
        if isinstance(value, dict):  # a torchrun node task's own ranks: `--wait` reads them (waiting.wait)
            value.pop(RANK_NODES, None)
        if rank.isdigit():
            out[int(rank)] = (str(kind), value)
    return out


def succeeded(result_pickle: Path) -> bool:
    """Whether a rank's result file (submitit's pickle of ("success", result) or ("error", traceback))
    holds a success; False while it is missing or half written (the wait of a run whose failed attempt
    may come back by itself, launcher.request.waiting)."""
    try:
        with open(result_pickle, "rb") as fh:
            return bool(pickle.load(fh)[0] == "success")  # noqa: S301 - the run's own private folder
    except Exception:  # noqa: BLE001 - missing, torn or foreign: not a success
        return False


def check_private(run_dir: Path, folder: Path) -> None:
    """Unpickling runs code: refuse pickles in a folder that someone else could have written.

    Run folders are made 0700 (the submitter and every task use umask 077), so this only fires
    for a folder whose mode was changed, or one made by another user."""
    me = os.geteuid()
    # As text, not Paths: a large sweep checks thousands of job folders, and pathlib's joins cost
    # more than the stat calls themselves.
    chain = [os.fspath(run_dir)]
    for part in folder.relative_to(run_dir).parts:
        chain.append(os.path.join(chain[-1], part))
    for path in chain:
        if path in _CHECKED:
            continue
        info = os.stat(path)
        if info.st_uid not in (me, 0) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ConfigError(f"{path}: writable by others (mode {stat.filemode(info.st_mode)}, owner uid "
                              f"{info.st_uid}); refusing to load the result pickles under it, since anyone who "
                              f"can write there can run code as you. If you trust its contents: chmod -R go-w "
                              f"{run_dir}")
        _CHECKED.add(path)


_CHECKED: set[str] = set()


def failure_of(outcomes: dict[int, tuple[str, Any]], job_folder: Path | None = None) -> tuple[int, str] | None:
    """The failed rank and its one-line error, the root cause first (peers die of timeouts). In the
    torchrun shape (`job_folder`'s rank notes) the ranks that failed under a node task, not the node."""
    failures = [(task, *error_text(str(v))) for task, (kind, v) in outcomes.items() if kind != "success"]
    if not failures:
        return None
    named, times = rank_failures(rank_notes(job_folder)) if job_folder is not None else ([], {})
    rank, short, _ = root_cause_first(named or failures, times=times)[0]
    return rank, short
