"""The one reader of the run folder's JSON-lines files (`events.jsonl`, `metrics.jsonl`): whole, or
incrementally from where the last read ended (`Tail`, for `watch`).

Rank 0 appends whole lines while others read, and a file may have been edited or written by another
tool: a line still being written (no newline yet) waits for the next read; a torn, foreign or hostile
line (not UTF-8, not JSON, nested without end, not an object) is skipped, never fatal. No torch here:
the submitter reads these files too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def objects(lines: list[bytes]) -> list[dict[str, Any]]:
    """The JSON objects among `lines`, in order; every other line skipped (a byte that is not UTF-8
    is read as U+FFFD: the rest of its line still counts)."""
    out = []
    for line in lines:
        try:
            row = json.loads(line.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError):
            continue
        if isinstance(row, dict):
            out.append(row)
    return out


def read(path: Path | str) -> list[dict[str, Any]]:
    """Every object line of `path` ([] where there is no such file)."""
    try:  # (no exists() first: `status` reads the files of every task of a sweep, 10,000 of them)
        with open(path, "rb") as fh:
            data = fh.read()
    except (FileNotFoundError, NotADirectoryError):  # what exists() said no to
        return []
    return objects(data.splitlines())


class Tail:
    """A JSON-lines file read incrementally: each read starts at the byte where the last one ended,
    and a line still being written (no newline yet) waits for the next read."""

    def __init__(self, path: Path | str) -> None:
        self.path, self.offset, self.bytes_read = os.fspath(path), 0, 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:  # not written yet
            return []
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        self.bytes_read += len(chunk)
        return objects(chunk[:end].splitlines())
