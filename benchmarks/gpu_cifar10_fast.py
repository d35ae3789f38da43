"""Benchmark 7: `cifar10-fast` on one GPU: images/s, time to accuracy, and how busy the GPU was.

    python benchmarks/gpu_cifar10_fast.py                 # a machine with one NVIDIA GPU (H100/H200...)
    python benchmarks/gpu_cifar10_fast.py --data DIR      # real CIFAR-10 (DIR holds cifar-10-batches-py)
    python benchmarks/gpu_cifar10_fast.py --cpu           # CPU fallback: a few steps, checks the script works

Runs the job through `submit.py` (profile local, 1 task, 1 GPU) as a user would: eager, then with
torch.compile. By default the data is CIFAR-10-shaped (50,000 + 10,000 synthetic images: class
templates plus noise, so accuracies are not CIFAR-10's; pass --data for real images). While each run
trains, `nvidia-smi` samples utilisation and memory every 250 ms. Whole script: about 3-4 minutes on
an H200 (each run pays torch import and CUDA start-up; the compiled one ~1 minute of compilation),
so it fits a 15-minute device budget twice.

Reading the numbers: utilisation near 100 % during epochs means the GPU, not Python, sets the pace
(uint8 data on the GPU, batch augmentation there, no host sync per step); low utilisation with a
small batch means launch overhead dominates: raise --batch or use --compile (fewer, fused kernels).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


class GpuSampler:
    """`nvidia-smi` in the background: (time, utilisation %, memory MiB) every 250 ms."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.proc: subprocess.Popen[str] | None = None
        self.thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                 "-lms", "250", "-i", "0"], stdout=subprocess.PIPE, text=True)
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                util, mem = (float(v) for v in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.time(), util, mem))

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def between(self, start: float, end: float) -> list[tuple[float, float, float]]:
        return [s for s in self.samples if start <= s[0] <= end]


def run_variant(label: str, sets: list[str], profile: list[str], sampler: GpuSampler | None) -> list[object]:
    result, wall, started = common.submit(["--job", "cifar10-fast", *profile, *sets])
    epochs = common.metrics(result["run_dir"])
    # The training window: from the end of epoch 1 (compilation and cuDNN autotuning are over) to the end.
    first_end = epochs[0]["time"]
    window = sampler.between(first_end, epochs[-1]["time"]) if sampler else []
    util = statistics.mean(s[1] for s in window) if window else float("nan")
    mem = max((s[2] for s in window), default=float("nan"))
    steady = [e["images_per_second"] for e in epochs[1:]] or [epochs[0]["images_per_second"]]
    reached = {t: next((e["time"] - started for e in epochs if e.get("test_accuracy", 0) >= t), None)
               for t in (0.90, 0.94)}
    return [label, result["images_per_second"], statistics.median(steady), epochs[0]["epoch_time_s"],
            reached[0.90] if reached[0.90] is not None else "-", reached[0.94] if reached[0.94] is not None else "-",
            result["test_accuracy"], wall, util, mem]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="CPU fallback: tiny data, a few steps, no GPU needed")
    parser.add_argument("--data", help="folder holding cifar-10-batches-py (real CIFAR-10); default: synthetic")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=0, help="batch per rank (default: the job's)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile run")
    args = parser.parse_args()
    print(common.load_note())
    sets = ["--set", f"job.epochs={args.epochs}", "--set", "job.eval_every_epochs=1"]
    if args.batch:
        sets += ["--set", f"job.batch_size_per_rank={args.batch}"]
    if args.data:
        sets += ["--set", f"job.data_dir={args.data}", "--set", "job.download=false",
                 "--set", "job.verify_checksums=false"]
    if args.cpu:
        # Enough to prove the path works here: 2 steps on 1 CPU rank.
        size = ["--set", "job.dataset=synthetic-cifar10", "--set", "job.synthetic_train_size=64",
                "--set", "job.synthetic_test_size=64", "--set", "job.batch_size_per_rank=32", "--set", "job.epochs=1"]
        profile = ["--profile", "local", "--set", "profile.tasks_per_node=1", "--set",
                   f"profile.cpus_per_task={min(2, os.cpu_count() or 1)}"]
        row = run_variant("cpu fallback (2 steps)", [*sets, *size], profile, None)
        rows = [row]
    else:
        if not (os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi")):
            print("No NVIDIA GPU here: run with --cpu for the CPU fallback.")
            sys.exit(1)
        if not args.data:
            sets += ["--set", "job.dataset=synthetic-cifar10", "--set", "job.synthetic_train_size=50000",
                     "--set", "job.synthetic_test_size=10000"]
        cpus = max(1, min(8, os.cpu_count() or 1))
        profile = ["--profile", "local", "--set", "profile.tasks_per_node=1", "--set", "profile.gpus_per_node=1",
                   "--set", f"profile.cpus_per_task={cpus}"]
        rows = []
        with GpuSampler() as sampler:
            rows.append(run_variant("eager, bf16, channels_last", sets, profile, sampler))
            if not args.no_compile:
                rows.append(run_variant("torch.compile, bf16, channels_last", [*sets, "--set", "job.compile=true"],
                                        profile, sampler))
    what = "real CIFAR-10" if args.data else "CIFAR-10-shaped synthetic data"
    print(f"\ncifar10-fast (resnet-small, ~2M parameters), 1 rank, {what}:\n")
    print(common.table(["variant", "images/s (all epochs)", "images/s (epochs 2+)", "epoch 1 s", "s to 90 %",
                        "s to 94 %", "final accuracy", "submit.py wall s", "GPU util % (epochs 2+)",
                        "GPU memory MiB"], rows))
    print("\n's to N %' counts from the start of submit.py (Python, torch import, CUDA start-up, data load included).")


if __name__ == "__main__":
    main()
