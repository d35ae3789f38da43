"""Checkpoints written atomically into the run folder, with a checksum, keeping the last K.

A checkpoint is written to a temporary file, fsync'ed, then renamed: a kill at any moment leaves
either the old set or the new one, never a half-written file under the final name. The SHA-256 of
the payload is stored beside it so that a truncated or altered file is detected on load and the
previous checkpoint is used instead.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import sys
from pathlib import Path
from typing import Any

import torch

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


def load_latest(folder: Path) -> tuple[dict[str, Any], Path] | None:
    """The newest checkpoint that loads; bad ones are reported on stderr and skipped."""
    for path in reversed(list_checkpoints(folder)):
        try:
            return read(path), path
        except Exception as err:  # noqa: BLE001 - any unreadable checkpoint falls back to the previous one
            print(f"[checkpoint] ignoring {path}: {err}; trying the previous one", file=sys.stderr, flush=True)
    return None
