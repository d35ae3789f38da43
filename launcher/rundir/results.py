"""Collect a run's results: per-task result.json and curves, and for sweeps a table and a plot.

    runs/<sweep>/summary.csv   one row per task: task, the swept keys, state, final metrics, wall time,
                               restarts, job id, error; sorted by the job's target metric (best first)
    runs/<sweep>/summary.md    the same as a Markdown table
    runs/<sweep>/summary.png   the target metric against the swept key(s)
    runs/<sweep>/task-NNNN/    each task's own run folder (metrics.jsonl, curves.png, result.json, ...)

`collect()` can run at any time, as often as wanted (while a sweep runs, from `status`, after a
`--resume`): it rebuilds everything from the run folder and the scheduler's state.
"""

from __future__ import annotations

import csv
import io
import os
import time
from pathlib import Path
from typing import Any

from launcher.rundir import ettr, plots
from launcher.rundir.cost import COST_COLUMNS
from launcher.rundir.layout import CURVES_FILE, METRICS_FILE, RESULT_FILE, SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG
from launcher.rundir.record import RecordedRun, load_run, read_optional, update_record, write_result
from launcher.rundir.states import ACTIVE, TaskState, task_states
from trainer.config.sweep import swept_keys

METRIC_COLUMNS = ["test_accuracy", "test_loss", "train_loss", "images_per_second", "epochs", "steps"]
TAIL_COLUMNS = ["wall_time_s", "ettr", "restarts", "job_id", "error"]


def metric_columns(target: str) -> list[str]:
    """The built-in recipe's metrics, and the target metric where a user's function names its own."""
    return METRIC_COLUMNS if target in METRIC_COLUMNS else [target, *METRIC_COLUMNS]


def rows_of(info: RecordedRun, states: list[TaskState]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per task and the swept keys (the overrides' keys, in the order the sweep names them)."""
    swept = swept_keys(info.overrides)
    rows = []
    for ts in states:
        result = ts.result or _recorded_result(ts)
        row: dict[str, Any] = {"task": ts.task, **{k: ts.overrides.get(k) for k in swept}, "state": ts.state}
        for key in metric_columns(info.target[0]):
            row[key] = result.get(key) if result and ts.state == "completed" else None
        effective = (result or {}).get("ettr") if ts.state == "completed" else None
        row.update(wall_time_s=None if ts.wall_time_s is None else round(ts.wall_time_s, 1),
                   restarts=ts.restarts, job_id=ts.job_id, error=ts.error or "",
                   ettr=effective.get("ratio") if isinstance(effective, dict) else None)
        if ts.reused:
            row["reused_from"] = ts.reused
        rows.append(row)
    return rows, swept


def _recorded_result(ts: TaskState) -> dict[str, Any] | None:
    return read_optional(ts.task_dir / RESULT_FILE) if ts.state == "completed" else None  # (ts.result unset)


def sort_rows(rows: list[dict[str, Any]], metric: str, mode: str) -> list[dict[str, Any]]:
    """Completed tasks best first by `metric`; the others after them, in task order."""
    scored: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for r in rows:  # one pass: `r not in scored` compared every pair of rows (1.2 s at 10,000 tasks)
        (scored if r["state"] == "completed" and isinstance(r.get(metric), (int, float)) else rest).append(r)
    scored.sort(key=lambda r: (-r[metric] if mode == "max" else r[metric], r["task"]))
    return scored + sorted(rest, key=lambda r: r["task"])


def _cell(key: str, value: Any) -> str:
    """Metrics to 4 decimals, throughput and times rounded; swept values exactly as given."""
    if value is None:
        return ""
    if key == "ettr" and isinstance(value, float):
        return f"{value:.0%}"
    if isinstance(value, float) and key in ("test_accuracy", "test_loss", "train_loss"):
        return f"{value:.4f}"
    if isinstance(value, float) and key in ("images_per_second", "wall_time_s"):
        return f"{value:.0f}" if key == "images_per_second" else f"{value:.1f}"
    return str(value)


def to_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in columns})
    return buffer.getvalue()


