"""Benchmark: how long the training loop stands still per checkpoint, synchronous against asynchronous.

    python benchmarks/checkpoint_stall.py [--gb 1.0] [--checkpoints 3] [--step-s 6] [--sharded]

Two CPU ranks (gloo, as torchrun would start them) hold the same state of `--gb` GB (float32 tensors) and take
`--checkpoints` checkpoints through the public API (`trainer.api.init`, `ctx.checkpoint`), `--step-s` seconds of
"training" apart that change every tensor in place right after each checkpoint (so a checkpoint that did not copy
its state would hold later values). Once with `async_checkpoints=False`, once with True, in one run. Columns: the
stall per checkpoint on rank 0 (the `ctx.checkpoint` call, the ranks' barrier included: what the loop waits for),
median and worst, and their ratio. After both, the two runs' checkpoint files are compared byte for byte (their
payloads: the same state at the same step), and the asynchronous run's newest checkpoint is resumed into a fresh
state and compared bitwise with the synchronous run's. Goal: asynchronous at most 1/5 of synchronous.

`--sharded`: the state is a model of 16 square Linear layers making `--gb` GB, sharded across the two ranks with
FSDP2 (`fully_shard`), so each rank holds and writes half (trainer.rank.sharded: torch.distributed.checkpoint,
every rank its own shards); the comparison is then of every shard file, and of the two runs' newest checkpoints
gathered to full weights.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def state_of_size(gb: float) -> dict[str, object]:
    """A model-like state: 64 float32 tensors making `gb` GB, the same on every rank (a fixed seed)."""
    import torch

    torch.manual_seed(0)
    each = int(gb * 2**30 / 4 / 64)
    return {f"layer{i}.weight": torch.randn(each) for i in range(64)}


def sharded_model(gb: float) -> object:
    """16 square Linear layers (no bias) making `gb` GB, the same full weights on every rank, then sharded by FSDP2."""
    import torch
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    width = int((gb * 2**30 / 4 / 16) ** 0.5)
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width, bias=False) for _ in range(16)))
    for layer in model:
        fully_shard(layer)
    return fully_shard(model)


def rank_main(rank: int, world: int, port: int, run_dir: str, is_async: bool, args: argparse.Namespace,
              out: str) -> None:
    os.environ.update({"TORCHELASTIC_RUN_ID": "bench", "RANK": str(rank), "WORLD_SIZE": str(world),
                       "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1"})
    import random

    import numpy as np
    import torch

    from trainer.api import init

    random.seed(rank)  # every generator a checkpoint holds starts alike in both runs (Python's is seeded from
    np.random.seed(rank)  # the OS at start-up otherwise)

    ctx = init(run_dir, threads=1, keep_checkpoints=args.checkpoints, async_checkpoints=is_async)
    model = sharded_model(args.gb) if args.sharded else state_of_size(args.gb)
    ctx.resume(model=model)
    tensors = list(model.parameters()) if args.sharded else list(model.values())
    stalls = []
    for step in range(1, args.checkpoints + 1):
        began = time.perf_counter()
        ctx.checkpoint(step)
        stalls.append(time.perf_counter() - began)
        with torch.no_grad():  # the next steps change every tensor in place
            for tensor in tensors:
                tensor.add_(1.0)
        time.sleep(args.step_s)
    ctx.wait_for_checkpoint()
    if rank == 0:
        Path(out).write_text(" ".join(f"{s:.6f}" for s in stalls))


def run(is_async: bool, args: argparse.Namespace, work: Path) -> tuple[list[float], Path]:
    import torch.multiprocessing as mp

    run_dir = work / ("async" if is_async else "sync")
    out = work / f"stalls-{run_dir.name}.txt"
    mp.spawn(rank_main, args=(2, free_port(), str(run_dir), is_async, args, str(out)), nprocs=2, join=True)
    return [float(x) for x in out.read_text().split()], run_dir / "checkpoints"


def payload_digest(path: Path) -> str:
    """The SHA-256 of a checkpoint's torch.save bytes (what follows its checksum line)."""
    return hashlib.sha256(path.read_bytes().partition(b"\n")[2]).hexdigest()


