"""Checkpoints written atomically into the run folder, with a checksum, keeping the last K.

A checkpoint is written to a temporary file, fsync'ed, then renamed: a kill at any moment leaves
either the old set or the new one, never a half-written file under the final name. The SHA-256 of
the payload is stored beside it so that a truncated or altered file is detected on load and the
previous checkpoint is used instead.

Most of a checkpoint is the same on every rank (model, optimizer, counters); `RankState` is the part
that is not, gathered from every rank to rank 0, which writes the file.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.collectives import Ranks

PATTERN = re.compile(r"^ckpt-(\d{9})\.pt$")


def _path(folder: Path, step: int) -> Path:
    return folder / f"ckpt-{step:09d}.pt"


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, payload: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def save(folder: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write `state` as the checkpoint for global step `step`, then drop all but the newest `keep`."""
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode()
    # Layout: 64 hex digits of SHA-256, a newline, then torch.save's bytes.
    path = _path(folder, step)
    atomic_write(path, digest + b"\n" + payload)
    for old in list_checkpoints(folder)[:-keep]:
        old.unlink(missing_ok=True)
    # A writer killed between write and rename leaves its temporary file behind; only rank 0 writes,
    # one checkpoint at a time, so any other temporary file is such a leftover.
    for stale in folder.glob(".ckpt-*.tmp-*"):
        if not stale.name.endswith(f".tmp-{os.getpid()}"):
            stale.unlink(missing_ok=True)
    return path


def list_checkpoints(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if PATTERN.match(p.name))


def read(path: Path) -> dict[str, Any]:
    """Load one checkpoint, raising ValueError if it is truncated or its checksum does not match."""
    raw = path.read_bytes()
    digest, sep, payload = raw.partition(b"\n")
    if not sep or len(digest) != 64:
        raise ValueError("no checksum header (truncated?)")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise ValueError("checksum mismatch (truncated or corrupted)")
    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)


@dataclass
class Loaded:
    state: dict[str, Any]
    path: Path
    # Newer checkpoints that failed to load, with the reason (reported, then skipped).
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def load_newest_good(folder: Path) -> Loaded | None:
    """The newest checkpoint that loads; each bad one is reported on stderr and the previous tried.

    None when there is no checkpoint, or none loads (then training starts from scratch, and the
    report says why).
    """
    skipped: list[tuple[Path, str]] = []
    for path in reversed(list_checkpoints(folder)):
        try:
            state = read(path)
        except Exception as err:  # noqa: BLE001 - any unreadable checkpoint falls back to the previous one
            reason = f"{type(err).__name__}: {err}" if not isinstance(err, ValueError) else str(err)
            skipped.append((path, reason))
            print(f"[checkpoint] cannot load {path}: {reason}; trying the previous one", file=sys.stderr, flush=True)
            continue
        return Loaded(state, path, skipped)
    if skipped:
        print(f"[checkpoint] no checkpoint in {folder} loads; starting from scratch", file=sys.stderr, flush=True)
    return None


class RankState:
    """What differs between ranks: the random number generators and the running epoch's loss.

    The loss sum and step count of the epoch under way are kept so that an epoch resumed in the
    middle reports the same train_loss as an uninterrupted one.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.new_epoch()

    def new_epoch(self) -> None:
        self.loss_sum = torch.zeros((), device=self.device)
        self.steps = 0

    def add(self, loss: torch.Tensor) -> None:
        self.loss_sum += loss
        self.steps += 1

    def mean_loss(self) -> torch.Tensor:
        return self.loss_sum / max(self.steps, 1)

    def capture(self) -> dict[str, Any]:
        """This rank's entry of the checkpoint's "ranks" list (the step count is the same on every
        rank: the checkpoint holds it once, as "epoch_steps")."""
        return {"rng": capture_rng(self.device), "epoch_loss_sum": self.loss_sum.detach().cpu()}

    def restore(self, mine: dict[str, Any], steps: int) -> None:
        restore_rng(mine["rng"], self.device)
        self.loss_sum = mine["epoch_loss_sum"].to(self.device)
        self.steps = steps

    def gather(self, ranks: Ranks) -> list[dict[str, Any]]:
        """Every rank's `capture()` in rank order on rank 0 (an empty list on the others)."""
        return ranks.gather(self.capture())


def capture_rng(device: torch.device) -> dict[str, Any]:
    """This rank's random number generators (all that can affect training)."""
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "python": random.getstate(), "numpy": np.random.get_state()}


def restore_rng(rng: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and rng.get("cuda") is not None:
        torch.cuda.set_rng_state(rng["cuda"], device)
    if rng.get("python") is not None:
        random.setstate(rng["python"])
    if rng.get("numpy") is not None:
        np.random.set_state(rng["numpy"])
