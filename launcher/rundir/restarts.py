"""How many times a run was restarted, and why, read from its event log (`events.jsonl`).

Every attempt of a task writes a "started" event (launcher.node); the trainer adds "resumed",
"stopped" and "finished" (trainer.rank.events). A restart is every "started" after the first; its cause
is read from what the previous attempt left:

* it stopped on the requeue signal and submitit requeued it: "timeout" or "preemption"
  (submitit's own distinction, the one `max_timeout_requeues` counts);
* it did not requeue itself but the same job came back (SLURM requeued it: `scontrol requeue`,
  a node failure, a preemption in requeue mode): "slurm-requeue";
* it failed and came back by itself (launcher.heal; its "failure" event says where the failure came
  from): "node-failure" (retried without that node; also SLURM's own requeue after NODE_FAIL) or
  "rank-failure" (a rank raised or died; retried from the newest checkpoint);
* a new job continued the run (`submit.py --resume` after a failure or a refused requeue): "failure";
* a pool's point (launcher.node.pool_worker) that another worker continued: "slurm-requeue" when SLURM
  ended its worker (which gave it back), "taken-back" when its worker died holding it.

No torch here: `submit.py status` and `--json` use it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.rank import events

# The event the retry step (launcher.rundir.retries) records after a failed attempt, and the cause of the
# restart that follows it, by where the failure came from (the event's "origin"). Named here, where
# restarts are read, so that the readers below the retry step need not import it.
FAILURE_EVENT = "failure"
FAILURE_CAUSES = {"node": "node-failure", "code": "rank-failure", "stop": "early-stop-signal"}

CAUSES = {
    "timeout": "requeued after its time limit",
    "preemption": "requeued after preemption",
    "slurm-requeue": "requeued by SLURM (scontrol requeue, node failure)",
    "node-failure": "retried without a failed node",
    "rank-failure": "retried after a rank failed",
    "early-stop-signal": "retried after a stop signal came before its ranks could take it",
    "failure": "resumed after a failure",
    "taken-back": "taken back from a pool worker that died",
}


@dataclass
class Restart:
    """One restart of a task: why, when, under which job id, and the steps it stopped and resumed at."""

    cause: str  # a key of CAUSES
    time: float
    job_id: str
    # The step the restarted attempt resumed at (None: it started from scratch, no checkpoint yet).
    resumed_step: int | None = None
    # The step the previous attempt stopped at, when it stopped on a signal (None: it was killed).
    stopped_step: int | None = None
    detail: str = ""


@dataclass
class Restarts:
    """A task's restarts, oldest first (from its events.jsonl)."""

    restarts: list[Restart] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.restarts)

    def by_cause(self) -> dict[str, int]:
        return dict(Counter(r.cause for r in self.restarts))

    def summary(self) -> str:
        """One line, e.g. '3 restarts: 2 requeued after preemption, 1 requeued by SLURM (...)'."""
        if not self.restarts:
            return "no restarts"
        parts = [f"{n} {CAUSES.get(cause, cause)}" for cause, n in self.by_cause().items()]
        return f"{self.count} restart{'s' if self.count != 1 else ''}: {', '.join(parts)}"

    def as_json(self) -> dict[str, Any]:
        return {"restarts": self.count, "restart_causes": self.by_cause()}


def read(run_dir: Path | str) -> Restarts:
    """The restarts of the run (or sweep task) whose folder is `run_dir`."""
    return classify(events.read(run_dir))


def classify(log: list[dict[str, Any]]) -> Restarts:
    attempts = events.attempts(log)
    if not any(events.starts_attempt(e) for e in log):
        # A run without launcher "started" lines (the trainer run by hand): each resume is a restart.
        return Restarts([Restart("failure", e.get("time", 0.0), str(e.get("job_id", "")), e.get("step"))
                         for e in log if e["event"] == "resumed"])
    out: list[Restart] = []
    for previous, current in itertools.pairwise(attempts):
        start = current[0]
        resumed = next((e for e in current if e["event"] == "resumed"), None)
        stopped = next((e for e in reversed(previous) if e["event"] == "stopped"), None)
        failed = next((e for e in reversed(previous) if e["event"] == FAILURE_EVENT), None)
        before = next((e for e in previous if events.starts_attempt(e)), {})
        same_job = str(before.get("job_id", "")) == str(start.get("job_id", ""))
        restart = Restart("failure", start.get("time", 0.0), str(start.get("job_id", "")),
                          None if resumed is None else resumed.get("step"),
                          None if stopped is None else stopped.get("step"))
        if stopped is not None and stopped.get("requeued"):
            restart.cause = stopped.get("reason") if stopped.get("reason") in CAUSES else "preemption"
            restart.detail = f"SIG{stopped.get('signal')} at step {stopped.get('step')}"
        elif same_job and failed is not None and failed.get("origin") in FAILURE_CAUSES:
            restart.cause = FAILURE_CAUSES[failed["origin"]]
            restart.detail = str(failed.get("error") or "")
        elif start.get("pool_worker") and start.get("taken_back"):  # (the worker's own record of it)
            restart.cause = "taken-back"
            restart.detail = f"job {before.get('job_id', '?')} died holding it; job {start.get('job_id', '?')} took it"
        elif same_job or (start.get("pool_worker") and stopped is not None and stopped.get("signal") == "TERM"):
            restart.cause = "slurm-requeue"
            restart.detail = (f"SIGTERM at step {stopped.get('step')}" if stopped is not None
                              else "killed without warning")
        else:
            restart.detail = f"job {before.get('job_id', '?')} ended; job {start.get('job_id', '?')} continued"
        out.append(restart)
    return Restarts(out)
