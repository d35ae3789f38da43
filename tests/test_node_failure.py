"""A node lost mid-run, on the SLURM dev cluster: a 2-node `digits` job loses its first node (the batch
host, where rank 0 and `srun` run) to SIGKILL of that node's `slurmd`, its `slurmstepd`s and every
job process on it, as when a machine dies. Rank 1 fails on the broken connection; nothing is left
on the lost node to report the batch script's end, so the job runs on until SLURM marks the node
down (SlurmdTimeout, 30 s in the dev cluster) and requeues it (JobRequeue=1 and the job's
`--requeue`). The job is pinned to its two nodes (`--nodelist`), so it then waits, and `status`
says why. The test brings the node back through the dev cluster's own daemon functions
(ReturnToService=2 returns it to service once its slurmd registers), holding the requeued job until
the node is back as a whole (conditions, not a delay: `returned_and_settled`); the job resumes from its
last checkpoint and completes, and its next attempt's retry step records the lost node (not left out:
the job names it in its nodelist).

The cluster is shared: the job takes whole nodes (4 CPUs per task on 4-CPU nodes: no other job
can share them, so nothing but this test's job is on the node it kills), and whatever happens, the
`finally` restarts that one slurmd, waits until every node is usable again and checks it with
`python -m launcher.devcluster status`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster.slurm.accounting import SchedulerRecord
from launcher.devcluster.faults import agent_retries, kill_node, restore, returned_and_settled, scontrol_job, two_nodes
from launcher.devcluster.paths import log_file
from launcher.rundir import exclusions
from launcher.rundir.states import TaskState, _from_scheduler
from tests.helpers import ROOT, last_json, run_submit, wait_until
from tests.test_exact_resume import _popen_submit
from tests.test_requeue_slurm import events_of

# ~20-40 s of training on two nodes (22 steps an epoch), a checkpoint every 40 steps and each epoch, no evaluation or
# step log in between: the kill lands early and a resume from scratch would show.
JOB = ("extends: digits\nname: digits-node-failure\nepochs: 20\neval_every_epochs: 20\n"
       "log_every_steps: 100000\ncheckpoint_every_steps: 40\n")
CPUS_PER_NODE = 4  # the dev cluster's nodes (launcher/devcluster/config.py)


def slurm_story(job_id: str, nodes: list[str], since: str) -> str:
    """What SLURM logged about `job_id` and on `nodes` since `since` (ISO time, second precision): for a
    failure that the run's own logs cannot explain."""
    lines = []
    for name, keep in [("slurmctld", lambda line: re.search(rf"JobId={job_id}\b|StepId={job_id}\.|cpu\d", line)),
                       *[(f"slurmd-{n}", lambda line: True) for n in nodes]]:
        try:
            text = log_file(name).read_text(errors="replace")
        except OSError as e:
            lines.append(f"({name}: {e})")
            continue
        picked = [line for line in text.splitlines() if line[1:20] >= since and keep(line)]
        lines += [f"--- {name} since {since} ---", *picked[-60:]]
    return "\n".join(lines)


def status_row(run_dir: Path, cwd: Path) -> dict[str, Any] | None:
    proc = run_submit(["status", str(run_dir), "--json", "--no-collect"], cwd=cwd, timeout=60)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return rows[0] if rows else None


def newest_checkpoint_step(run_dir: Path) -> int:
    steps = [int(p.stem.split("-")[1]) for p in (run_dir / "checkpoints").glob("ckpt-*.pt")]
    return max(steps, default=0)


