"""Your own training code on the real SLURM dev cluster: a user function across 2 nodes, and a sweep
over its `config.lr` with a failing point that `--resume` alone reruns, from its checkpoint."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import ROOT, assert_mlflow_run, assert_one_mlflow_run, last_json, mlflow_runs, run_submit, wait_until
from trainer.rank import events

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
tracker: {mlflow: {}}
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
    # --wait ends once every rank has returned; the scheduler records the job's end a moment later (on a loaded
    # machine, seconds): status says what the scheduler says, so it is read once that has happened.
    def completed() -> subprocess.CompletedProcess[str] | None:
        shown = run_submit(["status", str(run_dir)], cwd=ROOT, timeout=60)
        return shown if shown.returncode == 0 and "running" not in shown.stdout else None

    status = wait_until(completed, 120, "status of the ended run", poll=1)
    assert "completed" in status.stdout and "accuracy" in status.stdout, status.stdout


def test_sweep_over_config_lr_and_resume_reruns_only_the_failed_point(slurm_cluster: Path, tmp_path: Path) -> None:
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    # (max_failures 0: the failing point's own retries are tests/test_self_healing.py's)
    done = submit(["--job", str(tmp_path / "sweep.yaml"), "--set", "profile.nodes=1", "--set", "profile.max_failures=0",
                   "--wait", "--json"], tmp_path)
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
    said = [json.loads(line) for line in (run_dir / "task-0002" / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in said if e["event"] == "resumed"] == [20]
    rows = list(csv_rows(run_dir))
    assert [r["state"] for r in rows] == ["completed"] * 3 and all(float(r["accuracy"]) > 0.8 for r in rows)
    # MLflow (file store beside the run folders): one group of 3 runs, tagged with the sweep, the swept key a
    # parameter; the failed task's run is continued by --resume (its second job id), not a fourth run.
    client, runs = mlflow_runs(tmp_path / "mlruns", "tiny-sweep")
    by_task = {int(r.info.run_name.rsplit("-", 1)[-1]): r for r in runs}
    assert len(runs) == 3 and sorted(by_task) == [0, 1, 2], [r.info.run_name for r in runs]
    assert {r.data.tags["ddp_submit.sweep"] for r in runs} == {run_dir.name}
    assert all(r.info.run_name == f"{run_dir.name}/task-{t:04d}" for t, r in by_task.items())
    assert [by_task[t].data.tags["ddp_submit.swept"].split(",")[0] for t in range(3)] == ["config.lr"] * 3
    record = json.loads((run_dir / "run.json").read_text())
    for task, lr in enumerate(("0.05", "0.2", "0.1")):
        extra = {"fail_at_step": "25"} if task == 2 else {}  # MLflow keeps a parameter's first value
        jobs = record["task_jobs"][task]
        assert_mlflow_run(client, by_task[task], run_dir / f"task-{task:04d}",
                          {"lr": lr, "epochs": "2", **extra, "profile": "dev-cluster"}, ",".join(jobs), len(jobs))


def csv_rows(run_dir: Path):  # noqa: ANN201 - iterator of dicts
    with open(run_dir / "summary.csv", newline="") as fh:
        yield from csv.DictReader(fh)


# ----- exact resume through SLURM: a preemption signal, then `scontrol requeue` ------------------------

SLOW = JOB.replace("epochs: 3", "epochs: 16\n  step_sleep_s: 0.05") + "checkpoint_every_steps: 0\n"


def started(tmp_path: Path, name: str, job: str = SLOW) -> tuple[subprocess.Popen[str], Path]:
    cwd = tmp_path / name
    cwd.mkdir()
    (cwd / "slow.yaml").write_text(job)
    proc = subprocess.Popen([sys.executable, str(ROOT / "submit.py"), "--profile", "dev-cluster", "--job",
                             str(cwd / "slow.yaml"), "--set", f"profile.runs_dir={cwd / 'runs'}",
                             "--set", "profile.time_min=30", "--wait", "--json"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    run_dir = wait_until(lambda: next((cwd / "runs").glob("*/run.json"), None), 60, "the run folder").parent
    return proc, run_dir


def finished(proc: subprocess.Popen[str]) -> dict:
    try:
        out, err = proc.communicate(timeout=400)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def steps_logged(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_user_function_preempted_then_scontrol_requeued_ends_bitwise_identical(slurm_cluster: Path,
                                                                               tmp_path: Path) -> None:
    reference, _ = started(tmp_path, "reference")
    # Also fed to MLflow (a file store beside the run folders): one MLflow run across the 3 attempts on 2 nodes.
    proc, run_dir = started(tmp_path, "interrupted", SLOW + "tracker: {mlflow: {}}\n")
    wait_until(lambda: steps_logged(run_dir) >= 2, 180, "training")
    job_id = next(e["job_id"] for e in events.read(run_dir) if e["event"] == "started")
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)  # a preemption warning
    wait_until(lambda: [e for e in events.read(run_dir) if e["event"] == "resumed"], 180, "the first resume")
    done = steps_logged(run_dir)
    wait_until(lambda: steps_logged(run_dir) > done, 120, "training after the first resume")
    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30)  # SIGTERM, then a new start
    result = finished(proc)
    assert result["restarts"] == 2
    stopped = [e for e in events.read(run_dir) if e["event"] == "stopped"]
    resumed = [e["step"] for e in events.read(run_dir) if e["event"] == "resumed"]
    assert [e["signal"] for e in stopped] == ["USR2", "TERM"] and resumed == [e["step"] for e in stopped]
    ref = finished(reference)
    x, y = (torch.load(Path(r) / "weights.pt") for r in (ref["run_dir"], run_dir))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert len(set(result["nodes"])) == 2, result["nodes"]
    assert [r["step"] for r in rows_of(run_dir)] == list(range(16, 16 * 17, 16))  # every epoch's end, once
    assert_one_mlflow_run(run_dir, "tiny", {"lr": "0.1", "epochs": "16", "step_sleep_s": "0.05",
                                            "profile": "dev-cluster"}, job_id, attempts=3)


def rows_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
