"""Operating a run from the command line: `status`, `logs` (`cancel`: launcher.commands.cancel; `list`:
launcher.commands.recent).

    python submit.py status [RUN] [--json]        state of each task (and rebuild the sweep's summary)
    python submit.py logs RUN [--task I] [--rank R] [--err] [--follow]

RUN is a run folder, or its name under the runs folder: `--runs-dir`, else the `runs_dir` of
`--profile` (default: local). Nothing here imports torch: these commands answer in well under a
second on a finished run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from launcher.commands.console import EXIT_FAILED, EXIT_OK, ArgumentParser, overrides_text, relative
from launcher.config.resolve import runs_dir
from launcher.rundir import ettr, exclusions, layout, record, restarts, results, retries
from launcher.rundir.cost import advice, cost_cell, run_costs
from launcher.rundir.record import RecordedRun, find_run, load_run
from launcher.rundir.states import ACTIVE, TaskState, task_states
from trainer.config.schema import ConfigError

# ----- finding runs --------------------------------------------------------------------------------

def add_runs_dir_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="local",
                        help="look for runs in this profile's runs_dir (default: local)")
    parser.add_argument("--runs-dir", help="where runs are (default: the profile's runs_dir)")


def add_run_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    """RUN (dest `run`: launcher.commands.main relays a command on a run recorded by a submission over
    SSH to the cluster side) and where to look for it."""
    parser.add_argument("run", nargs=None if required else "?", metavar="RUN",
                        help="run folder, or its name under the runs folder" + ("" if required else
                                                                                " (default: the newest run)"))
    add_runs_dir_arguments(parser)


def find(args: argparse.Namespace) -> Path:
    return find_run(args.run, runs_dir(args.profile, args.runs_dir))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# ----- status --------------------------------------------------------------------------------------

def status_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="submit.py status", description="State of each task of a run (pending, "
                            "running, completed, failed, requeued, cancelled, timeout) and its restarts; also "
                            "(re)builds a sweep's summary.csv/summary.md/summary.png and each run's curves.png.")
    add_run_arguments(parser, required=False)
    parser.add_argument("--json", action="store_true", help="one JSON object per line, one per task")
    parser.add_argument("--no-collect", action="store_true", help="only show the states; write no files")
    return parser


def status(args: argparse.Namespace) -> int:
    run_dir = find(args)
    info = load_run(run_dir)
    states = task_states(info)
    silent = controller_note(states)
    if silent:
        print(silent, file=sys.stderr, flush=True)
    costs = run_costs(info, states)  # SLURM: what each finished task used, from sacct
    summary = None
    if not args.no_collect:
        summary = results.collect(run_dir, states, budget_s=results.CURVES_BUDGET_S, costs=costs)
    try:
        if args.json:
            left_out = exclusions.read(run_dir)  # the run's, shared by a sweep's tasks
            overall = results.overall_state(states)  # the one rule, also for the Python handles' state()
            for ts in states:
                causes = restarts.read(ts.task_dir).by_cause() if ts.restarts else {}
                print(json.dumps({**ts.as_json(), "cost": costs.get(ts.task), "restart_causes": causes,
                                  "ettr": task_ettr(info, ts), "excluded_nodes": left_out, "run_state": overall,
                                  "signature": info.task_signature(ts.task) or None,
                                  "run_signature": info.signature or None}, default=str), flush=True)
        else:
            print(_status_text(info, states, summary, costs), flush=True)
    except BrokenPipeError:  # `status --json | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


def head_line(info: RecordedRun, states: list[TaskState], shown: dict[str, str] | None = None) -> str:
    """The first line of `status` and of `watch`: the run, its job, profile and executor, and how many
    tasks are in each state (`shown`: another name for a state, as `watch` says done for completed)."""
    counts: dict[str, int] = {}
    for ts in states:
        name = (shown or {}).get(ts.state, ts.state)
        counts[name] = counts.get(name, 0) + 1
    return (f"run {relative(info.run_dir)}: {info.job.get('name', '?')} on {info.profile.get('name', '?')} "
            f"({info.executor}), {len(states)} task(s): {results.overall_state(states)} — "
            + ", ".join(f"{n} {s}" for s, n in counts.items()))


def controller_note(states: list[TaskState], then: str = "ask again later") -> str:
    """What `status` and `watch` say when slurmctld did not answer ("" when it did)."""
    silent = next((ts.controller for ts in states if ts.controller), "")
    return (f"slurmctld is unreachable ({silent}): states are from accounting (sacct) and the run folder and may "
            f"lag; {then}") if silent else ""


def waiting_text(ts: TaskState, clock: str = "%Y-%m-%d %H:%M:%S") -> str:
    """Why a pending task waits and when SLURM expects it to start, where it says (`status` and `watch`):
    `Resources, expected to start 15:20` ("" for a task that is not waiting)."""
    if not ts.waiting:
        return ""
    when = f", expected to start {time.strftime(clock, time.localtime(ts.expected_start))}" if ts.expected_start else ""
    return f"{ts.reason or 'queued'}{when}"


def _status_text(info: RecordedRun, states: list[TaskState], summary: dict[str, Any] | None,
                 costs: dict[int, dict[str, Any]]) -> str:
    metric, _ = info.target
    head = head_line(info, states)
    rows = [["task", "state", "restarts", "job id", "wall", metric, *(["cost"] if costs else []), "overrides",
             "error"]]
    for ts in states:
        result, broken = _recorded_result(ts)
        value = result.get(metric) if result and ts.state == "completed" else None
        rows.append([str(ts.task), ts.state, str(ts.restarts), ts.job_id or "-", _duration(ts.wall_time_s),
                     f"{value:.4f}" if isinstance(value, (int, float)) else "-",
                     *([cost_cell(costs.get(ts.task))] if costs else []), overrides_text(ts.overrides),
                     (f"rank {ts.failed_rank}: " if ts.failed_rank is not None else "") + ts.error
                     + (f"waiting: {waiting_text(ts)}" if ts.waiting else "") + broken
                     + (f"reused from {ts.reused}" if ts.reused and not ts.error else "")])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    effective = ettr.Ettr.from_json(task_ettr(info, states[0])) if not info.is_sweep and states else None
    if effective is not None:
        lines.append(f"effective training time: {effective.text()}")
    said = ettr.interval_said(states[0].task_dir) if not info.is_sweep and states else None
    if said:  # (`checkpoint_every_steps: auto`: the newest interval rank 0 set, and from what)
        lines.append(f"checkpoint interval (auto): {said}")
    if info.signature:
        lines.append(f"signature: {info.signature}" + (" (each point's: status --json)" if info.is_sweep else ""))
    if summary and summary.get("summary_csv"):
        lines.append(f"summary: {relative(Path(summary['summary_csv']))} (and summary.md, summary.png)")
    if summary and summary.get("curves_left"):
        lines.append(f"curves.png still to draw for {summary['curves_left']} task(s): run status again")
    lines += [f"cost: {line}" for line in advice(costs, info.profile)]
    lines += retries.notes(info.run_dir, [(ts.task, ts.task_dir) for ts in states if ts.state == "failed"])
    incomplete = [ts for ts in states if ts.state not in ACTIVE + ("completed",)]
    if incomplete:
        lines.append(f"resubmit the {len(incomplete)} incomplete task(s) with: "
                     f"python submit.py --resume {relative(info.run_dir)}")
    return "\n".join(line.rstrip() for line in lines)


def task_ettr(info: RecordedRun, ts: TaskState) -> dict[str, Any] | None:
    """A task's effective training time (launcher.rundir.ettr): as its result recorded it once it ended (a reused
    point's: where it ran), else from its events now."""
    recorded = (ts.result or {}).get("ettr")
    if isinstance(recorded, dict):
        return recorded
    now = time.time() if ts.state in ACTIVE else None
    found = ettr.of_task(ts.task_dir, info.record.get("created"), now) if not ts.reused else None
    return None if found is None else found.as_json()


