"""One training run, read top to bottom: set up, (resume,) train, evaluate, save, return metrics.

`run()` is what every launcher calls once per process: submitit's local and SLURM executors (through
the submitter's task), its debug executor (in-process), torchrun (`python -m trainer`) and plain
python. It never imports submitit.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer import checkpoint, data, distenv, events, runtime, startup
from trainer.config import JobConfig, RunSettings, interrupt_steps
from trainer.models import build_model
from trainer.stopping import KIND_NAMES, TERMINATE, StopRequested, StopSignals

# Called on rank 0 after the stop checkpoint is on disk, with the signal's name; returns what was
# decided (JSON-able, at least {"requeued": bool}), which every rank then receives in StopRequested.
# The launcher's requeue lives behind it: the trainer never imports submitit.
StopHook = Callable[[str], dict[str, Any]]


class InjectedFailure(RuntimeError):
    """Raised on purpose by `job.fail_at` to test how failures propagate."""


def run(job: JobConfig, settings: RunSettings, environ: Mapping[str, str] | None = None,
        on_stop: StopHook | None = None, stops: StopSignals | None = None) -> dict[str, Any]:
    """Train `job` in this process and return the final metrics (the same on every rank).

    On a stop signal every rank finishes its step, rank 0 checkpoints and calls `on_stop`, and
    StopRequested is raised on every rank (see trainer.stopping). A caller that installed the stop
    handlers itself, earlier (the launcher does, before importing torch), passes them as `stops`.
    """
    startup.begin()
    runtime.set_threads(settings.threads)
    env = distenv.resolve(os.environ if environ is None else environ)
    # Catch stop signals from the start: one that arrives while the process group forms or the data
    # loads is honoured at the first step boundary, instead of acting in the middle of a collective.
    own_stops = stops is None
    if stops is None:
        stops = StopSignals(settings.stop_signal)
        stops.install()
    try:
        device = runtime.pick_device(settings.use_gpus, env)
        runtime.init_process_group(env, device, settings.init_timeout_s, settings.collective_timeout_s)
        startup.mark("process_group")
        try:
            return Trainer(job, settings, env, device, stops=stops, on_stop=on_stop).fit()
        finally:
            runtime.destroy_process_group()
    finally:
        if own_stops:
            stops.restore()


def lr_factor(schedule: str, step: int, total: int, warmup_fraction: float) -> float:
    if schedule == "constant":
        return 1.0
    warmup = max(1, int(total * warmup_fraction))
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "onecycle":
        return max(0.0, 1.0 - progress)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


class Trainer:
    def __init__(self, job: JobConfig, settings: RunSettings, env: distenv.DistEnv, device: torch.device,
                 stops: StopSignals | None = None, on_stop: StopHook | None = None) -> None:
        self.job, self.settings, self.env, self.device = job, settings, env, device
        self.run_dir = Path(settings.run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.every = job.checkpoint_every_steps if job.checkpoint_every_steps is not None \
            else settings.checkpoint_every_steps
        if job.deterministic and device.type == "cpu":
            torch.use_deterministic_algorithms(True, warn_only=True)
        torch.manual_seed(job.seed)  # same initial weights on every rank (DDP also broadcasts them)

        startup.mark("data_start")
        self.data = self._load_data().to(device)
        startup.mark("data")
        self.gpu = device.type == "cuda"
        model = build_model(job.model).to(device)
        if job.channels_last:  # oneDNN's CPU convolutions prefer it too (LeNet: ~15-30 % faster)
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self.ddp: nn.Module = model
        if env.distributed:
            # Gradients land straight in the all-reduce buckets (no copy); buckets are reduced while
            # backward still runs for earlier layers.
            self.ddp = DDP(model, device_ids=[device.index] if self.gpu else None,
                           gradient_as_bucket_view=True, bucket_cap_mb=25 if self.gpu else 4)
        self.forward = torch.compile(self.ddp) if (self.gpu and job.compile) else self.ddp
        self.optimizer = self._make_optimizer()
        n_train = len(self.data.train_y)
        per_rank = math.ceil(n_train / env.world_size)
        self.steps_per_epoch = math.ceil(per_rank / job.batch_size_per_rank)
        self.total_steps = self.steps_per_epoch * job.epochs
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(job.lr_schedule, s, self.total_steps, job.warmup_fraction))
        self.epoch, self.step_in_epoch, self.global_step = 0, 0, 0
        # The running epoch's loss sum and step count: checkpointed, so that a resumed epoch reports
        # the same train_loss as an uninterrupted one.
        self.epoch_loss_sum = torch.zeros((), device=device)
        self.epoch_steps = 0
        self.history: list[dict[str, Any]] = []
        self.train_time = 0.0
        self.images_seen = 0
        self.resumed_from: str | None = None
        self.start_step = 0  # the step this attempt started (or resumed) at
        self.stops = stops
        self.on_stop = on_stop
        self.interrupts = interrupt_steps(job)

    # ----- setup helpers -------------------------------------------------------------------------
    def _load_data(self) -> data.TensorDataset:
        job = self.job
        if job.dataset == "digits":
            return data.load_digits()
        if job.dataset == "synthetic-cifar10":
            return data.load_synthetic_cifar10(job.synthetic_train_size, job.synthetic_test_size, seed=1234)
        root = Path(job.data_dir or self.settings.data_dir)
        # Only one rank per node downloads; the others wait. A failure is shared so nobody hangs.
        failure = ""
        if job.download and self.env.local_rank == 0:
            try:
                data.fetch_cifar10(root, job.verify_checksums)
            except data.DataError as err:
                failure = str(err)
        if self.env.distributed:
            flags = torch.tensor([1 if failure else 0])
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            if flags.item() and not failure:
                failure = data.cifar10_missing_message(root, "the download failed on another rank")
        if failure:
            raise data.DataError(failure)
        return data.load_cifar10(root, download=False, verify_checksums=job.verify_checksums)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        job = self.job
        if job.optimizer == "adamw":
            return torch.optim.AdamW(self.model.parameters(), lr=job.lr, weight_decay=job.weight_decay)
        return torch.optim.SGD(self.model.parameters(), lr=job.lr, momentum=job.momentum,
                               nesterov=job.nesterov and job.momentum > 0, weight_decay=job.weight_decay)

    # ----- checkpoints ---------------------------------------------------------------------------
    def rank_state(self) -> dict[str, Any]:
        """What differs between ranks: the RNG states and the running epoch's partial loss sum."""
        return {"rng": self.rng_state(), "epoch_loss_sum": self.epoch_loss_sum.detach().cpu()}

    def load_rank_state(self, mine: dict[str, Any]) -> None:
        self.set_rng_state(mine["rng"])
        self.epoch_loss_sum = mine["epoch_loss_sum"].to(self.device)

    def rng_state(self) -> dict[str, Any]:
        """This rank's random number generators (all that can affect training)."""
        try:
            import numpy as np

            numpy_state: Any = np.random.get_state()
        except ImportError:
            numpy_state = None
        return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(self.device) if self.gpu else None,
                "python": random.getstate(), "numpy": numpy_state}

    def set_rng_state(self, rng: dict[str, Any]) -> None:
        torch.set_rng_state(rng["torch"])
        if self.gpu and rng.get("cuda") is not None:
            torch.cuda.set_rng_state(rng["cuda"], self.device)
        if rng.get("python") is not None:
            random.setstate(rng["python"])
        if rng.get("numpy") is not None:
            import numpy as np

            np.random.set_state(rng["numpy"])

    def state_dict(self, per_rank: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Everything a resumed run needs to continue bit for bit: model, optimizer, LR schedule,
        every rank's RNG states, the sampler's epoch and position in it, counters and metrics."""
        return {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
            "global_step": self.global_step, "history": self.history, "train_time": self.train_time,
            "images_seen": self.images_seen, "world_size": self.env.world_size,
            "epoch_steps": self.epoch_steps,
            # The data order is a pure function of (seed, epoch) and the position is step_in_epoch.
            "sampler": {"seed": self.job.seed, "epoch": self.epoch, "position": self.step_in_epoch},
            # Indexed by rank (gathered from every rank by save_checkpoint).
            "ranks": per_rank if per_rank is not None else [self.rank_state()],
            "job": asdict(self.job),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.step_in_epoch = state["epoch"], state["step_in_epoch"]
        self.global_step, self.history = state["global_step"], state["history"]
        self.train_time, self.images_seen = state["train_time"], state["images_seen"]
        self.epoch_steps = state["epoch_steps"]
        self.load_rank_state(state["ranks"][self.env.rank])

    def save_checkpoint(self) -> None:
        """Rank 0 writes the checkpoint (with every rank's own state); all ranks leave together."""
        mine = self.rank_state()
        per_rank: list[Any] = [mine]
        if self.env.distributed:
            per_rank = [None] * self.env.world_size if self.env.is_main else []
            dist.gather_object(mine, per_rank if self.env.is_main else None, dst=0)
        if self.env.is_main:
            checkpoint.save(self.ckpt_dir, self.global_step, self.state_dict(per_rank), self.job.keep_checkpoints)
        if self.env.distributed:
            dist.barrier()

    def maybe_resume(self) -> None:
        found = checkpoint.load_newest_good(self.ckpt_dir)
        if found is None:
            return
        state, path = found.state, found.path
        if state["world_size"] != self.env.world_size:
            raise RuntimeError(f"{path} was written by a run with {state['world_size']} ranks; this one has "
                               f"{self.env.world_size}: resuming would change the data order")
        self.load_state_dict(state)
        self.resumed_from = str(path)
        self.start_step = self.global_step
        skipped = [f"{bad.name}: {why}" for bad, why in found.skipped]
        self.log(f"resumed from {path.name}: epoch {self.epoch + 1}, step {self.global_step}"
                 + (f" (skipped unreadable {'; '.join(skipped)})" if skipped else ""))
        self.record_event("resumed", checkpoint=path.name, step=self.global_step, epoch=self.epoch,
                          step_in_epoch=self.step_in_epoch, skipped=skipped)

    def record_event(self, event: str, **fields: Any) -> None:
        """Rank 0 appends starts, resumes and stops to events.jsonl (what `status` and `restarts` read)."""
        if self.env.is_main:
            events.append(self.run_dir, event, job_id=self.env.job_id, **fields)

    # ----- stop signal ---------------------------------------------------------------------------
    def stop_agreed(self) -> int:
        """At a step boundary: the stop every rank agrees on (0: none; see trainer.stopping)."""
        if (self.interrupts and self.env.is_main and self.global_step in self.interrupts
                and self.global_step != self.start_step):
            self.stops.raise_requeue_signal()  # the test aid goes through the real signal handler
        kind = self.stops.kind if self.stops is not None else 0
        if self.env.distributed:
            # A CPU tensor (gloo, also on GPU runs): no device sync at every step.
            t = torch.tensor([kind])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # any rank that saw a signal stops everyone
            kind = int(t.item())
        return kind

    def stop(self, kind: int) -> None:
        """Checkpoint, let the launcher decide (requeue or not) on rank 0, tell every rank, raise."""
        name = self.stops.name if self.stops is not None and self.stops.kind == kind else ""
        name = name or ("TERM" if kind == TERMINATE else self.settings.stop_signal)
        self.save_checkpoint()
        info: dict[str, Any] = {}
        if self.env.is_main:
            info = self.stop_decision(kind, name)
            self.log(f"stopped at step {self.global_step} on SIG{name}: " + ", ".join(f"{k} {v}" for k, v in info.items()))
            self.record_event("stopped", step=self.global_step, epoch=self.epoch, step_in_epoch=self.step_in_epoch,
                              signal=name, kind=KIND_NAMES[kind], **info)
        if self.env.distributed:
            box = [info]
            # Also keeps the other ranks alive until rank 0 has requeued: with srun --kill-on-bad-exit
            # a rank that exits early with an error would kill rank 0 before it requeues the job.
            dist.broadcast_object_list(box, src=0)
            info = box[0]
        raise StopRequested(self.global_step, name, kind, info)

    def stop_decision(self, kind: int, name: str) -> dict[str, Any]:
        if kind == TERMINATE:
            # SLURM is ending the job itself (scancel, scontrol requeue, node failure): it decides
            # whether the job comes back; requeueing ourselves would turn a user's cancel into a requeue.
            return {"requeued": False, "reason": "terminated"}
        if self.on_stop is None:
            return {"requeued": False, "reason": "no requeue hook (not run by the submitter)"}
        try:
            return dict(self.on_stop(name))
        except Exception as err:  # noqa: BLE001 - reported on every rank through StopRequested
            return {"requeued": False, "reason": "requeue failed", "message": f"{type(err).__name__}: {err}"}

    # ----- the loop ------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        if self.env.is_main:
            print(f"[trainer] {message}", flush=True)

    def fit(self) -> dict[str, Any]:
        own_stops = self.stops is None
        if own_stops:  # used without run(): catch the stop signals for the length of fit()
            self.stops = StopSignals(self.settings.stop_signal)
            self.stops.install()
        try:
            return self._fit()
        finally:
            if own_stops and self.stops is not None:
                self.stops.restore()

    def _fit(self) -> dict[str, Any]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.maybe_resume()
        job, env = self.job, self.env
        self.log(f"{job.name}: {job.model} on {job.dataset}, {env.world_size} rank(s) via {env.launcher}, "
                 f"device {self.device}, batch {job.batch_size_per_rank}/rank = "
                 f"{job.batch_size_per_rank * env.world_size} global, {self.steps_per_epoch} steps/epoch")
        while self.epoch < job.epochs:
            epoch_start, seen_before = time.perf_counter(), self.images_seen
            train_loss = self.train_epoch()
            elapsed = time.perf_counter() - epoch_start
            last = self.epoch + 1 == job.epochs
            metrics: dict[str, Any] = {"epoch": self.epoch + 1, "step": self.global_step, "train_loss": train_loss,
                                       "lr": self.scheduler.get_last_lr()[0], "epoch_time_s": round(elapsed, 4),
                                       "images_per_second": (self.images_seen - seen_before) / max(elapsed, 1e-9)}
            if last or (self.epoch + 1) % job.eval_every_epochs == 0 or job.stop_at_accuracy:
                metrics.update(self.evaluate())
            metrics["time"] = time.time()
            self.history.append(metrics)
            self.epoch, self.step_in_epoch = self.epoch + 1, 0
            self.write_metrics(metrics)
            if self.every is not None and not last:
                self.save_checkpoint()  # epoch end
            if job.stop_at_accuracy and metrics.get("test_accuracy", 0) >= job.stop_at_accuracy:
                self.log(f"reached test accuracy {metrics['test_accuracy']:.4f} >= {job.stop_at_accuracy}")
                break
        return self.finish()

    def train_epoch(self) -> float:
        job, env = self.job, self.env
        indices = data.epoch_indices(len(self.data.train_y), env.world_size, env.rank, self.epoch, job.seed)
        indices = indices.to(self.device)
        self.model.train()
        if self.step_in_epoch == 0:  # a new epoch (not one resumed in the middle)
            self.epoch_loss_sum = torch.zeros((), device=self.device)
            self.epoch_steps = 0
        bar = self._progress_bar()
        start = time.perf_counter()
        while self.step_in_epoch < self.steps_per_epoch:
            kind = self.stop_agreed()
            if kind:
                self.train_time += time.perf_counter() - start
                if bar is not None:
                    bar.close()
                self.stop(kind)
            loss = self.train_step(indices)
            startup.first_step(self.run_dir, env.rank)
            self.epoch_loss_sum += loss
            self.epoch_steps += 1
            self.step_in_epoch += 1
            self.global_step += 1
            if bar is not None:
                bar.update(1)
            elif self.global_step % job.log_every_steps == 0:
                self.log(f"epoch {self.epoch + 1} step {self.step_in_epoch}/{self.steps_per_epoch} "
                         f"loss {loss.item():.4f} lr {self.scheduler.get_last_lr()[0]:.5f}")
            if self.every and self.global_step % self.every == 0 and self.step_in_epoch < self.steps_per_epoch:
                self.train_time += time.perf_counter() - start
                self.save_checkpoint()
                start = time.perf_counter()
        self.train_time += time.perf_counter() - start
        if bar is not None:
            bar.close()
        mean = self.epoch_loss_sum / max(self.epoch_steps, 1)
        if env.distributed:
            dist.all_reduce(mean, op=dist.ReduceOp.AVG if self.gpu else dist.ReduceOp.SUM)
            if not self.gpu:
                mean /= env.world_size  # gloo has no AVG
        return float(mean.item())

    def train_step(self, indices: torch.Tensor) -> torch.Tensor:
        job, env = self.job, self.env
        lo = self.step_in_epoch * job.batch_size_per_rank
        batch_idx = indices[lo: lo + job.batch_size_per_rank]
        if f"{self.global_step}:{env.rank}" == job.fail_at:
            raise InjectedFailure(f"injected failure at step {self.global_step} on rank {env.rank} (job.fail_at)")
        gen = data.batch_generator(job.seed, self.epoch, self.step_in_epoch, env.rank) if job.augment else None
        x = data.prepare(self.data.train_x[batch_idx], self.data, job.augment, gen, job.channels_last)
        y = self.data.train_y[batch_idx]
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.accumulate(x, y)
        self.optimizer.step()
        self.scheduler.step()
        self.images_seen += len(batch_idx)
        return loss.detach()

    def accumulate(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward over `grad_accum_steps` micro-batches, all-reducing only on the last."""
        micro = max(1, self.job.grad_accum_steps)
        chunks = list(zip(x.chunk(micro), y.chunk(micro)))
        total = torch.zeros((), device=self.device)
        for i, (xc, yc) in enumerate(chunks):
            sync = i == len(chunks) - 1 or not isinstance(self.ddp, DDP)
            context = self.ddp.no_sync() if not sync else contextlib.nullcontext()
            with context, torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.gpu and self.job.amp_bf16):
                out = self.forward(xc)
                loss = F.cross_entropy(out.float(), yc, label_smoothing=self.job.label_smoothing)
            (loss * len(yc) / len(y)).backward()
            total += loss.detach() * len(yc) / len(y)
        return total

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss and accuracy on the whole test set: each rank takes a shard, sums are all-reduced."""
        self.model.eval()
        shard = data.eval_shard(len(self.data.test_y), self.env.world_size, self.env.rank)
        xs, ys = self.data.test_x[shard], self.data.test_y[shard]
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, correct, count
        for lo in range(0, len(ys), 1024):
            x = data.prepare(xs[lo:lo + 1024], self.data, False, None, self.job.channels_last)
            y = ys[lo:lo + 1024]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.gpu and self.job.amp_bf16):
                out = self.model(x).float()
            sums[0] += F.cross_entropy(out, y, reduction="sum").double()
            sums[1] += (out.argmax(1) == y).sum()
            sums[2] += len(y)
        if self.env.distributed:
            dist.all_reduce(sums)
        self.model.train()
        loss, correct, count = sums.tolist()
        return {"test_loss": loss / count, "test_accuracy": correct / count, "test_count": int(count)}

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        if not self.env.is_main:
            return
        with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(metrics) + "\n")
        # One line per epoch that fits a terminal: 4 significant digits, no count of test images.
        shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                          for k, v in metrics.items() if k not in ("time", "test_count"))
        self.log(shown)
        if self.job.tensorboard:
            self._tensorboard(metrics)

    def _tensorboard(self, metrics: dict[str, Any]) -> None:
        """Rank 0 mirrors each epoch's metrics into TensorBoard event files (run_dir/tensorboard/),
        at the global step, flushed so `tensorboard --logdir` sees them while the run goes on."""
        writer = getattr(self, "tb_writer", None)
        if writer is None:
            from torch.utils.tensorboard import SummaryWriter

            writer = self.tb_writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        for key, value in metrics.items():
            if key not in ("epoch", "step", "time") and isinstance(value, (int, float)):
                writer.add_scalar(key, value, self.global_step)
        writer.flush()

    def _progress_bar(self):  # noqa: ANN202 - tqdm or None
        if not (self.settings.progress_bar and self.env.is_main):
            return None
        from tqdm import tqdm

        return tqdm(total=self.steps_per_epoch, initial=self.step_in_epoch, desc=f"epoch {self.epoch + 1}",
                    unit="step", leave=False, file=sys.stderr)

    def finish(self) -> dict[str, Any]:
        last = self.history[-1]
        evaluated = [h for h in self.history if "test_accuracy" in h]
        final = evaluated[-1] if evaluated else last
        result = {
            "world_size": self.env.world_size, "epochs": last["epoch"], "steps": self.global_step,
            "test_accuracy": final.get("test_accuracy"), "test_loss": final.get("test_loss"),
            "train_loss": last["train_loss"],
            "images_per_second": self.images_seen * self.env.world_size / max(self.train_time, 1e-9),
            "train_time_s": round(self.train_time, 3), "run_dir": str(self.run_dir),
            # Where this rank ran and how it was set up (the submitter collects every rank's).
            "node": self.env.node, "rank": self.env.rank, "master_addr": self.env.master_addr,
            "threads": torch.get_num_threads(), "resumed_from": self.resumed_from,
        }
        if self.env.is_main:
            tmp = self.run_dir / ".model_final.pt.tmp"
            torch.save(self.model.state_dict(), tmp)
            os.replace(tmp, self.run_dir / "model_final.pt")
        self.record_event("finished", step=self.global_step, epochs=last["epoch"])
        return result
