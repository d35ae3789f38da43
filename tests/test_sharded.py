"""Sharded state (FSDP2): examples/fsdp2.yaml as users run it. Each rank writes its own shards of model and
optimizer (trainer.rank.sharded); a run resumed on another world size reshards, and a damaged shard makes the
resume fall back to the previous checkpoint. (Its requeue on the dev cluster, bitwise against its twin:
tests/test_clusters.py, where the same pair of runs also shows a run on the second cluster.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.helpers import ROOT, last_json, run_submit
from trainer.rank import events

JOB = str(ROOT / "examples" / "fsdp2.yaml")


def resumed(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in events.read(run_dir) if e["event"] == "resumed"]


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
