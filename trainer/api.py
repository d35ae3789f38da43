"""The public per-rank API: what your own training function (or script) gets from the launcher.

    # mypkg/train.py  (job file: `entrypoint: "mypkg.train:main"` and a `config:` mapping)
    from trainer.api import Context, ResumableSampler

    def main(ctx: Context, config: dict) -> dict:
        model = torch.nn.parallel.DistributedDataParallel(Net()) if ctx.distributed else Net()
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        start = ctx.resume(model=model, optimizer=opt)      # 0, or the step the last checkpoint holds
        for step in range(start, total_steps):
            ctx.step_boundary(step)    # checkpoints on cadence; on a stop signal every rank stops here
            ...one optimizer step...
            ctx.log({"loss": loss.item()}, step + 1)
        return {"loss": final_loss}

`Context` gives the distributed environment with the process group already formed once (NCCL on
GPUs, gloo otherwise; the profile's timeouts), the run folder, `log` (metrics.jsonl, curves.png,
TensorBoard, rank-0 log lines: what built-in jobs get), `checkpoint`/`resume` of anything with
`state_dict()`/`load_state_dict()` (models, optimizers, schedulers, samplers, plain dicts) plus
every rank's RNG states (atomic, checksummed, keep-K: trainer.checkpoint), and `step_boundary`,
the stop check of the requeue protocol (trainer.stopping: all ranks agree, rank 0 checkpoints,
the launcher requeues). `ResumableSampler` resumes a DistributedSampler's epoch mid-way.

Never imports submitit: the same function runs under the submitter, torchrun (`init()`) and
plain python.
"""

from __future__ import annotations

import atexit
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data.distributed import DistributedSampler

from trainer import checkpoint, distenv, events, runtime, scriptstop
from trainer.collectives import Ranks
from trainer.reporting import Reporter
from trainer.stopping import StopHook, StopProtocol, StopSignals

__all__ = ["Context", "ResumableSampler", "init"]


