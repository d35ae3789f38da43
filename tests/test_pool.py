"""A sweep as a pool of workers (`sweep_runner: pool`) on the real dev cluster, as users run it: 60 points of a
small function taken in turn by 3 workers of 2 ranks each, while the test kills one worker in the middle of a
point, requeues another with `scontrol requeue` and cancels one point; then `--resume`. One pool run serves
every assertion: each point's result and weights equal the array path's (bitwise: a sample against real
array tasks, every point against the same steps run here, tests/userpkg/pointfn.py), no point lost or run
twice, the requeued point resumed from its checkpoint, the failing point FAILED alone, each worker's
processes kept across its points, and status, logs, the summary and --resume as for an array."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.helpers import ROOT, SUBMIT, last_json, run_submit, wait_until
from tests.userpkg.pointfn import PointConfig, reference
from trainer.rank import events

pytestmark = pytest.mark.slurm

POINTS, FAILS, KILLED, REQUEUED, CANCELLED = 60, 7, 10, 11, 12
# Slow points (0.3 s a step), so that the test can act on each while it runs: 12 s, 18 s and 36 s.
SLOW = {KILLED: 40, REQUEUED: 60, CANCELLED: 120}
# Run as real array tasks too: the two points whose worker was interrupted (the others equal tests/userpkg/pointfn.py's
# steps run here, as the array tasks do).
SAMPLE = [KILLED, REQUEUED]


def point(task: int) -> dict[str, Any]:
    """Task `task`'s sweep entry (config keys, dotted as a sweep names them)."""
    entry: dict[str, Any] = {"config.lr": round(0.001 * (task + 1), 3)}
    if task == FAILS:
        entry["config.fail"] = True
    if task in SLOW:
        entry.update({"config.step_sleep_s": 0.3, "config.steps": SLOW[task]})
    return entry


def job_yaml(name: str, tasks: list[int]) -> str:
    return yaml.safe_dump({"name": name, "entrypoint": "tests.userpkg.pointfn:train", "target_metric": "loss",
                           "target_mode": "min", "checkpoint_every_steps": 5,
                           "sweep": {"tasks": [point(t) for t in tasks]}})


def config_of(task: int) -> PointConfig:
    return PointConfig(**{k.split(".", 1)[1]: v for k, v in point(task).items()})


def submit(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, SUBMIT, "--profile", "dev-cluster", "--set", "profile.nodes=1",
                             "--set", "profile.tasks_per_node=2", *args, "--wait", "--json"], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})


def status(run_dir: Path) -> dict[int, dict[str, Any]]:
    done = run_submit(["status", str(run_dir), "--json", "--no-collect"], run_dir.parent, timeout=120)
    assert done.returncode == 0, done.stderr
    return {line["task"]: line for line in map(json.loads, done.stdout.splitlines())}


def running_with_checkpoint(run_dir: Path, task: int, not_by: set[str]) -> str | None:
    """The worker running `task` once the point has a checkpoint (and is not held by one of `not_by`)."""
    if not list((run_dir / f"task-{task:04d}" / "checkpoints").glob("ckpt-*.pt")):
        return None
    line = status(run_dir)[task]
    return line["job_id"] if line["state"] == "running" and line["job_id"] not in not_by else None


def worker_pids(run_dir: Path, task: int, worker: str) -> list[int]:
    """The pids of `worker`'s ranks (every node of the dev cluster is this machine), from the attempt banner
    each rank wrote at the top of its log of `task`."""
    pids = []
    for log in (run_dir / f"task-{task:04d}" / "logs").glob(f"{worker}_*_log.out"):
        banners = [line for line in log.read_text().splitlines() if "attempt started" in line]
        pids.append(int(banners[-1].split(" pid ")[1].split()[0]))
    assert len(pids) == 2, pids
    return pids


