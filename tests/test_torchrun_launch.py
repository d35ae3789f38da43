"""`launch: torchrun` (issue 20): one SLURM task per node runs torchrun with tasks_per_node
processes, a c10d rendezvous on the first node, the job id as the run id (launcher/torchrun.py).

On the dev cluster, 2 nodes x 2 processes (CPU, gloo), five runs at once: the built-in digits job,
a plain torchrun script, a rank failing on the second node (fail-fast), and a run requeued with
`scontrol requeue` mid-run beside its uninterrupted reference (exact resume).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import ROOT, last_json, run_submit, wait_until

TORCHRUN = ["--profile", "dev-cluster", "--set", "profile.launch=torchrun", "--set", "profile.tasks_per_node=2"]
PLAIN_SCRIPT = ROOT / "tests" / "userpkg" / "plain_script.py"


@pytest.fixture(scope="module")
def runs(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("torchrun")
    (tmp / "plain.yaml").write_text(f"name: plain-script\nscript: {PLAIN_SCRIPT}\nargs: ['20']\n")
    cases = {
        "digits": ["--set", "job.epochs=2"],
        "script": ["--job", str(tmp / "plain.yaml")],
        # Rank 3 (on the second node) raises at step 2; the others would wait in the next all-reduce.
        "failing": ["--set", "job.epochs=50", "--set", "job.fail_at=2:3"],
        "reference": RESUMABLE,
        "requeued": RESUMABLE,
    }

    def run(name: str) -> tuple[Any, float]:
        start = time.monotonic()
        if name == "requeued":
            return requeued(tmp / name, cases[name]), time.monotonic() - start
        proc = run_submit([*TORCHRUN, *cases[name], "--set", f"profile.runs_dir={tmp / name}", "--wait", "--json"],
                          cwd=tmp, timeout=400)
        return proc, time.monotonic() - start

    with ThreadPoolExecutor(len(cases)) as pool:
        return dict(zip(cases, pool.map(run, cases)))


RESUMABLE = ["--set", "job.epochs=10", "--set", "profile.checkpoint_every_steps=5"]


def requeued(runs_dir: Path, sets: list[str]) -> subprocess.CompletedProcess[str]:
    """The run, requeued by SLURM (`scontrol requeue`: SIGTERM to every process) after its first checkpoint."""
    args = [sys.executable, str(ROOT / "submit.py"), *TORCHRUN, *sets, "--set", f"profile.runs_dir={runs_dir}",
            "--wait", "--json"]
    proc = subprocess.Popen(args, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        run_dir = wait_until(lambda: next(runs_dir.glob("*/checkpoints/ckpt-*.pt"), None), 300,
                             "the first checkpoint").parent.parent
        job_id = re.search(r'"job_id": "(\d+)"', (run_dir / "events.jsonl").read_text()).group(1)  # type: ignore[union-attr]
        subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30)
        out, err = proc.communicate(timeout=400)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_dry_run_shows_one_task_per_node_and_the_torchrun_command(tmp_path: Path) -> None:
    proc = run_submit([*TORCHRUN, "--dry-run", "--json"], cwd=tmp_path, timeout=60,
                      env={"SLURM_CONF": str(tmp_path / "none.conf")})
    assert proc.returncode == 0, proc.stderr
    info = last_json(proc.stdout)
    lines = info["sbatch_script"].splitlines()
    assert {"#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=2"} <= set(lines)
    assert info["world_size"] == 4
    assert ("-m torch.distributed.run --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d "
            "--rdzv-endpoint=FIRST_NODE:PORT --rdzv-id=SLURM_JOB_ID") in info["torchrun"]


def test_digits_trains_with_world_size_4_and_a_log_per_rank(runs: dict[str, Any]) -> None:
    proc, _ = runs["digits"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["world_size"] == 4 and result["test_accuracy"] > 0.5
    logs = Path(result["run_dir"]) / "logs" / result["job_id"]
    hosts = []
    for rank in range(4):  # `logs --rank R` reads these: each rank's own banner is in its file
        text = (logs / f"{result['job_id']}_{rank}_log.out").read_text()
        hosts += re.findall(rf"rank {rank}/4 on (\S+),", text)
    assert len(hosts) == 4 and len(set(hosts)) == 2, hosts  # one torchrun per node, on two nodes
    shown = run_submit(["logs", result["run_dir"], "--rank", "3"], cwd=ROOT, timeout=60)
    assert shown.returncode == 0 and "rank 3/4 on" in shown.stdout, shown.stdout + shown.stderr


def test_a_plain_torchrun_script_runs_under_it_unchanged(runs: dict[str, Any]) -> None:
    proc, _ = runs["script"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["sum"] == 80.0  # 20 all-reduces over 4 ranks


def test_a_rank_that_dies_ends_the_job_naming_it(runs: dict[str, Any]) -> None:
    proc, elapsed = runs["failing"]
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rank 3" in proc.stderr, proc.stderr[-3000:]
    assert elapsed < 180


def test_a_requeued_run_resumes_from_its_checkpoint_and_completes(runs: dict[str, Any]) -> None:
    (ref, _), (proc, _) = runs["reference"], runs["requeued"]
    assert ref.returncode == 0 and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    a, b = last_json(ref.stdout), last_json(proc.stdout)
    assert b["restarts"] == 1 and b["restart_causes"] == {"slurm-requeue": 1} and b["resumed_from"]
    assert a["steps"] == b["steps"] == 110 and a["restarts"] == 0


def test_a_requeued_run_ends_bitwise_equal_to_an_uninterrupted_one(runs: dict[str, Any]) -> None:
    # 4 ranks: with 3 or more, the resumed attempt's first step must reduce its gradients in the same DDP
    # bucket layout as the uninterrupted run's (trainer.recipes.components.settle_buckets).
    (ref, _), (proc, _) = runs["reference"], runs["requeued"]
    assert ref.returncode == 0 and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    a, b = last_json(ref.stdout), last_json(proc.stdout)
    x, y = (torch.load(Path(r["run_dir"]) / "model_final.pt") for r in (a, b))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert a["test_loss"] == b["test_loss"]
