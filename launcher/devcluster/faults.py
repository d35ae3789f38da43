"""Faults put into the dev cluster on purpose, for the tests and benchmarks (tests/, benchmarks/chaos.py): a node
dying (`kill_node`: its slurmd, the job's slurmstepds and processes on it, at once), coming back (`restore`,
`returned_and_settled`: the job held until SLURM has the node back as a whole), the controller back
(`controller_back`), and what they read of a job (`scontrol_job`, `job_start`) and of the cluster (`two_nodes`,
`agent_retries`). Like the rest of the dev cluster it imports nothing else from ``launcher``; a fault that cannot
be put in or undone raises ClusterError.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from launcher.devcluster import daemons
from launcher.devcluster.config import load_spec
from launcher.devcluster.paths import ClusterError, slurm_conf_path
from launcher.devcluster.processes import running_pid


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
    if not slurmd:
        raise ClusterError(f"slurmd of {node} is not running")
    steps, procs = node_processes(job_id, node)
    if not (steps and procs):
        raise ClusterError(f"no slurmstepd or job process of job {job_id} found on {node}")
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
    if spec is None:
        raise ClusterError("the dev cluster's spec is gone")
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
            if time.monotonic() >= deadline:
                raise ClusterError(f"node {node} not back as a whole after 240 s: {seen}")
            time.sleep(0.5)
        print(f"node {node} settled {time.time() - restarted:.1f} s after its slurmd was restarted; waited for {seen}")
    finally:
        subprocess.run(["scontrol", "release", job_id], check=True, timeout=30)


def controller_back() -> None:
    """slurmctld running and answering, every node of the dev cluster usable."""
    spec = load_spec()
    if spec is None:
        raise ClusterError("the dev cluster's spec is gone")
    if not running_pid("slurmctld"):
        daemons.start_slurmctld(spec)
    daemons.wait_nodes_ready(spec, timeout=240)


def job_start(job_id: str) -> float:
    """When SLURM started the job's current attempt (epoch seconds)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    stamp = out.split("StartTime=")[1].split()[0]
    return datetime.datetime.fromisoformat(stamp).timestamp()
