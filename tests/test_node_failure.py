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

import dataclasses
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster.slurm.accounting import SchedulerRecord
from launcher.devcluster import daemons, load_spec, running_pid
from launcher.devcluster.paths import log_file, slurm_conf_path
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


def two_nodes() -> list[str]:
    """Two cpu nodes for the job, idle ones first (the highest: other tests land on the lowest)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "cpu", "-o", "%N %t"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    states = dict(line.split() for line in out.splitlines() if line.strip())
    return sorted(sorted(states, reverse=True), key=lambda n: states[n] != "idle")[:2]


def scontrol_job(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def _environ(pid: int) -> dict[str, str]:
    try:
        items = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return {}
    return dict(i.decode(errors="replace").split("=", 1) for i in items if b"=" in i)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _is_slurmstepd(pid: int) -> bool:
    try:  # (by its own name, "slurmstepd: [JOB.STEP]": Debian's binary is slurmstepd-wlm)
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"slurmstepd")
    except OSError:
        return False


def node_processes(job_id: str, node: str) -> tuple[list[int], list[int]]:
    """(slurmstepds, job processes) of `job_id` on `node`: the job's processes carry SLURM_JOB_ID and
    SLURMD_NODENAME (the batch script, srun, the task and its children); the slurmstepd of each step
    is the parent of its first process."""
    procs = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    mine = [p for p in procs if (env := _environ(p)).get("SLURM_JOB_ID") == job_id
            and env.get("SLURMD_NODENAME") == node]
    steps = sorted({_parent(p) for p in mine if _is_slurmstepd(_parent(p))})
    return steps, mine


def kill_node(job_id: str, node: str) -> list[int]:
    """The node's slurmd, the job's slurmstepds and its processes on it die at once, as on a dead machine:
    all frozen first (SIGSTOP), then SIGKILLed. Killed one after the other, a survivor reacts to the
    others' death: srun, seeing its step's slurmstepd gone, asks slurmctld to cancel step J.0; the signal
    for the dead node waits in slurmctld's retry queue and reaches the node a minute later, when the
    requeued attempt's own step J.0 may run there (STEP J.0 CANCELLED on the returned node)."""
    slurmd = running_pid(f"slurmd-{node}")
    assert slurmd, f"slurmd of {node} is not running"
    steps, procs = node_processes(job_id, node)
    assert steps and procs, f"no slurmstepd or job process of job {job_id} found on {node}"
    killed = [slurmd, *steps, *procs]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in killed:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    return killed


def restore(node: str) -> None:
    """The node back in service: its slurmd restarted as `up` starts it, but clean (`slurmd -c`, as after a
    reboot: the dead steps' sockets and batch script folders are removed before it registers), the node
    resumed if SLURM left it down (wait_nodes_ready does that), every node of the cluster usable.

    Without -c the dead attempt's step sockets stay in the node's spool for 10 minutes (slurmd unlinks a
    stray socket only when it is older than that), named by the job id that the requeued attempt reuses,
    and every time slurmd lists its steps (each registration) it finds the dead batch socket and deletes
    the job's batch script folder: seen minutes after the node was back ("Purging vestigial job script
    .../job00112/slurm_script"), and a new attempt launched there meanwhile loses its script. A real machine
    comes back after minutes, past that age; this one comes back in seconds."""
    spec = load_spec()
    assert spec is not None, "the dev cluster's spec is gone"
    if not running_pid(f"slurmd-{node}"):
        (wanted,) = [n for n in spec.all_nodes() if n.name == node]
        started = daemons.slurmd_daemon(spec, wanted)
        daemons.start_daemon(dataclasses.replace(started, argv=[*started.argv, "-c"]))
    daemons.wait_nodes_ready(spec, timeout=120)


def node_settled(node: str, job_id: str, restarted: float) -> str:
    """"" once SLURM has `node` back as a whole, else what it still waits for: the node's new slurmd has
    registered (SlurmdStartTime after the restart), the node is in service with no flag left (not
    responding, down, drained, completing), no leftover of the killed attempt is in the node's spool (its
    step sockets and batch script folder, named by the job id that the requeued attempt reuses: `restore`),
    the job is plainly pending (its killed attempt has finished completing everywhere), and slurmctld has
    no RPC left to re-send (`agent_retries`)."""
    out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True,
                         timeout=30).stdout
    record = dict(re.findall(r"(\w+)=(\S*)", out))
    base, *flags = record.get("State", "?").split("+")
    if base not in ("IDLE", "MIXED", "ALLOCATED") or flags or base.endswith("*"):
        return f"node {node} is {record.get('State', '?')}"
    started = record.get("SlurmdStartTime", "")
    if not started[:1].isdigit() or datetime.datetime.fromisoformat(started).timestamp() < restarted - 1:
        return f"the new slurmd of {node} has not registered (SlurmdStartTime {started})"
    spool = slurm_conf_path().parent / "spool" / f"slurmd-{node}"
    left = sorted(p.name for p in spool.glob("*") if p.name.startswith(f"{node}_{job_id}.")
                  or p.name == f"job{int(job_id):05d}")
    if left:
        return f"the killed attempt's {', '.join(left)} still in {spool}"
    state = scontrol_job(job_id).get("JobState", "")
    if state != "PENDING":
        return f"job {job_id} is {state}"
    queued = agent_retries()
    if queued > 0:
        return f"slurmctld holds {queued} RPC(s) to re-send (sdiag's agent queue)"
    return ""


def agent_retries() -> int:
    """RPCs slurmctld keeps re-sending to nodes that did not take them (sdiag's "Agent queue size", its retry
    list; -1 where sdiag does not say). A step signal sent while the node was dead, e.g. to the killed
    attempt's step J.0, waits there and is re-sent a minute later: if the requeued attempt (the same job
    and step id, J.0) runs on the returned node by then, its ranks there are killed (STEP J.0 CANCELLED)."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"^Agent queue size:\s*(\d+)", out, re.MULTILINE)
    return int(found.group(1)) if found else -1


def returned_and_settled(node: str, job_id: str) -> None:
    """`restore` the node while the requeued job is held, and let the job go once SLURM has the node back as
    a whole (`node_settled`). Released at a fixed delay instead (at once, then 12 s after), the requeued
    attempt was killed on the returned node 8 to 25 s into its run now and then (STEP J.0 CANCELLED: a
    SIGKILL for step J.0, which the killed attempt's step had too): what the dead attempt left behind
    (`kill_node`, `restore`, `agent_retries`) must be gone first, whatever the time that takes."""
    subprocess.run(["scontrol", "hold", job_id], check=True, timeout=30)
    try:
        restarted = time.time()
        restore(node)
        seen: list[str] = []  # what it waited for, in order (shown with the test's output)
        deadline = time.monotonic() + 240  # a queued RPC is re-sent a minute after it failed
        while why := node_settled(node, job_id, restarted):
            seen += [why] if not seen or seen[-1] != why else []
            assert time.monotonic() < deadline, f"node {node} not back as a whole after 240 s: {seen}"
            time.sleep(0.5)
        print(f"node {node} settled {time.time() - restarted:.1f} s after its slurmd was restarted; waited for {seen}")
    finally:
        subprocess.run(["scontrol", "release", job_id], check=True, timeout=30)


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
