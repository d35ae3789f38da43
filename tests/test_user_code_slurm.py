"""Your own training code on the real SLURM dev cluster: a user function across 2 nodes, and a sweep
over its `config.lr` with a failing point that `--resume` alone reruns, from its checkpoint."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.helpers import ROOT, last_json, run_submit

pytestmark = pytest.mark.slurm

JOB = """name: tiny
entrypoint: "tests.userpkg.tiny:train"
target_metric: accuracy
config:
  lr: 0.1
  epochs: 3
"""

# Task 2 fails at step 25 after the periodic checkpoint of step 20 (32 steps per epoch on 1 rank).
SWEEP = """name: tiny-sweep
entrypoint: "tests.userpkg.tiny:train"
target_metric: accuracy
checkpoint_every_steps: 10
config:
  epochs: 2
sweep:
  tasks:
    - {config.lr: 0.05}
    - {config.lr: 0.2}
    - {config.lr: 0.1, config.fail_at_step: 25}
"""


def submit(args: list[str], tmp_path: Path, timeout: float = 300):  # noqa: ANN201 - CompletedProcess
    # From the project root, as a user of this project would: the test package is found there.
    return run_submit(["--profile", "dev-cluster", "--set", f"profile.runs_dir={tmp_path}", *args], cwd=ROOT,
                      timeout=timeout)


def test_user_function_on_two_nodes(slurm_cluster: Path, tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(JOB)
    proc = submit(["--job", str(tmp_path / "tiny.yaml"), "--set", "profile.nodes=2", "--wait", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["world_size"] == 2 and len(set(result["nodes"])) == 2, result["nodes"]
    assert result["accuracy"] >= 0.9
    run_dir = Path(result["run_dir"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [16, 32, 48]
    assert (run_dir / "curves.png").is_file()
    status = run_submit(["status", str(run_dir)], cwd=ROOT, timeout=60)
    assert status.returncode == 0 and "completed" in status.stdout and "accuracy" in status.stdout


def test_sweep_over_config_lr_and_resume_reruns_only_the_failed_point(slurm_cluster: Path, tmp_path: Path) -> None:
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    done = submit(["--job", str(tmp_path / "sweep.yaml"), "--set", "profile.nodes=1", "--wait", "--json"], tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    payload = last_json(done.stdout)
    run_dir = Path(payload["run_dir"])
    assert payload["counts"] == {"completed": 2, "failed": 1} and len({j.split("_")[0] for j in payload["job_ids"]}) == 1
    header = (run_dir / "summary.csv").read_text().splitlines()[0].split(",")
    assert header[:4] == ["task", "config.lr", "config.fail_at_step", "state"] and "accuracy" in header
    untouched = {t: (run_dir / f"task-{t:04d}" / "metrics.jsonl").stat().st_mtime_ns for t in (0, 1)}
    resumed = run_submit(["--resume", str(run_dir), "--set", "job.config.fail_at_step=0", "--wait", "--json"],
                         cwd=ROOT, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "running sweep tiny-sweep: 1 task(s)" in resumed.stdout
    for task, mtime in untouched.items():
        assert (run_dir / f"task-{task:04d}" / "metrics.jsonl").stat().st_mtime_ns == mtime
    events = [json.loads(line) for line in (run_dir / "task-0002" / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "resumed"] == [20]
    rows = list(csv_rows(run_dir))
    assert [r["state"] for r in rows] == ["completed"] * 3 and all(float(r["accuracy"]) > 0.8 for r in rows)


def csv_rows(run_dir: Path):  # noqa: ANN201 - iterator of dicts
    with open(run_dir / "summary.csv", newline="") as fh:
        yield from csv.DictReader(fh)
