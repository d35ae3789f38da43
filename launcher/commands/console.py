"""Console output and exit codes, shared by every command (the command line's own helper): one line per
error with every control character escaped (`escaped`, `error_line`), --json's last line (`emit`).
Rank 0's output while a local run is waited for is echoed by launcher.waiting.echo."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from launcher.request import channel

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
# How the user started us: `submit.py` in the checkout, `ddp-submit` installed.
PROGRAM = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "submit.py"


class ArgumentParser(argparse.ArgumentParser):
    """argparse exits with 2 on bad arguments already; keep its message to one line.

    Subcommands name themselves "submit.py CMD"; usage lines show the program as it was started."""

    def __init__(self, *args: Any, prog: str | None = None, **kwargs: Any) -> None:
        if prog is not None and prog.startswith("submit.py"):
            prog = PROGRAM + prog[len("submit.py"):]
        super().__init__(*args, prog=prog, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"error: {escaped(message)} (see {self.prog} --help)\n")


# Everything str.splitlines() breaks a line at, and every other control character (C0, DEL, C1:
# ESC sequences recolour, move or clear the terminal): a value quoted into an error (a key with a
# newline, a record separator in a file, an escape in a hostile file name) must neither split the one
# `error:` line into two nor reach the terminal as a command.
_ESCAPED = {c: repr(c)[1:-1] if repr(c)[1] == "\\" else f"\\x{ord(c):02x}"
            for c in [*map(chr, range(0x20)), *map(chr, range(0x7f, 0xa0)), "\u2028", "\u2029"]}


def escaped(text: str) -> str:
    """`text` with every line break and control character shown escaped (as repr() would), so it
    prints as one line and changes nothing on the terminal."""
    return "".join(_ESCAPED.get(c, c) for c in str(text))


def error_line(message: object) -> str:
    return f"error: {escaped(str(message))}"


def emit(human: str, payload: dict[str, Any], as_json: bool) -> None:
    """Print the human summary; with --json the last line is the JSON object (and with --events, the
    same object to the program that started this one: launcher.request.channel)."""
    channel.tell("result", payload=payload)
    if human:
        print(human, flush=True)
    if as_json:
        print(json.dumps(payload, default=str), flush=True)


def relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def overrides_text(overrides: dict[str, Any]) -> str:
    """A sweep task's overrides as one would write them: `lr=0.1 optimizer=sgd`."""
    return " ".join(f"{k}={v}" for k, v in overrides.items())
