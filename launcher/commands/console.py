"""Console output and exit codes, shared by every command."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class ArgumentParser(argparse.ArgumentParser):
    """argparse exits with 2 on bad arguments already; keep its message to one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see {self.prog} --help)\n")


def emit(human: str, payload: dict[str, Any], as_json: bool) -> None:
    """Print the human summary; with --json the last line is the JSON object."""
    if human:
        print(human, flush=True)
    if as_json:
        print(json.dumps(payload, default=str), flush=True)


def relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
