"""How each rank of a job ended, from submitit's result pickles (in the torchrun shape, from the ranks'
own notes: launcher.reports.rank_notes; a rank stopped before it left its pickle, from its own record of
what it raised: trainer.runners.failures), and which failure is the cause (the one rule:
launcher.reports.root_cause.root_cause_first)."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path
from typing import Any

from launcher.reports.root_cause import Failure, is_symptom, last_line, root_cause_first, traceback_body
from launcher.reports.rank_notes import rank_failures, rank_notes
from launcher.rundir.layout import job_files, job_log_dir, result_pickle_names
from launcher.rundir.record import read_optional
from trainer.config.schema import ConfigError
from trainer.rank.rundir import ERRORS_DIR
from trainer.runners.envelope import RANK_NODES


def error_text(text: str, default: str = "error") -> tuple[str, str]:
    """(the one-line error, the full text) of a rank's failure as submitit reports it: the traceback
    between "-----" rules, then a list of log paths; the traceback's last line is the exception."""
    return last_line(traceback_body(str(text)), default), str(text).strip()


def nodes_of(returned: list[Any]) -> list[str]:
    """The node each rank ran on, in rank order, from the results the job's tasks returned (one per rank; in the
    torchrun shape one per node, naming its ranks' nodes under RANK_NODES, which is taken out of them here)."""
    per_rank = [r.pop(RANK_NODES, None) if isinstance(r, dict) else None for r in returned]
    if per_rank and all(isinstance(p, dict) for p in per_rank):
        places = {int(rank): node for p in per_rank for rank, node in p.items()}  # type: ignore[union-attr]
        return [places[rank] for rank in sorted(places)]
    return [str(r.get("node", "")) if isinstance(r, dict) else "" for r in returned]


def read_outcomes(run_dir: Path, job_id: str,
                  files: dict[str, os.DirEntry[str]] | None = None, nodes: bool = False) -> dict[int, tuple[str, Any]]:
    """Each rank's ("success", result) or ("error", traceback) from submitit's result pickles
    (`files`: the job folder's listing, layout.job_files, if the caller has it; `nodes`: a torchrun node task's
    result keeps the nodes of its ranks, for nodes_of)."""
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
        if isinstance(value, dict) and not nodes:  # a torchrun node task's own ranks: for nodes_of
            value.pop(RANK_NODES, None)
        if rank.isdigit():
            out[int(rank)] = (str(kind), value)
    return out


def succeeded(result_pickle: Path) -> bool:
    """Whether a rank's result file (submitit's pickle of ("success", result) or ("error", traceback))
    holds a success; False while it is missing or half written (the wait of a run whose failed attempt
    may come back by itself, launcher.waiting.ends)."""
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


def failure_of(outcomes: dict[int, tuple[str, Any]], job_folder: Path | None = None,
               task_dir: Path | None = None) -> tuple[int, str] | None:
    """The failed rank and its one-line error, the root cause first (peers die of timeouts). In the
    torchrun shape (`job_folder`'s rank notes) the ranks that failed under a node task, not the node;
    otherwise with the ranks' own records in `task_dir` (raised_by_ranks)."""
    failures = [(task, *error_text(str(v))) for task, (kind, v) in outcomes.items() if kind != "success"]
    if not failures:
        return None
    named, times = rank_failures(rank_notes(job_folder)) if job_folder is not None else ([], {})
    if not named and task_dir is not None:
        succeeded = {task for task, (kind, _) in outcomes.items() if kind == "success"}
        failures, times = raised_by_ranks(failures, task_dir, succeeded)
    rank, short, _ = root_cause_first(named or failures, times=times)[0]
    return rank, short


def raised_by_ranks(failures: list[Failure], task_dir: Path,
                    succeeded: set[int]) -> tuple[list[Failure], dict[int, float]]:
    """`failures` with what each rank recorded itself (`task_dir`/errors/rank-N.json, written as the
    exception left the function, before the rank reports it to submitit) where its failure is otherwise
    only a symptom, and when each recorded rank failed (for root_cause_first). A rank that raised can be
    stopped by the local fail-fast or srun's kill-on-bad-exit before it leaves its result: its peer, whose
    connection to it closed, may report first, and without the record that closed connection, or "ended
    without a result", would be all there is to tell them apart. (A rank that succeeded is not a failure
    whatever an earlier attempt recorded.)"""
    by_rank = {failure[0]: failure for failure in failures}
    times: dict[int, float] = {}
    for path in sorted(Path(task_dir, ERRORS_DIR).glob("rank-*.json")):
        record = read_optional(path)
        rank = record.get("rank") if isinstance(record, dict) else None
        if not isinstance(rank, int) or isinstance(rank, bool) or rank in succeeded:
            continue
        text = str(record.get("traceback") or f"{record.get('type')}: {record.get('message')}")
        if isinstance(record.get("time"), (int, float)) and not isinstance(record.get("time"), bool):
            times[rank] = float(record["time"])
        known = by_rank.get(rank)
        if known is None or is_symptom(known[2]) and not is_symptom(text):
            by_rank[rank] = (rank, last_line(text, "error"), text)
    return sorted(by_rank.values()), times
