"""A job that failed sends itself back to the queue without the nodes it must leave out.

`requeue_without(job_id, nodes)` runs inside the job (the retry step of its batch script,
launcher.heal): `scontrol requeue` makes the job pending again at once (JobState PENDING with
COMPLETING, which counts as pending), then `scontrol update jobid=... excnodelist=...` sets its
ExcNodeList while it waits for its next start (SLURM refuses it on a running job). SLURM ends the
old attempt with SIGTERM meanwhile: the caller ignores it for these few milliseconds (KillWait is 30 s
by default). Also: what the controller says about a job and about nodes, read with `scontrol -o`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from launcher.cluster.failures import last_line
from launcher.cluster.slurm.limits import Partition, parse_partitions, parse_record, parse_records
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
        return f"scontrol requeue {job_id} failed: {last_line(err) or f'exit status {code}'}"
    leave_out = list(dict.fromkeys([*job_nodes(before, "ExcNodeList"), *nodes]))
    if not leave_out:
        return ""
    code, _, err = run(["update", f"jobid={job_id}", f"excnodelist={','.join(leave_out)}"], env)
    if code != 0:
        return (f"requeued, but leaving out {','.join(leave_out)} failed: {last_line(err) or f'exit status {code}'}"
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
