"""Operating runs: `status` (sacct, squeue, run folder), `logs`, `cancel`, `list`, for SLURM and local
runs, and what a finished run folder holds (curves.png, TensorBoard events)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster.jobids import expand_array_id
from launcher.cluster.slurm.accounting import SchedulerRecord, scancel_ids
from launcher.rundir import plots, results
from launcher.rundir.states import TaskState, _from_scheduler
from tests.helpers import ROOT, SUBMIT, last_json, run_submit, wait_until

PROFILE = ["--profile", "dev-cluster", "--set", "profile.nodes=1"]
PNG = b"\x89PNG\r\n\x1a\n"


def status_json(run_dir: str, cwd: Path, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    done = run_submit(["status", run_dir, "--json"], cwd, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# ----- SLURM ---------------------------------------------------------------------------------------

@pytest.mark.slurm
def test_status_logs_and_follow_of_a_running_slurm_job(slurm_cluster: Path, tmp_path: Path) -> None:
    done = run_submit([*PROFILE, "--job", "digits", "--set", "job.epochs=80", "--set", "job.log_every_steps=20",
                       "--json"], tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    run_dir = last_json(done.stdout)["run_dir"]

    # Accounting lags the controller by a moment on a fresh cluster: wait until sacct knows the job too.
    running = wait_until(lambda: (s := status_json(run_dir, tmp_path))[0]["state"] == "running"
                         and s[0]["source"] == "sacct" and s, 60, "the job to run (as sacct sees it)")
    assert running[0]["task"] == 0 and running[0]["restarts"] == 0 and running[0]["source"] == "sacct"
    # Accounting off: the controller's queue says the same.
    no_sacct = status_json(run_dir, tmp_path, env={"SUBMIT_NO_SACCT": "1"})
    assert no_sacct[0]["state"] in ("running", "completed") and no_sacct[0]["source"] == "squeue"
    human = run_submit(["status", run_dir], tmp_path, timeout=60).stdout
    assert "task  state" in human and ("running" in human or "completed" in human)

    # --follow prints the log as it grows and returns once the job has ended.
    follow = run_submit(["logs", run_dir, "--follow"], tmp_path, timeout=180)
    assert follow.returncode == 0, follow.stderr
    assert "[trainer] epoch 1 step 20/43" in follow.stdout, "plain progress lines in batch logs"
    assert "epoch 80" in follow.stdout and "test_accuracy" in follow.stdout
    assert "\r" not in follow.stdout, "no progress bar in a batch log"
    lines = status_json(run_dir, tmp_path)
    assert lines[0]["state"] == "completed"
    # Not waited for: status collected the result and drew the curves.
    result = json.loads((Path(run_dir) / "result.json").read_text())
    assert result["test_accuracy"] > 0.9 and result["state"] == "COMPLETED"
    assert (Path(run_dir) / "curves.png").read_bytes()[:8] == PNG

    plain = run_submit(["logs", run_dir], tmp_path, timeout=30)
    assert plain.returncode == 0 and plain.stdout == follow.stdout
    err = run_submit(["logs", run_dir, "--err"], tmp_path, timeout=30)
    job_id = json.loads((Path(run_dir) / "run.json").read_text())["job_ids"][0]
    assert err.returncode == 0
    assert err.stdout == (Path(run_dir) / "logs" / job_id / f"{job_id}_0_log.err").read_text()
    bad = run_submit(["logs", run_dir, "--rank", "3"], tmp_path, timeout=30)
    assert bad.returncode == 2 and "ranks 0..0" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slurm
def test_cancel_a_running_slurm_sweep(slurm_cluster: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "long.yaml"
    sweep.write_text("extends: digits\nname: long-sweep\nepochs: 5000\nsweep:\n  grid:\n    lr: [0.05, 0.1]\n")
    done = run_submit([*PROFILE, "--job", str(sweep), "--json"], tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    run_dir = last_json(done.stdout)["run_dir"]
    wait_until(lambda: all(s["state"] == "running" for s in status_json(run_dir, tmp_path)), 90,
               "both tasks to run")
    # One task, named by its run's name as `list` shows it: that task alone ends; the other runs on.
    one = run_submit(["cancel", "--profile", "dev-cluster", f"{Path(run_dir).name}/task-0001"], tmp_path, timeout=60)
    assert one.returncode == 0 and "task-0001: job " in one.stdout, one.stdout + one.stderr
    wait_until(lambda: [s["state"] for s in status_json(run_dir, tmp_path)] == ["running", "cancelled"], 60,
               "task 1 alone to be cancelled")
    cancelled = run_submit(["cancel", run_dir], tmp_path, timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled 1 task(s)" in cancelled.stdout and "scancel" in cancelled.stdout

    def all_cancelled() -> list[dict[str, Any]] | None:
        got = status_json(run_dir, tmp_path)
        return got if all(s["state"] == "cancelled" for s in got) else None

    states = wait_until(all_cancelled, 60, "sacct to show the tasks cancelled")
    assert all("CANCELLED" in s["error"] for s in states), states
    summary = (Path(run_dir) / "summary.csv").read_text().splitlines()
    assert len(summary) == 3 and all(",cancelled," in row for row in summary[1:])
    again = run_submit(["cancel", run_dir], tmp_path, timeout=60)
    assert again.returncode == 0 and "nothing to cancel" in again.stdout


# ----- local runs ----------------------------------------------------------------------------------

def test_local_run_folder_has_curves_and_tensorboard_and_status_reads_it(tmp_path: Path) -> None:
    done = run_submit(["--job", "digits", "--set", "job.epochs=3", "--set", "job.eval_every_epochs=1",
                       "--set", "job.tensorboard=true", "--json"], tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr
    run_dir = Path(last_json(done.stdout)["run_dir"])
    assert (run_dir / "curves.png").read_bytes()[:8] == PNG, "written by the submitter with the result"

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    accuracy = events.Scalars("test_accuracy")
    assert [e.step for e in accuracy] == [22, 44, 66]  # 1347 images / 2 ranks / 32 per batch = 22 steps
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [round(e.value, 5) for e in accuracy] == [round(m["test_accuracy"], 5) for m in metrics]
    assert {"train_loss", "test_loss", "lr", "images_per_second"} <= set(events.Tags()["scalars"])

    lines = status_json(str(run_dir), tmp_path)
    assert len(lines) == 1 and lines[0]["state"] == "completed" and lines[0]["source"] == "run folder"
    rank1 = run_submit(["logs", run_dir.name, "--rank", "1"], tmp_path, timeout=30)
    assert rank1.returncode == 0 and "[trainer]" not in rank1.stdout, "only rank 0 prints the trainer's lines"
    rank0 = run_submit(["logs", run_dir.name], tmp_path, timeout=30)
    assert "test_accuracy" in rank0.stdout
    listed = run_submit(["list"], tmp_path, timeout=30).stdout
    assert run_dir.name in listed and "completed" in listed and "test_accuracy 0.9" in listed


def test_cancel_a_local_run_stops_its_processes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    submitter = subprocess.Popen([sys.executable, SUBMIT, "--job", "digits", "--set", "job.epochs=5000"],
                                 cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def started() -> Path | None:
            found = [p for p in (tmp_path / "runs").glob("*/run.json")] if (tmp_path / "runs").exists() else []
            if found and json.loads(found[0].read_text()).get("job_ids"):
                metrics = found[0].parent / "metrics.jsonl"
                return found[0].parent if metrics.exists() else None
            return None

        run_dir = wait_until(started, 90, "the local run to train")
        pid = int(json.loads((run_dir / "run.json").read_text())["job_ids"][0])
        assert status_json(str(run_dir), tmp_path)[0]["state"] == "running"
        cancelled = run_submit(["cancel", str(run_dir)], tmp_path, timeout=60)
        assert cancelled.returncode == 0, cancelled.stderr
        assert f"stopped local process(es) {pid}" in cancelled.stdout
        submitter.wait(timeout=60)
        assert submitter.returncode == 1, "the waiting submitter reports the run as failed"
        assert not _alive(pid)
        lines = status_json(str(run_dir), tmp_path)
        assert lines[0]["state"] == "cancelled" and lines[0]["source"] == "run folder"
    finally:
        if submitter.poll() is None:
            submitter.send_signal(signal.SIGINT)
            submitter.wait(timeout=30)


def test_status_of_a_missing_run_is_a_one_line_error(tmp_path: Path) -> None:
    for args in (["status"], ["status", "nope"], ["logs", "nope"], ["cancel", "nope"]):
        done = run_submit(args, tmp_path, timeout=30)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


# ----- pieces --------------------------------------------------------------------------------------

def test_pending_array_ranges_expand_to_tasks() -> None:
    assert expand_array_id("12_[3-5,7%2]") == ["12_3", "12_4", "12_5", "12_7"]
    assert expand_array_id("12_[0]") == ["12_0"]
    assert expand_array_id("12_4") == ["12_4"] and expand_array_id("12") == ["12"]


def test_an_after_run_slurm_cancelled_before_it_started_says_so_whichever_record_slurm_gives() -> None:
    """afternotok on a run that succeeded: SLURM cancels the waiting job. sacct has been seen to give it
    Reason "Dependency" and no Start, or Reason None and the cancel time as its Start; squeue, until
    MinJobAge, DependencyNeverSatisfied. Each must read as never started, cancelled while it waited."""
    said = "cancelled before it started, while waiting for the runs it depends on (--after)"
    squeue = SchedulerRecord("33", "cancelled", "CANCELLED", end=90.0, reason="DependencyNeverSatisfied")
    plain = SchedulerRecord("33", "cancelled", "CANCELLED", end=90.0, elapsed_s=0.0, exit_code="0:0",
                            nodes="None assigned", reason="Dependency")
    started_at_cancel = SchedulerRecord("33", "cancelled", "CANCELLED", start=90.0, end=90.0, elapsed_s=0.0,
                                        exit_code="0:0", nodes="None assigned")
    for record, waiting, depends in [(squeue, None, False), (plain, None, False), (started_at_cancel, squeue, False),
                                     (started_at_cancel, None, True)]:
        ts = TaskState(0, "33", "unknown")
        _from_scheduler(ts, record, waiting, depends)
        assert (ts.state, ts.start, ts.error) == ("cancelled", None, said), (record, waiting, depends)
    # Cancelled while it ran: not before it started, whatever it depended on.
    ran = SchedulerRecord("33", "cancelled", "CANCELLED", start=80.0, end=90.0, elapsed_s=10.0, nodes="cpu1")
    ts = TaskState(0, "33", "unknown")
    _from_scheduler(ts, ran, None, True)
    assert (ts.start, ts.error) == (80.0, "CANCELLED"), ts


def test_rows_sort_best_first_and_failures_last() -> None:
    rows = [{"task": 0, "state": "completed", "test_loss": 0.5}, {"task": 1, "state": "failed", "test_loss": None},
            {"task": 2, "state": "completed", "test_loss": 0.2}, {"task": 3, "state": "running", "test_loss": None}]
    assert [r["task"] for r in results.sort_rows(rows, "test_loss", "min")] == [2, 0, 1, 3]
    assert [r["task"] for r in results.sort_rows(rows, "test_loss", "max")] == [0, 2, 1, 3]


def test_sweep_plot_with_a_categorical_key(tmp_path: Path) -> None:
    rows = [{"task": i, "optimizer": opt, "lr": lr, "state": "completed", "test_accuracy": 0.5 + i / 10}
            for i, (opt, lr) in enumerate([("sgd", 0.01), ("adamw", 0.01), ("sgd", 0.1), ("adamw", 0.1)])]
    rows.append({"task": 4, "optimizer": "sgd", "lr": 1.0, "state": "failed", "test_accuracy": None})
    out = plots.write_sweep_plot(rows, ["optimizer", "lr"], "test_accuracy", tmp_path / "s.png", "t")
    assert out is not None and out.read_bytes()[:8] == PNG


def test_cancel_names_whole_arrays_only_when_all_their_tasks_are_active() -> None:

    assert scancel_ids(["5_0", "5_1", "6_1"], ["5_0", "5_1", "6_0", "6_1", "7"]) == ["5", "6_1"]
    assert scancel_ids(["7"], ["5_0", "7"]) == ["7"]


def _made_run(runs: Path, name: str, created: Any) -> Path:
    """A local run folder as `submit.py` leaves one that never ran; `created` as recorded (... for none)."""
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    record = {"executor": "local", "run_dir": str(run_dir), "world_size": 1, "tasks": 1, "job_ids": [],
              "job": {"name": name, "target_metric": "test_accuracy", "target_mode": "max", "epochs": 1},
              "profile": {"name": "local", "executor": "local"}}
    if created is not ...:
        record["created"] = created
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


def test_runs_are_ordered_by_when_they_were_made_not_by_when_run_json_last_changed(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    # Written newest first, so the files' change times say the opposite of the recorded creation.
    newest = _made_run(runs, "a-newest", 1_767_000_300.0)
    _made_run(runs, "z-middle", 1_767_000_200)
    # No `created` (a record from before it was kept): the name's stamp, 2025, older than all the others.
    _made_run(runs, "20250101-000000-digits-local", ...)
    oldest = _made_run(runs, "b-oldest", 1_767_000_100.0)
    _made_run(runs, "m-bad-created", "yesterday")  # of the wrong type: listed as unreadable, last
    # `status` of the oldest rewrites its run.json: it must not become "the newest run" for that.
    assert status_json(str(oldest), tmp_path)[0]["task_dir"] == str(oldest.resolve())
    (runs / "z-middle" / "run.json").touch()
    latest = run_submit(["status", "--json"], tmp_path, timeout=60)  # no run named: the newest
    assert latest.returncode == 0, latest.stderr
    assert json.loads(latest.stdout.splitlines()[0])["task_dir"] == str(newest.resolve())
    listed = run_submit(["list", "--json"], tmp_path, timeout=60)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]
    assert [row["run"] for row in rows] == ["a-newest", "z-middle", "b-oldest", "20250101-000000-digits-local",
                                            "m-bad-created"]
    assert rows[-1]["state"].startswith("unreadable (") and "'created'" in rows[-1]["state"], rows[-1]
    assert "yesterday" in rows[-1]["state"] and "expected a finite JSON number" in rows[-1]["state"]
