"""Operating runs from the command line: `status`, `logs`, `cancel`, `list`, and waiting for a sweep.

    python submit.py status [RUN] [--json]        state of each task (and rebuild the sweep's summary)
    python submit.py logs RUN [--task I] [--rank R] [--err] [--follow]
    python submit.py cancel RUN
    python submit.py list [-n N] [--json]

RUN is a run folder, or its name under the runs folder (`--runs-dir`, default `runs`). Nothing here
imports torch: these commands answer in well under a second on a finished run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from launcher import runs
from launcher.cli import EXIT_FAILED, EXIT_OK, ArgumentParser, relative
from launcher.taskstate import (
    ACTIVE,
    RunInfo,
    TaskState,
    load_run,
    log_path,
    task_states,
)
from trainer.schema import ConfigError

DEFAULT_RUNS_DIR = "runs"


# ----- finding runs --------------------------------------------------------------------------------

def _add_run_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("run", nargs=None if required else "?", metavar="RUN",
                        help="run folder, or its name under --runs-dir" + ("" if required else
                                                                            " (default: the newest run)"))
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR, help="where runs are (default: runs)")


def run_folders(runs_dir: Path) -> list[Path]:
    """Run folders under `runs_dir`, newest first."""
    if not runs_dir.is_dir():
        return []
    found = [p.resolve() for p in runs_dir.iterdir() if (p / runs.RUN_FILE).is_file()]
    return sorted(found, key=lambda p: ((p / runs.RUN_FILE).stat().st_ctime, p.name), reverse=True)


def find_run(name: str | None, runs_dir: str) -> Path:
    if name is None:
        found = run_folders(Path(runs_dir))
        if not found:
            raise ConfigError(f"no runs in {runs_dir!r} (give a run folder, or --runs-dir)")
        return found[0]
    for path in (Path(name), Path(runs_dir) / name):
        if (path / runs.RUN_FILE).is_file():
            return path.resolve()
    raise ConfigError(f"run {name!r}: not a run folder (no {runs.RUN_FILE} there or in {runs_dir}/)")


def _overrides_text(overrides: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in overrides.items())


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# ----- status --------------------------------------------------------------------------------------

def status(argv: list[str]) -> int:
    parser = ArgumentParser(prog="submit.py status", description="State of each task of a run (pending, "
                            "running, completed, failed, requeued, cancelled, timeout) and its restarts; also "
                            "(re)builds a sweep's summary.csv/summary.md/summary.png and each run's curves.png.")
    _add_run_arguments(parser, required=False)
    parser.add_argument("--json", action="store_true", help="one JSON object per line, one per task")
    parser.add_argument("--no-collect", action="store_true", help="only show the states; write no files")
    args = parser.parse_args(argv)
    run_dir = find_run(args.run, args.runs_dir)
    info = load_run(run_dir)
    states = task_states(info)
    summary = None
    if not args.no_collect:
        from launcher import results

        summary = results.collect(run_dir, states)
    try:
        if args.json:
            for ts in states:
                print(json.dumps(ts.as_json(), default=str), flush=True)
        else:
            print(_status_text(info, states, summary), flush=True)
    except BrokenPipeError:  # `status --json | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


def _status_text(info: RunInfo, states: list[TaskState], summary: dict[str, Any] | None) -> str:
    from launcher.results import overall_state

    metric, _ = info.target
    counts: dict[str, int] = {}
    for ts in states:
        counts[ts.state] = counts.get(ts.state, 0) + 1
    head = (f"run {relative(info.run_dir)}: {info.job.get('name', '?')} on {info.profile.get('name', '?')} "
            f"({info.executor}), {len(states)} task(s): {overall_state(states)} — "
            + ", ".join(f"{n} {s}" for s, n in counts.items()))
    rows = [["task", "state", "restarts", "job id", "wall", metric, "overrides", "error"]]
    for ts in states:
        result = ts.result or _task_result(ts)
        value = result.get(metric) if result and ts.state == "completed" else None
        rows.append([str(ts.task), ts.state, str(ts.restarts), ts.job_id or "-", _duration(ts.wall_time_s),
                     f"{value:.4f}" if isinstance(value, (int, float)) else "-", _overrides_text(ts.overrides),
                     (f"rank {ts.failed_rank}: " if ts.failed_rank is not None else "") + ts.error])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    if summary and summary.get("summary_csv"):
        lines.append(f"summary: {relative(Path(summary['summary_csv']))} (and summary.md, summary.png)")
    if summary and summary.get("curves_left"):
        lines.append(f"curves.png still to draw for {summary['curves_left']} task(s): run status again")
    incomplete = [ts for ts in states if ts.state not in ACTIVE + ("completed",)]
    if incomplete:
        lines.append(f"resubmit the {len(incomplete)} incomplete task(s) with: "
                     f"python submit.py --resume {relative(info.run_dir)}")
    return "\n".join(line.rstrip() for line in lines)


def _task_result(ts: TaskState) -> dict[str, Any] | None:
    path = ts.task_dir / "result.json"
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except ValueError:
        return None


# ----- logs ----------------------------------------------------------------------------------------

def logs(argv: list[str]) -> int:
    parser = ArgumentParser(prog="submit.py logs", description="Print a task's log (submitit's files under "
                            "RUN/logs/<job id>/), by default task 0, rank 0, standard output.")
    _add_run_arguments(parser, required=True)
    parser.add_argument("--task", type=int, default=0, help="sweep task index (default 0)")
    parser.add_argument("--rank", type=int, default=0, help="rank within the task (default 0)")
    parser.add_argument("--err", action="store_true", help="standard error instead (tracebacks, submitit's log)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing until the task ends")
    parser.add_argument("--attempt", type=int, default=-1,
                        help="which submission of a resubmitted task (0 = first; default: the latest)")
    args = parser.parse_args(argv)
    run_dir = find_run(args.run, args.runs_dir)
    info = load_run(run_dir)
    task_jobs = info.task_jobs
    if not 0 <= args.task < len(task_jobs):
        raise ConfigError(f"--task {args.task}: this run has tasks 0..{len(task_jobs) - 1}")
    history = task_jobs[args.task]
    if not history:
        raise ConfigError(f"--task {args.task}: that task was never submitted")
    try:
        job_id = history[args.attempt]
    except IndexError:
        raise ConfigError(f"--attempt {args.attempt}: task {args.task} was submitted {len(history)} time(s)") \
            from None
    ranks = int(info.record.get("world_size") or 1)
    if not 0 <= args.rank < ranks:
        raise ConfigError(f"--rank {args.rank}: this run has ranks 0..{ranks - 1}")
    path = log_path(run_dir, job_id, args.rank, "err" if args.err else "out")
    if not args.follow:
        if not path.exists():
            state = task_states(info)[args.task].state
            print(f"no log yet at {relative(path)} (task {args.task} is {state})", file=sys.stderr)
            return EXIT_FAILED
        sys.stdout.write(path.read_text(errors="replace"))
        return EXIT_OK
    return _follow(info, args.task, path)


def _follow(info: RunInfo, task: int, path: Path, poll_s: float = 1.0) -> int:
    """Print `path` as it grows until the task is no longer pending or running."""
    position = 0
    last_check, active = 0.0, True
    while True:
        if path.exists():
            with open(path, encoding="utf-8", errors="replace") as fh:
                fh.seek(position)
                chunk = fh.read()
                position = fh.tell()
            if chunk:
                sys.stdout.write(chunk)
                sys.stdout.flush()
        if not active:
            return EXIT_OK
        now = time.monotonic()
        if now - last_check >= 3 * poll_s:
            last_check = now
            # One more read after the task ended picks up its last lines.
            active = task_states(load_run(info.run_dir))[task].state in ACTIVE
        time.sleep(poll_s)


# ----- cancel --------------------------------------------------------------------------------------

def cancel(argv: list[str]) -> int:
    parser = ArgumentParser(prog="submit.py cancel", description="Cancel a run's tasks that are still pending "
                            "or running (scancel on SLURM; the local processes otherwise).")
    _add_run_arguments(parser, required=True)
    args = parser.parse_args(argv)
    run_dir = find_run(args.run, args.runs_dir)
    info = load_run(run_dir)
    states = task_states(info)
    active = [ts for ts in states if ts.state in ACTIVE]
    if not active:
        print(f"nothing to cancel: no task of {relative(run_dir)} is pending or running", flush=True)
        return EXIT_OK
    if info.executor == "slurm":
        ids = _scancel_ids([ts.job_id for ts in active], [ts.job_id for ts in states])
        done = subprocess.run(["scancel", *ids], check=False, capture_output=True, text=True, env=info.slurm_env())
        if done.returncode != 0:
            print(f"error: scancel failed: {done.stderr.strip()}", file=sys.stderr)
            return EXIT_FAILED
        what = f"scancel {' '.join(ids)}"
    else:
        for ts in active:
            _stop_local(int(ts.job_id))
        what = "stopped local process(es) " + ", ".join(ts.job_id for ts in active)
    runs.update_record(run_dir, cancelled_at=time.time())
    print(f"cancelled {len(active)} task(s) of {relative(run_dir)}: {what}", flush=True)
    return EXIT_OK


def _scancel_ids(active: list[str], every: list[str]) -> list[str]:
    """Whole arrays by their id where every task of the array is still active, else task by task."""
    by_array: dict[str, int] = {}
    for job_id in every:
        by_array[job_id.split("_")[0]] = by_array.get(job_id.split("_")[0], 0) + 1
    active_by_array: dict[str, int] = {}
    for job_id in active:
        active_by_array[job_id.split("_")[0]] = active_by_array.get(job_id.split("_")[0], 0) + 1
    ids: dict[str, None] = {}
    for job_id in active:
        base = job_id.split("_")[0]
        ids[base if active_by_array[base] == by_array[base] else job_id] = None
    return [*ids]


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(stat.parent.name))
    return out


def _stop_local(pid: int, grace_s: float = 10.0) -> None:
    """What submitit's LocalJob.cancel does (SIGINT to the controller, which stops its ranks), then
    SIGKILL for whatever is still alive after `grace_s` (ranks ignore SIGTERM under submitit)."""
    family = [pid] + _children(pid)
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in family):
            return
        time.sleep(0.2)
    for p in family:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# ----- list ----------------------------------------------------------------------------------------

def list_runs(argv: list[str]) -> int:
    parser = ArgumentParser(prog="submit.py list", description="Recent runs, newest first: profile, job, "
                            "tasks, state and best target metric.")
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR, help="where runs are (default: runs)")
    parser.add_argument("-n", type=int, default=20, help="how many runs (default 20)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line, one per run")
    args = parser.parse_args(argv)
    rows = []
    for run_dir in run_folders(Path(args.runs_dir))[:max(0, args.n)]:
        try:
            rows.append(_list_row(run_dir))
        except (OSError, ValueError, KeyError) as err:
            rows.append({"run": run_dir.name, "state": f"unreadable ({err})"})
    if args.json:
        for row in rows:
            print(json.dumps(row, default=str), flush=True)
        return EXIT_OK
    if not rows:
        print(f"no runs in {args.runs_dir}", flush=True)
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


def _list_row(run_dir: Path) -> dict[str, Any]:
    info = load_run(run_dir)
    metric, _ = info.target
    state = str(info.record.get("state") or "").lower()
    best = info.record.get("best")
    if state in ("", "running", "pending"):
        from launcher.results import collect

        summary = collect(run_dir, max_curves=0)
        state, best = summary["state"], summary["best"]
        if best:
            best = {metric: best.get(metric), "task": best.get("task")}
    elif best is None and (run_dir / "result.json").exists():
        best = {metric: json.loads((run_dir / "result.json").read_text()).get(metric)}
    return {"run": run_dir.name, "run_dir": str(run_dir), "profile": info.profile.get("name", ""),
            "job": info.job.get("name", ""), "executor": info.executor, "tasks": info.num_tasks,
            "created": info.record.get("created"), "state": state, "target_metric": metric, "best": best}


# ----- waiting for a sweep -------------------------------------------------------------------------

def wait_for_sweep(run_dir: Path, jobs: list[Any], as_json: bool, poll_s: float = 2.0) -> int:
    """Wait for the array tasks in `jobs`, printing each as it ends and rebuilding the summary;
    0 if every task of the run completed, 1 otherwise (the failed rows say why)."""
    from launcher import results

    info = load_run(run_dir)
    mine = {str(j.job_id) for j in jobs}
    tasks = [t for t, ids in enumerate(info.task_jobs) if ids and ids[-1] in mine]
    print(f"running sweep {info.job.get('name', '')}: {len(tasks)} task(s) on {info.executor}, "
          f"run folder {relative(run_dir)}", flush=True)
    if info.executor == "debug":
        _run_debug_jobs(info, jobs, tasks)
    reported: set[int] = set()
    metric, _ = info.target
    while True:
        for job in jobs:
            if info.executor == "local":
                job.done()  # reaps finished controllers, so they are not seen as running zombies
        states = task_states(info)
        ended = [states[t] for t in tasks if t not in reported and states[t].state not in ACTIVE]
        for ts in ended:
            reported.add(ts.task)
            value = (ts.result or {}).get(metric)
            detail = f"{metric} {value:.4f}" if isinstance(value, (int, float)) else ts.error
            print(f"task {ts.task} {ts.state}: {_overrides_text(ts.overrides)}  {detail}", flush=True)
        if ended:
            results.collect(run_dir, states, max_curves=None)
        if len(reported) == len(tasks):
            break
        time.sleep(poll_s)
    summary = results.collect(run_dir, states, max_curves=None)
    if info.is_sweep:
        print((run_dir / results.SUMMARY_MD).read_text().rstrip(), flush=True)
    failed = [s for s in states if s.state != "completed"]
    payload = {"run_dir": str(run_dir), "state": summary["state"].upper(), "tasks": len(states),
               "counts": summary["counts"], "target_metric": metric, "best": summary["best"],
               "summary_csv": summary.get("summary_csv"), "job_ids": [s.job_id for s in states]}
    if failed:
        print(f"{len(failed)} task(s) did not complete; resubmit them with: "
              f"python submit.py --resume {relative(run_dir)}", file=sys.stderr)
    if as_json:
        print(json.dumps(payload, default=str), flush=True)
    return EXIT_FAILED if failed else EXIT_OK


def _run_debug_jobs(info: RunInfo, jobs: list[Any], tasks: list[int]) -> None:
    """The debug executor runs each task in this process when its result is asked for; record the
    outcome in the task's folder since it leaves no result pickles."""
    from launcher import outcome

    for task, job in zip(tasks, jobs):
        task_dir = info.task_dir(task)
        task_dir.mkdir(parents=True, exist_ok=True)
        done = outcome.wait(job)
        if done.ok and done.result is not None:
            runs.write_result(task_dir, {**done.result, "state": "COMPLETED", "job_id": str(job.job_id),
                                         "task": task})
        else:
            rank, short, _ = done.failures[0]
            (task_dir / "failure.json").write_text(json.dumps({"rank": rank, "error": short}))


def __getattr__(name: str) -> Any:
    """`submit.py list` calls operations.list: served here, so the builtin `list` is not shadowed."""
    if name == "list":
        return list_runs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
