"""The faults of `benchmarks/chaos.py`, each injected the way a test of this project already injects it on the
dev cluster (named beside each one), and the conditions a fault waits for before it lands.

Everything here acts on one *target*: a run folder of one SLURM job (a plain run, or one task of a sweep), its
current job id and its ranks' task processes. Nothing here sleeps a fixed time where a condition exists; the
two durations that are the fault itself (how long the controller stays away, how long the ranks are frozen
until SLURM's time-limit signal is due) are said where they are.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from launcher.devcluster import daemons, running_pid
from launcher.devcluster.faults import controller_back, job_start, kill_node, restore, returned_and_settled, scontrol_job
from trainer.rank import events

# name: (what it does, the kinds whose code or job allows it)
ALL_KINDS = ("builtin", "entrypoint", "script", "sweep")
FAULTS = {
    "kill-9": ("SIGKILL of one rank's task process (tests/test_failfast.py, test_self_healing.py)", ALL_KINDS),
    "node-lost": ("the batch host's slurmd, slurmstepds and job processes SIGKILLed, then the node restored "
                  "(tests/test_node_failure.py)", ("builtin", "entrypoint", "script")),
    "bad-node": ("every rank on one node raises CUDA's ECC error from step 22 (tests/userpkg/faults.py)",
                 ("entrypoint", "sweep")),
    "requeue": ("scontrol requeue (tests/test_requeue_slurm.py)", ALL_KINDS),
    "preempt": ("scancel --signal=USR2, SLURM's preemption warning (tests/test_requeue_slurm.py)", ALL_KINDS),
    "time-limit": ("a 1-minute limit, ranks frozen until SLURM's signal is due (tests/test_requeue_slurm.py); "
                   "once it has stopped the run, the limit is set back to 30 minutes", ALL_KINDS),
    "ctld-restart": ("slurmctld stopped, then started again (tests/test_controller_restart.py)", ALL_KINDS),
    # A `script:` checkpoints only when it stops (its init() call sets no cadence): nothing to cut mid-run.
    "truncated-ckpt": ("the newest checkpoint cut in half while the ranks are frozen, then scontrol requeue "
                       "(tests/test_checkpoint.py)", ("builtin", "entrypoint", "sweep")),
}
# Faults decided at submission (job or profile settings), not injected from outside later.
AT_SUBMISSION = ("bad-node", "time-limit")
# At most one of these per run: each costs the most wall time, and node-lost pins the job to its nodes
# (`sbatch_extra.nodelist`), which would keep a bad node from being left out.
SLOW = ("node-lost", "bad-node", "time-limit")
BAD_NODE_STEP = 22  # tiny's 48 steps, a checkpoint every 4: step 20's comes before it
TIME_LIMIT_SIGNAL_DUE_S = 47  # a 1-minute limit, the signal 45 s before it: SLURM has sent it 15-47 s in

# Held by a controller outage, and by a submission until its job is queued (runs may go two at a time).
CONTROLLER = threading.Lock()


class Cleanup:
    """What the faults changed on the shared cluster, undone in `undo` (called from a `finally`)."""

    def __init__(self) -> None:
        self.lost_nodes: set[str] = set()
        self.frozen: set[int] = set()
        self.controller_stopped = False

    def undo(self) -> list[str]:
        done = []
        for pid in sorted(self.frozen):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        for node in sorted(self.lost_nodes):
            restore(node)
            done.append(f"node {node} restored")
        if self.controller_stopped or not running_pid("slurmctld"):
            controller_back()
            done.append("slurmctld started again")
        return done


CLEANUP = Cleanup()


@dataclass
class Target:
    """One SLURM job of a run: `folder` holds its events.jsonl and checkpoints/, `logs` its ranks' logs."""

    folder: Path
    logs: Path
    ranks: int
    seen_attempts: int = 0  # 'started' events of attempts that an earlier fault ended
    notes: list[str] = field(default_factory=list)

    def started(self) -> list[dict]:
        return self.events("started")

    def events(self, name: str) -> list[dict]:
        try:
            return [e for e in events.read(self.folder) if e["event"] == name]
        except (OSError, ValueError):
            return []

    def job_id(self) -> str:
        return self.started()[-1]["job_id"]

    def rank_pids(self) -> list[int] | None:
        """The task pid of every rank of the current attempt (from the banner each writes at the top of its
        log), or None until all have written theirs."""
        job = self.job_id()
        pids = []
        for rank in range(self.ranks):
            log = self.logs / job / f"{job}_{rank}_log.out"
            try:
                banners = [l for l in log.read_text(errors="replace").splitlines() if "attempt started" in l]
            except OSError:
                return None
            if len(banners) < len(self.started()):
                return None  # this attempt's banner is not there yet
            pids.append(int(banners[-1].split(" pid ")[1].split()[0]))
        return pids

    def checkpoints(self) -> list[Path]:
        return sorted((self.folder / "checkpoints").glob("ckpt-*.pt"))


class Ended(Exception):
    """The run ended before the fault's trigger came."""


def wait_for(condition, timeout: float, what: str, poll: float = 0.2, running=lambda: True):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if not running():
            raise Ended(what)
        time.sleep(poll)
    raise TimeoutError(f"no {what} after {timeout:.0f} s")


def trigger(target: Target, when: str, running, timeout: float = 300) -> None:
    """Wait for a new attempt whose ranks have started ("start") and, for "checkpoint", have written a
    checkpoint since (for "epoch", logged an epoch's metrics since): each fault lands on an attempt that an
    earlier fault did not already hit."""
    wait_for(lambda: len(target.started()) > target.seen_attempts and target.rank_pids(), timeout,
             "new attempt with its ranks started", running=running)
    since = target.started()[-1]["time"]
    if when == "checkpoint":
        wait_for(lambda: any(p.stat().st_mtime > since for p in _existing(target.checkpoints())), timeout,
                 "checkpoint of this attempt", running=running)
    if when == "epoch":
        metrics = target.folder / "metrics.jsonl"
        wait_for(lambda: metrics.exists() and metrics.stat().st_mtime > since, timeout, "epoch of this attempt",
                 running=running)