def to_markdown(rows: list[dict[str, Any]], columns: list[str], title: str) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [f"# {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(esc(_cell(k, row.get(k))) for k in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True


def overall_state(states: list[TaskState]) -> str:
    if any(s.state == "running" for s in states):
        return "running"
    if any(s.state in ACTIVE for s in states):
        if all(s.state == "unknown" for s in states):
            return "unknown"  # slurmctld did not answer: nothing says whether it runs or waits
        return "pending" if all(s.state in ACTIVE for s in states) else "running"
    if all(s.state == "completed" for s in states):
        return "completed"
    if all(s.state in ("completed", "cancelled") for s in states):
        return "cancelled"
    return "failed"


CURVES_BUDGET_S = 1.0


def _write_task_results(info: RecordedRun, states: list[TaskState], max_curves: int | None,
                        budget_s: float | None = None) -> int:
    """Each completed task's final metrics as result.json in its folder, and its curves picture
    (at most `max_curves` new pictures, ~0.1 s each); returns how many pictures are left to draw."""
    drawn = left = 0
    # A picture costs 0.1-1 s (more on a loaded machine): `status` also stops drawing after budget_s.
    deadline = time.monotonic() + budget_s if budget_s is not None else float("inf")
    for ts in states:
        if ts.state == "completed" and ts.result and not ts.recorded and _worth_recording(ts):
            # With the wall time, so that later calls take the task as finished (states.finished_record).
            effective = ettr.of_task(ts.task_dir, info.record.get("created"), None)
            write_result(ts.task_dir, ts.result, job_id=ts.job_id, restarts=ts.restarts, task=ts.task,
                         overrides=ts.overrides, wall_time_s=ts.wall_time_s,
                         **({"ettr": effective.as_json()} if effective is not None else {}))
        if ts.recorded and os.path.exists(os.path.join(ts.task_dir, CURVES_FILE)):
            continue  # a finished task's metrics no longer change: its picture stays fresh
        if not ts.task_dir.is_dir() or plots.is_fresh(ts.task_dir / CURVES_FILE, ts.task_dir / METRICS_FILE):
            continue
        if max_curves is not None and (drawn >= max_curves or time.monotonic() > deadline):
            left += 1
            continue
        title = f"{info.run_dir.name}" + (f" task {ts.task}: " + ", ".join(
            f"{k}={v}" for k, v in ts.overrides.items()) if info.is_sweep else "")
        drawn += plots.write_curves(ts.task_dir, title) is not None
    return left


def _worth_recording(ts: TaskState) -> bool:
    """No result.json yet, or one from before wall times were recorded; a broken one is left for
    `status` to name."""
    path = ts.task_dir / RESULT_FILE
    if not path.exists():
        return True
    existing = read_optional(path)
    return existing is not None and "wall_time_s" not in existing


def collect(run_dir: Path, states: list[TaskState] | None = None,
            max_curves: int | None = 24, budget_s: float | None = None,
            costs: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """(Re)build the run's result files from its folder and the scheduler; return a short summary.

    `max_curves` bounds how many per-task curve pictures one call draws, so that `status` on a
    thousand-task sweep answers in seconds (each call draws the next batch); None draws them all.
    `costs` (launcher.rundir.cost.run_costs, by task) adds what each task used to a sweep's summary.
    """
    info = load_run(run_dir)
    states = task_states(info) if states is None else states
    curves_left = _write_task_results(info, states, max_curves, budget_s)
    metric, mode = info.target
    state = overall_state(states)
    summary: dict[str, Any] = {"run_dir": str(run_dir), "state": state, "tasks": len(states),
                               "counts": _counts(states), "target_metric": metric, "curves_left": curves_left}
    if info.is_sweep:
        rows, swept = rows_of(info, states)
        for row in rows:
            row.update((costs or {}).get(row["task"], {}))
        rows = sort_rows(rows, metric, mode)
        columns = ["task", *swept, "state", *metric_columns(metric), *TAIL_COLUMNS, *(COST_COLUMNS if costs else []),
                   *(["reused_from"] if info.reused else [])]
        csv_text = to_csv(rows, columns)
        title = (f"{run_dir.name}: {len(rows)} tasks, sorted by {metric} ({mode}); "
                 + ", ".join(f"{n} {k}" for k, n in summary["counts"].items()))
        changed = _write_if_changed(run_dir / SUMMARY_CSV, csv_text)
        _write_if_changed(run_dir / SUMMARY_MD, to_markdown(rows, columns, title)
                          + f"\n![{metric} vs {', '.join(swept)}]({SUMMARY_PNG})\n")
        if changed or not (run_dir / SUMMARY_PNG).exists():
            plots.write_sweep_plot(rows, swept, metric, run_dir / SUMMARY_PNG, run_dir.name)
        summary.update(swept=swept, rows=rows, summary_csv=str(run_dir / SUMMARY_CSV))
        best = rows[0] if rows and rows[0]["state"] == "completed" else None
    else:
        result = states[0].result or _recorded_result(states[0]) if states else None
        if states and states[0].state == "completed" and result and not (run_dir / RESULT_FILE).exists():
            write_result(run_dir, result, run_dir=str(run_dir), job_id=states[0].job_id,
                         restarts=states[0].restarts)
        best = {metric: result.get(metric)} if result and states[0].state == "completed" else None
    summary["best"] = best
    if state not in ("running", "pending"):
        # Cached for `list`, which then needs no scheduler call for finished runs.
        update_record(run_dir, state=state.upper(),
                           best={metric: best.get(metric), "task": best.get("task")} if best else None)
    return summary


def _counts(states: list[TaskState]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    return counts
