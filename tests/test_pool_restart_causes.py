"""Why a pool's point ran again, as `status` and `--json`'s restart_causes say it, read from the point's
events.jsonl as the worker writes it (launcher/node/pool_worker.py: "started" with pool_worker and
taken_back; the trainer's "stopped" with its signal): taken back from a dead worker, given back when
SLURM ended its worker (SIGTERM), or continued by `--resume` after a failure or a cancel."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.rundir import restarts


def started(job_id: str, taken_back: bool = False) -> dict[str, Any]:
    return {"event": "started", "time": 1.0, "job_id": job_id, "pool_worker": True, "taken_back": taken_back}


def stopped(signal: str) -> dict[str, Any]:
    return {"event": "stopped", "time": 2.0, "step": 3, "signal": signal, "kind": "terminate"}


@pytest.mark.parametrize("log,cause", [
    ([started("11_0"), started("11_1", taken_back=True)], "taken-back"),
    ([started("11_0"), stopped("TERM"), started("11_1")], "slurm-requeue"),
    # A failed point, then --resume: a new job continues it; nobody died holding it.
    ([started("11_0"), {"event": "finished", "time": 2.0}, started("12_0")], "failure"),
    # A cancelled point (the holder stopped it on the cancel record), then --resume.
    ([started("11_0"), stopped("TAKEN"), started("12_0")], "failure"),
], ids=["taken back from a dead worker", "its worker ended by SLURM", "failed then resumed", "cancelled then resumed"])
def test_a_pool_points_restart_is_named_by_what_happened(log: list[dict[str, Any]], cause: str) -> None:
    assert restarts.classify(log).by_cause() == {cause: 1}
