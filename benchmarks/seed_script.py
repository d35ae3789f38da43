"""Benchmark: the seed as a user would bring it (`script:` with our thread control) vs the seed program as written.

Both train the blog's LeNet on the real CIFAR-10 images (../shared/data/cifar10-jpeg.tar.gz, decoded once
into torchvision's format under ~/.cache/ddp-bench; never into the repository), 2 ranks on this machine,
batch 64 per rank, the same epochs, the same per-sample ToTensor + Normalize DataLoader:

* A: `benchmarks/seed_program.py` as written: torch's default threads in each rank (every core, in
  every rank: oversubscribed).
* B: `examples/seed_cifar10.py` (the same program, corrected only where it was wrong) submitted as a
  `script:` job on the `local` profile: the launcher starts one child per rank in torchrun's environment
  with OMP_NUM_THREADS (and MKL/OpenBLAS) set to the profile's cpus_per_task (1 on `local`).
* C (`--one-thread`): the seed program with torch.set_num_threads(1) in each rank: thread control
  alone, without the launcher, to tell what B gains from threads from what it gains (or loses) elsewhere.

Each side reports images/s of its own training loop (start-up excluded: the same measure in both
programs), and the run's wall time from the command's start. The runs alternate A, B, A, B, ... so that
other work on a shared machine slows both alike; the table shows every run, then the best of each (other
work only ever slows a run down) and the ratio. Goal: B >= 2.5x A.

    python benchmarks/seed_script.py [--epochs 1] [--repeat 3] [--max-steps N] [--one-thread]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def seed_as_written(root: Path, epochs: int, max_steps: int, threads: int = 0) -> tuple[dict, float]:
    cmd = [sys.executable, str(common.ROOT / "benchmarks" / "seed_program.py"), "--data", str(root),
           "--epochs", str(epochs), "--max-steps", str(max_steps), "--threads", str(threads)]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=common.ROOT,
                          env={**env, "PYTHONPATH": str(common.ROOT)})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"seed program failed:\n{proc.stderr[-3000:]}")
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1]), wall


def seed_via_script_job(root: Path, epochs: int, max_steps: int) -> tuple[dict, float]:
    args = json.dumps(["--data", str(root), "--epochs", str(epochs), "--max-steps", str(max_steps), "--no-md5"])
    result, wall, _ = common.submit(["--profile", "local", "--job", "examples/seed-script.yaml",
                                     "--set", f"job.args={args}"])
    return result, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="A/B pairs, interleaved")
    parser.add_argument("--max-steps", type=int, default=0, help="steps per epoch and rank (0: the whole epoch)")
    parser.add_argument("--one-thread", action="store_true",
                        help="also C: the seed program with torch.set_num_threads(1) per rank (thread control alone)")
    args = parser.parse_args()
    root = common.real_cifar10()
    if root is None:
        return
    print(common.load_note())
    rows, a_runs, b_runs, c_runs = [], [], [], []
    for i in range(args.repeat):
        a, a_wall = seed_as_written(root, args.epochs, args.max_steps)
        b, b_wall = seed_via_script_job(root, args.epochs, args.max_steps)
        a_runs.append((a["images_per_second"], a_wall))
        b_runs.append((b["images_per_second"], b_wall))
        rows.append([f"A{i + 1}: seed program as written", f"{a['threads']} threads/rank", a["images_per_second"],
                     a_wall, "-"])
        rows.append([f"B{i + 1}: seed script via `script:`", f"{b['threads']} thread/rank",
                     b["images_per_second"], b_wall, f"{b['test_accuracy']:.3f}"])
        line = (f"pair {i + 1}: A {a['images_per_second']:,.0f} images/s ({a_wall:.1f} s), "
                f"B {b['images_per_second']:,.0f} images/s ({b_wall:.1f} s)")
        if args.one_thread:
            c, c_wall = seed_as_written(root, args.epochs, args.max_steps, threads=1)
            c_runs.append(c["images_per_second"])
            rows.append([f"C{i + 1}: seed program, 1 thread/rank", "1 thread/rank", c["images_per_second"], c_wall, "-"])
            line += f", C {c['images_per_second']:,.0f} images/s ({c_wall:.1f} s)"
        print(f"{line}; {common.load_note()}", flush=True)
    best_a, best_b = max(r[0] for r in a_runs), max(r[0] for r in b_runs)
    ratios = [b[0] / a[0] for a, b in zip(a_runs, b_runs)]
    rows.append(["best A", "", best_a, min(r[1] for r in a_runs), ""])
    rows.append(["best B", "", best_b, min(r[1] for r in b_runs), ""])
    steps = f" ({args.max_steps} steps/rank each)" if args.max_steps else ""
    print(f"\nLeNet, 2 local ranks, batch 64/rank, {args.epochs} epoch(s){steps} of the real CIFAR-10 training images, "
          f"{args.repeat} interleaved A/B pairs:\n")
    print(common.table(["run", "threads", "images/s (training loop)", "wall s (command)", "test accuracy"], rows))
    print(f"\nB / A images/s: best {best_b / best_a:.2f}x, per pair {', '.join(f'{r:.2f}' for r in ratios)} "
          f"(median {statistics.median(ratios):.2f}x); wall time A / B: "
          f"{min(r[1] for r in a_runs) / min(r[1] for r in b_runs):.2f}x. Goal: >= 2.5x. {common.load_note()}")
    if c_runs:
        print(f"B / C (the launcher's script path vs the seed with 1 thread/rank alone): best {best_b / max(c_runs):.2f}x")


if __name__ == "__main__":
    main()
