"""The built-in `cifar10` job on the public API (trainer.recipes.training) vs the previous private Trainer path.

    python benchmarks/builtin_vs_previous.py [--against 8cbe9dd] [--repeat 3] [--epochs 1] [--ranks 1]

Both sides train the shipped `cifar10` job (LeNet, batch 128 per rank, one-cycle SGD) on real CIFAR-10
(the shared JPEG tarball, decoded once into ~/.cache/ddp-bench: see common.real_cifar10) with the
trainer alone (`python -m trainer`, or torchrun with --ranks 2), 1 thread per rank, same settings. The
previous side is `git archive REV` unpacked in a temporary folder (no change to this repository's
git state). Runs alternate A/B then B/A, so that drifting load on a shared machine hits both alike.

Reported: each side's images/s as the trainer reports it (training steps only: evaluation and
checkpoints excluded, the same definition on both sides), best and median of --repeat runs, and the
ratio this/previous (of the bests, of the medians, and the median of the ratios of each A/B pair).
On a shared machine wall-clock figures swing with other work, so the CPU seconds each whole run
used (user + system, start-up and evaluation included: the same work on both sides) are reported
too, as training images per CPU second. Also checked: both sides end with bitwise-equal weights
(the same arithmetic, different bookkeeping). Goal (issue 10): this >= 0.97x previous.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DEFAULT_AGAINST = "8cbe9dd"  # the last commit with the private Trainer (trainer/runners/dispatch.py)


def unpack(rev: str, into: Path) -> Path:
    """The tree of `rev` as plain files (git archive: nothing is added to the repository's worktrees)."""
    archive = into / "tree.tar"
    with open(archive, "wb") as fh:
        subprocess.run(["git", "-C", str(common.ROOT), "archive", rev], stdout=fh, check=True)
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    archive.unlink()
    return tree


def train(tree: Path, data_root: Path, epochs: int, ranks: int, run_dir: Path) -> dict:
    job = run_dir.with_suffix(".yaml")
    job.write_text(f"extends: cifar10\nepochs: {epochs}\ndata_dir: {data_root}\ndownload: false\n"
                   "verify_checksums: false\nlog_every_steps: 1000000\n")
    trainer = ["-m", "trainer", "--job", str(job), "--run-dir", str(run_dir), "--threads", "1"]
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] if ranks > 1 else []
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT") and not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, *launcher, *trainer], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{tree}: the trainer failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {**result, "images_per_cpu_second": 50_000 * epochs / cpu_s}  # real CIFAR-10: 50,000 training images


def same_weights(a: Path, b: Path) -> bool:
    import torch  # only here: the comparison at the end

    x, y = torch.load(a), torch.load(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default=DEFAULT_AGAINST, help="the previous revision (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side (default %(default)s)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--ranks", type=int, default=1, help="1: python -m trainer; more: torchrun")
    args = parser.parse_args()
    data_root = common.real_cifar10()
    if data_root is None:
        sys.exit(1)
    with tempfile.TemporaryDirectory(prefix="bench-builtin-") as tmp:
        sides = {"this": common.ROOT, args.against: unpack(args.against, Path(tmp))}
        names = list(sides)
        speeds: dict[str, list[float]] = {name: [] for name in names}
        per_cpu: dict[str, list[float]] = {name: [] for name in names}
        finals: dict[str, Path] = {}
        print(common.load_note(), flush=True)
        for i in range(args.repeat):
            for name in names if i % 2 == 0 else names[::-1]:  # A/B, then B/A
                run_dir = Path(tmp) / f"{name}-{i}"
                result = train(sides[name], data_root, args.epochs, args.ranks, run_dir)
                speeds[name].append(result["images_per_second"])
                per_cpu[name].append(result["images_per_cpu_second"])
                finals.setdefault(name, run_dir / "model_final.pt")
                print(f"  {name:>8} run {i + 1}: {result['images_per_second']:,.0f} images/s, "
                      f"{result['images_per_cpu_second']:,.0f} images per CPU s, test_accuracy "
                      f"{result['test_accuracy']:.4f}, train_loss {result['train_loss']:.4f}", flush=True)
        equal = same_weights(finals[names[0]], finals[names[1]])
        print(common.load_note())
    rows = []
    for label, values in (("images/s (trainer's)", speeds), ("images per CPU second", per_cpu)):
        this, previous = values[names[0]], values[names[1]]
        pairs = statistics.median(a / b for a, b in zip(this, previous))
        rows.append([label, max(this), max(previous), max(this) / max(previous), statistics.median(this),
                     statistics.median(previous), statistics.median(this) / statistics.median(previous), pairs])
    print(f"\ncifar10 job, real CIFAR-10, {args.ranks} rank(s) x 1 thread, {args.epochs} epoch(s), "
          f"{args.repeat} runs per side, interleaved")
    print(common.table(["measure", "best this", f"best {names[1]}", "ratio", "median this",
                        f"median {names[1]}", "ratio", "median of pair ratios"], rows))
    print(f"final weights bitwise equal on both sides: {equal}")


if __name__ == "__main__":
    main()
