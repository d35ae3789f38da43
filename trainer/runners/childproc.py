"""A `script:` child's ties to its task (trainer.runners.scripts): it dies with the task, and its
failure is told in one line.

- The child cannot outlive its task: on Linux it asks the kernel for SIGKILL when its parent dies
  (prctl PR_SET_PDEATHSIG), so a task killed by the local fail-fast or by srun takes its script
  with it; the task also kills the child on any exit of its own (`end`).
- Its failure: the message torch's `@record` wrote to TORCHELASTIC_ERROR_FILE, else the last
  exception line of its standard error (kept while it passes through to the task's).
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
TAIL_LINES = 50


def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    except OSError:
        return None


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGKILL the child when this process dies (None off Linux).
    Loaded here, before the fork: the child only makes the call."""
    libc, parent = _libc(), os.getpid()
    if libc is None or not hasattr(libc, "prctl"):
        return None

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the task died before the call: nobody would send the signal
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def end(child: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """Make sure `child` has ended: SIGTERM, then SIGKILL after `grace_s`."""
    if child.poll() is not None:
        return
    try:
        child.terminate()
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    except OSError:
        pass


class StderrTail:
    """Pass the child's standard error through to this process's, remembering its last lines."""

    def __init__(self, stream: Any, lines: int = TAIL_LINES) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=lines)
        self.thread = threading.Thread(target=self.relay, args=(stream,), daemon=True)
        self.thread.start()

    def relay(self, stream: Any) -> None:
        for line in stream:
            sys.stderr.write(line)
            sys.stderr.flush()
            self.lines.append(line.rstrip("\n"))

    def join(self, timeout: float = 10.0) -> None:
        self.thread.join(timeout=timeout)

    def last_exception(self) -> str:
        """The exception line of the last Python traceback seen ("ValueError: bad lr"), or ""."""
        lines = list(self.lines)
        starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
        if not starts:
            return ""
        for line in lines[starts[-1] + 1:]:
            if line and not line[0].isspace():
                return line.strip()
        return ""


def recorded_error(path: str) -> str:
    """The message torch's `@record` wrote to the error file at `path` ("" when none)."""
    try:
        with open(path) as fp:
            data = json.load(fp)
    except (OSError, ValueError):
        return ""
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    return str(message).strip() if message else ""
