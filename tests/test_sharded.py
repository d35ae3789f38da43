"""Sharded state (FSDP2): examples/fsdp2.yaml as users run it. Each rank writes its own shards of model and
optimizer (trainer.rank.sharded); a requeue on the dev cluster resumes bitwise, a run resumed on another world
size reshards, and a damaged shard makes the resume fall back to the previous checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.helpers import ROOT, last_json, run_submit, run_submits
from trainer.rank import checkpoint, events
from trainer.rank.checkpoint import same_weights

JOB = str(ROOT / "examples" / "fsdp2.yaml")


def resumed(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in events.read(run_dir) if e["event"] == "resumed"]


@pytest.mark.slurm
def test_an_fsdp2_model_requeued_on_the_dev_cluster_ends_bitwise_equal_to_its_uninterrupted_twin(
        slurm_cluster: Path, tmp_path: Path) -> None:
    common = ["--job", JOB, "--profile", "dev-cluster", "--wait", "--json"]
    plain, stopped = run_submits([common, [*common, "--set", "job.interrupt_at=75"]], tmp_path, timeout=400)
    assert plain.returncode == 0 and stopped.returncode == 0, (plain.stderr[-2000:], stopped.stderr[-2000:])
    ref, run = last_json(plain.stdout), last_json(stopped.stdout)
    run_dir = Path(run["run_dir"])
    assert ref["restarts"] == 0 and run["restarts"] == 1 and len(set(run["nodes"])) == 2, run
    # Mid-epoch (22 steps an epoch), between two periodic checkpoints (every 20 steps): the stop's own.
    assert [(e["step"], e["checkpoint"]) for e in resumed(run_dir)] == [(75, "ckpt-000000075")]
    assert same_weights(Path(ref["run_dir"]) / "model_final.pt", run_dir / "model_final.pt")
    # Each checkpoint a folder: both ranks' shard files (nothing gathered to rank 0) under rank 0's manifest.
    newest = sorted((run_dir / "checkpoints").iterdir())[-1]
    meta = checkpoint.read(newest)  # (checks every shard file against the manifest)
    assert sorted(meta["files"]) == sorted(p.name for p in (newest / "shards").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert (meta["sharded"], meta["world_size"], len(meta["ranks"])) == (["model", "optimizer"], 2, 2)


def test_a_failed_fsdp2_run_resumes_resharded_on_four_ranks_from_its_newest_intact_checkpoint(tmp_path: Path) -> None:
    first = run_submit(["--job", JOB, "--set", "job.checkpoint_every_steps=22", "--set", "job.config.fail_at_step=50",
                        "--json"], tmp_path, timeout=300)
    assert first.returncode == 1 and "failing on purpose at step 50" in first.stderr, first.stderr[-2000:]
    run_dir = Path(last_json(first.stdout)["run_dir"])
    folders = run_dir / "checkpoints"
    assert sorted(p.name for p in folders.iterdir()) == ["ckpt-000000022", "ckpt-000000044"]
    damaged = folders / "ckpt-000000044" / "shards" / "__1_0.distcp"
    raw = bytearray(damaged.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one byte of rank 1's shard
    damaged.write_bytes(bytes(raw))
    # Resumed on 4 ranks with one epoch in all: it loads step 22 and trains no further, so the weights it ends with
    # are the checkpoint's, resharded from 2 ranks' shards to 4 and gathered again.
    again = run_submit(["--resume", str(run_dir), "--set", "profile.tasks_per_node=4", "--set",
                        "job.config.fail_at_step=0", "--set", "job.config.epochs=1", "--json"], tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    (event,) = resumed(run_dir)
    assert (event["step"], event["checkpoint"], event["resharded_from"]) == (22, "ckpt-000000022", 2)
    assert event["skipped"] == ["ckpt-000000044: shard file __1_0.distcp: checksum mismatch (truncated or corrupted)"]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["world_size"] == 4, result
    dcp_to_torch_save(folders / "ckpt-000000022" / "shards", tmp_path / "consolidated.pt")
    saved = torch.load(tmp_path / "consolidated.pt")["model"]
    final = torch.load(run_dir / "model_final.pt")
    assert saved.keys() == final.keys() and all(torch.equal(saved[k], final[k]) for k in saved)
    log = (run_dir / "logs").rglob("*_0_log.out")
    assert any("resharded from 2 ranks to 4 (not bitwise" in p.read_text() for p in log)
