"""The retry step's two moments in the batch script (launcher.cluster.slurm.healing): before srun
(`before`) and after srun ended with an error (`after`). See launcher/heal/__init__.py."""

from __future__ import annotations

import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.reports import fault_origin
from launcher.reports.fault_origin import Verdict
from launcher.cluster.slurm import requeue
from launcher.cluster.slurm.env import slurm_env
from launcher.cluster.slurm.healing import MOVED_EXIT, RERUN_EXIT, RetryPolicy
from launcher.heal import facts
from launcher.heal.facts import OWN_PREFIX
from launcher.rundir import exclusions, retries
from trainer.config.lookup import CODE_ROOT
from trainer.distributed import hostlist
from trainer.rank import events

MOST_MOVES = 3  # requeues of one job off a left-out node (a failed ExcNodeList update must not loop)
RERUN_MIN_LEFT_S = 300  # a retry in this allocation has only the time limit's rest: with less, requeue


class Here:
    """This attempt: the job, its run and task folders, and the policy the batch script carries."""

    def __init__(self, policy: RetryPolicy, environ: Mapping[str, str]) -> None:
        self.policy, self.environ = policy, environ
        self.root = Path(policy.run)
        self.job = facts.job_id(environ)
        self.restart = facts.restart_count(environ)
        self.task_dir, self.run_root = facts.task_of(self.root, self.job)
        self.env = slurm_env()
        name = self.task_dir.name  # a sweep's task-NNNN (its array index differs where the sweep was split)
        self.task = int(name[5:]) if name.startswith("task-") and name[5:].isdigit() else 0

    def say(self, line: str) -> None:
        print(f"{OWN_PREFIX} {line}", flush=True)

    def pinned(self) -> tuple[str, ...]:
        return self.policy.pinned_nodes()

    def leave_out(self, verdict: Verdict, why: str) -> list[dict[str, Any]]:
        """Add the verdict's nodes to the run's exclusion list, bounded by the partition's usable nodes."""
        entries = exclusions.add_bounded(self.root, verdict.nodes, why, self.policy, self.env, task=self.task,
                                         job_id=self.job)
        for e in entries:
            self.say(f"node {e['node']} left out of this run's later attempts" if e["excluded"]
                     else f"node {e['node']} not left out: {e.get('why_not')}")
        return entries


def before(policy: RetryPolicy, environ: Mapping[str, str]) -> int:
    """Before srun: note where this attempt's logs start; record a node SLURM lost in the previous
    attempt; move off a node the run leaves out (MOVED_EXIT: the script ends)."""
    here = Here(policy, environ)
    previous = facts.note_start(here.root, here.job, here.restart)
    if here.restart and previous and not facts.rerun(environ):  # (a rerun here follows no SLURM-ended life)
        _lost_nodes(here, previous)
    banned = [n for n in exclusions.excluded(here.root) if n not in here.pinned()]
    landed = hostlist.expand(environ.get("SLURM_JOB_NODELIST", "")) if environ.get("SLURM_JOB_NODELIST") else []
    on = [n for n in landed if n in banned]
    moves = sum(1 for e in events.read(here.task_dir) if e.get("event") == "moved" and e.get("job_id") == here.job)
    if not on or moves >= MOST_MOVES:
        return 0
    previous_handler = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # SLURM ends this attempt meanwhile
    try:
        problem = requeue.requeue_without(here.job, banned, here.env)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    if problem.startswith("scontrol requeue"):
        here.say(f"this attempt landed on {', '.join(on)}, which the run leaves out, and stays: {problem}")
        return 0
    events.append(here.task_dir, "moved", job_id=here.job, nodes=on, note=problem)
    here.say(f"this attempt landed on {', '.join(on)}, which the run leaves out: requeued without it")
    return MOVED_EXIT


def _lost_nodes(here: Here, previous: dict[str, Any]) -> None:
    """The previous attempt ended in NODE_FAIL (SLURM requeued the job itself): the node it lost goes on
    the exclusion list. Which node: the one SLURM still has down, else the one whose ranks vanished."""
    nodes = requeue.node_fail_nodes(here.job, here.env)
    if nodes is None:  # (accounting off: nothing to read)
        return
    down = requeue.still_down(nodes, here.env)
    if not down:  # back already (ReturnToService): the node whose ranks ended without a word
        # The previous attempt's ranks ran on the nodes SLURM lost it on, not on this attempt's (a rank
        # that died before writing where it ran is placed by that list), and only those can be blamed.
        # (SLURM may name none: "None assigned".)
        then = {**here.environ, "SLURM_JOB_NODELIST": ",".join(nodes)} if nodes else here.environ
        ends, first = facts.rank_ends(here.root, here.job, then, previous,
                                      {k: int(v) for k, v in (facts.read_marks(
                                          facts.marks_path(here.root, here.job)).get("sizes") or {}).items()})
        verdict = fault_origin.classify(ends, list(here.policy.patterns), first_dead=first)
        down = [n for n in verdict.nodes if n in nodes or not nodes] if verdict.origin == "node" else []
    verdict = Verdict("node", None, f"SLURM lost node(s) {', '.join(down) or '?'} (NODE_FAIL)", tuple(down),
                      evidence="NODE_FAIL")
    left = here.leave_out(verdict, verdict.error)
    events.append(here.task_dir, retries.FAILURE_EVENT, job_id=here.job, restart=here.restart - 1,
                  **verdict.as_json(), retry=False, why="requeued by SLURM after NODE_FAIL",
                  excluded=[e["node"] for e in left if e["excluded"]])


