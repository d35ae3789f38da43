"""`launch: torchrun` (issue 20): one SLURM task per node runs torchrun with tasks_per_node
processes, a c10d rendezvous on the first node, the job id as the run id (launcher/node/torchrun_task.py, torchrun_worker.py).

On the dev cluster, 2 nodes x 2 processes (CPU, gloo), all runs at once: the built-in digits job
(uninterrupted: the reference), a plain torchrun script, a 2-point sweep of a user's entrypoint (one array; each point trains with
world size 4 and reports every rank's place), a rank failing on the second node (fail-fast), and two
runs interrupted beside the reference (exact resume): one requeued with `scontrol requeue` mid-run,
one sent the stop signal (USR2, as SLURM sends it before the time limit) while torchrun starts.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import ROOT, last_json, run_submit, wait_until
from trainer.rank import events

TORCHRUN = ["--profile", "dev-cluster", "--set", "profile.launch=torchrun", "--set", "profile.tasks_per_node=2"]
PLAIN_SCRIPT = ROOT / "tests" / "userpkg" / "plain_script.py"


@pytest.fixture(scope="module")
def runs(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("torchrun")
    (tmp / "plain.yaml").write_text(f"name: plain-script\nscript: {PLAIN_SCRIPT}\nargs: ['20']\n")
    (tmp / "sweep.yaml").write_text(SWEEP)
    # 4 runs of 2 x 2 CPUs fill the 4 CPU nodes: the failing run (timed) and the interrupted ones, which need
    # more than one attempt, go first. The sweep's 2 jobs use the 2 GPU nodes' CPUs meanwhile, side by side.
    cases = {
        # Rank 3 (on the second node) raises at step 2; the others would wait in the next all-reduce.
        "failing": ["--set", "job.epochs=50", "--set", "job.fail_at=2:3", "--set", "profile.max_failures=0"],
        "requeued": RESUMABLE,
        "signalled": RESUMABLE,
        # The same stop signal with no time-out requeue left: submitit refuses the requeue.
        "refused": [*RESUMABLE, "--set", "profile.max_timeout_requeues=0"],
        "reference": RESUMABLE,  # also the digits run whose logs the tests read
        "script": ["--job", str(tmp / "plain.yaml")],
        "sweep": ["--job", str(tmp / "sweep.yaml"), "--set", "profile.partition=gpu"],
    }
    interrupt = {"requeued": (["scontrol", "requeue"], after_first_checkpoint),
                 "signalled": (["scancel", "--signal=USR2"], as_torchrun_starts),
                 "refused": (["scancel", "--signal=USR2"], as_torchrun_starts)}

    def run(name: str) -> tuple[Any, float]:
        start = time.monotonic()
        if name in interrupt:
            return interrupted(tmp / name, cases[name], *interrupt[name]), time.monotonic() - start
        # From the project root, as its user would: the sweep's entrypoint is found there (tests.userpkg).
        proc = run_submit([*TORCHRUN, *cases[name], "--set", f"profile.runs_dir={tmp / name}", "--wait", "--json"],
                          cwd=ROOT if name == "sweep" else tmp, timeout=600)
        return proc, time.monotonic() - start

    with ThreadPoolExecutor(len(cases)) as pool:
        return dict(zip(cases, pool.map(run, cases)))


RESUMABLE = ["--set", "job.epochs=10", "--set", "profile.checkpoint_every_steps=5"]

# A user's function (tiny's loop, 2 steps of 16 samples per rank), 2 points: one array of 2 jobs of 2 nodes
# (2 points show the array as well as 4 did, and run in one round on the 2 GPU nodes: 4 took two rounds).
SWEEP = """name: ranks-sweep
entrypoint: "tests.userpkg.ranks:train"
target_metric: accuracy
config:
  epochs: 1
  samples: 128
sweep:
  grid:
    config.lr: [0.1, 0.2]
