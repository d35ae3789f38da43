"""PNG pictures of a run: its loss and accuracy curves, and a sweep's metric against what was swept.

matplotlib (its Figure, saved through Agg: no display needed) is imported only here and only when a picture is drawn,
so the trainer's hot path and `submit.py --help` never pay for it. Pictures are redrawn only when
their input is newer than the file, so `status` stays quick on a finished sweep.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launcher.rundir.layout import CURVES_FILE, METRICS_FILE
from trainer.rank import jsonlines


def _figure(**kwargs: Any) -> Any:
    """A matplotlib Figure, loaded on demand (status and --help never pay for matplotlib unless a
    picture is drawn). Not pyplot: its import and figure manager cost every finished run about 0.3 s
    of CPU more, and a Figure of its own saves a PNG through Agg without any backend chosen."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's rows (trainer.rank.jsonlines: a torn, foreign or hostile line is skipped like
    one being written right now; `status` draws from the others)."""
    return jsonlines.read(run_dir / METRICS_FILE)


def _numbers(row: dict[str, Any], *keys: str) -> bool:
    return all(isinstance(row.get(k), (int, float)) and not isinstance(row.get(k), bool) for k in keys)


def is_fresh(output: Path, *inputs: Path) -> bool:
    """`output` exists and is newer than every existing input."""
    if not output.exists():
        return False
    newest = max((p.stat().st_mtime for p in inputs if p.exists()), default=0.0)
    return output.stat().st_mtime >= newest


def write_curves(run_dir: Path, title: str = "") -> Path | None:
    """`run_dir/curves.png`: train and test loss (left) and test accuracy (right) per epoch.

    Returns the file, or None when the run has no metrics yet.
    """
    metrics_file = run_dir / METRICS_FILE
    output = run_dir / CURVES_FILE
    if is_fresh(output, metrics_file):
        return output
    rows = read_metrics(run_dir)
    if not rows:
        return None
    if not all(_numbers(r, "epoch", "train_loss", "epoch_time_s") for r in rows):
        return _save(_metric_curves(rows, title or run_dir.name), output)  # a user's own metrics
    fig = _figure(figsize=(10, 4))
    ax_loss, ax_acc = fig.subplots(1, 2)
    epochs = [r["epoch"] for r in rows]
    ax_loss.plot(epochs, [r.get("train_loss") for r in rows], marker=".", label="train loss")
    evaluated = [r for r in rows if _numbers(r, "test_loss", "test_accuracy")]
    if evaluated:
        ax_loss.plot([r["epoch"] for r in evaluated], [r["test_loss"] for r in evaluated], marker="o",
                     label="test loss")
        ax_acc.plot([r["epoch"] for r in evaluated], [r["test_accuracy"] for r in evaluated], marker="o",
                    color="tab:green", label="test accuracy")
        best = max(r["test_accuracy"] for r in evaluated)
        ax_acc.set_title(f"test accuracy (best {best:.4f})")
    else:
        ax_acc.set_title("test accuracy (not evaluated yet)")
    ax_loss.set_title("loss")
    for ax, label in ((ax_loss, "loss"), (ax_acc, "accuracy")):
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title or run_dir.name)
    fig.tight_layout()
    return _save(fig, output)


def _metric_curves(rows: list[dict[str, Any]], title: str) -> Any:
    """What a user's function logged with ctx.log: one panel per numeric metric against the step."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k, v in row.items() if k not in ("step", "time", "epoch") and k not in keys
                 and isinstance(v, (int, float)) and not isinstance(v, bool)]
    keys = keys[:6] or ["step"]
    fig = _figure(figsize=(4 * len(keys), 4))
    axes = fig.subplots(1, len(keys), squeeze=False)
    for ax, key in zip(axes[0], keys):
        points = [(r.get("step", i), r[key]) for i, r in enumerate(rows) if isinstance(r.get(key), (int, float))]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".")
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _save(fig: Any, output: Path) -> Path:
    """Write the figure under a temporary name, then rename: a reader never sees half a PNG."""
    tmp = output.with_name(f".{output.name}.tmp.png")
    fig.savefig(tmp, dpi=80)
    tmp.replace(output)
    return output


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def write_sweep_plot(rows: list[dict[str, Any]], swept: list[str], metric: str, output: Path,
                     title: str = "") -> Path | None:
    """`metric` of the completed tasks against the first swept key, one line per value of the others.

    A numeric key spanning more than a factor of 20 (learning rates) gets a log axis; other keys are
    shown as categories in the order they appear.
    """
    done = [r for r in rows if r.get("state") == "completed" and isinstance(r.get(metric), (int, float))]
    if not swept:
        return None
    fig = _figure(figsize=(7, 4.5))
    ax = fig.subplots()
    x_key, others = swept[0], swept[1:]
    xs_all: list[Any] = list(dict.fromkeys(r[x_key] for r in rows if r.get(x_key) is not None))
    numeric = _numeric(xs_all) and bool(xs_all)
    position = {v: i for i, v in enumerate(xs_all)}
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in done:
        groups.setdefault(tuple(row.get(k) for k in others), []).append(row)
    for key, members in groups.items():
        members = [m for m in members if m.get(x_key) is not None]
        members.sort(key=lambda m: m[x_key] if numeric else position[m[x_key]])
        xs = [m[x_key] if numeric else position[m[x_key]] for m in members]
        label = ", ".join(f"{k}={v}" for k, v in zip(others, key)) or metric
        ax.plot(xs, [m[metric] for m in members], marker="o", label=label)
    if numeric:
        positive = [v for v in xs_all if v > 0]
        if positive and len(positive) == len(xs_all) and max(positive) / min(positive) > 20:
            ax.set_xscale("log")
    else:
        ax.set_xticks(range(len(xs_all)), [str(v) for v in xs_all])
    failed = len(rows) - len(done)
    ax.set_xlabel(x_key)
    ax.set_ylabel(metric)
    ax.grid(True, alpha=0.3)
    if groups:
        ax.legend(fontsize="small")
    note = f" ({failed} task(s) without a result)" if failed else ""
    ax.set_title((title + "\n" if title else "") + f"{metric} vs {x_key}{note}", fontsize="medium")
    fig.tight_layout()
    return _save(fig, output)