def compare_sharded(sync_files: list[Path], async_files: list[Path], work: Path) -> tuple[list[bool], bool]:
    """Each checkpoint's shard data files byte for byte and its DCP metadata's layout (the .metadata file itself also
    records the folder it was written in and a random save id: it differs by design); and the newest two gathered
    to full weights (torch.distributed.checkpoint's own consolidation), tensor for tensor."""
    import pickle

    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    def layout(folder: Path) -> object:
        with open(folder / "shards" / ".metadata", "rb") as fh:
            return pickle.load(fh).state_dict_metadata

    same = []
    for a, b in zip(sync_files, async_files):
        names = sorted(p.name for p in (a / "shards").glob("*.distcp"))
        same.append(a.name == b.name and names == sorted(p.name for p in (b / "shards").glob("*.distcp"))
                    and all((a / "shards" / n).read_bytes() == (b / "shards" / n).read_bytes() for n in names)
                    and layout(a) == layout(b))
    full = []
    for folder in (sync_files[-1], async_files[-1]):
        dcp_to_torch_save(folder / "shards", work / f"{folder.parent.parent.name}.pt")
        full.append(torch.load(work / f"{folder.parent.parent.name}.pt")["model"])
    return same, full[0].keys() == full[1].keys() and all(torch.equal(full[0][k], full[1][k]) for k in full[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="the state's size in GB (default 1.0)")
    parser.add_argument("--checkpoints", type=common.positive, default=3)
    parser.add_argument("--step-s", type=float, default=6.0, help="seconds of 'training' between checkpoints")
    parser.add_argument("--sharded", action="store_true", help="an FSDP2 model sharded across the ranks")
    args = parser.parse_args()
    import torch

    from trainer.rank import checkpoint, rundir

    common.CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="checkpoint-stall-", dir=common.CACHE))
    sync_stalls, sync_dir = run(False, args, work)
    async_stalls, async_dir = run(True, args, work)
    sync_files, async_files = rundir.checkpoint_files(sync_dir), rundir.checkpoint_files(async_dir)
    if args.sharded:
        same_bytes, bitwise = compare_sharded(sync_files, async_files, work)
    else:
        same_bytes = [a.name == b.name and payload_digest(a) == payload_digest(b)
                      for a, b in zip(sync_files, async_files)]
        resumed, reference = checkpoint.read(async_files[-1]), checkpoint.read(sync_files[-1])
        bitwise = all(torch.equal(resumed["objects"]["model"][k], reference["objects"]["model"][k])
                      for k in reference["objects"]["model"])
    sm, am = statistics.median(sync_stalls), statistics.median(async_stalls)
    held = "sharded by FSDP2 across" if args.sharded else "on each of"
    print(f"state {args.gb:g} GB {held} 2 CPU ranks (gloo), {args.checkpoints} checkpoints {args.step_s:g} s "
          f"apart; {common.load_note()}")
    print(common.table(["checkpoint", "median stall s", "worst stall s"],
                       [["synchronous (async_checkpoints: false)", sm, max(sync_stalls)],
                        ["asynchronous (the default)", am, max(async_stalls)]]))
    print(f"\nasync/sync: {am / sm:.3f}; goal at most 0.2: {'met' if am / sm <= 0.2 else 'NOT met'}")
    print(f"checkpoint files byte-identical in content: {sum(same_bytes)} of {len(sync_files)} "
          f"({'all' if all(same_bytes) and len(sync_files) == len(async_files) else 'NOT all'}); "
          f"the asynchronous run's newest resumed bitwise equal to the synchronous one's: {bitwise}")
    if not os.environ.get("KEEP_BENCH"):
        shutil.rmtree(work, ignore_errors=True)  # (GBs of temporary files)


if __name__ == "__main__":
    main()
