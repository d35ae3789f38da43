"""`status` prints exactly what it printed before it was made fast (benchmarks/status_scale.py).

A small SLURM sweep's run folder, built the way finished tasks leave it, with every kind of task
`status` tells apart: completed (from the result pickles, then from the result.json that the first
`status` records), a rank that raised while its peer died of it, no result at all, a broken
result.json, restarts from events.jsonl, a task resubmitted by `--resume`, one never submitted, a
failure.json only, a cancelled sweep. Its job ids are ones the dev cluster's accounting does not
know, so sacct and squeue are asked for real (where the dev cluster is up; the answer is the same
where it is not) and the states come from the run folder. The text,
`--json`, `--no-collect`, summary.csv/summary.md and the recorded result.json files must equal the
ones recorded in tests/data/status_output/ (written by the code before the speed-up; rewrite them
with STATUS_OUTPUT_RECORD=1 only for a change of output that is meant).
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher import devcluster as dev_cluster
from tests.helpers import ROOT, run_submit

RECORDED = Path(__file__).resolve().parent / "data" / "status_output"
LOG_START = "2026-01-02 03:04:05"
BASE = 9_100_000
TRACEBACK = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    step()\n"
             "{}\n\nYou can check full logs with 'job.stderr(0)' and 'job.stdout(0)'")


def _result(task: int) -> dict[str, Any]:
    return {"test_accuracy": 0.9 + (task * 7 % 10) / 100, "test_loss": 0.3 + task / 100, "train_loss": 0.4,
            "epochs": 1, "world_size": 2, "images_per_second": 9000.0 + task}


def _logs(run_dir: Path, job_id: str, outcomes: list[tuple[str, Any]] | None, wall_s: float) -> None:
    """submitit's folder for one array task: each rank's logs and (unless None) result pickle, the
    files last written `wall_s` after the first log line's time."""
    folder = run_dir / "logs" / job_id
    folder.mkdir(parents=True)
    start = datetime.datetime.fromisoformat(LOG_START).timestamp()  # local time, as status reads it
    for rank in range(2):
        (folder / f"{job_id}_{rank}_log.out").write_text(f"{LOG_START} rank {rank} starts\n")
        (folder / f"{job_id}_{rank}_log.err").write_text(f"submitit INFO ({LOG_START},000) - Starting\n")
        if outcomes is not None:
            with open(folder / f"{job_id}_{rank}_result.pkl", "wb") as fh:
                pickle.dump(outcomes[rank], fh)
    for path in folder.iterdir():
        os.utime(path, (start + wall_s, start + wall_s))


def _task_folder(run_dir: Path, task: int, events: list[dict[str, Any]], metrics: bool = True) -> Path:
    folder = run_dir / f"task-{task:04d}"
    folder.mkdir()
    if metrics:
        (folder / "metrics.jsonl").write_text(json.dumps({"epoch": 1, **_result(task)}) + "\n")
        (folder / "curves.png").write_bytes(b"\x89PNG drawn already")
        os.utime(folder / "metrics.jsonl", (1_700_000_000, 1_700_000_000))  # older than curves.png
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


def _success(task: int) -> list[tuple[str, Any]]:
    return [("success", {**_result(task), "rank": rank, "node": "cpu1"}) for rank in range(2)]


def _build_sweep(run_dir: Path, slurm_conf: str) -> None:
    run_dir.mkdir(parents=True)
    ids = [f"{BASE}_{t}" for t in range(12)]
    started = [{"event": "started", "time": 1.0, "job_id": ids[0]}, {"event": "finished", "time": 2.0}]
    for task in (0, 1, 2, 3, 4):
        _task_folder(run_dir, task, started)
        _logs(run_dir, ids[task], _success(task), wall_s=60 * task + 7.4)
    # Rank 1 raised; rank 0 died of it (a closed connection): rank 1 is the cause.
    _task_folder(run_dir, 5, started[:1])
    _logs(run_dir, ids[5], [("error", TRACEBACK.format("RuntimeError: Connection closed by peer")),
                            ("error", TRACEBACK.format("ValueError: loss is nan at step 12"))], wall_s=33)
    _task_folder(run_dir, 6, started[:1], metrics=False)  # no pickle, no record: lost
    _logs(run_dir, ids[6], None, wall_s=5)
    broken = _task_folder(run_dir, 7, started)  # its result.json is half written
    _logs(run_dir, ids[7], _success(7), wall_s=70)
    (broken / "result.json").write_text('{"test_accuracy": 0.5, "sta')
    _task_folder(run_dir, 8, [{"event": "started", "time": 1.0, "job_id": ids[8]},
                              {"event": "started", "time": 5.0, "job_id": ids[8]},
                              {"event": "finished", "time": 9.0}])  # requeued by SLURM once
    _logs(run_dir, ids[8], _success(8), wall_s=3700)
    resumed = f"{BASE + 1}_9"  # task 9 failed under its first id, then --resume ran it again
    _task_folder(run_dir, 9, started)
    _logs(run_dir, ids[9], [("error", TRACEBACK.format("OSError: disk full"))] * 2, wall_s=12)
    _logs(run_dir, resumed, _success(9), wall_s=95)
    failed = _task_folder(run_dir, 11, started[:1], metrics=False)  # what a waiting submitter wrote
    (failed / "failure.json").write_text(json.dumps({"rank": 0, "error": "CUDA error: out of memory"}))
    _logs(run_dir, ids[11], None, wall_s=2)
    # Task 10 was never submitted (a submission interrupted part-way).
    task_jobs = [[j] for j in ids]
    task_jobs[9], task_jobs[10] = [ids[9], resumed], []
    overrides = [{"lr": round(0.01 * (t + 1), 4), "optimizer": "sgd" if t % 2 else "adamw"} for t in range(12)]
    (run_dir / "run.json").write_text(json.dumps({
        "executor": "slurm", "run_dir": str(run_dir), "world_size": 2, "tasks": 12,
        "job": {"name": "pinned", "target_metric": "test_accuracy", "target_mode": "max", "epochs": 1},
        "profile": {"name": "dev-cluster", "executor": "slurm", "slurm_conf": slurm_conf},
        "sweep_overrides": overrides, "job_ids": ids, "task_jobs": task_jobs, "created": 1_767_000_000.0,
        "resumes": [{"time": 1_767_000_500.0, "job_ids": [resumed]}],
        "signature": "5e1f0c9a1e6b2d4c", "task_signatures": [f"{t:02d}" * 8 for t in range(12)]}))


