"""Several SLURM clusters behind one login (`clusters:`, SLURM's -M), on the dev cluster's two clusters
(`python -m launcher.devcluster up --clusters 2`: `devcluster` with cpu1..4 and gpu1..2, `second` with sec1..2, in
one slurmdbd). A run sent to the second is submitted, waited for, requeued, looked at, cancelled and resumed from
the first cluster's login, as users would (by name, and by a list of both that only the second can run), and every command reaches the second cluster's jobs, not the first's
jobs of the same ids."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from launcher import client
from launcher.devcluster import config as cluster_config
from launcher.devcluster import second as second_cluster
from tests.helpers import ROOT, last_json, run_submit, run_submits, wait_until
from trainer.rank import checkpoint, events
from trainer.rank.checkpoint import same_weights

pytestmark = [pytest.mark.slurm]

ON_SECOND = ["--profile", "dev-cluster", "--set", "profile.clusters=second"]
TINY = "tests.userpkg.tiny:train"
FSDP2 = str(ROOT / "examples" / "fsdp2.yaml")


@pytest.fixture(scope="module")
def second(slurm_cluster: Path) -> Path:
    """The dev cluster's second cluster, up."""
    spec = cluster_config.load_spec()
    if spec is None or spec.clusters < 2 or not second_cluster.node_states():
        message = "the dev cluster's second cluster is not up: `python -m launcher.devcluster up --clusters 2`"
        if os.environ.get("CI"):
            pytest.fail(message + " (.ci/run must start it)", pytrace=False)
        pytest.skip(message)
    return slurm_cluster


