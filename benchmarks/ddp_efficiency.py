"""Benchmark 2: DDP scaling efficiency = per-rank images/s with 2 ranks / images/s with 1 rank, at the
same threads per rank (1), LeNet on CIFAR-10-shaped data, through submit.py's local executor.

    python benchmarks/ddp_efficiency.py [--epochs 1] [--repeat 3]

Each figure is the best of --repeat runs (other work on a shared machine only slows runs down).

On two cores the 2-rank run has no idle core left and pays one all-reduce of LeNet's 248 KB of
gradients per step over gloo (about 1.6 ms here), so efficiency grows with the per-rank batch: the
rows show the seed's 64, our cifar10 job's batch, and 512. Goal: >= 0.9.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def images_per_rank(root: Path, job: str, ranks: int, batch: int | None, epochs: int) -> float:
    sets = ["--set", f"profile.tasks_per_node={ranks}", "--set", "profile.cpus_per_task=1",
            "--set", f"job.epochs={epochs}", "--set", f"job.data_dir={root}", "--set", "job.download=false",
            "--set", "job.verify_checksums=false", "--set", "job.eval_every_epochs=100"]
    if batch:
        sets += ["--set", f"job.batch_size_per_rank={batch}"]
    result, _, _ = common.submit(["--profile", "local", "--job", job, *sets])
    return result["images_per_second"] / result["world_size"]


def main() -> None:
    args = common.throughput_arguments(__doc__, "figure")
    print(common.load_note())
    root = common.synthetic_cifar10()
    from trainer.config.job import load_job

    rows = []
    for job, batch in (("cifar10-seed", None), ("cifar10", None), ("cifar10", 512)):
        size = batch or load_job(job).batch_size_per_rank
        one = max(images_per_rank(root, job, 1, batch, args.epochs) for _ in range(args.repeat))
        two = max(images_per_rank(root, job, 2, batch, args.epochs) for _ in range(args.repeat))
        rows.append([f"{job}, batch {size}/rank", one, two, 2 * two, two / one])
    print(f"\nLeNet, 1 thread per rank, {args.epochs} epoch(s) of 50,000 CIFAR-10-shaped images, best of "
          f"{args.repeat} runs:\n")
    print(common.table(["job", "1 rank: images/s", "2 ranks: images/s per rank", "2 ranks: total",
                        "efficiency (per rank, 2 vs 1)"], rows))


if __name__ == "__main__":
    main()
