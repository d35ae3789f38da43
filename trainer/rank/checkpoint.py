"""Checkpoints written atomically into the run folder, with a checksum, keeping the last K.

A checkpoint is written to a temporary file, fsync'ed, then renamed: a kill at any moment leaves
either the old set or the new one, never a half-written file under the final name. The SHA-256 of
the payload is stored beside it so that a truncated or altered file is detected on load and the
previous checkpoint is used instead.

Most of a checkpoint is the same on every rank (model, optimizer, counters); the part that is not
(each rank's RNG states and its `per_rank` objects: trainer.api.Context.checkpoint) is gathered from
every rank to rank 0, which writes the file.

Asynchronous (the default, `Writer`): at the step boundary rank 0 takes a copy of the state (`frozen`: every
tensor copied, into pinned host memory where the state is on a GPU, shared storage kept shared, so the file holds
the bytes a synchronous save of that moment would; from a GPU, with its tensors recorded on the CPU)
and the training loop goes on while a background thread serializes, checksums and writes it. At most one write
is in flight: the next checkpoint, a stop (preemption, time limit, a requested stop) and the attempt's end wait
for it, so a requeue resumes from the newest checkpoint. A checkpoint is durable once its write has finished
(fsync'ed and renamed); a crash during a write leaves the previous good one, which the next attempt resumes.
"""

from __future__ import annotations

import copy
import os
import random
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.rank import durable, rundir, sharded
from trainer.rank.rundir import checkpoint_name


def save(folder: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write `state` as the checkpoint for global step `step`, then drop all but the newest `keep`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / checkpoint_name(step)
    durable.atomic_write(path, durable.encode(state))
    durable.prune(folder, keep, current=f".{path.name}.tmp-{os.getpid()}")
    return path


def frozen(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of `state` that the training steps after this moment do not change: what an asynchronous write
    serializes (deepcopy keeps tensors that share storage sharing it, as torch.save would record them). A state
    on a GPU is copied to pinned host memory instead (`to_host`): a second copy in the GPU's own memory is what
    a large model has no room for, and a pinned copy is the fast one. (A sharded state's DTensors keep their
    device: trainer.rank.sharded copies them with deepcopy.)"""
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in _leaves(state)):
        return to_host(state, pin=True)
    return copy.deepcopy(state)


def to_host(state: Any, pin: bool) -> Any:
    """`state` with every tensor copied to host memory (pinned with `pin`: the copies from a GPU then run without
    staging, and are waited for once at the end), tensors that shared a storage still sharing one copy of it, as
    deepcopy keeps them; everything else deep-copied."""
    memo: dict[tuple[str, int], Any] = {}

    def host(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.layout != torch.strided or tensor.is_quantized:  # (no plain storage to share)
            return tensor.detach().to("cpu", copy=True)
        storage = tensor.untyped_storage()
        key = (str(storage.device), storage.data_ptr())
        if key not in memo:
            memo[key] = torch.empty(storage.nbytes(), dtype=torch.uint8, pin_memory=pin).untyped_storage()
            memo[key].copy_(storage, non_blocking=pin)
        return torch.empty(0, dtype=tensor.dtype).set_(memo[key], tensor.storage_offset(), tensor.size(),
                                                        tensor.stride())

    def copied(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return host(value)
        if isinstance(value, dict):
            return type(value)((k, copied(v)) for k, v in value.items())
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            return type(value)(copied(v) for v in value)
        return copy.deepcopy(value)

    out = copied(state)
    if pin and torch.cuda.is_available():
        torch.cuda.synchronize()  # (the non-blocking copies from the GPU have landed)
    return out


def _leaves(value: Any) -> Any:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


class Writer:
    """A rank's checkpoint writes in the background, one at a time (the module doc): rank 0's file, or each rank's
    shards (trainer.rank.sharded)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._failed: tuple[int, BaseException] | None = None

    def start(self, folder: Path, step: int, state: dict[str, Any], keep: int) -> None:
        """Write `state` (already `frozen`) as step `step`'s checkpoint once the write in flight has finished."""
        self.run(step, lambda: save(folder, step, state, keep))

    def run(self, step: int, write: Callable[[], Any]) -> None:
        """Call `write` (step `step`'s checkpoint, of state already `frozen`) in the background, once the write in
        flight has finished."""
        self.wait()
        self._thread = threading.Thread(target=self._write, args=(step, write), name=f"checkpoint-{step}",
                                        daemon=True)
        self._thread.start()

    def _write(self, step: int, write: Callable[[], Any]) -> None:
        try:
            write()
        except BaseException as err:  # noqa: BLE001 - raised in the training thread by `wait`
            self._failed = (step, err)

    def wait(self) -> None:
        """Until the write in flight (if any) is durable; its failure is raised here, in the training thread."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._failed is not None:
            (step, err), self._failed = self._failed, None
            raise RuntimeError(f"the checkpoint of step {step} could not be written: {type(err).__name__}: {err}") \
                from err


def read(path: Path, verify: bool = True) -> dict[str, Any]:
    """Load one checkpoint, raising ValueError if it is truncated or its checksum does not match. A sharded
    checkpoint's folder gives its state.pt (trainer.rank.sharded), each shard file checked with `verify`."""
    return sharded.read(path, verify) if path.is_dir() else durable.read(path)


@dataclass
class Loaded:
    """The newest checkpoint that loaded, and the newer ones that did not."""

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
    for path in reversed(rundir.checkpoint_files(folder)):
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


def state_of(name: str, obj: Any) -> Any:
    """What a checkpoint keeps of `obj`: a plain dict as it is, anything else its state_dict()."""
    if isinstance(obj, dict):
        return dict(obj)
    state_dict = getattr(obj, "state_dict", None)
    if not callable(state_dict):
        raise TypeError(f"checkpoint: '{name}' ({type(obj).__name__}) has no state_dict(); give objects "
                        f"with state_dict()/load_state_dict() or plain dicts")
    return state_dict()


def load_into(obj: Any, state: Any) -> None:
    """Put a checkpoint's `state` back into `obj` (the inverse of `state_of`)."""
    if isinstance(obj, dict):
        obj.clear()
        obj.update(state)
    else:
        obj.load_state_dict(state)


def same_weights(a: Path, b: Path) -> bool:
    """Whether two saved state dicts hold bitwise-equal tensors: what an exact resume promises."""
    x, y = torch.load(a), torch.load(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


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