class Context:
    """One rank's view of the run. Made by the launcher (or `init()`); not constructed by users."""

    def __init__(self, env: distenv.DistEnv, device: torch.device, run_dir: Path | str, config: Any = None, *,
                 stops: StopSignals, stop_signal: str = "USR2", on_stop: StopHook | None = None,
                 checkpoint_every_steps: int = 0, keep_checkpoints: int = 3, tensorboard: bool = False,
                 progress_bar: bool = False, log_every_steps: int = 50,
                 interrupts: frozenset[int] | set[int] = frozenset()) -> None:
        self.env, self.device, self.config = env, device, config
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_every_steps, self.keep_checkpoints = checkpoint_every_steps, keep_checkpoints
        self.ranks = Ranks(env)
        self.report = Reporter(self.run_dir, env, tensorboard, progress_bar, log_every_steps)
        self._stopper = StopProtocol(stops, stop_signal, on_stop, self.ranks, self.report, interrupts)
        self._objects: dict[str, Any] = {}
        self._start_step = 0
        self.last_metrics: dict[str, Any] = {}
        self.resumed_from: str | None = None
        # Attempts before this one: the run's "started" events (one per attempt, written by the
        # launcher on rank 0), or torchrun's restart count. Rank 0 reads, everyone agrees.
        self.restarts = int(self.ranks.broadcast(_previous_attempts(self.run_dir) if env.is_main else 0))

    # ----- where this rank is ------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def local_rank(self) -> int:
        return self.env.local_rank

    @property
    def node(self) -> str:
        return self.env.node

    @property
    def is_main(self) -> bool:
        return self.env.is_main

    @property
    def distributed(self) -> bool:
        return self.env.distributed

    # ----- metrics -----------------------------------------------------------------------------
    def log(self, metrics: dict[str, Any], step: int) -> None:
        """Record `metrics` at global `step` (rank 0 writes; call it on every rank, it is cheap):
        a line in metrics.jsonl and the log, TensorBoard scalars, and the curves `status` draws.
        Values must be numbers or strings; average them over ranks yourself if they differ."""
        row = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}, "time": time.time()}
        self.last_metrics = {k: v for k, v in row.items() if k != "time"}
        self.report.epoch(row, int(step))

    # ----- checkpoints -------------------------------------------------------------------------
    def checkpoint(self, step: int, **objects: Any) -> None:
        """Save `objects` (default: those given to `resume`) as the checkpoint of `step`, with every
        rank's RNG states. Call it on every rank at the same step: rank 0 writes, all leave together."""
        objects = objects or self._objects
        per_rank = self.ranks.gather({"rng": checkpoint.capture_rng(self.device)})
        if self.is_main:
            state = {"step": int(step), "world_size": self.world_size, "ranks": per_rank,
                     "objects": {name: _state_of(name, obj) for name, obj in objects.items()}}
            checkpoint.save(self.run_dir / "checkpoints", int(step), state, self.keep_checkpoints)
        self.ranks.barrier()

    def resume(self, **objects: Any) -> int:
        """Load the newest good checkpoint into `objects` (and this rank's RNG states); return its
        step, or 0 when there is none (a fresh start). The objects are remembered for `checkpoint`
        and `step_boundary`."""
        self._objects = dict(objects)
        found = checkpoint.load_newest_good(self.run_dir / "checkpoints")
        if found is None:
            return 0
        state = found.state
        if state["world_size"] != self.world_size:
            raise RuntimeError(f"{found.path} was written by a run with {state['world_size']} ranks; this one has "
                               f"{self.world_size}: resuming would change the data order")
        missing = [name for name in objects if name not in state["objects"]]
        if missing:
            raise RuntimeError(f"{found.path} holds no {', '.join(missing)} (it holds: "
                               f"{', '.join(state['objects']) or 'nothing'})")
        for name, obj in objects.items():
            _load_into(obj, state["objects"][name])
        checkpoint.restore_rng(state["ranks"][self.rank]["rng"], self.device)
        self._start_step = int(state["step"])
        self.resumed_from = str(found.path)
        skipped = [f"{bad.name}: {why}" for bad, why in found.skipped]
        self.report.log(f"resumed from {found.path.name}: step {self._start_step}")
        self.report.event("resumed", checkpoint=found.path.name, step=self._start_step, skipped=skipped)
        return self._start_step

    def step_boundary(self, step: int) -> None:
        """Call before each optimizer step (`step` = steps done so far), on every rank.

        Checkpoints every `checkpoint_every_steps` (the job's or the profile's); and when a stop
        signal arrived on any rank (preemption, the time limit, the local executor's requeue), every
        rank stops here: rank 0 checkpoints, the launcher requeues, and StopRequested is raised on
        every rank (let it propagate: the next attempt resumes from that checkpoint).
        """
        kind = self._stopper.agreed(step, self._start_step)
        if kind:
            self._stopper.stop(kind, lambda: self.checkpoint(step), step=step)
        every = self.checkpoint_every_steps
        if every and step != self._start_step and step % every == 0:
            self.checkpoint(step)

    def close(self) -> None:
        self.report.close()


class ResumableSampler(DistributedSampler):  # type: ignore[type-arg]
    """A DistributedSampler whose epoch can start mid-way: `set_epoch(epoch, skip=n)` leaves out
    the first `n` samples of this rank's share (those an interrupted attempt already trained on),
    so the rest of the epoch sees exactly the samples, in the order, an uninterrupted run would."""

    def __init__(self, dataset: Any, ctx: Context | None = None, **kwargs: Any) -> None:
        if ctx is not None:
            kwargs.setdefault("num_replicas", ctx.world_size)
            kwargs.setdefault("rank", ctx.rank)
        super().__init__(dataset, **kwargs)
        self.skip = 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        super().set_epoch(epoch)
        self.skip = skip

    def __iter__(self) -> Iterator[int]:
        return iter(list(super().__iter__())[self.skip:])

    def __len__(self) -> int:
        return max(0, self.num_samples - self.skip)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "skip": self.skip}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.set_epoch(state["epoch"], state["skip"])


_INITIALISED: dict[str, Any] = {}


