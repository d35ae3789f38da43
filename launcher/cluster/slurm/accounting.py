"""Job states from SLURM: `sacct` (accounting, also for ended jobs) and `squeue` (the controller's
queue, the only source where accounting is off), both parsed by their header's column names; and
`scancel`. A controller that does not answer is told apart from one that does not know the job
(launcher.cluster.slurm.controller). Nothing here imports torch.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass

from launcher.cluster.jobids import base_id, distinct_bases, expand_array_id
from launcher.cluster.slurm.controller import Unreachable, ask, ask_until_answered
from launcher.cluster.slurm.env import sacct_cluster_args

# Set to 1 to ignore sacct even where accounting is on (what a cluster without accounting sees).
NO_SACCT_ENV = "SUBMIT_NO_SACCT"
# SLURM's job states (sacct/squeue) -> ours.
STATES = {
    "PENDING": "pending", "CONFIGURING": "running", "RUNNING": "running", "COMPLETING": "running",
    "SUSPENDED": "running", "STOPPED": "running", "RESIZING": "running", "SIGNALING": "running",
    "STAGE_OUT": "running",
    "COMPLETED": "completed",
    "FAILED": "failed", "OUT_OF_MEMORY": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed",
    "DEADLINE": "failed", "SPECIAL_EXIT": "failed",
    "CANCELLED": "cancelled", "REVOKED": "cancelled",
    "TIMEOUT": "timeout",
    "REQUEUED": "requeued", "REQUEUE_FED": "requeued", "REQUEUE_HOLD": "requeued", "PREEMPTED": "requeued",
    "RESV_DEL_HOLD": "pending",
}
# A life of the job ended in these, but SLURM requeues a requeueable job (ours all are) after them:
# the job is over only if the controller does not hold it queued again.
REQUEUED_AFTER = ("NODE_FAIL", "PREEMPTED")
# Records of these states in `sacct --duplicates` are earlier lives of a requeued job.
RESTART_STATES = ("REQUEUED", "PREEMPTED", "NODE_FAIL", "TIMEOUT", "REQUEUE_FED", "REQUEUE_HOLD")

SACCT_COLUMNS = ("JobID", "State", "Start", "End", "ElapsedRaw", "ExitCode", "NodeList", "Reason")
# squeue -O field -> the header it prints.
SQUEUE_FIELDS = {"JobArrayID": "JOBID", "State": "STATE", "RestartCnt": "RESTART_COUNT",
                 "StartTime": "START_TIME", "Reason": "REASON", "NodeList": "NODELIST"}


@dataclass
class SchedulerRecord:
    """One job's (or array task's) record from sacct or squeue, in our state names."""

    job_id: str
    state: str  # ours (see STATES)
    slurm_state: str
    start: float | None = None  # for a pending job: SLURM's expected start, where it has one
    end: float | None = None
    elapsed_s: float | None = None
    exit_code: str = ""
    nodes: str = ""
    restarts: int = 0
    reason: str = ""  # why a pending job waits (squeue's Reason; sacct's: why it waited last)


def query(argv: list[str], env: dict[str, str], timeout: float = 30) -> str | None:
    """A SLURM command's standard output, or None where it is missing or fails (e.g. accounting off)."""
    return ask(argv, env, timeout).out


def table(text: str) -> list[dict[str, str]]:
    """`|`-separated output with a header line, as one mapping per row keyed by the header's names."""
    # (Under -M, squeue and sinfo head their output with "CLUSTER: NAME": not a row.)
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("CLUSTER: ")]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split("|")]
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= len(header):
            rows.append(dict(zip(header, cells)))
    return rows