def _build_cancelled(run_dir: Path, slurm_conf: str) -> None:
    run_dir.mkdir(parents=True)
    ids = [f"{BASE + 2}_{t}" for t in range(3)]
    _task_folder(run_dir, 0, [{"event": "started", "time": 1.0}, {"event": "finished", "time": 2.0}])
    _logs(run_dir, ids[0], _success(0), wall_s=40)
    _task_folder(run_dir, 1, [{"event": "started", "time": 1.0}])
    _logs(run_dir, ids[1], [("error", TRACEBACK.format("RuntimeError: Connection closed"))] * 2, wall_s=41)
    _task_folder(run_dir, 2, [], metrics=False)
    (run_dir / "run.json").write_text(json.dumps({
        "executor": "slurm", "run_dir": str(run_dir), "world_size": 2, "tasks": 3,
        "job": {"name": "stopped", "target_metric": "test_loss", "target_mode": "min", "epochs": 1},
        "profile": {"name": "dev-cluster", "executor": "slurm", "slurm_conf": slurm_conf},
        "sweep_overrides": [{"seed": s} for s in range(3)], "job_ids": ids, "created": 1_767_000_000.0,
        "cancelled_at": 1_767_000_100.0}))


def _outputs(cwd: Path, run_dir: Path) -> dict[str, str]:
    """What a user sees, in the order a user would ask for it, with the temporary folder named <tmp>."""
    out: dict[str, str] = {}
    for name, args in (("first.txt", []), ("again.txt", []), ("json.txt", ["--json"]),
                       ("no-collect.txt", ["--no-collect"]), ("no-collect-json.txt", ["--no-collect", "--json"])):
        done = run_submit(["status", str(run_dir), *args], cwd, timeout=120)
        assert done.returncode == 0 and not done.stderr, (name, done.stdout, done.stderr)
        out[name] = done.stdout
    out["summary.csv"] = (run_dir / "summary.csv").read_text()
    out["summary.md"] = (run_dir / "summary.md").read_text()
    out["results.json"] = json.dumps({p.parent.name: json.loads(p.read_text()) for p in
                                      sorted(run_dir.glob("task-*/result.json")) if p.parent.name != "task-0007"},
                                     indent=1, sort_keys=True) + "\n"
    record = json.loads((run_dir / "run.json").read_text())
    out["record.json"] = json.dumps({k: record.get(k) for k in ("state", "best")}, sort_keys=True) + "\n"
    return {name: text.replace(str(cwd), "<tmp>") for name, text in out.items()}


@pytest.mark.parametrize("build", [_build_sweep, _build_cancelled], ids=["sweep", "cancelled"])
def test_status_output_is_unchanged(tmp_path: Path, build: Any) -> None:
    cwd = tmp_path.resolve()
    run_dir = cwd / "runs" / build.__name__.removeprefix("_build_")
    slurm_conf = str(dev_cluster.slurm_conf_path())
    build(run_dir, slurm_conf)
    got = {name: text.replace(slurm_conf, "<slurm.conf>") for name, text in _outputs(cwd, run_dir).items()}
    folder = RECORDED / run_dir.name
    if os.environ.get("STATUS_OUTPUT_RECORD") == "1":
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in got.items():
            (folder / name).write_text(text)
    expected = {p.name: p.read_text() for p in folder.iterdir()}
    assert sorted(got) == sorted(expected)
    for name, text in got.items():
        assert text == expected[name], f"{name} differs from {folder / name}"
    # The first call recorded each finished task; the second read those records instead of the
    # pickles and logs, and must say the same.
    assert got["first.txt"] == got["again.txt"]


def test_status_loads_neither_the_submit_path_nor_heavy_libraries(tmp_path: Path) -> None:
    """What `status` imports is part of what it costs (a fresh process each call): not torch,
    submitit or matplotlib when there is nothing to draw, nor the code that submits."""
    cwd = tmp_path.resolve()
    run_dir = cwd / "runs" / "sweep"
    _build_sweep(run_dir, str(dev_cluster.slurm_conf_path()))
    assert run_submit(["status", str(run_dir)], cwd, timeout=120).returncode == 0  # draws summary.png
    code = ("import contextlib, io, json, sys\nfrom launcher.commands.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    codes = [main(['status', {str(run_dir)!r}, *extra]) for extra in ([], ['--json'], ['--no-collect'])]\n"
            "print(json.dumps([codes, sorted(sys.modules)]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    codes, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert codes == [0, 0, 0]
    heavy = ("torch", "submitit", "matplotlib", "numpy", "launcher.request.send", "launcher.request.submission",
             "launcher.waiting.ends", "launcher.request.plan", "launcher.commands.submit")
    assert [m for m in loaded if m.startswith(heavy)] == []
