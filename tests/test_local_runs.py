"""Real runs of the executors: local (2 processes), debug. (The embedded default on 2 local ranks and the trainer
under torchrun: tests/test_readme.py, which runs the README's own lines for them.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import ROOT, last_json, run_submit, run_submits


def test_debug_executor_runs_in_process(tmp_path: Path) -> None:
    proc = run_submit(["--profile", "debug", "--set", "job.epochs=2", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc.stdout)
    assert result["world_size"] == 1
    assert result["epochs"] == 2
    assert result["test_accuracy"] > 0.8


def test_debug_executor_stops_at_a_breakpoint(tmp_path: Path) -> None:
    """pdb works: a breakpoint() in the training function is reached in the submitter's own process."""
    job = tmp_path / "bp.yaml"
    job.write_text("extends: digits\nepochs: 1\n")
    env = {"PYTHONBREAKPOINT": "pdb.set_trace"}
    code = ("import sys, trainer.recipes.training as b\n"
            "orig = b.fit\n"
            "def fit(ctx, job):\n    breakpoint()\n    return orig(ctx, job)\n"
            "b.fit = fit\n"
            f"sys.argv = ['submit.py', '--profile', 'debug', '--job', {str(job)!r}]\n"
            "from launcher.commands.main import main\nsys.exit(main())\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, input="p ctx.env.launcher\nc\n",
                          capture_output=True, text=True, timeout=300, env={**os.environ, **env,
                                                                            "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "(Pdb)" in proc.stdout and "'single'" in proc.stdout


def test_a_failing_rank_fails_the_run_with_exit_1_naming_the_rank(tmp_path: Path) -> None:
    proc = run_submit(["--set", "job.fail_at=5:1", "--json"], cwd=tmp_path)
    assert proc.returncode == 1
    assert "failed on rank 1" in proc.stderr
    assert "injected failure at step 5 on rank 1" in proc.stderr
    assert last_json(proc.stdout)["state"] == "FAILED"


def _final_weights(tmp_path: Path, runs: dict[str, tuple[int, int, int]]) -> dict[str, dict]:
    """Each named run's final weights: (ranks, batch per rank, train size) of LeNet on synthetic CIFAR, all
    run at once (tests/helpers.py's run_submits)."""
    args = []
    for name, (ranks, batch, train_size) in runs.items():
        job = tmp_path / f"{name}.yaml"
        job.write_text(f"name: {name}\nmodel: lenet\ndataset: synthetic-cifar10\nsynthetic_train_size: {train_size}\n"
                       f"synthetic_test_size: 64\nepochs: 1\nbatch_size_per_rank: {batch}\nlr: 0.05\nmomentum: 0.9\n")
        args.append(["--job", str(job), "--set", f"profile.tasks_per_node={ranks}", "--json"])
    weights = {}
    for name, proc in zip(runs, run_submits(args, cwd=tmp_path)):
        assert proc.returncode == 0, proc.stderr
        weights[name] = torch.load(Path(last_json(proc.stdout)["run_dir"]) / "model_final.pt")
    return weights


def test_ddp_averages_gradients_like_one_process_on_the_concatenated_batch(tmp_path: Path) -> None:
    """2 ranks x batch B for 8 steps == 1 process x batch 2B: DistributedSampler gives rank r the items
    r, r+2, ... of the epoch's permutation, so each step's union is the single process's batch."""
    # "half": different data, whose weights must differ.
    runs = _final_weights(tmp_path, {"ddp": (2, 32, 512), "single": (1, 64, 512), "half": (1, 32, 256)})
    ddp, single, other = runs["ddp"], runs["single"], runs["half"]
    for key in single:
        torch.testing.assert_close(ddp[key], single[key], rtol=1e-4, atol=1e-5)
    assert any(not torch.allclose(other[k], single[k], rtol=1e-3, atol=1e-4) for k in single)


@pytest.mark.parametrize("args", [["--help"], ["--dry-run"], ["--profile", "slurm-gpu", "--dry-run", "--json"]])
def test_help_and_dry_run_do_not_import_torch(tmp_path: Path, args: list[str]) -> None:
    code = ("import sys; sys.argv = ['submit.py', *sys.argv[1:]]\n"
            "from launcher.commands.main import main\n"
            "try:\n    rc = main()\nexcept SystemExit as e:\n    rc = e.code\n"
            "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'NO_TORCH'); sys.exit(rc)\n")
    # No SLURM_CONF, whatever ran before (the slurm_cluster fixture sets one for the session): the
    # preflight of slurm-gpu is skipped with a note, and the dry run succeeds without torch.
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**env, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "NO_TORCH"
    assert not (tmp_path / "runs").exists()