def _existing(paths: list[Path]) -> list[Path]:
    return [p for p in paths if p.exists()]


AWAY = ("Unable to contact slurm controller", "Socket timed out", "Connection refused", "Zero Bytes were transmitted")


def slurm(*argv: str) -> None:
    """A SLURM command that must land: retried while the controller is away (another run's outage), and only
    then (a job that has ended is an answer: "Invalid job id specified")."""
    deadline = time.monotonic() + 180
    while True:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline or not any(word in proc.stderr for word in AWAY):
            raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
        time.sleep(1)


def descendants(pids: list[int]) -> list[int]:
    """`pids` and every process below them (a `script:` rank's task runs the script as a child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    if sig == signal.SIGSTOP:
        CLEANUP.frozen.update(pids)
    elif sig == signal.SIGCONT:
        CLEANUP.frozen.difference_update(pids)


def inject(fault: str, target: Target, drawn: dict) -> str:
    """Inject `fault` on `target`'s current attempt, with what the schedule drew for it (`rank`, `outage_s`);
    returns what was done, for the run's record."""
    job = target.job_id()
    pids = target.rank_pids() or []
    if fault != "ctld-restart":  # every other fault ends this attempt: the next fault waits for a new one
        target.seen_attempts = len(target.started())
    if fault == "kill-9":
        rank = drawn["rank"]
        os.kill(pids[rank], signal.SIGKILL)
        return f"kill -9 rank {rank} (pid {pids[rank]}) of job {job}"
    if fault == "requeue":
        slurm("scontrol", "requeue", job)
        return f"scontrol requeue {job}"
    if fault == "preempt":
        slurm("scancel", "--signal=USR2", job)
        return f"scancel --signal=USR2 {job}"
    if fault == "truncated-ckpt":
        # Frozen first, so that no rank writes a newer checkpoint (nor one on SIGTERM: KillWait is 2 s, then
        # SIGKILL) and the cut one is the newest when the next attempt resumes.
        frozen = descendants(pids)
        signal_all(frozen, signal.SIGSTOP)
        try:
            newest = target.checkpoints()[-1]
            size = newest.stat().st_size
            os.truncate(newest, size // 2)
            slurm("scontrol", "requeue", job)
            wait_for(lambda: not any(_alive(p) for p in pids), 120, "end of the frozen attempt")
        finally:
            signal_all(frozen, signal.SIGCONT)
        return f"{newest.name} cut from {size} to {size // 2} bytes, then scontrol requeue {job}"
    if fault == "time-limit":
        # As tests/test_requeue_slurm.py: the ranks held (a slow machine) until SLURM's signal is due.
        frozen = descendants(pids)
        signal_all(frozen, signal.SIGSTOP)
        stops = len(target.events("stopped"))
        try:
            due = job_start(job) + TIME_LIMIT_SIGNAL_DUE_S
            time.sleep(max(0.0, due - time.time()))  # the fault itself: frozen until the signal is due
        finally:
            signal_all(frozen, signal.SIGCONT)
        # One time limit, not one per attempt: on this machine an attempt takes 10-25 s to reach its first
        # step, so every later attempt would be signalled too before doing much. Once the limit has stopped
        # the run, the job gets a long limit back (a run with no requeue left has ended: nothing to update).
        try:
            wait_for(lambda: target.events("stopped")[stops:] or job_over(job), 120, "stop on the time limit")
            stop = (target.events("stopped")[stops:] or [{}])[0]
            after = "; not requeued (no time-out requeue left)"
            if stop.get("requeued"):
                slurm("scontrol", "update", f"jobid={job}", "TimeLimit=30")
                after = "; then its limit set back to 30 min"
        except (TimeoutError, RuntimeError) as e:
            after = f"; its limit left at 1 min ({e})"
        return f"ranks of job {job} frozen until {TIME_LIMIT_SIGNAL_DUE_S} s after its start{after}"
    if fault == "ctld-restart":
        outage = drawn["outage_s"]
        with CONTROLLER:
            CLEANUP.controller_stopped = True
            daemons.stop_daemon("slurmctld")
            time.sleep(outage)  # the fault itself: how long nothing answers
            controller_back()
            CLEANUP.controller_stopped = False
        return f"slurmctld stopped for {outage:.0f} s, then started again"
    if fault == "node-lost":
        # Held until the node is back: no other run's controller outage meanwhile (this fault's scontrol calls
        # would fail, and a restarted controller waits for every node, this lost one too). Seen in the first
        # 40-run soak: a node-lost and a ctld-restart at once left cpu3 down for every run after them.
        with CONTROLLER:
            node = scontrol_job(job)["BatchHost"]
            CLEANUP.lost_nodes.add(node)
            kill_node(job, node)
            # SLURM marks the node down after SlurmdTimeout and requeues the job, pinned to its nodes: it waits.
            wait_for(lambda: scontrol_job(job).get("JobState") == "PENDING", 240, f"requeue of job {job}", poll=1)
            returned_and_settled(node, job)
            CLEANUP.lost_nodes.discard(node)
        return f"node {node} (batch host of job {job}) lost, then restored"
    raise ValueError(fault)


def job_over(job: str) -> bool:
    """The job is no longer running (ended, or requeued and waiting): a fault meant for this attempt missed it."""
    proc = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60)
    return proc.returncode == 0 and proc.stdout.strip() != "RUNNING" or "Invalid job id" in proc.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
