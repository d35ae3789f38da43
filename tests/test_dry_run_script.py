"""`--dry-run` prints the exact sbatch script; setup lines run as their author wrote them, and every
other value from profiles and --set (job name, env values) never executes.

The recorded script (tests/data/dev-cluster-dry-run.sbatch) pins what we hand to sbatch: resource
lines, --requeue, the signal, exports before setup commands, srun's per-task logs and
--kill-on-bad-exit. Only machine-specific paths are normalised. To re-record after an intended
change: UPDATE_RECORDED=1 python -m pytest tests/test_dry_run_script.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "tests" / "data" / "dev-cluster-dry-run.sbatch"
MARKERS = [f"m{i}" for i in range(1, 5)]
# Setup lines are shell written by the profile's author and run as written: the conda hook's
# `eval "$(...)"` pattern, a `;` list and a variable the exports set before them.
SETUP = ["printenv NOTE", 'eval "$(echo export FROM_HOOK=hooked)"', 'echo "setup ran; $FROM_HOOK with $OMP_NUM_THREADS"']


def hostile_sets(tmp: Path) -> list[str]:
    """--set values full of shell metacharacters; each would create a marker file if a shell ran it."""
    m = {name: tmp / name for name in MARKERS}
    name = f"digits $(touch {m['m1']}); `touch {m['m2']}`"
    note = f"it''s $(touch {m['m3']}); `touch {m['m4']}` | cat"  # YAML '' is one quote
    return ["--set", f"job.name={name}", "--set", f"profile.env.NOTE='{note}'",
            "--set", f"profile.setup={json.dumps(SETUP)}", "--set", f"profile.runs_dir={tmp / 'runs'}"]


def literal_values(tmp: Path) -> dict[str, str]:
    m = {name: tmp / name for name in MARKERS}
    return {
        "job_name": f"digits $(touch {m['m1']}); `touch {m['m2']}`",
        "note": f"it's $(touch {m['m3']}); `touch {m['m4']}` | cat",
        "echo": "setup ran; hooked with 1",
    }


def submit(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}  # the profile brings it
    return subprocess.run([sys.executable, str(ROOT / "submit.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def normalise(script: str, run_dir: str, tmp: Path) -> str:
    """Replace what differs between machines and runs; nothing else."""
    return (script.replace(run_dir, "<RUN_DIR>").replace(str(tmp), "<TMP>")
            .replace(sys.executable, "<PYTHON>").replace(str(ROOT), "<PROJECT>"))


def dry_run_script(tmp: Path, env: dict[str, str] | None = None) -> tuple[str, subprocess.CompletedProcess[str]]:
    proc = submit("--profile", "dev-cluster", "--job", "digits", *hostile_sets(tmp), "--dry-run", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    info = last_json(proc)
    assert info["dry_run"] is True
    # The human part shows the same script.
    assert info["sbatch_script"] in proc.stdout
    return normalise(info["sbatch_script"], info["run_dir"], tmp), proc


def test_dry_run_prints_the_recorded_script(slurm_cluster: Path, tmp_path: Path) -> None:
    script, _ = dry_run_script(tmp_path)
    if os.environ.get("UPDATE_RECORDED"):
        RECORDED.parent.mkdir(exist_ok=True)
        RECORDED.write_text(script)
    assert script == RECORDED.read_text()
    assert not (tmp_path / "runs").exists()  # a dry run creates no run folder


def test_dry_run_without_slurm_still_shows_the_script(tmp_path: Path) -> None:
    """On a machine without SLURM's commands (a laptop) the script is still shown, the same one;
    only the live preflight is skipped, and it says so."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PATH"] = str(empty)
    script, proc = dry_run_script(tmp_path, env)
    assert "preflight against the cluster skipped" in proc.stderr and "scontrol" in proc.stderr
    assert script == RECORDED.read_text()


def test_submitted_script_is_the_dry_run_script_and_nothing_executes(slurm_cluster: Path, tmp_path: Path) -> None:
    """A real submission with metacharacters in the job name and an env value, and setup lines in
    the conda hook's style: sbatch got exactly the dry-run script, no marker file appears, the job
    name and env value arrive literally, and the setup lines ran as written."""
    expected, _ = dry_run_script(tmp_path)
    proc = submit("--profile", "dev-cluster", "--job", "digits", *hostile_sets(tmp_path), "--set", "job.epochs=1",
                  "--wait", "--json")
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc)
    job_id, run_dir = result["job_id"], result["run_dir"]
    logs = Path(run_dir) / "logs" / job_id
    submitted = (logs / f"{job_id}_submission.sh").read_text()  # submitit keeps what it gave sbatch
    assert normalise(submitted, run_dir, tmp_path) == expected
    assert [m for m in MARKERS if (tmp_path / m).exists()] == []
    values = literal_values(tmp_path)
    batch_out = (logs / f"{job_id}_0_log.out").read_text()  # the batch script's stdout
    assert values["note"] + "\n" in batch_out  # printenv NOTE
    assert values["echo"] + "\n" in batch_out
    name = ""
    for _ in range(30):  # accounting may lag a moment
        name = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobName"], capture_output=True,
                              text=True, check=True).stdout.strip()
        if name:
            break
        time.sleep(1)
    assert name == values["job_name"]


@pytest.mark.parametrize("sets,message", [
    (["job.name=two\nlines"], "key 'name' has invalid value 'two\\nlines'; expected one line of text without control characters"),  # a real newline
    (["profile.sbatch_extra.comment=\"a\\nb\""], "'sbatch_extra.comment' has invalid value 'a\\nb'; expected one line of text without control characters"),
    (["profile.setup=[\"echo 'unclosed\"]"], "profile.setup[0]: \"echo 'unclosed\" is not a valid bash line"),
    (["profile.setup=[\"if true; then\"]"], "profile.setup[0]: 'if true; then' is not a valid bash line"),
])
def test_values_that_cannot_be_quoted_safely_are_refused(tmp_path: Path, sets: list[str], message: str) -> None:
    """A newline would end a #SBATCH line and start a shell command; a setup line bash cannot parse
    would fail in the job's log, minutes later. Both are bad input (exit 2), before anything else."""
    args = ["--profile", "dev-cluster", "--set", f"profile.runs_dir={tmp_path / 'runs'}"]
    for item in sets:
        args += ["--set", item]
    proc = submit(*args, "--dry-run")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()
