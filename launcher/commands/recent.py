"""`submit.py list [-n N] [--json]`: recent runs, newest first (run folders here, and the local
records of runs submitted over SSH: launcher.remote.ssh_record), with their state and best target metric.
Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from launcher.commands.console import EXIT_OK, ArgumentParser
from launcher.commands.operate import add_runs_dir_arguments
from launcher.config.resolve import runs_dir
from launcher.remote import ssh_record as remote_record
from launcher.rundir import layout, record, record_types, results
from launcher.rundir.record import find_run, load_run, run_folders
from trainer.config import values
from trainer.config.schema import ConfigError


def list_runs_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="submit.py list", description="Recent runs, newest first: profile, job, "
                            "tasks, state and best target metric.")
    add_runs_dir_arguments(parser)
    parser.add_argument("-n", type=int, default=20, help="how many runs (default 20)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line, one per run")
    same = parser.add_mutually_exclusive_group()
    same.add_argument("--same-as", metavar="RUN", help="only the runs with RUN's signature (RUN included): the "
                      "same job, config, shape, code and interpreter (docs/signatures.md)")
    same.add_argument("--signature", help="only the runs with this signature (as status and --json show it)")
    return parser


def list_runs(args: argparse.Namespace) -> int:
    where = runs_dir(args.profile, args.runs_dir)
    wanted = _wanted_signature(args, where)
    rows = []
    folders = run_folders(where)
    if wanted is not None:  # (-n counts the matching runs, not the folders read)
        folders = [f for f in folders if _signature_of(f) == wanted]
    for run_dir in folders[:max(0, args.n)]:
        try:
            rows.append(_list_row(run_dir))
        except (OSError, ValueError, KeyError, TypeError) as err:  # ConfigError is a ValueError
            rows.append({"run": run_dir.name, "run_dir": str(run_dir), "state": f"unreadable ({err})"})
    if wanted is None:  # (a run submitted over SSH: its signature is in the cluster side's records)
        rows = remote_record.with_rows(rows, where, args.n)  # runs submitted over SSH: their local records, offline
    if args.json:
        for row in rows:
            print(json.dumps(row, default=str), flush=True)
        return EXIT_OK
    if not rows:
        print(f"no runs in {where}" + (f" with signature {wanted}" if wanted else ""), flush=True)
        return EXIT_OK
    table = [["run", "profile", "job", "tasks", "state", "best"]]
    for row in rows:
        best = row.get("best") or {}
        metric = row.get("target_metric", "")
        value = best.get(metric) if isinstance(best, dict) else None
        shown = f"{metric} {value:.4f}" if isinstance(value, (int, float)) else "-"
        if isinstance(best, dict) and best.get("task") is not None:
            shown += f" (task {best['task']})"
        table.append([row["run"], str(row.get("profile", "")), str(row.get("job", "")), str(row.get("tasks", "")),
                      str(row.get("state", "")), shown])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table), flush=True)
    return EXIT_OK


def _wanted_signature(args: argparse.Namespace, where: Path) -> str | None:
    """The signature `--same-as RUN` or `--signature` asks for (None: every run), checked where it enters."""
    if args.same_as is not None:
        found = load_run(find_run(args.same_as, where)).signature
        if not found:
            raise ConfigError(f"--same-as {values.shown_name(args.same_as)}: that run was recorded before runs had "
                              f"signatures (list shows every run)")
        return found
    if args.signature is not None and record_types.signature(args.signature) is not None:
        raise ConfigError(f"--signature {values.shown_name(args.signature)}: expected a signature as status "
                          f"shows it (lowercase hex digits, e.g. 3f0c9a1e6b2d4c57)")
    return args.signature


def _signature_of(run_dir: Path) -> str | None:
    try:
        return load_run(run_dir).signature or None
    except (OSError, ValueError, KeyError, TypeError):  # an unreadable record: not a match (the plain list shows it)
        return None


def _list_row(run_dir: Path) -> dict[str, Any]:
    info = load_run(run_dir)
    metric, _ = info.target
    state = str(info.record.get("state") or "").lower()
    best = info.record.get("best")
    if state in ("", "running", "pending"):
        summary = results.collect(run_dir, max_curves=0)
        state, best = summary["state"], summary["best"]
        if best:
            best = {metric: best.get(metric), "task": best.get("task")}
    elif best is None and (result := record.read_optional(run_dir / layout.RESULT_FILE)) is not None:
        best = {metric: result.get(metric)}
    return {"run": run_dir.name, "run_dir": str(run_dir), "profile": info.profile.get("name", ""),
            "job": info.job.get("name", ""), "executor": info.executor, "tasks": info.num_tasks,
            "created": info.record.get("created"), "state": state, "target_metric": metric, "best": best,
            "signature": info.signature or None}

