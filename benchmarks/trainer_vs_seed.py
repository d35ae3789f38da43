"""Benchmark 1: training throughput of the trainer vs the seed program, same LeNet, 2 ranks, same files.

Both read the same CIFAR-10-shaped data (50,000 + 10,000 images made locally, written once in
torchvision's format under ~/.cache/ddp-bench) through torchvision, train one epoch on 2 local
ranks, and report images/s of their training loops (start-up and evaluation excluded on both sides).

    python benchmarks/trainer_vs_seed.py [--epochs 1] [--repeat 3]

Each row is the best of --repeat runs (other work on a shared 2-core machine only ever slows a run
down, so the fastest run is the closest to what the code itself costs; every row gets the same treatment).

Rows: the seed as written (torch's default threads per rank: oversubscribed on 2 cores), the seed
with 1 thread per rank (what torchrun's OMP_NUM_THREADS=1 default would have given it), our trainer
with the seed's recipe (`cifar10-seed`: batch 64 per rank), with our recipe (`cifar10`: 128), and
with 512 per rank (fewer gloo all-reduces per image: the throughput the data path allows).
Goal: >= 8x the seed as written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

from trainer.config.job import load_job  # noqa: E402 - no torch: config only


def seed_throughput(data_root: Path, epochs: int, threads: int) -> dict:
    cmd = [sys.executable, str(common.ROOT / "benchmarks" / "seed_program.py"), "--data", str(data_root),
           "--epochs", str(epochs)]
    if threads:
        cmd += ["--threads", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=common.ROOT,
                          env={**os.environ, "PYTHONPATH": str(common.ROOT)})
    if proc.returncode != 0:
        raise RuntimeError(f"seed program failed:\n{proc.stderr[-3000:]}")
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


def trainer_throughput(data_root: Path, job: str, epochs: int, extra: list[str] = ()) -> dict:
    result, _, _ = common.submit([
        "--profile", "local", "--job", job, "--set", f"job.epochs={epochs}", "--set", f"job.data_dir={data_root}",
        "--set", "job.download=false", "--set", "job.verify_checksums=false", *extra])
    return result


def best(runs: list[dict]) -> dict:
    return max(runs, key=lambda r: r["images_per_second"])


def main() -> None:
    args = common.throughput_arguments(__doc__, "row")
    print(common.load_note())
    root = common.synthetic_cifar10()
    rows = []
    seed = best([seed_throughput(root, args.epochs, threads=0) for _ in range(args.repeat)])
    base = seed["images_per_second"]
    rows.append(["seed program as written", f"gloo, {seed['threads']} threads/rank, ToTensor per sample, batch 64",
                 base, 1.0])
    seed1 = best([seed_throughput(root, args.epochs, threads=1) for _ in range(args.repeat)])
    rows.append(["seed program, 1 thread/rank", "as torchrun's OMP_NUM_THREADS=1 would run it",
                 seed1["images_per_second"], seed1["images_per_second"] / base])
    variants = [("cifar10-seed", "the seed's recipe", None), ("cifar10", "our recipe", None),
                ("cifar10", "throughput: larger batch", 512)]
    for job, what, batch in variants:
        extra = ["--set", f"job.batch_size_per_rank={batch}"] if batch else []
        result = best([trainer_throughput(root, job, args.epochs, extra) for _ in range(args.repeat)])
        batch = batch or load_job(job).batch_size_per_rank
        rows.append([f"trainer, job {job}", f"{what} (batch {batch}/rank), uint8 tensors, 1 thread/rank",
                     result["images_per_second"], result["images_per_second"] / base])
    print(f"\nLeNet, 2 local ranks, {args.epochs} epoch(s) of 50,000 CIFAR-10-shaped images (same files), "
          f"best of {args.repeat} runs:\n")
    print(common.table(["variant", "setup", "images/s", "x seed as written"], rows))


if __name__ == "__main__":
    main()