def after(status: int, policy: RetryPolicy, environ: Mapping[str, str]) -> int:
    """After srun ended with `status` (not 0): classify, leave a failed node out, retry or end."""
    here = Here(policy, environ)
    marks = facts.read_marks(facts.marks_path(here.root, here.job))
    if marks.get("restart") != here.restart:
        marks = {}  # `before` found no folder yet (a first attempt): the logs start at 0
    log = events.read(here.task_dir)
    mine = _this_attempt(log, here)
    if any(e["event"] == "stopped" and e.get("kind") != "terminate" for e in mine):
        return status  # the stop signal ended it: submitit requeued it, or said why not
    # (A SIGTERM stop with the job still running was no scheduler's: srun's --kill-on-bad-exit ending the
    # peers of a rank that died. The scheduler's own end kills this script before it gets here.)
    record = requeue.show_job(here.job, here.env)
    state = record.get("JobState", "")
    if state and state != "RUNNING":
        return status  # the scheduler is ending the job itself (scancel, time limit, requeue)
    ends, first = facts.rank_ends(here.root, here.job, environ, marks)
    if fault_origin.all_returned(ends):
        # The work is done: what ended a rank after it returned (a time limit's warning signal arriving as the rank
        # exited, in the chaos soak) is no failure. Retried, the attempt would redo its last steps and meet it again.
        here.say(f"every rank returned its result in this attempt; srun's exit status {status} came after that: "
                 f"the job ends as done")
        return 0
    tool = tuple(str(root / package) for root in (CODE_ROOT, Path(here.run_root) / "code")
                 for package in ("trainer", "launcher"))  # this tool's frames are not the user's
    verdict = fault_origin.classify(ends, list(policy.patterns), tool_code=tool, first_dead=first,
                                    stop_signal=policy.stop_signal)
    started = float(marks.get("time") or 0)
    earlier = [e for e in log if events.starts_attempt(e) and e not in mine]
    decision = retries.decide(verdict, log, here.job, policy.max_failures,
                              first_attempt=not earlier, reached_first_step=facts.reached_first_step(
                                  here.task_dir, started))
    left = here.leave_out(verdict, f"rank {verdict.rank}: {verdict.error}") if verdict.origin == "node" else []
    in_place = decision.retry and _in_place(verdict, record)
    why = decision.why + ("; in this allocation (no requeue)" if in_place else "")
    events.append(here.task_dir, retries.FAILURE_EVENT, job_id=here.job, restart=here.restart, **verdict.as_json(),
                  retry=decision.retry, why=why, in_place=in_place, excluded=[e["node"] for e in left if e["excluded"]])
    here.say(f"the attempt failed ({verdict.origin}: {verdict.error}); {why}")
    if not decision.retry:
        return status
    if in_place:
        return RERUN_EXIT
    previous_handler = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # SLURM ends this attempt meanwhile
    try:
        problem = requeue.requeue_without(here.job, exclusions.excluded(here.root), here.env)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    if problem:
        here.say(problem)
    return status if problem.startswith("scontrol requeue") else 0


def _in_place(verdict: Verdict, record: dict[str, str]) -> bool:
    """Whether to retry in this allocation rather than requeue: a failure of the code (every node is fine, and
    none is left out), with at least RERUN_MIN_LEFT_S of the time limit left (a requeue starts a whole one)."""
    if verdict.origin != "code":
        return False
    left = requeue.seconds_left(record)
    return left is None or left >= RERUN_MIN_LEFT_S


def _this_attempt(log: list[dict[str, Any]], here: Here) -> list[dict[str, Any]]:
    """The events of this attempt: from its "started" on (none if rank 0 never got that far)."""
    for at in range(len(log) - 1, -1, -1):
        e = log[at]
        if events.starts_attempt(e):
            ids = (here.job, here.environ.get("SLURM_JOB_ID", ""))  # (the trainer names a raw job id)
            same = str(e.get("job_id")) in ids and e.get("slurm_restart_count") == here.restart
            return log[at:] if same else []
    return []