def _time(text: str) -> float | None:
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def sacct(job_ids: list[str], columns: tuple[str, ...], env: dict[str, str], since: float | None = None,
          allocations_only: bool = False) -> list[dict[str, str]] | None:
    """sacct's rows for `job_ids` (whole arrays; every life of a requeued job, `--duplicates`), keyed by
    `columns`, the one way this tool asks sacct; None where accounting is off or unavailable, [] for no ids.

    `since` (the run's creation) keeps out older jobs with the same ids: a cluster whose controller
    state was reset numbers its jobs from 1 again while its accounting database remembers them.
    `allocations_only`: the jobs' records without their steps (`-X`)."""
    if env.get(NO_SACCT_ENV, "") not in ("", "0"):
        return None
    if not job_ids:
        return []
    window = ["-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))] if since else []
    out = query(["sacct", *sacct_cluster_args(env), *(["-X"] if allocations_only else []), "-D", "-P", "-j",
                 ",".join(distinct_bases(job_ids)),
                 *window, f"--format={','.join(columns)}"], env)
    return None if out is None else table(out)


def sacct_records(job_ids: list[str], env: dict[str, str],
                  since: float | None = None) -> dict[str, SchedulerRecord] | None:
    """The current record of each job (array tasks one by one); None where accounting is unavailable
    (`since`: as in `sacct`)."""
    rows = sacct(job_ids, SACCT_COLUMNS, env, since, allocations_only=True)
    if rows is None:
        return None
    records: dict[str, SchedulerRecord] = {}
    for row in rows:
        slurm_state = row["State"].split()[0] if row["State"] else "PENDING"
        for one in expand_array_id(row["JobID"]):
            previous = records.get(one)
            # --duplicates lists a requeued job's earlier lives first, then its current record.
            restarts = (previous.restarts + (previous.slurm_state in RESTART_STATES)) if previous else 0
            record = SchedulerRecord(one, STATES.get(slurm_state, "failed"), slurm_state, _time(row["Start"]),
                                     _time(row["End"]), float(row["ElapsedRaw"]) if row["ElapsedRaw"].isdigit()
                                     else None, row["ExitCode"], row["NodeList"], restarts,
                                     reason="" if row.get("Reason") in (None, "None") else row["Reason"])
            if previous and previous.start is not None and record.start is not None:
                record.start = previous.start  # wall time spans every life of the job
            records[one] = record
    return records


def squeue_records(env: dict[str, str]) -> dict[str, SchedulerRecord] | None:
    """Jobs the controller still knows (queued, running, or ended less than MinJobAge ago); None where
    squeue is missing or fails; raises Unreachable where the controller does not answer (it may still
    hold every job: not the same as not knowing them)."""
    fields = ",".join(f"{name}:|" for name in SQUEUE_FIELDS).rstrip("|")
    answer = ask(["squeue", "-r", "-t", "all", "-O", fields], env)
    if answer.unreachable:
        raise Unreachable(answer.unreachable)
    out = answer.out
    if out is None:
        return None
    records: dict[str, SchedulerRecord] = {}
    for row in table(out):
        jid, slurm_state, restarts = row["JOBID"], row["STATE"], row["RESTART_COUNT"]
        reason = row["REASON"] if row["REASON"] not in ("None", "(null)") else ""
        records[jid] = SchedulerRecord(jid, STATES.get(slurm_state, "failed"), slurm_state, _time(row["START_TIME"]),
                                       nodes=row["NODELIST"], restarts=int(restarts) if restarts.isdigit() else 0,
                                       reason=reason)
    return records


def controller_state(job_id: str, env: dict[str, str]) -> str:
    """SLURM's state of `job_id` in the controller now (e.g. PENDING again after a requeue); "" where it
    no longer holds the job or cannot be asked; raises Unreachable where the controller does not answer."""
    answer = ask(["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T"], env)
    if answer.unreachable:
        raise Unreachable(answer.unreachable)
    out = answer.out
    return out.split()[0] if out and out.split() else ""


def scancel_ids(active: list[str], every: list[str]) -> list[str]:
    """Whole arrays by their id where every task of the array is still active, else task by task."""
    def per_array(ids: list[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job_id in ids:
            counts[base_id(job_id)] = counts.get(base_id(job_id), 0) + 1
        return counts

    total, running = per_array(every), per_array(active)
    ids = {base_id(j) if running[base_id(j)] == total[base_id(j)] else j: None for j in active}
    return [*ids]


def release(job_ids: list[str], env: dict[str, str], why: str) -> str:
    """`scontrol release` the jobs (an array by its base id); "" on success, else what it said. While the
    controller does not answer it is asked again (the user told once, `why`): a job left held waits for ever."""
    answer = ask_until_answered(["scontrol", "release", ",".join(distinct_bases(job_ids))], env, why)
    return "" if answer.ok else answer.error


def scancel(job_ids: list[str], env: dict[str, str]) -> str:
    """Cancel `job_ids`; "" on success, else scancel's complaint. While the controller does not answer,
    scancel is tried again (the user told once) until it does: the cancel is delivered, not lost."""
    answer = ask_until_answered(["scancel", *job_ids], env, "the cancel waits")
    return "" if answer.ok else answer.error