@pytest.fixture(scope="module")
def pool(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cwd = tmp_path_factory.mktemp("pool")
    (cwd / "pool.yaml").write_text(job_yaml("pool60", list(range(POINTS))))
    (cwd / "sample.yaml").write_text(job_yaml("sample", SAMPLE))
    sweep = submit(["--job", "pool.yaml", "--set", "profile.sweep_runner=pool", "--set", "profile.pool_workers=3"],
                   cwd)
    array = submit(["--job", "sample.yaml", "--set", f"profile.array_parallelism={len(SAMPLE)}",
                    "--set", "profile.runs_dir=array-runs"], cwd)
    try:
        run_dir = wait_until(lambda: next((p.parent for p in cwd.glob("runs/*/run.json")
                                           if json.loads(p.read_text()).get("job_ids")), None), 300, "the pool's jobs")
        # A shared cluster may hold the workers pending a while: the deadlines wait for the points themselves.
        killed = wait_until(lambda: running_with_checkpoint(run_dir, KILLED, set()), 900, "task 10's checkpoint")
        for pid in worker_pids(run_dir, KILLED, killed):  # its ranks die at once, with no warning
            os.kill(pid, signal.SIGKILL)
        requeued = wait_until(lambda: running_with_checkpoint(run_dir, REQUEUED, {killed}), 600,
                              "task 11 running with a checkpoint on a live worker")
        subprocess.run(["scontrol", "requeue", requeued], check=True, timeout=60)
        wait_until(lambda: status(run_dir)[CANCELLED]["state"] == "running", 600, "task 12 running")
        cancelled = run_submit(["cancel", str(run_dir / f"task-{CANCELLED:04d}")], cwd, timeout=120)
        out, err = sweep.communicate(timeout=1200)
        array_out, array_err = array.communicate(timeout=900)
    finally:
        sweep.kill()
        array.kill()
    return {"cwd": cwd, "run_dir": run_dir, "code": sweep.returncode, "out": out, "err": err, "killed": killed,
            "requeued": requeued, "cancelled": cancelled, "array": (array.returncode, array_out, array_err)}


def test_every_point_ends_once_as_the_array_path_would(pool: dict[str, Any]) -> None:
    assert pool["code"] == 1, pool["out"][-3000:] + pool["err"][-3000:]  # a point failed, one was cancelled
    payload = last_json(pool["out"])
    assert payload["counts"] == {"completed": POINTS - 2, "failed": 1, "cancelled": 1}, payload
    run_dir = pool["run_dir"]
    lines = status(run_dir)
    assert lines[FAILS]["state"] == "failed" and lines[FAILS]["failed_rank"] == 1
    assert "point fails on purpose at step 5" in lines[FAILS]["error"]
    assert lines[CANCELLED]["state"] == "cancelled", pool["cancelled"].stdout + pool["cancelled"].stderr
    for task in range(POINTS):
        folder = run_dir / f"task-{task:04d}"
        log = events.read(folder)
        # None run twice: one end per point, and every attempt but the last one stopped or died unfinished.
        assert [e["event"] for e in log].count("finished") == (task not in (FAILS, CANCELLED)), (task, log)
        if task in (FAILS, CANCELLED):
            continue
        weights, loss = reference(config_of(task))
        mine = torch.load(folder / "weights.pt")
        assert mine.keys() == weights.keys() and all(torch.equal(mine[k], weights[k]) for k in weights), task
        assert lines[task]["result"]["loss"] == loss and lines[task]["state"] == "completed", task


def test_a_sample_of_points_equals_real_array_tasks_bitwise(pool: dict[str, Any]) -> None:
    code, out, err = pool["array"]
    assert code == 0, out[-3000:] + err[-3000:]
    array_dir = Path(last_json(out)["run_dir"])
    for index, task in enumerate(SAMPLE):
        arrayed = torch.load(array_dir / f"task-{index:04d}" / "weights.pt")
        pooled = torch.load(pool["run_dir"] / f"task-{task:04d}" / "weights.pt")
        assert all(torch.equal(arrayed[k], pooled[k]) for k in arrayed), task
        assert json.loads((array_dir / f"task-{index:04d}" / "result.json").read_text())["loss"] == \
            json.loads((pool["run_dir"] / f"task-{task:04d}" / "result.json").read_text())["loss"]


def test_a_killed_workers_point_is_taken_back_and_resumed(pool: dict[str, Any]) -> None:
    log = events.read(pool["run_dir"] / f"task-{KILLED:04d}")
    starts = [e for e in log if e["event"] == "started"]
    assert starts[0]["job_id"] == pool["killed"] and starts[-1]["job_id"] != pool["killed"], starts
    assert not any(e["event"] == "stopped" for e in log), "SIGKILL leaves no time to stop"
    resumed = [e for e in log if e["event"] == "resumed"]
    assert resumed and resumed[-1]["step"] >= 5, log  # from the dead worker's checkpoint
    assert status(pool["run_dir"])[KILLED]["restarts"] == len(starts) - 1 >= 1


def test_a_requeued_workers_point_resumes_from_its_checkpoint(pool: dict[str, Any]) -> None:
    log = events.read(pool["run_dir"] / f"task-{REQUEUED:04d}")
    stopped = [e for e in log if e["event"] == "stopped"]
    assert stopped and stopped[0]["signal"] == "TERM" and stopped[0]["job_id"], log  # checkpointed on its way out
    resumed = [e for e in log if e["event"] == "resumed"]
    assert resumed and resumed[-1]["step"] == stopped[-1]["step"], log
    assert [e["job_id"] for e in log if e["event"] == "started"][0] == pool["requeued"]


def test_each_worker_keeps_its_processes_across_its_points(pool: dict[str, Any]) -> None:
    """Torch and the process group once per worker: every point a worker's life ran shows the same rank-0 pid."""
    lives: dict[tuple[str, str], set[str]] = {}
    for log in pool["run_dir"].glob("task-*/logs/*_0_log.out"):
        for line in log.read_text().splitlines():
            if "attempt started" in line:
                job = line.split(": job ")[1].split(",")[0]
                restart = line.split("restart count ")[1].split(",")[0]
                lives.setdefault((job, restart), set()).add(line.split(" pid ")[1].split()[0])
    assert len(lives) >= 3 and all(len(pids) == 1 for pids in lives.values()), lives
    assert sum(1 for _ in pool["run_dir"].glob("task-*/logs/*_0_log.out")) >= POINTS - 1


def test_status_logs_summary_and_resume_as_for_an_array(pool: dict[str, Any]) -> None:
    run_dir, cwd = pool["run_dir"], pool["cwd"]
    logs = run_submit(["logs", str(run_dir), "--task", str(FAILS), "--rank", "1", "--err"], cwd, timeout=60)
    assert logs.returncode == 0 and "point fails on purpose at step 5" in logs.stdout, logs.stderr
    rows = (run_dir / "summary.csv").read_text().splitlines()
    assert len(rows) == POINTS + 1 and rows[0].startswith("task,config.lr")
    done = run_submit(["--resume", str(run_dir), "--set", "profile.pool_workers=1", "--wait", "--json"], cwd,
                      timeout=900)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # the failing point fails again
    lines = status(run_dir)
    assert lines[CANCELLED]["state"] == "completed" and lines[FAILS]["state"] == "failed"
    weights, _ = reference(config_of(CANCELLED))
    resumed = torch.load(run_dir / f"task-{CANCELLED:04d}" / "weights.pt")
    assert all(torch.equal(resumed[k], weights[k]) for k in weights)
    log = events.read(run_dir / f"task-{CANCELLED:04d}")
    assert [e["signal"] for e in log if e["event"] == "stopped"] == ["CANCEL"]
    assert [e for e in log if e["event"] == "resumed"], log  # from the checkpoint the cancel left
