"""How long `submit.py status` takes on a large sweep (goal: under 3 s at 10,000 tasks).

    python benchmarks/status_scale.py [--tasks 10000] [--repeat 3]

Builds a finished SLURM sweep's run folder the way a real one looks after its tasks ran (run.json
with one job array id per 1,001 tasks, each task's folder with result.json, metrics.jsonl and
events.jsonl, each rank's submitit result pickle under logs/<array>_<task>/), then times `status`
as a fresh process, as a user runs it: `--no-collect` (the states only) and the full command
(states, summary.csv/md/png). The job ids are ones the dev cluster's accounting does not know, so
sacct and squeue are asked for real (when the dev cluster is up) and the states come from the run
folder, which is what costs time at this size. By default each task's curves.png exists already
(drawn by a waiting submitter or earlier `status` calls); `--no-curves` leaves them to draw, and
each `status` call then spends about a second (plus matplotlib's import) drawing the next ones.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARRAY = 1001


def build(run_dir: Path, tasks: int, curves: bool = True) -> None:
    run_dir.mkdir(parents=True)
    base = 9_000_000
    job_ids = [f"{base + t // ARRAY}_{t % ARRAY}" for t in range(tasks)]
    overrides = [{"lr": round(0.001 * (t + 1), 6)} for t in range(tasks)]
    job = {"name": "scale", "target_metric": "test_accuracy", "target_mode": "max", "epochs": 1}
    profile = {"name": "dev-cluster", "executor": "slurm", "slurm_conf": ".dev-cluster/slurm.conf"}
    (run_dir / "run.json").write_text(json.dumps({
        "executor": "slurm", "run_dir": str(run_dir), "world_size": 2, "tasks": tasks, "job": job,
        "profile": profile, "sweep_overrides": overrides, "job_ids": job_ids, "created": time.time() - 3600}))
    for t in range(tasks):
        folder = run_dir / f"task-{t:04d}"
        folder.mkdir()
        result = {"test_accuracy": 0.9 + t / tasks / 20, "test_loss": 0.3, "train_loss": 0.4, "epochs": 1,
                  "world_size": 2, "images_per_second": 9000.0}
        (folder / "metrics.jsonl").write_text(json.dumps({"epoch": 1, **result}) + "\n")
        if curves:  # drawn already (by a waiting submitter or earlier `status` calls): newer than metrics
            (folder / "curves.png").write_bytes(b"\x89PNG placeholder")
        (folder / "events.jsonl").write_text(json.dumps({"time": time.time(), "event": "started"}) + "\n"
                                             + json.dumps({"time": time.time(), "event": "finished"}) + "\n")
        logs = run_dir / "logs" / job_ids[t]
        logs.mkdir(parents=True)
        for rank in range(2):
            with open(logs / f"{job_ids[t]}_{rank}_result.pkl", "wb") as fh:
                pickle.dump(("success", {**result, "rank": rank, "node": "cpu1"}), fh)
            (logs / f"{job_ids[t]}_{rank}_log.out").write_text("2026-01-01 00:00:00 start\n")
            (logs / f"{job_ids[t]}_{rank}_log.err").write_text("submitit INFO (2026-01-01 00:00:00,000) - x\n")


def timed(args: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "submit.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1200)
    took = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-curves", action="store_true",
                        help="leave every task's curves.png to draw (each status call draws ~1 s of them)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "runs" / "scale-sweep"
        t0 = time.perf_counter()
        build(run_dir, args.tasks, curves=not args.no_curves)
        print(f"built a {args.tasks}-task sweep folder in {time.perf_counter() - t0:.1f} s", flush=True)
        first = timed(["status", str(run_dir)], env, Path(tmp))
        print(f"status (first, writes summary.csv/md/png): {first:.2f} s", flush=True)
        for what, extra in (("status --no-collect", ["--no-collect"]), ("status", []), ("status --json", ["--json"])):
            times = [timed(["status", str(run_dir), *extra], env, Path(tmp)) for _ in range(args.repeat)]
            print(f"{what}: median {statistics.median(times):.2f} s, fastest {min(times):.2f} s "
                  f"({args.tasks} tasks)", flush=True)


if __name__ == "__main__":
    main()
