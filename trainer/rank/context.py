"""`Context`: one rank's view of the run, the object the public API (trainer.api) hands your function.

It joins the per-rank services of this wing behind one face: where the rank runs (trainer.distributed),
`log`/`print`/`progress` (trainer.rank.reporting), `checkpoint`/`resume` of every rank's state
(trainer.rank.checkpoint), and `step_boundary`, where the stop protocol runs (trainer.rank.stopping).
The launcher makes it (trainer.runners.functions), or `trainer.api.init()` under torchrun.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from trainer.distributed import environment
from trainer.distributed.ranks import Ranks
from trainer.rank import checkpoint, events, interval, sharded, timing
from trainer.rank.reporting import Progress, Reporter
from trainer.rank.rundir import CHECKPOINTS_DIR, checkpoint_name
from trainer.rank.stopping import StopHook, StopProtocol, StopSignals
from trainer.rank.trackers import TrackerRun, Trackers


class Context:
    """One rank's view of the run. Made by the launcher (or `init()`); not constructed by users."""

    def __init__(self, env: environment.DistEnv, device: torch.device, run_dir: Path | str, config: Any = None, *,
                 stops: StopSignals, stop_signal: str = "USR2", on_stop: StopHook | None = None,
                 checkpoint_every_steps: int = 0, keep_checkpoints: int = 3, tensorboard: bool = False,
                 progress_bar: bool = False, log_every_steps: int = 50,
                 interrupts: frozenset[int] | set[int] = frozenset(), trackers: Trackers | None = None,
                 async_checkpoints: bool = True, auto_interval_s: tuple[float, float] | None = None,
                 history: list[str] | tuple[str, ...] = ()) -> None:
        self.env, self.device, self.config = env, device, config
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_every_steps, self.keep_checkpoints = checkpoint_every_steps, keep_checkpoints
        # Rank 0's writes in the background (trainer.rank.checkpoint's doc); None: each written before the loop goes on.
        self._writer = checkpoint.Writer() if async_checkpoints else None
        self._write_group: Any = None  # the process group of sharded writes in the background (made at the first)
        # This attempt's time in steps, as the run's effective training time counts it (launcher.rundir.ettr): from
        # the first step's start, less the time the loop stood still for checkpoints.
        self._first_step_at: float | None = None
        self._made_at = time.time()  # (a function that never calls step_boundary: its whole call counts as steps)
        self._stalled_s = 0.0
        # `checkpoint_every_steps: auto` (its bounds, seconds of steps): rank 0's interval from the run's history
        # (trainer.rank.interval), and its step time at which the next checkpoint is due.
        self._interval: interval.Interval | None = None
        self._due_at = 0.0
        self.ranks = Ranks(env)
        self.report = Reporter(self.run_dir, env, tensorboard, progress_bar, log_every_steps, trackers)
        self._stopper = StopProtocol(stops, stop_signal, on_stop, self.ranks, self.report, interrupts)
        self._objects: dict[str, Any] = {}
        self._per_rank: dict[str, Any] = {}
        self._start_step = 0
        self._saved_step = 0  # the step of the last checkpoint written or resumed from (0: the start)
        self._bar: Progress | None = None
        self.last_metrics: dict[str, Any] = {}
        self.resumed_from: str | None = None
        # Attempts before this one: the run's "started" events (one per attempt, written by the
        # launcher on rank 0), or torchrun's restart count. Rank 0 reads, everyone agrees.
        self.restarts = int(self.ranks.broadcast(previous_attempts(self.run_dir) if env.is_main else 0))
        if auto_interval_s is not None and env.is_main:
            self._interval = interval.from_history(self.run_dir, *auto_interval_s, now=time.time(),
                                                   predecessors=history)
            self._due_at = self._interval.seconds
            self.report.event("checkpoint_interval", **self._interval.as_event())

    # ----- where this rank is (read from its DistEnv) -------------------------------------------
    rank = property(lambda self: self.env.rank, doc="This process's rank, 0 .. world_size - 1.")
    world_size = property(lambda self: self.env.world_size, doc="How many ranks the run has.")
    local_rank = property(lambda self: self.env.local_rank, doc="This rank's index on its node (its GPU).")
    node = property(lambda self: self.env.node, doc="The node this rank runs on.")
    is_main = property(lambda self: self.env.is_main, doc="Whether this is rank 0.")
    distributed = property(lambda self: self.env.distributed, doc="Whether the run has more than one rank.")

    # ----- metrics -----------------------------------------------------------------------------
    def log(self, metrics: dict[str, Any], step: int) -> None:
        """Record `metrics` at global `step` (rank 0 writes; call it on every rank, it is cheap):
        a line in metrics.jsonl and the log, TensorBoard scalars, the MLflow and W&B runs (steps an
        earlier attempt logged are skipped), and the curves `status` draws.
        Values must be numbers or strings; average them over ranks yourself if they differ."""
        # `step` first, unless the metrics place it themselves (the built-in's lines start with the epoch).
        row = {} if "step" in metrics else {"step": int(step)}
        row.update({k: _plain(v) for k, v in metrics.items()}, step=int(step), time=time.time())
        self.last_metrics = {k: v for k, v in row.items() if k != "time"}
        self.report.epoch(row, int(step))

    def print(self, message: str) -> None:
        """A line in rank 0's log (`[trainer] message`); the other ranks print nothing."""
        self.report.log(message)

    def progress(self, total: int, done: int = 0, desc: str = "") -> Progress:
        """Rank 0's progress over `total` steps (`done` already done: a resumed epoch), as built-in
        jobs show it: a tqdm bar on a terminal, else a log line every `log_every_steps` steps. Call
        `.step(step, describe)` after each step (`describe()` makes the line, only when one is due)
        and `.close()` at the end (or use it as a context manager); a stop closes it."""
        self._bar = self.report.progress(desc, total, done)
        return self._bar

    # ----- checkpoints -------------------------------------------------------------------------
    def checkpoint(self, step: int, *, per_rank: dict[str, Any] | None = None, **objects: Any) -> None:
        """Save `objects` (default: those given to `resume`) as the checkpoint of `step`, with every
        rank's RNG states and its own `per_rank` objects (default: those given to `resume`), which
        may differ between ranks (a running loss, a rank's sampler). Call it on every rank at the
        same step: rank 0 writes, all leave together."""
        began = time.monotonic()
        objects = objects or self._objects
        mine = self._per_rank if per_rank is None else per_rank
        per_rank_states = self.ranks.gather({"rng": checkpoint.capture_rng(self.device),
                                             "objects": {n: checkpoint.state_of(n, o) for n, o in mine.items()}})
        shared = sharded.names(objects)  # written by every rank (trainer.rank.sharded), not gathered
        folder, state = self.run_dir / CHECKPOINTS_DIR, None
        if self.is_main:
            state = {"step": int(step), "world_size": self.world_size, "ranks": per_rank_states,
                     "objects": {name: checkpoint.state_of(name, obj) for name, obj in objects.items()
                                 if name not in shared}, **({"sharded": shared} if shared else {})}
        if shared:
            self._checkpoint_shards(folder, int(step), objects, shared, state)
        elif state is not None and self._writer is not None:  # a copy now, written while the loop goes on
            self._writer.start(folder, int(step), checkpoint.frozen(state), self.keep_checkpoints)
        elif state is not None:
            checkpoint.save(folder, int(step), state, self.keep_checkpoints)
        self._saved_step = int(step)
        self.ranks.barrier()
        stall = time.monotonic() - began
        self._stalled_s += stall
        told = {}
        if self._interval is not None:  # (rank 0) the next one is due one interval of steps from now
            self._interval.measured(stall)
            self._due_at = self.productive_s() + self._interval.seconds
            told = self._interval.as_event()
        self.report.event("checkpointed", step=int(step), stall_s=round(stall, 4), productive_s=self.productive_s(),
                          **told)

    def _checkpoint_shards(self, folder: Path, step: int, objects: dict[str, Any], shared: list[str],
                           state: dict[str, Any] | None) -> None:
        """Every rank writes its shards of the `shared` objects; rank 0 (`state`: the rest) makes it a checkpoint."""
        shards = sharded.state_dicts(objects, shared)
        where, final = sharded.temporary(folder, step, self.restarts), folder / checkpoint_name(step, sharded=True)
        keep, group = self.keep_checkpoints, None
        if self._writer is not None:  # copies now, written on a process group of the writes' own
            if self._write_group is None:
                self._write_group = sharded.background_group()  # (every rank is here: a collective)
            shards, state, group = checkpoint.frozen(shards), checkpoint.frozen(state), self._write_group

        def write() -> None:
            sharded.write_shards(where, shards, group)
            if state is not None:
                sharded.finish(where, final, state, keep)

        if self._writer is not None:
            self._writer.run(step, write)
        else:
            write()

    def wait_for_checkpoint(self) -> None:
        """Until the checkpoint being written in the background (rank 0's, if any) is durable: a stop and the
        attempt's end wait for it; call it yourself before you read the checkpoints folder."""
        if self._writer is not None:
            began = time.monotonic()
            try:
                self._writer.wait()
            finally:
                self._stalled_s += time.monotonic() - began

    def productive_s(self) -> float:
        """Seconds of this attempt spent in steps so far: since the first step began, less checkpoint stalls."""
        if self._first_step_at is None:
            return 0.0
        return round(max(0.0, time.time() - self._first_step_at - self._stalled_s), 4)

    def resume(self, *, per_rank: dict[str, Any] | None = None, **objects: Any) -> int:
        """Load the newest good checkpoint into `objects`, this rank's `per_rank` objects and its
        RNG states; return its step, or 0 when there is none (a fresh start). The objects are
        remembered for `checkpoint` and `step_boundary`."""
        self._objects, self._per_rank = dict(objects), dict(per_rank or {})
        # Rank 0 picks the newest checkpoint that loads (checking checksums; a sharded one's every file), every rank
        # loads that one.
        found = checkpoint.load_newest_good(self.run_dir / CHECKPOINTS_DIR) if self.is_main else None
        chosen = self.ranks.broadcast(None if found is None else str(found.path))
        if chosen is None:
            return 0
        path = Path(chosen)
        state = found.state if found is not None else checkpoint.read(path, verify=False)
        shared = list(state.get("sharded", []))
        resharded = state["world_size"] != self.world_size
        if resharded and not shared:
            raise RuntimeError(f"{path} was written by a run with {state['world_size']} ranks; this one has "
                               f"{self.world_size}: resuming would change the data order (only a checkpoint of "
                               f"sharded state, trainer.rank.sharded, resumes on another world size)")
        mine = {} if resharded else state["ranks"][self.rank]
        held, held_mine = {**state.get("objects", {}), **dict.fromkeys(shared)}, mine.get("objects", {})
        missing = [n for n in objects if n not in held]
        missing += [] if resharded else [f"per_rank {n}" for n in self._per_rank if n not in held_mine]
        if missing:
            raise RuntimeError(f"{path} holds no {', '.join(missing)} (it holds: "
                               f"{', '.join([*held, *(f'per_rank {n}' for n in held_mine)]) or 'nothing'})")
        if shared:
            shards = sharded.state_dicts(objects, [n for n in shared if n in objects])
            sharded.read_shards(path, shards)
            sharded.load_into(objects, shards)
        for name, obj in objects.items():
            if name not in shared:
                checkpoint.load_into(obj, held[name])
        if not resharded:  # (a rank of another world size has no RNG or per-rank objects of its own to resume)
            for name, obj in self._per_rank.items():
                checkpoint.load_into(obj, held_mine[name])
            checkpoint.restore_rng(mine["rng"], self.device)
        self._start_step = self._saved_step = int(state["step"])
        self.resumed_from = str(path)
        skipped = [f"{bad.name}: {why}" for bad, why in (found.skipped if found is not None else [])]
        how = (f", resharded from {state['world_size']} ranks to {self.world_size} (not bitwise: each rank's data, "
               f"RNG and per-rank objects start afresh)" if resharded else "")
        self.report.log(f"resumed from {path.name}: step {self._start_step}{how}")
        self.report.event("resumed", checkpoint=path.name, step=self._start_step, skipped=skipped,
                          **({"resharded_from": state["world_size"]} if resharded else {}))
        return self._start_step

    def step_boundary(self, step: int) -> bool:
        """Call before each optimizer step (`step` = steps done so far), on every rank; True when it
        wrote a checkpoint (a loop that times its steps can leave that time out).

        Checkpoints every `checkpoint_every_steps` (the job's or the profile's; not a step already
        checkpointed, e.g. by your own `checkpoint` at an epoch end), or with `auto` when rank 0's interval from
        measurements has passed (trainer.rank.interval); and when a stop signal arrived
        on any rank (preemption, the time limit, the local executor's requeue), every rank stops
        here: rank 0 checkpoints, the launcher requeues, and StopRequested is raised on every rank
        (let it propagate: the next attempt resumes from that checkpoint).
        """
        if self._first_step_at is None:
            self._first_step_at = time.time()  # (before it, this attempt was starting up)
        if step != self._start_step:
            timing.first_step(self.run_dir, self.rank)  # the start-up benchmark's mark (once)
        due = self._interval is not None and self.productive_s() >= self._due_at
        kind = self._stopper.agreed(step, self._start_step, due)
        if kind:
            if self._bar is not None:
                self._bar.close()  # before the stop's log line, which would land inside the bar
            # (Written before the requeue is asked for: the next attempt resumes from it.)
            self._stopper.stop(kind, lambda: (self.checkpoint(step), self.wait_for_checkpoint()), step=step)
        every = self.checkpoint_every_steps
        if step != self._saved_step and (self._stopper.checkpoint_due or every and step % every == 0):
            self.checkpoint(step)
            return True
        return False

    @property
    def trackers(self) -> dict[str, TrackerRun]:
        """The run's MLflow and W&B runs on rank 0, by name ("mlflow", "wandb"), each a `TrackerRun` with
        `run_id` and `run` (the `wandb.Run`) or `client` (an `MlflowClient`): for what `log` does not
        cover (artifacts, tables). The same runs on every attempt; {} on other ranks and without a tracker."""
        return self.report.tracker_runs

    def close(self, outcome: str = "finished") -> None:
        """End this attempt: `outcome` is finished, stopped (a requeue follows) or failed; the checkpoint being
        written first (a failure still leaves it whole for the next attempt)."""
        try:
            self.wait_for_checkpoint()
        except Exception as err:  # noqa: BLE001 - a stop's or a failure's own cause is what the attempt reports
            if outcome == "finished":
                raise
            self.report.log(str(err))
        finally:
            # How this attempt spent its time (launcher.rundir.ettr reads it with the "checkpointed" events).
            if self._first_step_at is None:
                self._first_step_at = self._made_at
            self.report.event("timed", outcome=outcome, productive_s=self.productive_s(),
                              stalled_s=round(self._stalled_s, 4), first_step_at=self._first_step_at)
            self.report.close(outcome)


def previous_attempts(run_dir: Path) -> int:
    """Attempts before this one (trainer.rank.events: the launcher's count, else torchrun's)."""
    return events.attempt_number(run_dir) - 1


def _plain(value: Any) -> Any:
    """Tensors and numpy scalars as Python numbers (metrics.jsonl is JSON)."""
    if isinstance(value, torch.Tensor):
        return value.item()
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, (int, float, str, bool)) else value
