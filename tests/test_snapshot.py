"""The code a run imports is the code that was submitted (launcher/rundir/snapshot.py).

The tests work on a private copy of the project (a git repository of its own), because they edit
its code while jobs wait or are requeued: `trainer/__init__.py` prints which version was imported,
"submitted" when the job is submitted and "edited" right after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, last_json, wait_until
from trainer.rank import events

MARKER = 'print("code version: {}", flush=True)\n'


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    copy = tmp_path / "project"
    for name in filter(None, files):
        if (ROOT / name).is_file() and not name.startswith("tests/"):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    init = copy / "trainer" / "__init__.py"
    init.write_text(init.read_text() + MARKER.format("submitted"))
    git(copy, "init", "-q")
    git(copy, "add", "-A")
    git(copy, "commit", "-q", "-m", "the submitted code")
    # Not git's: an ignored cache stays out of the snapshot; a new, untracked module goes in.
    (copy / "trainer" / "__pycache__").mkdir(exist_ok=True)
    (copy / "trainer" / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"junk")
    (copy / "trainer" / "notes_new.py").write_text("# new, not committed yet\n")
    return copy


def edit(project: Path) -> None:
    init = project / "trainer" / "__init__.py"
    init.write_text(init.read_text().replace(MARKER.format("submitted"), MARKER.format("edited")))


def submit(project: Path, args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PYTHONPATH"] = str(project)
    return subprocess.run([sys.executable, str(project / "submit.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def versions(run_dir: Path) -> list[str]:
    """What each attempt of rank 0 printed on import, in order."""
    text = "".join(p.read_text() for p in sorted(run_dir.glob("logs/*/*_0_log.out")))
    return [line.split(": ")[1] for line in text.splitlines() if line.startswith("code version: ")]


def test_snapshot_holds_what_git_ships_and_notes_the_commit(project: Path, tmp_path: Path) -> None:
    proc = submit(project, ["--set", "job.epochs=1", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc.stdout)
    run_dir = Path(result["run_dir"])
    code = run_dir / "code"
    assert result["code"] == str(code)  # the tasks imported the copy
    assert (code / "trainer" / "notes_new.py").is_file() and (code / "launcher" / "node" / "task.py").is_file()
    assert not (code / "trainer" / "__pycache__" / "stale.cpython-311.pyc").exists()
    assert not (code / "jobs").exists() and not (code / "tests").exists()
    note = json.loads((code / "SNAPSHOT.json").read_text())
    assert note["git_commit"] == git(project, "rev-parse", "HEAD").strip()
    assert note["git_dirty"] is True and "uncommitted" in note["note"]  # notes_new.py is not committed
    assert json.loads((run_dir / "run.json").read_text())["code"]["files"] == note["files"]


def test_resume_runs_the_snapshot_and_the_profile_key_turns_it_off(project: Path, tmp_path: Path) -> None:
    proc = submit(project, ["--set", "job.epochs=2", "--set", "job.fail_at=30:0", "--json"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_dir = Path(last_json(proc.stdout)["run_dir"])
    edit(project)
    proc = submit(project, ["--resume", str(run_dir), "--set", "job.fail_at=", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((run_dir / "result.json").read_text())["code"] == str(run_dir / "code")
    assert versions(run_dir) == ["submitted", "submitted"]

    proc = submit(project, ["--set", "job.epochs=1", "--set", "profile.snapshot=false", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc.stdout)
    assert result["code"] == str(project) and not (Path(result["run_dir"]) / "code").exists()
    assert versions(Path(result["run_dir"])) == ["edited"]


def started_events(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in events.read(run_dir) if e["event"] == "started"]


def epochs_done(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slurm
def test_dev_cluster_job_edited_while_pending_and_requeued_runs_the_submitted_code(
        slurm_cluster: Path, project: Path, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("extends: digits\nname: snap\nepochs: 120\neval_every_epochs: 40\n"
                                       "log_every_steps: 100000\n")
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PYTHONPATH"] = str(project)
    args = [sys.executable, str(project / "submit.py"), "--job", "job.yaml", "--profile", "dev-cluster",
            "--set", f"profile.slurm_conf={ROOT / '.dev-cluster' / 'slurm.conf'}", "--set", "profile.time=30",
            # Held in the queue for 15 s: the edit below happens before the job starts.
            "--set", "profile.sbatch_extra.begin=now+15", "--wait", "--json"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        record = wait_until(lambda: next(((p, json.loads(p.read_text())) for p in (tmp_path / "runs").glob(
            "*/run.json") if json.loads(p.read_text()).get("job_ids")), None), 120, "the job id")
        run_dir, job_id = record[0].parent, record[1]["job_ids"][0]
        edit(project)
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                               check=True).stdout.strip()
        assert state == "PENDING" and not started_events(run_dir)  # edited before the job started
        wait_until(lambda: epochs_done(run_dir) >= 2, 240, "training")
        subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30)
        out, err = proc.communicate(timeout=400)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    result = last_json(out)
    assert result["restarts"] == 1 and result["code"] == str(run_dir / "code")
    assert len(started_events(run_dir)) == 2
    # Both attempts (two "started" events above) imported the code as submitted: rank 0 and, before srun,
    # the batch script's retry step (python -m launcher.heal), which imports the snapshot too.
    assert len(versions(run_dir)) >= 2 and set(versions(run_dir)) == {"submitted"}, versions(run_dir)