def sacct_on(cluster: str, job_id: str) -> list[str]:
    """The allocation's state and nodes on `cluster`, as SLURM's accounting has them ([] where that cluster has no
    such job)."""
    done = subprocess.run(["sacct", "-M", cluster, "-X", "-n", "-P", "-j", job_id, "-o", "State,NodeList"],
                          capture_output=True, text=True, timeout=60, check=True)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def test_the_fsdp2_example_requeued_on_the_second_cluster_ends_bitwise_equal_to_its_twin_on_the_first(
        second: Path, tmp_path: Path) -> None:
    """Two of the issues' aims in one pair of runs: a run on the second cluster requeued there resumes bitwise, and
    so does a model sharded with FSDP2 (examples/fsdp2.yaml: every rank writes its own shards, trainer.rank.sharded),
    mid-epoch (22 steps an epoch), between two periodic checkpoints (every 20 steps): from the stop's own."""
    common = ["--job", FSDP2, "--profile", "dev-cluster", "--wait", "--json"]
    there, here = run_submits([[*common, "--set", "profile.clusters=second", "--set", "job.interrupt_at=75"], common],
                              tmp_path, timeout=400)
    assert there.returncode == 0 and here.returncode == 0, (there.stderr[-3000:], here.stderr[-2000:])
    run, twin = last_json(there.stdout), last_json(here.stdout)
    assert sorted(set(run["nodes"])) == ["sec1", "sec2"] and not set(twin["nodes"]) & {"sec1", "sec2"}, run["nodes"]
    assert run["restarts"] == 1 and twin["restarts"] == 0
    run_dir = Path(run["run_dir"])
    assert [(e["step"], e["checkpoint"]) for e in events.read(run_dir) if e["event"] == "resumed"] == [
        (75, "ckpt-000000075")]
    assert same_weights(Path(twin["run_dir"]) / "model_final.pt", run_dir / "model_final.pt")
    # Each checkpoint a folder: both ranks' shard files (nothing gathered to rank 0) under rank 0's manifest.
    newest = sorted((run_dir / "checkpoints").iterdir())[-1]
    meta = checkpoint.read(newest)  # (checks every shard file against the manifest)
    assert sorted(meta["files"]) == sorted(p.name for p in (newest / "shards").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert (meta["sharded"], meta["world_size"], len(meta["ranks"])) == (["model", "optimizer"], 2, 2)
    wait_until(lambda: sacct_on("second", run["job_id"]) == ["COMPLETED|sec[1-2]"], 60, "sacct -M second's record")
    status = run_submit(["status", str(run_dir)], tmp_path, timeout=120)
    assert status.returncode == 0 and "completed" in status.stdout and "cpu " in status.stdout, status.stdout


def test_a_run_that_names_both_clusters_lands_on_the_one_that_can_start_it_and_is_operated_there(
        second: Path, tmp_path: Path) -> None:
    """`clusters: [devcluster, second]` with a constraint only the second's nodes meet (its feature `second`):
    `--when` asks each and says SLURM's pick, sbatch sends the job there, run.json records it, and the run's
    status (the Python handle's too), watch, logs, cancel and --resume reach it there; `--after` it from the first
    cluster is refused."""
    (tmp_path / "both.yaml").write_text("extends: dev-cluster\nclusters: [devcluster, second]\nconstraint: second\n")
    both = ["--profile", "both.yaml"]
    when = run_submit([*both, "--when", "--json"], tmp_path, timeout=120)
    assert when.returncode == 0, when.stderr
    answer = last_json(when.stdout)
    assert answer["cluster"] == "second" and {row["cluster"] for row in answer["when"]} == {"devcluster", "second"}
    stop = tmp_path / "stop"
    (tmp_path / "job.yaml").write_text(f"name: tiny-both\nentrypoint: \"{TINY}\"\ncheckpoint_every_steps: 10\n"
                                       f"config: {{until_file: {stop}, epochs: 1000, step_sleep_s: 0.02}}\n")
    try:
        queued = run_submit([*both, "--job", "job.yaml", "--json"], tmp_path, timeout=120)
        assert queued.returncode == 0, queued.stderr[-3000:]
        run_dir = Path(last_json(queued.stdout)["run_dir"])
        record = json.loads((run_dir / "run.json").read_text())
        (job_id,) = record["job_ids"]
        assert record["cluster"] == "second"
        wait_until(lambda: (run_dir / "metrics.jsonl").exists(), 180, "the run to train", poll=0.5)
        assert sacct_on("second", job_id) == ["RUNNING|sec[1-2]"]
        run = client.attach(run_dir)
        (state,) = run.status()
        assert state["state"] == "running" and state["job_id"] == job_id, state
        watched = run_submit(["watch", str(run_dir), "--once"], tmp_path, timeout=120)
        assert watched.returncode == 0 and "running" in watched.stdout, watched.stdout + watched.stderr
        assert "rank 0/2 on sec1" in run.logs()
        cancelled = run_submit(["cancel", str(run_dir)], tmp_path, timeout=120)
        assert cancelled.returncode == 0, cancelled.stderr
        (ended,) = run.wait(timeout=180, poll_s=0.5)
        assert ended["state"] == "cancelled" and sacct_on("second", job_id)[0].startswith("CANCELLED"), ended
        # `--after` it from the first cluster: SLURM has no dependency across clusters.
        refused = run_submit(["--profile", "dev-cluster", "--after", str(run_dir), "--dry-run"], tmp_path)
        assert refused.returncode == 2 and "SLURM has no dependency across clusters" in refused.stderr, refused.stderr
        stop.touch()
        resumed = run_submit(["--resume", str(run_dir), "--wait", "--json"], tmp_path, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        again = json.loads((run_dir / "run.json").read_text())
        (new,) = again["job_ids"]  # (the task's job now; run.json's `resumes` keeps the history)
        assert again["cluster"] == "second" and new != job_id
        wait_until(lambda: sacct_on("second", new) == ["COMPLETED|sec[1-2]"], 60, "sacct -M second's record")
        assert [e["step"] > 0 for e in events.read(run_dir) if e["event"] == "resumed"] == [True]  # its checkpoint
    finally:
        stop.touch()
