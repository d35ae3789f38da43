"""Bytes made durable: what every checkpoint file is written and read through (trainer.rank.checkpoint's whole
files, trainer.rank.sharded's state.pt).

A file is written to a temporary name, fsync'ed, then renamed (and its folder fsync'ed): a kill at any moment
leaves the old file or the new one, never half of one under the final name. A checkpoint file starts with the
SHA-256 of its payload, so a truncated or altered one is detected when read.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from trainer.rank.rundir import checkpoint_files


def fsync_dir(folder: Path) -> None:
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
    fsync_dir(path.parent)


def encode(state: dict[str, Any]) -> bytes:
    """A checkpoint file's bytes: 64 hex digits of SHA-256, a newline, then torch.save's bytes."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    return hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def read(path: Path) -> dict[str, Any]:
    """A checkpoint file's state, raising ValueError if it is truncated or its checksum does not match."""
    raw = path.read_bytes()
    digest, sep, payload = raw.partition(b"\n")
    if not sep or len(digest) != 64:
        raise ValueError("no checksum header (truncated?)")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise ValueError("checksum mismatch (truncated or corrupted)")
    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, read a megabyte at a time (a shard may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prune(folder: Path, keep: int, current: str) -> None:
    """Drop all but the newest `keep` checkpoints (files, or sharded ones' folders: trainer.rank.sharded), and
    the temporary files and folders of writes that were killed: one checkpoint is written at a time, so any
    temporary other than `current` (the one just renamed) is such a leftover."""
    for old in [*checkpoint_files(folder)[:-keep], *(p for p in folder.glob(".ckpt-*.tmp-*") if p.name != current)]:
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
