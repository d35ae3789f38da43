"""Fast by default: threads per task, and the airbench-style cifar10-fast job running on CPUs."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, last_json, rank_results, run_submit
from trainer.distributed import threads


@pytest.mark.parametrize("requested,environ,usable,expected", [
    (1, {}, 2, 1),                                # the local profile: 1 thread per rank
    (4, {}, 2, 2),                                # never more than the CPUs this process may use
    (8, {"SLURM_CPUS_PER_TASK": "4"}, 16, 4),     # never more than SLURM granted
    (2, {"SLURM_CPUS_PER_TASK": "4"}, 16, 2),     # the profile may ask for fewer
    (2, {"SLURM_CPUS_PER_TASK": ""}, 16, 2),      # empty or odd values are ignored
    (2, {"SLURM_CPUS_PER_TASK": "x"}, 16, 2),
    (3, {}, 1, 1),
])
def test_thread_count(requested: int, environ: dict[str, str], usable: int, expected: int) -> None:
    assert threads.thread_count(requested, environ, usable) == expected


def test_set_threads_applies_to_torch_and_to_child_processes() -> None:
    """One call sets torch's threads and the OpenMP/MKL variables that processes it starts inherit."""
    code = (
        "import os, subprocess, sys, torch\n"
        "from trainer.distributed import process\n"
        "n = process.set_threads(1)\n"
        "child = subprocess.run([sys.executable, '-c', 'import os, torch; "
        "print(os.environ[\"OMP_NUM_THREADS\"], os.environ[\"MKL_NUM_THREADS\"], torch.get_num_threads())'],"
        " capture_output=True, text=True, check=True).stdout.split()\n"
        "print(n, torch.get_num_threads(), torch.get_num_interop_threads(), *child)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1", "1", "1", "1", "1"]


def test_nothing_else_sets_threads() -> None:
    """trainer.distributed.process.set_threads is the one place: no other project module calls torch's setters."""
    offenders = []
    for path in [*ROOT.glob("trainer/**/*.py"), *ROOT.glob("launcher/**/*.py")]:
        if path.name == "process.py":
            continue
        text = path.read_text()
        if "set_num_threads" in text or "set_num_interop_threads" in text:
            offenders.append(path.name)
    assert offenders == []


def test_cifar10_fast_trains_resnet_small_on_cpu_with_one_thread_per_rank(tmp_path: Path) -> None:
    """The GPU recipe runs unchanged on CPUs (bf16 and compile only apply on GPUs): 2 local ranks,
    2 optimizer steps of resnet-small on CIFAR-10-shaped data, each rank with exactly the one CPU
    thread the local profile gives it (cpus_per_task: 1)."""
    proc = run_submit(["--job", "cifar10-fast", "--set", "job.dataset=synthetic-cifar10",
                       "--set", "job.synthetic_train_size=128", "--set", "job.synthetic_test_size=64",
                       "--set", "job.batch_size_per_rank=32", "--set", "job.epochs=1", "--json"],
                      cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["world_size"] == 2
    assert result["steps"] == 2  # 128 images / 2 ranks / 32 per rank
    assert math.isfinite(result["train_loss"]) and math.isfinite(result["test_loss"])
    ranks = rank_results(Path(result["run_dir"]))
    assert len(ranks) == 2
    assert [r["threads"] for r in ranks] == [1, 1]


def test_a_cpu_run_does_not_import_what_it_does_not_use() -> None:
    """Start-up cost: a CPU digits run imports neither scikit-learn (about 1 s per rank) nor
    torchvision. (torch._dynamo, ~1.3 s, cannot be avoided: torch.optim imports it.)"""
    code = ("import sys, tempfile, dataclasses\n"
            "from trainer.runners import dispatch\n"
            "from trainer.config.job import RunSettings, load_job\n"
            "job = dataclasses.replace(load_job('digits'), epochs=1)\n"
            "assert job.deterministic\n"
            "dispatch.run_job(job, RunSettings(run_dir=tempfile.mkdtemp()), environ={})\n"
            "print(sorted(m for m in ('sklearn', 'torchvision') "
            "if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
