"""While `--wait` waits for a SLURM run: a job that SLURM requeued itself after NODE_FAIL leaves the lost
node out before it starts again.

Nothing of the job is left to do that where the lost node was its batch host (the retry step runs
there, launcher.heal), and the next attempt's retry step can only move off a node it landed on, at the
cost of one more turn in the queue. So, each round it asks the controller anyway (launcher.waiting.ends),
`--wait` looks at the pending job: where its last attempt ended NODE_FAIL and a node of it is still down,
that node goes on the run's exclusion list (bounded, as the retry step's), and the pending job's
ExcNodeList gets every node the run leaves out (also those a sweep sibling's failure added meanwhile).
The retry step of the next attempt then records the NODE_FAIL in events.jsonl, as it does without
`--wait`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from launcher.cluster.slurm import requeue
from launcher.cluster.slurm.env import slurm_env
from launcher.cluster.slurm.healing import RetryPolicy
from launcher.rundir import exclusions

LOOKS = 12  # accounting asked about one requeue at most this often (a round is 5 s): it may lag, or say no


class LeaveOutWhilePending:
    """Called each round `--wait` finds the job pending in the controller; acts after a requeue only."""

    def __init__(self, policy: RetryPolicy, job_id: str, say: Callable[[str], None] | None = None) -> None:
        self.policy, self.job_id, self.root = policy, job_id, Path(policy.run)
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.said: set[str] = set()
        self.looked: dict[str, int] = {}  # how often each restart's NODE_FAIL was looked for in accounting

    def __call__(self) -> None:
        # The run's cluster (the profile's `clusters:`), which launcher.request.send put in this process's environment.
        env = slurm_env(cluster=os.environ.get("SLURM_CLUSTERS", ""))
        record = requeue.show_job(self.job_id, env)  # ({} while the controller does not answer)
        if record.get("JobState") != "PENDING" or record.get("Restarts", "0") in ("", "0"):
            return
        restart = record["Restarts"]
        if 0 <= self.looked.get(restart, 0) < LOOKS:
            found = self._lost_nodes(env)
            self.looked[restart] = -1 if found else self.looked.get(restart, 0) + 1
        wanted = [n for n in exclusions.excluded(self.root) if n not in self.policy.pinned_nodes()]
        missing = [n for n in wanted if n not in requeue.job_nodes(record, "ExcNodeList")]
        if not missing:
            return
        problem = requeue.leave_out_while_pending(self.job_id, record, missing, env)
        line = (f"job {self.job_id}: {problem}" if problem else
                f"job {self.job_id} waits to start again: {', '.join(missing)} left out of it before it starts")
        if line not in self.said:  # (a refused update is tried again each round, and said once)
            self.said.add(line)
            self.say(line)

    def _lost_nodes(self, env: dict[str, str]) -> bool:
        """Leave out the nodes SLURM lost in the last attempt and still has down; whether accounting said
        NODE_FAIL (it may record the attempt's end a moment after the job is pending again)."""
        nodes = requeue.node_fail_nodes(self.job_id, env)
        down = requeue.still_down(nodes, env) if nodes else []
        if not down:
            return nodes is not None  # (back already: the next attempt's retry step finds it from the ranks' logs)
        for entry in [e for node in down for e in exclusions.add_bounded(
                self.root, [node], f"SLURM lost node {node} (NODE_FAIL)", self.policy, env, job_id=self.job_id)]:
            if not entry["excluded"]:
                self.say(f"job {self.job_id}: SLURM lost node {entry['node']} (NODE_FAIL); not left out: "
                         f"{entry.get('why_not')}")
        return True