"""


def after_first_checkpoint(runs_dir: Path) -> str | None:
    """The job id, once the run has written its first checkpoint (mid-run)."""
    ckpt = next(runs_dir.glob("*/checkpoints/ckpt-*.pt"), None)
    if ckpt is None:
        return None
    return re.search(r'"job_id": "(\d+)"', (ckpt.parent.parent / "events.jsonl").read_text()).group(1)  # type: ignore[union-attr]


def as_torchrun_starts(runs_dir: Path) -> str | None:
    """The job id, once both node tasks have started torchrun: their workers are still starting
    (importing torch: seconds), not yet catching the stop signal, which their node's task notes for
    them. (Both: a node task still unpickling its function has no handler yet, and USR2 would kill it,
    as it kills any submitit task in its first second; seen in CI when only node 0 was waited for.)"""
    for log in runs_dir.glob("*/logs/*/*_0_log.out"):
        other = log.with_name(log.name.replace("_0_log.out", "_1_log.out"))
        if "[torchrun] node 0" in log.read_text() and other.exists() and "[torchrun] node 1" in other.read_text():
            return log.parent.name
    return None


def interrupted(runs_dir: Path, sets: list[str], command: list[str],
                when: Callable[[Path], str | None]) -> subprocess.CompletedProcess[str]:
    """The run, interrupted by `command JOB_ID` once `when` gives the job id: `scontrol requeue` (SLURM
    requeues it: SIGTERM to every process) or `scancel --signal=USR2` (the stop signal, delivered to every
    process of the job's steps as SLURM's `--signal` is before the time limit: the job requeues itself)."""
    args = [sys.executable, str(ROOT / "submit.py"), *TORCHRUN, *sets, "--set", f"profile.runs_dir={runs_dir}",
            "--wait", "--json"]
    proc = subprocess.Popen(args, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        # 600 s: in the suite another file's jobs may hold the CPU nodes first (seen: 20 jobs, 300 s).
        job_id = wait_until(lambda: when(runs_dir), 600, when.__name__, poll=0.1)
        subprocess.run([*command, job_id], check=True, timeout=30)
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_dry_run_shows_one_task_per_node_and_the_torchrun_command(tmp_path: Path) -> None:
    proc = run_submit([*TORCHRUN, "--dry-run", "--json"], cwd=tmp_path, timeout=60,
                      env={"SLURM_CONF": str(tmp_path / "none.conf")})
    assert proc.returncode == 0, proc.stderr
    info = last_json(proc.stdout)
    lines = info["sbatch_script"].splitlines()
    assert {"#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=2"} <= set(lines)
    assert info["world_size"] == 4
    assert ("-m torch.distributed.run --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d "
            "--rdzv-endpoint=FIRST_NODE:PORT --rdzv-id=SLURM_JOB_ID") in info["torchrun"]


def test_every_rank_is_told_its_own_thread_count_not_its_nodes(tmp_path: Path) -> None:
    """cpus_per_task is per rank in every shape: 4 ranks of 2 CPUs on a node are one SLURM task of 8
    CPUs here, and the batch script exported OMP_NUM_THREADS=8 to each of them (trainer.distributed.threads)."""
    proc = run_submit(["--profile", "slurm-cpu", "--set", "profile.launch=torchrun", "--set",
                       "profile.tasks_per_node=4", "--set", "profile.cpus_per_task=2", "--dry-run", "--json"],
                      cwd=tmp_path, timeout=60, env={"SLURM_CONF": str(tmp_path / "none.conf")})
    assert proc.returncode == 0, proc.stderr
    lines = last_json(proc.stdout)["sbatch_script"].splitlines()
    assert {"#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=8"} <= set(lines), lines
    assert {f"export {name}=2" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")} <= set(lines)


def test_digits_trains_with_world_size_4_and_a_log_per_rank(runs: dict[str, Any]) -> None:
    proc, _ = runs["reference"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["world_size"] == 4 and result["test_accuracy"] > 0.5
    logs = Path(result["run_dir"]) / "logs" / result["job_id"]
    hosts = []
    for rank in range(4):  # `logs --rank R` reads these: each rank's own banner is in its file
        text = (logs / f"{result['job_id']}_{rank}_log.out").read_text()
        hosts += re.findall(rf"rank {rank}/4 on (\S+),", text)
    assert len(hosts) == 4 and len(set(hosts)) == 2, hosts  # one torchrun per node, on two nodes
    assert result["nodes"] == hosts  # each rank's node, as in the tasks shape (not one per node task)
    # The same result envelope as the tasks shape: which interpreter and which code (the run's snapshot) ran.
    assert result["python"] and result["code"] == str(Path(result["run_dir"]) / "code"), result
    shown = run_submit(["logs", result["run_dir"], "--rank", "3"], cwd=ROOT, timeout=60)
    assert shown.returncode == 0 and "rank 3/4 on" in shown.stdout, shown.stdout + shown.stderr


def test_a_plain_torchrun_script_runs_under_it_unchanged(runs: dict[str, Any]) -> None:
    proc, _ = runs["script"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["sum"] == 80.0  # 20 all-reduces over 4 ranks


def test_a_rank_that_dies_ends_the_job_naming_it(runs: dict[str, Any]) -> None:
    proc, _ = runs["failing"]
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "error: the run failed on rank 3: " in proc.stderr, proc.stderr[-3000:]
    failed = last_json(proc.stdout)
    # Fail-fast from the moment rank 3 raised (its note) to the job's end in accounting: not the time the
    # run waited in the queue or took to start, which the runs beside it and a loaded machine decide.
    (note,) = Path(failed["run_dir"]).glob("logs/*/torchrun/rank-3.json")
    end = subprocess.run(["sacct", "-j", failed["job_id"], "-X", "-n", "-P", "-o", "End"], capture_output=True,
                         text=True, check=True, timeout=30).stdout.split()[0]
    assert datetime.datetime.fromisoformat(end).timestamp() - json.loads(note.read_text())["time"] < 60, end
    # The rank, not the SLURM task (here a node) that ran it, in the result and in `status`.
    assert failed["failed_rank"] == 3 and "on rank 3" in failed["error"], failed
    shown = run_submit(["status", failed["run_dir"]], cwd=ROOT, timeout=60)
    assert shown.returncode == 0 and "failed" in shown.stdout and "rank 3: " in shown.stdout, shown.stdout
    rows = run_submit(["status", "--json", "--no-collect", failed["run_dir"]], cwd=ROOT, timeout=60)
    row = last_json(rows.stdout)
    assert row["failed_rank"] == 3, rows.stdout
    # Its cost: one SLURM task per node ran torchrun and 2 ranks, so sacct's peak is measured against the
    # node's request (dev-cluster's 768M x 2), and both views say so.
    assert row["cost"]["mem_per"] == "node" and row["cost"]["mem_requested_mb"] == 1536, row
    assert "/1536 MB per node" in shown.stdout, shown.stdout


def test_a_requeued_run_resumes_from_its_checkpoint_and_completes(runs: dict[str, Any]) -> None:
    (ref, _), (proc, _) = runs["reference"], runs["requeued"]
    assert ref.returncode == 0 and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    a, b = last_json(ref.stdout), last_json(proc.stdout)
    assert b["restarts"] == 1 and b["restart_causes"] == {"slurm-requeue": 1} and b["resumed_from"]
    assert a["steps"] == b["steps"] == 110 and a["restarts"] == 0


def test_a_requeued_run_ends_bitwise_equal_to_an_uninterrupted_one(runs: dict[str, Any]) -> None:
    # 4 ranks: with 3 or more, the resumed attempt's first step must reduce its gradients in the same DDP
    # bucket layout as the uninterrupted run's (trainer.recipes.components.settle_buckets).
    (ref, _), (proc, _) = runs["reference"], runs["requeued"]
    assert ref.returncode == 0 and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    a, b = last_json(ref.stdout), last_json(proc.stdout)
    x, y = (torch.load(Path(r["run_dir"]) / "model_final.pt") for r in (a, b))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert a["test_loss"] == b["test_loss"]


def test_a_stop_signal_while_torchrun_starts_requeues_the_run_which_ends_bitwise_equal(runs: dict[str, Any]) -> None:
    # USR2 is what SLURM sends `signal_delay_s` before the time limit (once) and on preemption. Sent while
    # the workers still start, it is not lost: their node's task notes it, they stop at their first step
    # boundary, rank 0 checkpoints and node task 0 requeues the job through submitit. (Sent mid-run it
    # reaches the workers themselves past torchrun's agent: checked by hand, docs/profiles-and-jobs.md.)
    (ref, _), (proc, _) = runs["reference"], runs["signalled"]
    assert ref.returncode == 0 and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    a, b = last_json(ref.stdout), last_json(proc.stdout)
    # A time-out by submitit's rule, which node task 0 applied and rank 0 reported: a signal after
    # min(80 %, limit - 10 min) of the limit is one, here of the dev cluster's 10 minutes from the start.
    assert b["restarts"] == 1 and b["restart_causes"] == {"timeout": 1} and b["resumed_from"], b
    (stopped,) = [e for e in events.read(Path(b["run_dir"])) if e["event"] == "stopped"]
    assert stopped["signal"] == "USR2" and stopped["requeued"] and stopped["reason"] == "timeout", stopped
    x, y = (torch.load(Path(r["run_dir"]) / "model_final.pt") for r in (a, b))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert a["steps"] == b["steps"] == 110 and a["test_loss"] == b["test_loss"]


def test_a_refused_requeue_ends_the_run_saying_so_and_how_to_continue(runs: dict[str, Any]) -> None:
    """The stop signal with no time-out requeue left (max_timeout_requeues: 0): as in the tasks shape, the run
    fails saying that it was not requeued and how to continue (`--resume`), and its event log says it was
    not requeued. It was logged as requeued, and ended without a result or that line."""
    proc, _ = runs["refused"]
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "and not requeued: " in proc.stderr and "continue with: python submit.py --resume " in proc.stderr, \
        proc.stderr[-3000:]
    failed = last_json(proc.stdout)
    (stopped,) = [e for e in events.read(Path(failed["run_dir"])) if e["event"] == "stopped"]
    assert stopped["signal"] == "USR2" and stopped["requeued"] is False and stopped["reason"] == "timeout", stopped
    assert not any(e["event"] == "started" for e in events.read(Path(failed["run_dir"]))[1:]), "it came back"


def test_a_sweep_of_an_entrypoint_is_one_array_and_every_point_trains_with_world_size_4(
        runs: dict[str, Any]) -> None:
    proc, _ = runs["sweep"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = last_json(proc.stdout)
    assert payload["counts"] == {"completed": 2}, payload
    (array,) = {j.split("_")[0] for j in payload["job_ids"]}
    assert sorted(payload["job_ids"]) == [f"{array}_{t}" for t in range(2)]
    accounted = subprocess.run(["sacct", "-j", array, "-X", "-n", "-P", "-o", "JobID,State,NNodes"],
                               capture_output=True, text=True, check=True, timeout=30).stdout.split()
    assert sorted(accounted) == [f"{array}_{t}|COMPLETED|2" for t in range(2)], accounted  # one array, 2 nodes each
    run_dir = Path(payload["run_dir"])
    for task in range(2):
        result = json.loads((run_dir / f"task-{task:04d}" / "result.json").read_text())
        assert result["world_size"] == 4 and result["steps"] == 2, result
        places = result["places"]  # what each rank's ctx said, gathered on rank 0
        assert [p["rank"] for p in places] == [0, 1, 2, 3] and {p["world_size"] for p in places} == {4}
        assert [p["local_rank"] for p in places] == [0, 1, 0, 1], places  # torchrun: node by node
        assert all(p["env"]["RANK"] == str(p["rank"]) and p["env"]["LOCAL_RANK"] == str(p["local_rank"])
                   and p["env"]["WORLD_SIZE"] == "4" for p in places), places
        # The two ranks of a node share it (its torchrun), the two nodes differ.
        assert places[0]["node"] == places[1]["node"] != places[2]["node"] == places[3]["node"], places
        assert {places[0]["env"]["SLURM_NODEID"], places[2]["env"]["SLURM_NODEID"]} == {"0", "1"}, places
