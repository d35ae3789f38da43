"""A job that failed sends itself back to the queue without the nodes it must leave out.

`requeue_without(job_id, nodes)` runs inside the job (the retry step of its batch script,
launcher.heal): `scontrol requeue` makes the job pending again at once (JobState PENDING with
COMPLETING, which counts as pending), then `scontrol update jobid=... excnodelist=...` sets its
ExcNodeList while it waits for its next start (SLURM refuses it on a running job). SLURM ends the
old attempt with SIGTERM meanwhile: the caller ignores it for these few milliseconds (KillWait is 30 s
by default). Also: what the controller says about a job and about nodes, read with `scontrol -o`; the
nodes SLURM lost in a job's last attempt (NODE_FAIL); and what bounds a run's exclusion list.
"""

from __future__ import annotations

import datetime
import subprocess
import time
from collections.abc import Callable

from launcher.cluster.jobids import expand_array_id
from launcher.cluster.slurm.accounting import sacct
from launcher.cluster.slurm.controller import conclusion
from launcher.cluster.slurm.limits import Partition, fitting_nodes, parse_partitions, parse_record, parse_records
from launcher.cluster.slurm.healing import RetryPolicy
from trainer.distributed import hostlist

TIMEOUT_S = 20.0

Run = Callable[[list[str], dict[str, str]], tuple[int, str, str]]


def scontrol(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `scontrol ARGS`; 127 where it cannot run or times out."""
    try:
        done = subprocess.run(["scontrol", *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return 127, "", str(err)
    return done.returncode, done.stdout, done.stderr


def show_job(job_id: str, env: dict[str, str], run: Run = scontrol) -> dict[str, str]:
    """The controller's record of `job_id` ({} where it does not answer)."""
    code, out, _ = run(["show", "job", "-o", job_id], env)
    return parse_record(out.splitlines()[0]) if code == 0 and out.strip() else {}


def seconds_left(record: dict[str, str], now: float | None = None) -> float | None:
    """How long a running job's time limit still lets it run (its record's EndTime); None where unknown."""
    try:
        end = datetime.datetime.fromisoformat(record.get("EndTime", "")).timestamp()
    except ValueError:  # "Unknown" (no limit), or no record
        return None
    return end - (time.time() if now is None else now)


def job_nodes(record: dict[str, str], key: str) -> list[str]:
    """A node list of a job record (NodeList, ExcNodeList, ReqNodeList) as names."""
    value = record.get(key, "")
    return [] if value in ("", "(null)") else hostlist.expand(value)


def requeue_without(job_id: str, nodes: list[str], env: dict[str, str], run: Run = scontrol) -> str:
    """Requeue `job_id` and leave `nodes` out of its next start (with the ExcNodeList it had);
    "" when done, else what went wrong (the requeue itself failing is the only fatal part)."""
    before = show_job(job_id, env, run)
    code, _, err = run(["requeue", job_id], env)
    if code != 0:
        return f"scontrol requeue {job_id} failed: {conclusion(err) or f'exit status {code}'}"
    problem = leave_out_while_pending(job_id, before, nodes, env, run)
    return f"requeued, but {problem}" if problem else ""


def leave_out_while_pending(job_id: str, record: dict[str, str], nodes: list[str], env: dict[str, str],
                            run: Run = scontrol) -> str:
    """Add `nodes` to the ExcNodeList of `job_id`, pending (`record`: its controller record, with the
    ExcNodeList it has); "" when done, else what went wrong."""
    leave_out = list(dict.fromkeys([*job_nodes(record, "ExcNodeList"), *nodes]))
    if not leave_out:
        return ""
    code, _, err = run(["update", f"jobid={job_id}", f"excnodelist={','.join(leave_out)}"], env)
    if code != 0:
        return (f"leaving out {','.join(leave_out)} failed: {conclusion(err) or f'exit status {code}'}"
                f" (the next attempt checks its nodes again before it starts)")
    return ""


def node_records(nodes: list[str], env: dict[str, str], run: Run = scontrol) -> dict[str, dict[str, str]]:
    """The controller's records of `nodes` by name ({} where it does not answer)."""
    if not nodes:
        return {}
    code, out, _ = run(["show", "node", "-o", ",".join(nodes)], env)
    return {r["NodeName"]: r for r in parse_records(out) if "NodeName" in r} if code == 0 else {}


def lost(record: dict[str, str]) -> bool:
    """A node SLURM marked down for not responding (or still not responding)."""
    state, reason = record.get("State", "").upper(), record.get("Reason", "")
    return "NOT_RESPONDING" in state or "DOWN" in state or reason.startswith("Not responding")


def partition(name: str, env: dict[str, str], run: Run = scontrol) -> Partition | None:
    """The partition `name` ("": the default one) as the live preflight reads it (None: no answer)."""
    code, parts, _ = run(["show", "partition", "-o"], env)
    code2, nodes, _ = run(["show", "node", "-o"], env)
    if code or code2:
        return None
    found = parse_partitions(parts, nodes)
    return found.get(name) if name else next((p for p in found.values() if p.default), None)


def node_fail_nodes(job_id: str, env: dict[str, str]) -> list[str] | None:
    """The nodes of `job_id`'s last ended attempt where SLURM ended it NODE_FAIL (and requeued the job
    itself); None where that attempt ended otherwise, none has ended, or accounting does not say."""
    rows = sacct([job_id], ("JobID", "State", "NodeList"), env, allocations_only=True) or []
    mine = [row for row in rows if job_id in expand_array_id(row["JobID"])]  # (sacct answers for the whole array)
    ended = [row for row in mine if row["State"] and not row["State"].startswith(("RUNNING", "PENDING"))]
    if not ended or not ended[-1]["State"].startswith("NODE_FAIL"):
        return None
    return hostlist.expand(ended[-1]["NodeList"]) if ended[-1]["NodeList"] not in ("", "None assigned") else []


def still_down(nodes: list[str], env: dict[str, str], run: Run = scontrol) -> list[str]:
    """Those of `nodes` that SLURM still has down or not responding."""
    return [n for n, rec in node_records(nodes, env, run).items() if lost(rec)]


def bounds(policy: RetryPolicy, env: dict[str, str]) -> tuple[list[str] | None, int, str]:
    """What bounds the exclusion list of a run with the retry step's `policy` (sbatch.heal_policy): (the
    partition's nodes that can hold one node's share of the request, None where the controller does not
    say; the nodes the run needs; the partition's name)."""
    part = partition(policy.partition, env)
    fitting = None if part is None else [n.name for n in fitting_nodes(policy, part)]
    return fitting, policy.nodes, part.name if part else ""
