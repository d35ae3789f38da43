"""Running the real command line in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUBMIT = str(ROOT / "submit.py")


def run_submit(args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None,
               stdin: str | None = None, unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`python submit.py ARGS` with `cwd` as the working directory (its runs/ is where runs go), this
    process's environment plus `env`, less the variables named in `unset`."""
    full_env = {k: v for k, v in {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}.items() if k not in unset}
    return subprocess.run([sys.executable, SUBMIT, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env, input=stdin if stdin is not None else "")


def last_json(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, "no output"
    return json.loads(lines[-1])


def wait_until(condition: Callable[[], Any], timeout: float, what: str, poll: float = 0.5) -> Any:
    """Poll `condition` until it returns something truthy (returned), or fail the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def rank_results(run_dir: Path, job_id: str = "*") -> list[Any]:
    """What each rank's task function returned, from submitit's per-task result pickles (rank order)."""
    paths = (run_dir / "logs").glob(f"{job_id}/{job_id}_*_result.pkl")
    results = []
    for path in sorted(paths, key=lambda p: (p.parent.name, int(p.name.split("_")[-2]))):
        with open(path, "rb") as fh:
            status, value = pickle.load(fh)
        assert status == "success", value
        results.append(value)
    return results


def rank_pid(run_dir: Path, rank: int) -> int | None:
    """The pid of `rank`'s current attempt (a task's pid), from the banner it writes at the top of its log."""
    for log in (run_dir / "logs").glob(f"*/*_{rank}_log.out"):
        banners = [line for line in log.read_text().splitlines() if "attempt started" in line]
        if banners:
            return int(banners[-1].split(" pid ")[1].split()[0])
    return None
