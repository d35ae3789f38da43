"""The parts of the public API (trainer.api) the built-in recipes need, used as a user would
(tests/userpkg/perrank.py, submitted as an `entrypoint:` job): objects checkpointed per rank
(`per_rank=`), rank 0's progress lines and log line (`ctx.progress`, `ctx.print`), collectives
(`ctx.ranks`), and `step_boundary` saying when it checkpointed and leaving out a step already
checkpointed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import last_json, run_submits
from trainer.config.job import JobConfig, RunSettings
from trainer.rank import checkpoint, rundir
from trainer.runners.dispatch import run_job

JOB = """name: perrank
entrypoint: "tests.userpkg.perrank:train"
target_metric: mean_rank_loss
log_every_steps: 3
config:
  epochs: 3
"""


def logged(run_dir: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time"} for r in rows]


def rank_log(run_dir: Path, rank: int) -> str:
    return "".join(p.read_text() for p in (run_dir / "logs").glob(f"*/*_{rank}_log.out"))


def test_step_boundary_says_when_it_checkpointed_and_skips_a_step_already_checkpointed(tmp_path: Path) -> None:
    # 1 rank: 256 samples / 16 = 16 steps per epoch; every 8 steps, and the function's own epoch-end checkpoints.
    job = JobConfig(name="perrank", entrypoint="tests.userpkg.perrank:train", target_metric="mean_rank_loss",
                    config={"epochs": 2}, keep_checkpoints=100, log_every_steps=100000)
    result = run_job(job, RunSettings(run_dir=str(tmp_path), checkpoint_every_steps=8), environ={})
    assert result["steps"] == 32
    assert result["boundary_saves"] == "8,24"  # not 16: the epoch end had just checkpointed it
    steps = [int(p.name[5:14]) for p in rundir.checkpoint_files(tmp_path / "checkpoints")]
    assert steps == [8, 16, 24]


def test_per_rank_state_progress_and_print_on_two_local_ranks_requeued_mid_epoch(tmp_path: Path) -> None:
    (tmp_path / "perrank.yaml").write_text(JOB)
    # 2 ranks: 8 steps per epoch. Stopped mid-epoch: each rank's running loss must come back as its own.
    reference, proc = run_submits([["--job", "perrank.yaml", "--json"],
                                   ["--job", "perrank.yaml", "--set", "job.interrupt_at=13", "--json"]], cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["restarts"] == 1 and result["steps"] == 24
    ref_dir, run_dir = Path(last_json(reference.stdout)["run_dir"]), Path(result["run_dir"])
    assert logged(run_dir) == logged(ref_dir)  # every epoch's mean over ranks, mid-epoch resumes included
    newest = checkpoint.load_newest_good(run_dir / "checkpoints")
    assert newest is not None and newest.state["step"] == 16  # the epoch end after the stop at 13
    ranks = [entry["objects"]["running"] for entry in newest.state["ranks"]]
    assert len(ranks) == 2 and ranks[0] != ranks[1] and all(r["steps"] == 8 for r in ranks)
    # Rank 0 prints its line and a progress line every 3 steps (no terminal here: no bar); rank 1 neither.
    log0, log1 = rank_log(run_dir, 0), rank_log(run_dir, 1)
    assert "[trainer] perrank: done after 24 steps" in log0 and "perrank: done" not in log1
    assert "[trainer] user step 3 loss" in log0 and "user step" not in log1
