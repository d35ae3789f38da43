"""Checkpoints of state sharded across ranks (FSDP2's `fully_shard`, DTensor parameters), through the same
`ctx.checkpoint`/`ctx.resume` calls as any other state (trainer.rank.context decides which path a call takes).

Gathering such a model to rank 0 would need the whole of it in one process, which is why it was sharded. So each
rank writes its own shards with `torch.distributed.checkpoint` (DCP), and rank 0 writes the rest as it does for
any checkpoint (trainer.rank.checkpoint): the step, the world size, every rank's RNG states and `per_rank` objects
and the objects that are not sharded, in `state.pt`. A checkpoint is then a folder:

    checkpoints/ckpt-000000040/state.pt        the checksummed torch.save of the above, plus the SHA-256 of
                                               every shard file (its manifest) and which objects are sharded
    checkpoints/ckpt-000000040/shards/         DCP's files (.metadata, __R_N.distcp)

The promises are the single-file checkpoint's. Atomic: all ranks write into `.ckpt-<step>.tmp-<attempt>/`; once
DCP's save has returned on rank 0 (it returns after every rank's files are written and fsync'ed, and its metadata
last), rank 0 checksums the files, writes state.pt and renames the folder; a folder under the final name is
therefore whole. Checksummed: rank 0 checks the manifest before a resume and falls back to the previous
checkpoint if a file is missing or altered. Keep-K: older folders are removed. Asynchronous: each rank takes a
copy of its shards at the step boundary and writes them from a thread, on a process group of its own, so the
training loop's collectives and the write's never meet.

Optimizers are saved by parameter name (DCP's `get_optimizer_state_dict`), not by position, so a resume on
another world size reshards both model and optimizer; it is not bitwise (each rank's data and RNG differ, and
the per-rank objects of the old ranks have no owner), and `resume` says so.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from trainer.rank import durable

STATE_FILE = "state.pt"
SHARDS_DIR = "shards"


def _params(obj: Any) -> list[Any]:
    """The parameters a module or an optimizer holds ([] for anything else)."""
    if isinstance(obj, torch.nn.Module):
        return list(obj.parameters())
    if isinstance(obj, torch.optim.Optimizer):
        return [p for group in obj.param_groups for p in group["params"]]
    return []


def names(objects: dict[str, Any]) -> list[str]:
    """The objects whose state is sharded across ranks (DTensor parameters: FSDP2), which this module checkpoints.
    (A DTensor exists only once torch.distributed.tensor is imported: nothing of DCP is imported before a sharded
    checkpoint needs it, for the start-up of every other run.)"""
    tensors = sys.modules.get("torch.distributed.tensor")
    if tensors is None:
        return []
    return [name for name, obj in objects.items() if any(isinstance(p, tensors.DTensor) for p in _params(obj))]


def _owner(name: str, optimizer: torch.optim.Optimizer, objects: dict[str, Any]) -> nn.Module:
    """The module among `objects` whose parameters the optimizer steps (DCP names its state by them)."""
    mine = {id(p) for p in _params(optimizer)}
    for obj in objects.values():
        if isinstance(obj, nn.Module) and mine <= {id(p) for p in obj.parameters()}:
            return obj
    raise TypeError(f"checkpoint: the sharded optimizer '{name}' needs its model among the objects checkpointed "
                    f"(ctx.resume(model=..., {name}=...)): its state is saved by the model's parameter names")


def state_dicts(objects: dict[str, Any], sharded: list[str]) -> dict[str, Any]:
    """Each sharded object's state as DCP saves and loads it (this rank's shards, named by parameter)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    out: dict[str, Any] = {}
    for name in sharded:
        obj = objects[name]
        if isinstance(obj, nn.Module):
            out[name] = get_model_state_dict(obj)
        else:
            out[name] = get_optimizer_state_dict(_owner(name, obj, objects), obj)
    return out


def load_into(objects: dict[str, Any], states: dict[str, Any]) -> None:
    """Put loaded shards back (the inverse of `state_dicts`)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    for name, state in states.items():
        obj = objects[name]
        if isinstance(obj, nn.Module):
            set_model_state_dict(obj, state)
        else:
            set_optimizer_state_dict(_owner(name, obj, objects), obj, state)


def temporary(folder: Path, step: int, attempt: int) -> Path:
    """Where this attempt's ranks write step `step`'s shards before rank 0 renames the folder (the attempt in the
    name: a folder an earlier attempt left half-written is never written into again)."""
    return folder / f".ckpt-{step:09d}.tmp-{attempt}"


def write_shards(where: Path, states: dict[str, Any], group: Any = None) -> None:
    """Every rank: its shards of `states` into `where`/shards (DCP's save: a collective over `group`)."""
    import torch.distributed.checkpoint as dcp

    writer = dcp.FileSystemWriter(str(where / SHARDS_DIR), sync_files=True, overwrite=True)
    dcp.save(states, storage_writer=writer, process_group=group)


def finish(where: Path, final: Path, meta: dict[str, Any], keep: int) -> Path:
    """Rank 0, after `write_shards` returned: the manifest and state.pt, then the rename that makes it a checkpoint."""
    shards = where / SHARDS_DIR
    meta = {**meta, "files": {p.name: durable.sha256_of(p) for p in sorted(shards.iterdir()) if p.is_file()}}
    durable.atomic_write(where / STATE_FILE, durable.encode(meta))
    if final.exists():  # the same step written again (an explicit ctx.checkpoint at a step already saved)
        shutil.rmtree(final)
    os.replace(where, final)
    durable.fsync_dir(final.parent)
    durable.prune(final.parent, keep, current=where.name)
    return final


def read(folder: Path, verify: bool = True) -> dict[str, Any]:
    """A sharded checkpoint's state.pt; with `verify`, ValueError unless every shard file matches its manifest."""
    meta = durable.read(folder / STATE_FILE) if (folder / STATE_FILE).exists() else None
    if meta is None:
        raise ValueError(f"no {STATE_FILE} (not a whole checkpoint)")
    if verify:
        for name, digest in meta["files"].items():
            path = folder / SHARDS_DIR / name
            if not path.is_file():
                raise ValueError(f"shard file {name} is missing")
            if durable.sha256_of(path) != digest:
                raise ValueError(f"shard file {name}: checksum mismatch (truncated or corrupted)")
    return meta


def read_shards(folder: Path, states: dict[str, Any]) -> None:
    """Every rank: fill `states` (this rank's `state_dicts`, any world size) from the checkpoint's shards."""
    import torch.distributed.checkpoint as dcp

    dcp.load(states, storage_reader=dcp.FileSystemReader(str(folder / SHARDS_DIR)))


def background_group() -> Any:
    """A process group for writes from a thread (gloo: DCP's save exchanges its plans as objects on the CPU);
    made once, by every rank together, the first time a sharded checkpoint is written in the background."""
    return dist.new_group(backend="gloo") if dist.is_initialized() else None
