"""Running the real command line in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUBMIT = str(ROOT / "submit.py")


def run_submit(args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None,
               stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python submit.py ARGS` with `cwd` as the working directory (its runs/ is where runs go)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, SUBMIT, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env, input=stdin if stdin is not None else "")


def last_json(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, "no output"
    return json.loads(lines[-1])
