"""The one rule for values that reach a shell line, a command's argument vector or a path.

Each function answers None when `value` may go there, else what would be valid (the `expected` of
trainer.config.schema.require, so the error names the file and key the value came from). Jobs
(trainer.config.job), profiles (launcher.config.profile) and file names (trainer.config.lookup) use
them where the value enters, before anything is written or queued:

- one line, no control characters: a newline in a path or a name written into the batch script
  ends its line and starts another (a working `#SBATCH` line, or a shell command); NUL cannot be
  passed in an argument vector or an environment at all; ESC sequences act on the terminal.
- no leading '-' where a program reads options (`python`, `container`, a script path): srun,
  apptainer and python would take it as one of theirs.
- container binds `SRC[:DST[:ro|rw]]` with an absolute, existing SRC: apptainer reads a 4th field as
  another option set, and an empty SRC (`:/x`) binds the current folder.
- paths that fit the file system (NAME_MAX per component, PATH_MAX in all): beyond them every open
  fails with an OSError, here or on a node after queueing.
"""

from __future__ import annotations

import os
import re
from typing import Any

# C0 controls, DEL, C1 controls and the Unicode line and paragraph separators (str.splitlines breaks there).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Lone surrogates: bytes that were not UTF-8 (an argv or a file name decoded with surrogateescape); no
# file, batch script or JSON record can hold them as text.
_UNDECODED = re.compile("[\ud800-\udfff]")
NAME_MAX, PATH_MAX = 255, 4096
BIND_MODES = ("ro", "rw")


def text(value: Any) -> str | None:
    """One line of text without control characters."""
    if not isinstance(value, str):
        return None
    if (undecoded := _UNDECODED.search(value)) is not None:
        return f"UTF-8 text (found {undecoded.group()!r}: a byte that is not UTF-8)"
    found = _CONTROL.search(value)
    return None if found is None else f"one line of text without control characters (found {found.group()!r})"


def argument(value: Any) -> str | None:
    """A value a program reads as its first operand: `text`, and not starting with '-'."""
    if isinstance(value, str) and value.startswith("-"):
        return "a value not starting with '-' (the program it is given to would read it as an option)"
    return text(value)


def path(value: Any) -> str | None:
    """A path: `text`, each component at most NAME_MAX bytes and the whole at most PATH_MAX."""
    problem = text(value)
    if problem or not isinstance(value, str):
        return problem
    if value.startswith("~") and os.path.expanduser(value) == value:  # `~name/...` of no user here
        return f"a path whose '~{value[1:].partition('/')[0]}' names a user of this machine (or no '~')"
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in value.split("/")), default=0)
    if longest > NAME_MAX:
        return f"a path whose every name is at most {NAME_MAX} bytes (one here is {longest}: the file system's limit)"
    if len(value.encode("utf-8", "surrogateescape")) > PATH_MAX:
        return f"a path of at most {PATH_MAX} bytes (this one is too deep for the file system)"
    return None


def file_name(value: Any) -> str | None:
    """A name or path given for a file or folder to find (`--profile`, `--job`, `extends:`, RUN,
    `--runs-dir`): a byte that is not UTF-8 still names a file (the OS takes bytes), so only the rest of
    `path` applies; each such byte is one byte long, as '_' is."""
    return path(_UNDECODED.sub("_", value) if isinstance(value, str) else value)


def bind(value: Any) -> str | None:
    """A container bind `SRC[:DST[:ro|rw]]`: SRC an absolute path that exists here, DST absolute."""
    problem = path(value)
    if problem or not isinstance(value, str):
        return problem
    fields = value.split(":")
    form = "SRC[:DST[:ro|rw]] (SRC an existing absolute path, DST absolute, no commas)"
    if "," in value or len(fields) > 3 or "" in fields:
        return form
    if len(fields) == 3 and fields[2] not in BIND_MODES:
        return f"{form}; the option is 'ro' or 'rw', not {fields[2]!r}"
    if not all(f.startswith("/") for f in fields[:2]):
        return form
    if not os.path.exists(fields[0]):
        return f"{form}; {fields[0]!r} does not exist here (binds are checked where you submit)"
    return None


def shown_name(value: str) -> str:
    """A file or folder name for an error line: whole up to 60 characters, else its start and its
    length in bytes (the unit of the file system's limits, which such an error is often about)."""
    return repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value.encode(errors='surrogateescape'))} bytes)"