def _recorded_result(ts: TaskState) -> tuple[dict[str, Any] | None, str]:
    """The task's final metrics, and a note naming its result.json if that file is unreadable
    (truncated, not JSON, not an object): the state then comes from the scheduler and the pickles."""
    if ts.recorded:
        return ts.result, ""  # just read from that very file
    path = ts.task_dir / layout.RESULT_FILE
    try:
        recorded = record.read_result(path) if path.exists() else None
    except ConfigError as err:
        return ts.result, f"(unreadable record: {err})"
    return ts.result or recorded, ""


# ----- logs ----------------------------------------------------------------------------------------

def logs_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="submit.py logs", description="Print a task's log (submitit's files under "
                            "RUN/logs/<job id>/), by default task 0, rank 0, standard output.")
    add_run_arguments(parser, required=True)
    parser.add_argument("--task", type=int, default=0, help="sweep task index (default 0)")
    parser.add_argument("--rank", type=int, default=0, help="rank within the task (default 0)")
    parser.add_argument("--err", action="store_true", help="standard error instead (tracebacks, submitit's log)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing until the task ends")
    parser.add_argument("--attempt", type=int, default=-1,
                        help="which submission of a resubmitted task (0 = first; default: the latest)")
    return parser


def logs(args: argparse.Namespace) -> int:
    run_dir = find(args)
    info = load_run(run_dir)
    task_jobs = info.task_jobs
    if not 0 <= args.task < len(task_jobs):
        raise ConfigError(f"--task {args.task}: this run has tasks 0..{len(task_jobs) - 1}")
    came = info.reused.get(args.task)
    origin = run_dir.parent / str(came.get("run")) if came else None
    if came and origin is not None and (origin / layout.RUN_FILE).is_file():  # a point reused: its logs are its run's
        print(f"task {args.task} was computed by {relative(origin)}, task {came.get('task')}: its logs",
              file=sys.stderr, flush=True)
        return logs(argparse.Namespace(**{**vars(args), "run": str(origin), "task": int(came.get("task") or 0)}))
    history = task_states(info)[args.task].job_history if info.is_pool else task_jobs[args.task]
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
    stream = "err" if args.err else "out"
    path = layout.point_log_path(info.task_dir(args.task), job_id, args.rank, stream) if info.is_pool else \
        layout.log_path(run_dir, job_id, args.rank, stream)
    if not args.follow:
        if not path.exists():
            state = task_states(info)[args.task].state
            print(f"no log yet at {relative(path)} (task {args.task} is {state})", file=sys.stderr)
            return EXIT_FAILED
        sys.stdout.write(path.read_text(errors="replace"))
        return EXIT_OK
    return _follow(info, args.task, path)


def _follow(info: RecordedRun, task: int, path: Path, poll_s: float = 1.0) -> int:
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
