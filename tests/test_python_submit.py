"""The Python submit API (launcher.client), called as a notebook would: a round trip on the local
executor and on the dev cluster, and bad input raising before anything is queued."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.client import RunFailed, SubmitError, submit
from tests.helpers import ROOT


@pytest.fixture(autouse=True)
def worktree_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # The submitter child must import this checkout (and tests.userpkg), as run_submit arranges.
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_entrypoint_round_trip_on_the_local_executor(tmp_path: Path) -> None:
    run = submit(entrypoint="tests.userpkg.tiny:train", config={"lr": 0.1, "epochs": 2}, cwd=tmp_path)
    assert run.run_dir.parent == tmp_path / "runs"
    result = run.result(timeout=300)
    assert result["state"] == "COMPLETED" and result["world_size"] == 2 and result["steps"] == 32
    assert result["accuracy"] > 0.8
    assert [s["state"] for s in run.status()] == ["completed"]
    assert "attempt started" in run.logs(rank=1)


def test_bad_config_raises_submit_error_and_queues_nothing(tmp_path: Path) -> None:
    run = submit(entrypoint="tests.userpkg.tiny:train", config={"lrr": 0.1}, cwd=tmp_path)
    with pytest.raises(SubmitError, match="unknown key 'config.lrr'"):
        run.result(timeout=120)
    assert not (tmp_path / "runs").exists()


def test_failing_function_raises_run_failed_naming_the_rank(tmp_path: Path) -> None:
    run = submit(entrypoint="tests.userpkg.tiny:broken", config={"fail_rank": 1}, cwd=tmp_path)
    with pytest.raises(RunFailed, match="rank 1") as failed:
        run.result(timeout=300)
    assert "user code failed on purpose" in str(failed.value)


@pytest.mark.slurm
def test_round_trip_on_the_dev_cluster(slurm_cluster: Path, tmp_path: Path) -> None:
    run = submit("dev-cluster", entrypoint="tests.userpkg.tiny:train", config={"epochs": 2},
                 sets=[f"profile.runs_dir={tmp_path}"], cwd=ROOT)
    assert run.run_dir.parent == tmp_path  # known while the job is queued or running
    result = run.result(timeout=300)
    assert result["world_size"] == 2 and result["accuracy"] > 0.8
    assert [s["state"] for s in run.status()] == ["completed"]
    assert "attempt started" in run.logs(rank=1)
