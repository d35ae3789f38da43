"""GPU requests as sites write them (issue 20): a GPU type, GPUs per task, `--gres` or
`--gpus-per-node` style, the preflight against the nodes' GRES, and one GPU per rank.

The dev cluster's gpu partition (gpu1, gpu2) advertises `gpu:fake:4` with stand-in device files: the
scheduler really binds GPUs to tasks (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS), only CUDA is missing.
`submit.py probe` runs the exact request and reports, per rank, the GPU the trainer would take
(`trainer.distributed.environment.own_gpu`, which `pick_device` uses), in both launch shapes (`launch:
torchrun`: each rank torchrun starts reports). The four probes run at once.
Re-record the scripts after an intended change: UPDATE_RECORDED=1 python -m pytest tests/test_gpu_requests.py
"""

from __future__ import annotations

import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, last_json, run_submit

DATA = ROOT / "tests" / "data"
GPU = ["--profile", "dev-cluster-gpu"]
# (id, --set overrides): each style, typed and untyped, with and without gpus_per_task.
SHAPES = {
    "gres-typed-per-task": ["profile.gpu_request=gres", "profile.gpu_type=fake", "profile.gpus_per_task=1"],
    "gpus-typed-per-task": ["profile.gpu_type=fake", "profile.gpus_per_task=1"],
    "gpus-untyped": [],
    # One torchrun per node (typed --gres for the node's task): each rank is a worker torchrun started,
    # its GPU the LOCAL_RANK-th of the node's.
    "torchrun": ["profile.launch=torchrun", "profile.gpu_request=gres", "profile.gpu_type=fake"],
}


def srun_line(lines: list[str]) -> str:
    """The batch script's srun line (the retry step's line follows it)."""
    return next(line for line in lines if line.startswith("srun "))


@pytest.fixture(scope="module")
def probes(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    def probe(tmp: Path, sets: list[str]) -> Any:
        args = [*GPU, "--json", "--set", f"profile.runs_dir={tmp / 'runs'}"]
        for s in sets:
            args += ["--set", s]
        return run_submit(["probe", *args], cwd=tmp, timeout=180)

    # The folders are made here, not in the threads: pytest makes its base folder on the first mktemp,
    # and two threads doing that at once fail (FileExistsError).
    folders = [tmp_path_factory.mktemp("probe") for _ in SHAPES]
    with ThreadPoolExecutor(len(SHAPES)) as pool:
        return dict(zip(SHAPES, pool.map(probe, folders, SHAPES.values())))


@pytest.mark.parametrize("shape", SHAPES)
def test_each_rank_has_its_own_gpu_in_every_request_style(probes: dict[str, Any], shape: str) -> None:
    proc = probes[shape]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tasks = last_json(proc.stdout)["tasks"]
    assert sorted(t["rank"] for t in tasks) == [0, 1, 2, 3]
    # Distinct per node, and the one the scheduler gave this task: its own (per task) or the
    # LOCAL_RANK-th of the node's (per node).
    per_node = {(t["node"], t["gpu"]) for t in tasks}
    assert len(per_node) == 4, tasks
    for node in {t["node"] for t in tasks}:
        assert sorted(t["local_rank"] for t in tasks if t["node"] == node) == [0, 1], tasks
    # Reported by the processes that would train: srun's tasks, or the workers torchrun started.
    assert {t["launcher"] for t in tasks} == {"torchrun" if shape == "torchrun" else "slurm"}, tasks
    for t in tasks:
        visible = t["CUDA_VISIBLE_DEVICES"].split(",")
        if "profile.gpus_per_task=1" in SHAPES[shape]:
            assert visible == [t["gpu"]], t
        else:
            assert len(visible) == 2 and visible[t["local_rank"]] == t["gpu"], t
    # What the user reads: the probe's lines name each rank's GPU.
    assert all(f"gpu {t['gpu']}" in proc.stdout for t in tasks)


def dry_run(tmp_path: Path, *args: str) -> dict:
    proc = run_submit([*args, "--dry-run", "--json"], cwd=tmp_path, timeout=60,
                      env={"SLURM_CONF": str(tmp_path / "none.conf")})
    assert proc.returncode == 0, proc.stderr
    return last_json(proc.stdout)


@pytest.mark.parametrize("name,args", [
    ("gres", [*GPU, "--set", "profile.gpu_request=gres", "--set", "profile.gpu_type=fake",
              "--set", "profile.gpus_per_task=1"]),
    ("gpus", ["--profile", "slurm-gpu", "--set", "profile.gpu_type=a100", "--set", "profile.gpus_per_task=1"]),
    ("torchrun", [*GPU, *(arg for s in SHAPES["torchrun"] for arg in ("--set", s))]),
])
def test_the_request_lines_are_the_recorded_ones(tmp_path: Path, name: str, args: list[str]) -> None:
    info = dry_run(tmp_path, *args)
    # (the interpreter first: a venv of the checkout's own, .venv, lies inside the project)
    script = (info["sbatch_script"].replace(info["run_dir"], "<RUN_DIR>").replace(sys.executable, "<PYTHON>")
              .replace(str(ROOT), "<PROJECT>").replace(str(tmp_path), "<TMP>"))
    recorded = DATA / f"gpu-{name}-dry-run.sbatch"
    if os.environ.get("UPDATE_RECORDED"):
        recorded.write_text(script)
    assert script == recorded.read_text()
    lines = script.splitlines()
    if name == "torchrun":  # one task per node holds the node's GPUs; torchrun gives each rank its own
        assert {"#SBATCH --gres=gpu:fake:2", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=2"} <= set(lines)
        assert "--gpu-bind" not in srun_line(lines) and "--nproc-per-node=2" in info["torchrun"]
        return
    if name == "gres":
        assert "#SBATCH --gres=gpu:fake:2" in lines and not any("--gpus-per" in line for line in lines)
    else:
        assert {"#SBATCH --gpus-per-node=a100:8", "#SBATCH --gpus-per-task=a100:1"} <= set(lines)
    # Each task bound to its own GPU on srun, in both styles (SLURM 22.05 loses a typed per-task count).
    assert "--gpu-bind=single:1" in srun_line(lines)


def test_shipped_gpu_profiles_show_their_request(tmp_path: Path) -> None:
    """Without the new keys the request is what it was: --gpus-per-node=N, one task per GPU; with
    `launch: torchrun`, one task per node holding the node's GPUs and CPUs. The request lines, exactly."""
    request = re.compile(r"#SBATCH --(nodes|ntasks-per-node|cpus-per-task|gpus.*|gres|mem|partition)=")
    for profile, gpus, cpus, mem in (("slurm-gpu", 8, 10, "524288M"), ("dev-cluster-gpu", 2, 1, "2048M")):
        for launch, tasks, cpus_per_task in (("tasks", gpus, cpus), ("torchrun", 1, cpus * gpus)):
            info = dry_run(tmp_path, "--profile", profile, "--set", f"profile.launch={launch}")
            lines = info["sbatch_script"].splitlines()
            assert [line for line in lines if request.match(line)] == [
                f"#SBATCH --cpus-per-task={cpus_per_task}", f"#SBATCH --gpus-per-node={gpus}", f"#SBATCH --mem={mem}",
                "#SBATCH --nodes=2", f"#SBATCH --ntasks-per-node={tasks}", "#SBATCH --partition=gpu"], (profile, launch)
            assert "gpu-bind" not in srun_line(lines)
            assert launch == "tasks" or f"--nnodes=2 --nproc-per-node={gpus} " in info["torchrun"]
