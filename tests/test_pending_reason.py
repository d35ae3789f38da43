"""`status` says why a task waits (SLURM's pending reason) and, where SLURM gives one, when it is
expected to start: here a job asked to begin in an hour (`sbatch --begin`), on the dev cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, wait_until

pytestmark = pytest.mark.slurm


def submit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, str(ROOT / "submit.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_status_shows_the_pending_reason_and_expected_start(slurm_cluster: Path, tmp_path: Path) -> None:
    proc = submit("--profile", "dev-cluster", "--set", "profile.sbatch_extra.begin=now+3600", "--set",
                  f"profile.runs_dir={tmp_path / 'runs'}", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"]
    try:
        def pending() -> dict[str, object] | None:
            out = submit("status", run_dir, "--json", "--no-collect", cwd=tmp_path).stdout
            row = json.loads(out.strip().splitlines()[-1])
            return row if row["state"] == "pending" and row["reason"] == "BeginTime" else None

        row = wait_until(pending, 60, "the pending reason")
        assert row["expected_start"] is not None
        text = submit("status", run_dir, "--no-collect", cwd=tmp_path).stdout
        assert "waiting: BeginTime, expected to start" in text, text
    finally:
        submit("cancel", run_dir, cwd=tmp_path)