@pytest.mark.slurm
def test_a_node_lost_mid_run_is_requeued_by_slurm_and_the_run_resumes_from_its_checkpoint(
        slurm_cluster: Path, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(JOB)
    nodes = two_nodes()
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    proc = _popen_submit(["--job", "job.yaml", "--profile", "dev-cluster", "--wait", "--json",
                          "--set", f"profile.cpus_per_task={CPUS_PER_NODE}",
                          "--set", f"profile.sbatch_extra.nodelist={','.join(nodes)}"], tmp_path)
    run_dir: Path | None = None
    lost = ""
    try:
        run_dir = wait_until(lambda: next((tmp_path / "runs").glob("*/run.json"), None), 60, "the run folder").parent
        wait_until(lambda: newest_checkpoint_step(run_dir) >= 40, 240, "the first checkpoint", poll=0.1)
        job_id = events_of(run_dir, "started")[0]["job_id"]
        lost = scontrol_job(job_id)["BatchHost"]
        assert lost in nodes
        before = newest_checkpoint_step(run_dir)
        kill_node(job_id, lost)
        killed = time.time()

        # SLURM requeues the job once it has marked the node down; pinned to it, the job waits.
        row = wait_until(lambda: (r := status_row(run_dir, tmp_path)) and r["state"] in ("requeued", "pending")
                         and r["reason"] and r, 180, "the requeued job's pending reason", poll=2)
        requeued = time.time()
        shown = run_submit(["status", str(run_dir), "--no-collect"], cwd=tmp_path, timeout=60).stdout
        assert f"waiting: {row['reason']}" in shown, shown
        node_state = subprocess.run(["sinfo", "-h", "-n", lost, "-o", "%t"], capture_output=True, text=True,
                                    timeout=30).stdout.strip()
        assert node_state.startswith("down"), node_state
        print(f"node {lost} down; slurmctld's agent queue holds {agent_retries()} RPC(s) to re-send")

        returned_and_settled(lost, job_id)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            if run_dir is not None:
                run_submit(["cancel", str(run_dir)], cwd=tmp_path, timeout=60)
        if lost:
            restore(lost)
        up = subprocess.run([sys.executable, "-m", "launcher.devcluster", "status"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
    print(f"node {lost} lost; requeued and waiting ({row['reason']}) {requeued - killed:.0f} s after the kill")

    assert proc.returncode == 0, out + err[-3000:] + slurm_story(job_id, nodes, since)
    result = last_json(out)
    assert result["state"] == "COMPLETED" and result["restarts"] == 1, f"{result}\n{slurm_story(job_id, nodes, since)}"
    # The next attempt's retry step read SLURM's NODE_FAIL and blamed the lost node; the job names it in
    # its nodelist, so it is not left out, and the run's list says why.
    assert result["restart_causes"] == {"node-failure": 1}, result
    (entry,) = exclusions.read(run_dir)
    assert entry["node"] == lost and not entry["excluded"] and "sbatch_extra.nodelist" in entry["why_not"], entry
    assert result["epochs"] == 20
    started = events_of(run_dir, "started")
    assert len(started) == 2 and {e["job_id"] for e in started} == {job_id}
    (resumed,) = events_of(run_dir, "resumed")
    assert resumed["step"] >= before > 0, (resumed, before)  # from its last checkpoint, not from scratch
    assert not events_of(run_dir, "restarted_from_scratch")


def test_a_node_failure_is_requeued_not_failed_while_the_controller_holds_the_job_again() -> None:
    """Accounting hears of the requeue a moment after the NODE_FAIL; `status` (and a waiting sweep) must
    not call the task failed in between when the controller (squeue) has it pending again."""
    lost = SchedulerRecord("7", "failed", "NODE_FAIL", start=100.0, end=160.0, exit_code="0:0", restarts=0)
    again = SchedulerRecord("7", "pending", "PENDING", start=200.0, restarts=1, reason="BeginTime")
    ts = TaskState(0, "7", "unknown")
    _from_scheduler(ts, lost, again)
    assert (ts.state, ts.restarts, ts.reason, ts.error) == ("requeued", 1, "BeginTime", "")
    gone = TaskState(0, "7", "unknown")
    _from_scheduler(gone, lost, None)  # not requeued (the controller no longer holds it)
    assert gone.state == "failed" and gone.error.startswith("NODE_FAIL")
