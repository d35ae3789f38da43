"""Your own training code (issue 10): a user package in the test tree (tests/userpkg, not in
trainer/) with its own model, data and loop, written only against trainer.api, submitted as
`entrypoint:` jobs the way a user would (python submit.py ...), locally, in-process and as sweeps;
and stopped several times, it ends bitwise equal to an uninterrupted run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


from tests.helpers import ROOT, last_json, run_submit, run_submits
from trainer.config.job import JobConfig, RunSettings
from trainer.rank import events
from trainer.rank.stopping import StopRequested
from trainer.runners.dispatch import run_job
from trainer.rank.checkpoint import same_weights

JOB = """name: tiny
entrypoint: "tests.userpkg.tiny:train"
target_metric: accuracy
log_every_steps: 100000
config:
  lr: 0.1
  epochs: 3
"""


def logged(run_dir: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time"} for r in rows]


def test_user_function_trains_on_two_local_ranks_with_metrics_status_and_curves(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(JOB)
    proc = run_submit(["--job", "tiny.yaml", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["world_size"] == 2 and result["accuracy"] >= 0.9 and result["steps"] == 48
    assert "accuracy" in proc.stdout.splitlines()[-2]  # the human line shows the function's metrics
    run_dir = Path(result["run_dir"])
    rows = logged(run_dir)
    assert [r["epoch"] for r in rows] == [1, 2, 3] and [r["step"] for r in rows] == [16, 32, 48]
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert (run_dir / "curves.png").stat().st_size > 1000
    status = run_submit(["status", str(run_dir), "--json"], cwd=tmp_path)
    assert status.returncode == 0 and json.loads(status.stdout.splitlines()[-1])["state"] == "completed"
    human = run_submit(["status", str(run_dir)], cwd=tmp_path).stdout
    assert "accuracy" in human and f"{result['accuracy']:.4f}" in human

    # The same submission again (a comment, a time limit and a log cadence are not what the run is): answered
    # with this run at once, nothing queued (launcher.commands.reuse); `--rerun` makes a new run, the next answer.
    (tmp_path / "tiny.yaml").write_text("# the same job\n" + JOB.replace("100000", "7"))
    again = run_submit(["--job", "tiny.yaml", "--set", "profile.time=00:30:00", "--json"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    answered = last_json(again.stdout)
    assert answered["reused"] is True and answered["run_dir"] == str(run_dir) and answered["state"] == "COMPLETED"
    same = ("accuracy", "steps", "world_size", "nodes")  # (the fresh result's shape: each rank's node too)
    assert {k: answered[k] for k in same} == {k: result[k] for k in same}
    assert f"an identical run already completed: runs/{run_dir.name} (signature " in again.stdout
    assert "nothing was queued (--rerun runs it again)" in again.stdout and "running tiny" not in again.stdout
    assert [p.name for p in (tmp_path / "runs").iterdir() if (p / "run.json").is_file()] == [run_dir.name]
    forced = run_submit(["--job", "tiny.yaml", "--rerun", "--json"], cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr[-3000:]
    newer = last_json(forced.stdout)
    assert "reused" not in newer and newer["run_dir"] != str(run_dir) and newer["accuracy"] == result["accuracy"]
    latest = last_json(run_submit(["--job", "tiny.yaml", "--json"], cwd=tmp_path).stdout)
    assert latest["run_dir"] == newer["run_dir"] and latest["reused"] is True
    shutil.rmtree(tmp_path / "runs" / ".signatures")  # as runs made before the index: named in it at the next look
    earlier = last_json(run_submit(["--job", "tiny.yaml", "--json"], cwd=tmp_path).stdout)
    assert earlier["run_dir"] == newer["run_dir"] and earlier["reused"] is True, earlier
    refused = run_submit(["--resume", str(run_dir), "--rerun"], cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.startswith("error: --rerun: --resume ") and not refused.stdout


def test_user_function_runs_in_process_with_config_from_set(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(JOB)
    proc = run_submit(["--profile", "debug", "--job", "tiny.yaml", "--set", "job.config.epochs=1", "--json"],
                      cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["world_size"] == 1 and result["steps"] == 32  # 512 samples, 16 per step, 1 epoch
    assert "lr: 0.1" in (Path(result["run_dir"]) / "job.yaml").read_text()  # the other config keys kept


def test_module_next_to_the_job_file_is_found(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "mine.py").write_text("def main(ctx):\n    ctx.log({'answer': 42}, 1)\n"
                                                "    return {'world': ctx.world_size}\n")
    (tmp_path / "jobs" / "mine.yaml").write_text('entrypoint: "mine:main"\ntarget_metric: answer\n')
    proc = run_submit(["--profile", "debug", "--job", "jobs/mine.yaml", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["answer"] == 42 and result["world"] == 1


def test_function_without_the_api_still_runs(tmp_path: Path) -> None:
    (tmp_path / "plain.yaml").write_text('entrypoint: "tests.userpkg.tiny:plain"\n')
    proc = run_submit(["--job", "plain.yaml", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert last_json(proc.stdout)["rank_seen"] == 0


def test_user_function_raising_on_one_rank_fails_naming_it(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text('entrypoint: "tests.userpkg.tiny:broken"\nconfig: {fail_rank: 1}\n')
    proc = run_submit(["--job", "broken.yaml"], cwd=tmp_path)
    assert proc.returncode == 1
    assert "error: the run failed on rank 1" in proc.stderr and "user code failed on purpose" in proc.stderr


# ----- exact resume ------------------------------------------------------------------------------

def in_process(run_dir: Path, interrupts: str = "") -> list[int]:
    job = JobConfig(name="tiny", entrypoint="tests.userpkg.tiny:train", target_metric="accuracy",
                    config={"epochs": 3, "lr": 0.1}, interrupt_at=interrupts, log_every_steps=100000)
    stops = []
    while True:
        try:
            run_job(job, RunSettings(run_dir=str(run_dir), checkpoint_every_steps=7), environ={})
            return stops
        except StopRequested as stop:
            stops.append(stop.step)
            assert len(stops) < 10


def test_user_function_stopped_four_times_in_process_ends_bitwise_identical(tmp_path: Path) -> None:
    assert in_process(tmp_path / "reference") == []
    # 32 steps per epoch: mid-epoch, back to back, at the epoch boundary, after a periodic checkpoint.
    assert in_process(tmp_path / "stopped", "5,6,32,50") == [5, 6, 32, 50]
    assert same_weights(tmp_path / "reference" / "weights.pt", tmp_path / "stopped" / "weights.pt")
    assert logged(tmp_path / "reference") == logged(tmp_path / "stopped")
    resumed = [e["step"] for e in events.read(tmp_path / "stopped") if e["event"] == "resumed"]
    assert resumed == [5, 6, 32, 50]


def test_user_function_requeued_twice_on_local_ranks_ends_bitwise_identical(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(JOB)
    # The stopped run also feeds MLflow (file store) and W&B (offline): one tracker run across its 3 attempts.
    (tmp_path / "tracked.yaml").write_text(JOB + TRACKED)
    reference, proc = run_submits([["--job", "tiny.yaml", "--json"],
                                   ["--job", "tracked.yaml", "--set", "job.interrupt_at=10,30", "--json"]],
                                  cwd=tmp_path, timeout=600, env={"MLFLOW_ALLOW_FILE_STORE": "true", "WANDB_SILENT": "true"})
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["restarts"] == 2
    run_dir, ref_dir = Path(result["run_dir"]), Path(last_json(reference.stdout)["run_dir"])
    log = events.read(run_dir)
    assert [e["step"] for e in log if e["event"] == "stopped"] == [10, 30]
    assert [e["step"] for e in log if e["event"] == "resumed"] == [10, 30]
    assert same_weights(ref_dir / "weights.pt", run_dir / "weights.pt")
    assert logged(ref_dir) == logged(run_dir)
    assert_one_tracker_run(run_dir, result["job_id"], logged(run_dir))


TRACKED = """tracker:
  mlflow: {}
  wandb: {project: tiny, mode: offline}
"""


def assert_one_tracker_run(run_dir: Path, job_id: str, rows: list[dict[str, Any]]) -> None:
    """Read back with MLflow's own client and from W&B's offline files: one run, each step once, as logged."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir.parent / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
    history = client.get_metric_history(run.info.run_id, "train_loss")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == \
        [(r["step"], r["train_loss"]) for r in rows]
    assert run.data.params == {"lr": "0.1", "epochs": "3", "profile": "local"}
    assert run.data.tags["ddp_submit.attempts"] == "3" and run.data.tags["ddp_submit.job_ids"] == job_id
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 3 and len({p.name.rsplit("-", 2)[-1] for p in offline}) == 1


def test_the_same_function_runs_under_plain_torchrun_through_init(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(ROOT / "tests" / "userpkg" / "script.py"), str(tmp_path / "run")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["world_size"] == 2 and result["steps"] == 32 and result["accuracy"] > 0.8
    assert [r["step"] for r in logged(tmp_path / "run")] == [16, 32]