def init(run_dir: str | Path | None = None, config: Any = None, threads: int | None = None,
         init_timeout_s: int = 120, collective_timeout_s: int = 45, stop_signal: str | None = None,
         checkpoint_every_steps: int = 0, keep_checkpoints: int = 3) -> Context:
    """The same Context for a script run by torchrun (or plain python): call it once per process.

    Reads the rank from torchrun's (or SLURM's) variables, forms the process group once (NCCL on a
    GPU, gloo otherwise) and tears it down at exit, takes over the stop signals (`stop_signal`, by
    default the one a `script:` job's profile uses, else USR2; and TERM). A stop at `step_boundary`
    checkpoints and raises StopRequested; left uncaught, the script prints one line and exits with
    status 75 (`trainer.scriptstop.STOPPED_EXIT_CODE`): a `script:` job then requeues and the next
    attempt resumes from the checkpoint; under torchrun, rerun the same command to resume.
    `run_dir` defaults to $TRAINER_RUN_DIR, then runs/script.
    """
    if "ctx" in _INITIALISED:
        return _INITIALISED["ctx"]
    env = distenv.resolve(os.environ)
    if threads:
        runtime.set_threads(threads)
    device = runtime.pick_device(torch.cuda.is_available(), env)
    store = runtime.init_process_group(env, device, init_timeout_s, collective_timeout_s)
    # Set by trainer.scriptrun when the submitter runs this script (`script:` jobs).
    channel = os.environ.get(scriptstop.CHANNEL_VARIABLE, "")
    stop_signal = stop_signal or os.environ.get(scriptstop.STOP_SIGNAL_VARIABLE) or "USR2"
    interrupts = {int(p) for p in os.environ.get(scriptstop.INTERRUPT_VARIABLE, "").split(",") if p.strip()}
    stops = StopSignals(stop_signal)
    stops.install()
    folder = run_dir or os.environ.get("TRAINER_RUN_DIR") or "runs/script"
    # Rank 0's stop decision is the task's: it requeues the job (trainer.scriptstop).
    on_stop = (lambda name: scriptstop.request_decision(channel, name)) if channel else None
    ctx = Context(env, device, folder, config, stops=stops, stop_signal=stop_signal, on_stop=on_stop,
                  checkpoint_every_steps=checkpoint_every_steps, keep_checkpoints=keep_checkpoints,
                  interrupts=interrupts)
    scriptstop.exit_as_stopped_on_stop_requested(channel)

    def teardown() -> None:
        ctx.close()
        runtime.destroy_process_group(together=False)
        _INITIALISED.clear()
        _INITIALISED_STORE.clear()

    _INITIALISED_STORE.append(store)  # rank 0's rendezvous store lives as long as the group
    _INITIALISED["ctx"] = ctx
    atexit.register(teardown)
    return ctx


_INITIALISED_STORE: list[Any] = []


def epoch_and_skip(step: int, steps_per_epoch: int, batch_size: int) -> tuple[int, int]:
    """Where global step `step` falls: (epoch, samples of this rank's share already consumed)."""
    return step // steps_per_epoch, (step % steps_per_epoch) * batch_size


def _previous_attempts(run_dir: Path) -> int:
    started = sum(1 for e in events.read(run_dir) if e.get("event") == "started")
    if started:
        return started - 1
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def _plain(value: Any) -> Any:
    """Tensors and numpy scalars as Python numbers (metrics.jsonl is JSON)."""
    if isinstance(value, torch.Tensor):
        return value.item()
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, (int, float, str, bool)) else value


def _state_of(name: str, obj: Any) -> Any:
    if isinstance(obj, dict):
        return dict(obj)
    state_dict = getattr(obj, "state_dict", None)
    if not callable(state_dict):
        raise TypeError(f"checkpoint: '{name}' ({type(obj).__name__}) has no state_dict(); give objects "
                        f"with state_dict()/load_state_dict() or plain dicts")
    return state_dict()


def _load_into(obj: Any, state: Any) -> None:
    if isinstance(obj, dict):
        obj.clear()
        obj.update(state)
    else:
        obj.load_state_dict(state)


def steps_per_epoch(samples: int, world_size: int, batch_size: int, drop_last: bool = False) -> int:
    """Optimizer steps per epoch for one rank's share of `samples` (DistributedSampler pads)."""
    per_rank = math.ceil(samples / world_size)
    return per_rank // batch_size if drop_last else math.ceil(per_rank / batch_size)
