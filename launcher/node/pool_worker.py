"""A pool worker (`sweep_runner: pool`): what submitit runs once per rank of each of the pool's allocations.
Its ranks stay up and run the sweep's points one after another: torch is imported, the thread count set and
the process group formed once per worker (trainer.distributed.held), not once per point, and no point
waits in the queue. Kept free of torch at import time (the submitter pickles it).

Each round rank 0 decides and every rank follows (`HeldGroup.share`): take the next free point (its claim:
launcher.reports.pool_claims), wait while other workers hold the last ones (one may die: its point is then
taken back), stop, or end. A point runs as an array task would (launcher.node.task's attempt banner and
"started" event, trainer.runners.dispatch.run_point: the same seed and settings as a fresh process), its
output in the point's own logs (launcher.node.pool_point); every rank then reports how it ended and rank 0
records that. A failed point is recorded and the worker goes on (its group formed again); a cancelled
point is dropped. A stop signal (preemption, the time limit, SLURM ending the job) stops the point at its
next step boundary: rank 0 checkpoints it, gives it back and the worker requeues (or ends) as a task would;
the requeued worker, or another, resumes the point from that checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from submitit.helpers import Checkpointable

from launcher.reports.pool_claims import Claims, Record, Worker
from launcher.node import pool_point
from launcher.node.task import SubmititRequeue, after_the_work, announce, drop_stale_result, exit_after_stop, \
    private_and_coreless, restore_caller_gpus
from trainer.config.job import JobConfig, RunSettings
from trainer.distributed import environment
from trainer.rank import stopping
from trainer.rank.stopping import NONE, REQUEUE, TERMINATE, StopRequested, StopSignals

# How often a worker with nothing to take looks again (at points other workers hold).
WAIT_S = 2.0


class PoolWorker(Checkpointable):
    """The points of one pool (`points`: task -> its job and settings, `order`: the order to take them in).
    On requeue submitit pickles this same object again: what was done is in the run folder, not here."""

    def __init__(self, points: dict[int, tuple[JobConfig, RunSettings]], order: list[int], run_root: str) -> None:
        self.points, self.order, self.run_root = points, order, run_root

    def __call__(self) -> dict[str, Any]:
        private_and_coreless()
        restore_caller_gpus(os.environ)  # before torch
        drop_stale_result()
        requeue = SubmititRequeue.current()
        first = self.points[self.order[0]][1]
        stops = StopSignals(requeue.signal_name if requeue is not None else first.stop_signal)
        stops.install()  # before torch (seconds): a signal meanwhile stops the first point at its first step
        try:
            from trainer.distributed import process  # torch, once for every point
            from trainer.distributed.held import HeldGroup

            env = environment.resolve(os.environ)
            process.set_threads(first.threads)
            device = process.pick_device(first.use_gpus, env)
            held = HeldGroup(env, device, first.init_timeout_s, first.collective_timeout_s)
            try:
                return _Rounds(self, env, held, stops, requeue).run()
            except BaseException:
                # Anything unforeseen (an OSError on the shared folder, say): the group is torn down while
                # the interpreter is whole, not at exit, where its threads can abort the process (held.close).
                held.close(together=False)
                raise
        finally:
            after_the_work(stops, requeue)


class _Rounds:
    """One life of a worker: its rounds until the pool is done or a stop ends it."""

    def __init__(self, worker: PoolWorker, env: Any, held: Any, stops: StopSignals,
                 requeue: SubmititRequeue | None) -> None:
        self.worker, self.env, self.held, self.stops, self.requeue = worker, env, held, stops, requeue
        self.me = Worker(env.scheduler_job_id)
        self.claims = Claims(worker.run_root, self.me) if env.is_main else None
        self.stop: tuple[int, str, dict[str, Any]] | None = None  # rank 0: a stop that ends this life
        self.ran: list[int] = []

    def run(self) -> dict[str, Any]:
        while True:
            step = self.held.share(self.decide() if self.env.is_main else None)
            if step["do"] == "done":
                self.held.close()
                return {"pool_worker": self.me.job_id, "points": self.ran}
            if step["do"] == "stop":
                self.held.close(together=False)
                stop = StopRequested(-1, step["signal"], step["kind"], step["info"])
                exit_after_stop(stop, self.worker.run_root, self.worker.run_root)
            if step["do"] == "run":
                self.point(step["task"], Record(step["number"], "held", step["record"]))
            elif self.env.is_main:
                time.sleep(WAIT_S)

    def decide(self) -> dict[str, Any]:
        """Rank 0: what every rank does next."""
        assert self.claims is not None
        if self.stop is None and self.stops.kind != NONE and self.stops.signalled:  # a stop between two points
            kind, name = self.stops.kind, self.stops.name
            self.stop = (kind, name, stopping.decide(kind, name, self.requeue if kind == REQUEUE else None))
        if self.stop is not None:
            kind, name, info = self.stop
            return {"do": "stop", "kind": kind, "signal": name, "info": info}
        taken = self.claims.take(self.worker.order)
        if taken is not None:
            task, record, taken_back = taken
            return {"do": "run", "task": task, "number": record.number, "record": record.data}
        return {"do": "wait" if self.claims.unfinished(self.worker.order) else "done"}

    def point(self, task: int, record: Record) -> None:
        """Run `task` on this rank (all ranks), then rank 0 records how it ended."""
        job, settings = self.worker.points[task]
        number = len(self.ran)
        self.ran.append(task)
        print(f"[pool] worker {self.me.job_id}: task {task} (rank {self.env.rank}'s log: "
              f"{os.path.join(settings.run_dir, 'logs')})", flush=True)
        start = time.time()
        with contextlib.ExitStack() as held_claim:
            # Rank 0 beats for its claim until the point's end is recorded: the gather and a re-formed
            # group can outlast the lease, and a silent holder's point would be taken back and run twice.
            beat = None if self.claims is None else held_claim.enter_context(
                pool_point.Heartbeat(self.claims, task, record, self.stops))
            with pool_point.own_logs(settings.run_dir, self.me.job_id, self.env.rank):
                announce(settings, pool_worker=True, taken_back=bool(record.data.get("taken_back")))
                on_stop = None if self.claims is None else self._on_stop(task, record)
                mine = pool_point.outcome_of(lambda: self._run(job, settings, on_stop, number))
                if mine["kind"] == pool_point.FAILED:
                    self.held.abandon()  # a peer waiting for this rank in a collective fails now, not in 45 s
            ends = self.held.gather(mine)
            if any(e["kind"] == pool_point.FAILED for e in ends):
                self.held.reform()
            print(f"[pool] worker {self.me.job_id}: task {task} {mine['kind']} after {time.time() - start:.1f} s",
                  flush=True)
            if self.claims is None or beat is None:
                return
            settled = beat.superseded is not None  # cancelled, or taken back from this worker: the newer record stands
            if not settled and any(e["kind"] != pool_point.STOPPED for e in ends):
                self.claims.finish(task, record, pool_point.ended(ends, round(time.time() - start, 3)))
                settled = True
            elif not settled and self.stops.signalled:  # a stop signal: this life ends (a requeue gave it back)
                if mine["stop_kind"] == TERMINATE:
                    self.claims.give_back(task, record, f"SIG{mine['signal']}")
                self.stop = (mine["stop_kind"], mine["signal"], mine["info"])
            elif not settled:  # another rank's signal alone: the point goes back, rank 0 decides what follows
                self.claims.give_back(task, record, f"SIG{mine['signal']} on another rank")
        if settled:  # (after the beat has stopped: a newer record it saw last must not stop the next point)
            self.stops.clear()

    def _run(self, job: JobConfig, settings: RunSettings, on_stop: Any, number: int) -> dict[str, Any]:
        from trainer.runners import dispatch

        return dispatch.run_point(job, settings, self.held, self.stops, on_stop, number)

    def _on_stop(self, task: int, record: Record) -> Any:
        """Rank 0's requeue hook for the point: give it back first (the requeue ends this life moments
        later), then submitit's requeue of the worker, as a task's."""
        def on_stop(name: str) -> dict[str, Any]:
            assert self.claims is not None
            self.claims.give_back(task, record, f"SIG{name}")
            if self.requeue is None:
                return {"requeued": False, "reason": "no requeue hook (not run by the submitter)"}
            return self.requeue(name)
        return on_stop
