"""Sweeps larger than the cluster accepts, on the SLURM dev cluster.

- Refused before anything is queued (exit 2, one line naming the limit): a sweep whose tasks and
  the jobs already in the controller's queue exceed MaxJobCount. The dev cluster's MaxJobCount is
  10,000 (SLURM's default, what the issue's user met) and cannot change without restarting the
  shared controller, so the test fills it the way a busy cluster would: one job of its own held in
  the queue next to a 10,000-task sweep (the largest a sweep may be).
- A submission interrupted part-way: `sbatch` fails on the second array of a split sweep (a
  wrapper in front of the real sbatch refuses its second call, as the controller did after
  "Resource temporarily unavailable"). The submitter exits 1 saying what was queued; the run
  folder knows the first array, so `status` shows its tasks and the unsubmitted ones, `--resume`
  queues only those, and `cancel` reaches the queued array.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, the_run, wait_until

pytestmark = pytest.mark.slurm


def user_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def submit(*args: str, cwd: Path, env: dict[str, str] | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "submit.py"), *args], cwd=cwd, env=env or user_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)


def squeue_ids(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-n", name, "-o", "%i"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return out.split()


def status_rows(run_dir: Path, cwd: Path) -> list[dict[str, Any]]:
    proc = submit("status", str(run_dir), "--json", cwd=cwd)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_sweep_beyond_max_job_count_is_refused_before_queueing(slurm_cluster: Path, tmp_path: Path) -> None:
    name = f"oversize-{os.getpid()}"
    grid = {"lr": [round(0.001 * (i + 1), 4) for i in range(100)], "seed": list(range(100))}
    (tmp_path / "big.yaml").write_text(json.dumps({"extends": "digits", "name": name, "sweep": {"grid": grid}}))
    held = subprocess.run(["sbatch", "--parsable", "--hold", "-J", f"{name}-held", "-o", "/dev/null", "-t", "1",
                           "--wrap", "true"], capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    try:
        started = time.monotonic()
        proc = submit("--profile", "dev-cluster", "--job", "big.yaml", "--set",
                      f"profile.runs_dir={tmp_path / 'runs'}", cwd=tmp_path, timeout=240)
        took = time.monotonic() - started
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "MaxJobCount" in lines[0] and "10000 task(s)" in lines[0] and "nothing was queued" in lines[0], lines
        assert squeue_ids(name) == [], "part of the sweep was queued"
        assert not (tmp_path / "runs").exists()
        assert took < 60, f"refusing took {took:.1f} s"
    finally:
        subprocess.run(["scancel", held.split(";")[0]], check=False, timeout=30)


FAIL_SECOND_SBATCH = """#!/bin/sh
# In front of the real sbatch: the first call goes through, every later one fails as a
# controller at its job limit answers.
count_file="{count}"
n=$(cat "$count_file" 2>/dev/null || echo 0)
echo $((n + 1)) > "$count_file"
if [ "$n" -ge 1 ]; then
    echo "sbatch: error: Batch job submission failed: Resource temporarily unavailable" >&2
    exit 1
fi
exec "{real}" "$@"
"""


def test_interrupted_submission_is_recorded_for_status_resume_and_cancel(slurm_cluster: Path,
                                                                         tmp_path: Path) -> None:
    name = f"partial-{os.getpid()}"
    sweep = {"extends": "digits", "name": name, "epochs": 1,
             "sweep": {"grid": {"lr": [0.01, 0.02, 0.03, 0.04]}}}
    (tmp_path / "s.yaml").write_text(json.dumps(sweep))
    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    real = subprocess.run(["which", "sbatch"], capture_output=True, text=True, check=True).stdout.strip()
    (wrapper_dir / "sbatch").write_text(FAIL_SECOND_SBATCH.format(count=tmp_path / "calls", real=real))
    (wrapper_dir / "sbatch").chmod(0o755)
    env = user_env(PATH=f"{wrapper_dir}{os.pathsep}{os.environ['PATH']}")
    args = ["--profile", "dev-cluster", "--job", "s.yaml", "--set", f"profile.runs_dir={tmp_path / 'runs'}",
            "--set", "profile.max_array_size=2", "--set", "profile.nodes=1"]
    proc = submit(*args, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    run_dir = the_run(tmp_path / "runs")
    record = json.loads((run_dir / "run.json").read_text())
    queued = [str(j) for j in record["job_ids"]]
    assert len(queued) == 2 and queued[0].split("_")[0] == queued[1].split("_")[0], record["job_ids"]
    array = queued[0].split("_")[0]
    error = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and array in error[0] and "2 of 4 task(s)" in error[0] and "--resume" in error[0], error

    rows = status_rows(run_dir, tmp_path)
    assert [r["task"] for r in rows] == [0, 1, 2, 3]
    assert all(r["job_id"].startswith(array) for r in rows[:2]), rows
    assert [r["error"] for r in rows[2:]] == ["never submitted"] * 2, rows

    # --resume (with a working sbatch) queues only the two tasks that never were.
    proc = submit("--resume", str(run_dir), "--json", "--set", "profile.max_array_size=2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["resubmitted"] == [2, 3]

    # cancel reaches both arrays: the first one (recorded as sbatch returned it) and the resumed one.
    proc = submit("cancel", str(run_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wait_until(lambda: squeue_ids(name) == [], 60, "the run's jobs to leave the queue")
    rows = status_rows(run_dir, tmp_path)
    assert all(r["state"] in ("cancelled", "completed") for r in rows), rows
    assert all(r["error"] != "never submitted" for r in rows), rows
