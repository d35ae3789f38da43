"""`--when` on the real dev cluster: with the small `gpu` partition made busy by this test's own long jobs, the
estimates differ between the variants (the `cpu` partition starts now, `gpu` once those jobs end), as one
table, and nothing is queued. The busy jobs are cancelled after (only these: they are this test's)."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import last_json, run_submit, wait_until

pytestmark = pytest.mark.slurm


def squeue_state(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def test_when_prints_estimates_that_differ_between_variants(slurm_cluster: Path, tmp_path: Path) -> None:
    name = f"when-{uuid.uuid4().hex[:8]}"
    busy = subprocess.run(["sbatch", "--parsable", "-p", "gpu", "-N", "2", "--exclusive", "-t", "60", "-J",
                           f"{name}-busy", "-o", "/dev/null", "--wrap", "sleep 3600"], capture_output=True, text=True,
                          timeout=60, check=True).stdout.strip().split(";")[0]
    try:
        # Running, or queued behind others' jobs there: either way the partition is busy for an hour or more.
        wait_until(lambda: squeue_state(busy) in ("RUNNING", "PENDING"), 120, "the busy job queued")
        before = time.time()
        done = run_submit(["--profile", "dev-cluster", "--set", f"job.name={name}", "--when", "--json"], tmp_path,
                          timeout=300)
        human = run_submit(["--profile", "dev-cluster", "--set", f"job.name={name}", "--when"], tmp_path, timeout=300)
    finally:
        subprocess.run(["scancel", busy], timeout=60, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {row["variant"]: row for row in last_json(done.stdout)["when"]}
    assert set(rows) == {"as asked", "1 node(s)", "partition gpu", "time 3 min (4 attempts)"}, rows
    assert rows["as asked"]["partition"] == "cpu" and rows["partition gpu"]["partition"] == "gpu"
    gpu = rows["partition gpu"]["start"]
    assert gpu is not None and gpu >= before + 50 * 60, rows  # after the busy job's hour
    cpu = [rows[v]["start"] for v in ("as asked", "1 node(s)", "time 3 min (4 attempts)")]
    assert all(start is not None and start < gpu for start in cpu), rows
    # One table, and nothing queued under the run's name, ever.
    lines = human.stdout.splitlines()
    assert lines[1].split()[:2] == ["variant", "nodes"] and lines[-1] == "Nothing was queued.", human.stdout
    assert any(line.startswith("partition gpu") and "in " in line for line in lines), human.stdout
    jobs = subprocess.run(["sacct", "-X", "-P", "-n", "--name", name, "--format=JobID", "-S", "now-1hours"],
                          capture_output=True, text=True, timeout=60).stdout.split()
    assert jobs == [] and not list(tmp_path.glob("runs/*")), jobs
