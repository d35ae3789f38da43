"""Shared helpers for the benchmarks: data made once in a cache folder outside the repository,
running `submit.py` as a user would, and printing tables side by side.

Benchmarks are measurements, not tests: they print what they measured and never assert.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trainer.recipes.cifar_files import CLASSES, write_cifar10  # noqa: E402 - the same writer the tests use

# Everything a benchmark makes (converted images, synthetic data, run folders) lives here, never in
# the repository: arrays made from the CIFAR-10 JPEGs must not be committed.
CACHE = Path(os.environ.get("DDP_BENCH_CACHE", "~/.cache/ddp-bench")).expanduser()
JPEG_TARBALL = Path(os.environ.get("CIFAR10_JPEG_TARBALL", ROOT.parent / "shared" / "data" / "cifar10-jpeg.tar.gz"))
SUBMIT = str(ROOT / "submit.py")


def positive(text: str) -> int:
    """argparse's type for a count (runs, points, files, repetitions): a whole number, at least 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def load_note() -> str:
    """The 1-minute load average and a warning: other work on this 2-core machine skews timings."""
    load = os.getloadavg()[0]
    note = f"load average (1 min) {load:.2f} on {os.cpu_count()} CPU(s)"
    return note + ("  ** busy machine: timings are pessimistic **" if load > 0.7 else "")


def throughput_arguments(doc: str | None, per: str) -> argparse.Namespace:
    """A throughput benchmark's command line: `--epochs` per run (1) and `--repeat` runs per `per` (3; the
    fastest is shown)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help=f"runs per {per}; the fastest is shown")
    return parser.parse_args()


def synthetic_cifar10(n_train: int = 50_000, n_test: int = 10_000, seed: int = 0) -> Path:
    """CIFAR-10-shaped images (each class its own template plus noise, learnable), written once in
    torchvision's `cifar-10-batches-py` format so that the seed program and the trainer read the
    same files through torchvision. Returns the data root (the folder that holds the batches)."""
    root = CACHE / f"synthetic-{n_train}-{n_test}-{seed}"
    if (root / "cifar-10-batches-py" / "test_batch").is_file():
        return root
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, (10, 32, 32, 3))

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 10, n)
        x = (templates[y] + rng.integers(0, 256, (n, 32, 32, 3))) // 2
        return x.astype(np.uint8), y

    tmp = root.with_name(root.name + ".tmp")
    write_cifar10(tmp, *make(n_train), *make(n_test))
    os.replace(tmp, root)
    return root


def real_cifar10() -> Path | None:
    """Real CIFAR-10 (lossy JPEGs from the shared tarball), decoded ONCE into torchvision's format
    under the cache folder. None, with a message on stderr, when the tarball is missing."""
    root = CACHE / "cifar10-jpeg"
    if (root / "cifar-10-batches-py" / "test_batch").is_file():
        return root
    if not JPEG_TARBALL.is_file():
        print(f"NOTE: {JPEG_TARBALL} is missing, so the real-CIFAR-10 figures cannot be measured "
              f"(set CIFAR10_JPEG_TARBALL to its path)", file=sys.stderr)
        return None
    from PIL import Image

    start = time.perf_counter()
    images: dict[str, list[tuple[str, np.ndarray, int]]] = {"train": [], "test": []}
    with tarfile.open(JPEG_TARBALL) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 3 or parts[1] not in CLASSES:
                continue
            raw = tar.extractfile(member).read()  # type: ignore[union-attr]
            pixels = np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"), dtype=np.uint8)
            images[parts[0]].append((member.name, pixels, CLASSES.index(parts[1])))
    arrays = []
    for split in ("train", "test"):
        items = sorted(images[split], key=lambda item: item[0])
        # CIFAR-10's own files are in random order; keep that property (fixed seed) so that nothing
        # that reads them in order (the test-set shards) sees one class at a time.
        order = np.random.default_rng(0).permutation(len(items))
        arrays += [np.stack([items[i][1] for i in order]), np.array([items[i][2] for i in order])]
    tmp = root.with_name(root.name + ".tmp")
    write_cifar10(tmp, *arrays)
    os.replace(tmp, root)
    print(f"converted {JPEG_TARBALL.name} into {root} in {time.perf_counter() - start:.1f} s "
          f"({len(arrays[1])} train, {len(arrays[3])} test images)", file=sys.stderr)
    return root


def submit(args: list[str], timeout: float = 1800) -> tuple[dict[str, Any], float, float]:
    """Run `python submit.py ARGS --json` from the repository root; returns (last JSON line, wall
    seconds, the wall-clock time it started). Run folders go to the cache, not to the repo's runs/; each is a new
    run (`--rerun`): a benchmark repeats identical runs on purpose, which would otherwise be answered at once."""
    cmd = [sys.executable, SUBMIT, *args, "--set", f"profile.runs_dir={CACHE / 'runs'}", "--json",
           *([] if "--resume" in args else ["--rerun"])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]), wall, started


def metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table (pastes straight into benchmarks/README.md)."""
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.0f}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
