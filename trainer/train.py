"""One training run, read top to bottom: set up, (resume,) train, evaluate, save, return metrics.

`run()` is what every launcher calls once per process: submitit's local and SLURM executors (through
the submitter's task), its debug executor (in-process), torchrun (`python -m trainer`) and plain
python. It never imports submitit.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from trainer import checkpoint, data, distenv, recipe, runtime, scriptrun, startup, step, stopping, userrun
from trainer.collectives import Ranks
from trainer.config import JobConfig, RunSettings, interrupt_steps
from trainer.reporting import Reporter
from trainer.stopping import StopHook, StopProtocol, StopSignals


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
    with stopping.installed(stops, settings.stop_signal) as stops:
        if job.script:  # a script forms its own process group, in a child process (trainer.scriptrun)
            return scriptrun.run(job, settings, env, stops)
        device = runtime.pick_device(settings.use_gpus, env)
        with runtime.process_group(env, device, settings.init_timeout_s, settings.collective_timeout_s):
            startup.mark("process_group")
            if job.entrypoint:  # the user's own function, on the same public API as below
                return userrun.run(job, settings, env, device, stops, on_stop)
            return Trainer(job, settings, env, device, stops=stops, on_stop=on_stop).fit()


class Trainer:
    def __init__(self, job: JobConfig, settings: RunSettings, env: distenv.DistEnv, device: torch.device,
                 stops: StopSignals | None = None, on_stop: StopHook | None = None) -> None:
        self.job, self.settings, self.env, self.device = job, settings, env, device
        self.stops, self.on_stop = stops, on_stop
        self.run_dir = Path(settings.run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.every = job.checkpoint_every_steps if job.checkpoint_every_steps is not None \
            else settings.checkpoint_every_steps
        self.bf16 = device.type == "cuda" and job.amp_bf16
        self.ranks = Ranks(env)
        self.report = Reporter(self.run_dir, env, job.tensorboard, settings.progress_bar, job.log_every_steps)
        if job.deterministic and device.type == "cpu":
            torch.use_deterministic_algorithms(True, warn_only=True)
        torch.manual_seed(job.seed)  # same initial weights on every rank (DDP also broadcasts them)

        startup.mark("data_start")
        self.data = recipe.load_data(job, settings.data_dir, env.local_rank, self.ranks).to(device)
        startup.mark("data")
        self.model, self.ddp, self.forward = recipe.build(job, device, env.distributed)
        self.optimizer = recipe.make_optimizer(job, self.model)
        per_rank = math.ceil(len(self.data.train_y) / env.world_size)
        self.steps_per_epoch = math.ceil(per_rank / job.batch_size_per_rank)
        self.total_steps = self.steps_per_epoch * job.epochs
        self.scheduler = recipe.make_scheduler(job, self.optimizer, self.total_steps)
        self.epoch, self.step_in_epoch, self.global_step = 0, 0, 0
        self.mine = checkpoint.RankState(device)  # RNG states and the running epoch's loss
        self.history: list[dict[str, Any]] = []
        self.train_time = 0.0
        self.images_seen = 0
        self.resumed_from: str | None = None
        self.start_step = 0  # the step this attempt started (or resumed) at

    # ----- checkpoints ---------------------------------------------------------------------------
    def state_dict(self, per_rank: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Everything a resumed run needs to continue bit for bit: model, optimizer, LR schedule,
        every rank's RNG states, the sampler's epoch and position in it, counters and metrics."""
        return {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
            "global_step": self.global_step, "history": self.history, "train_time": self.train_time,
            "images_seen": self.images_seen, "world_size": self.env.world_size,
            "epoch_steps": self.mine.steps,
            # The data order is a pure function of (seed, epoch) and the position is step_in_epoch.
            "sampler": {"seed": self.job.seed, "epoch": self.epoch, "position": self.step_in_epoch},
            # Indexed by rank (gathered from every rank by save_checkpoint).
            "ranks": per_rank if per_rank is not None else [self.mine.capture()],
            "job": asdict(self.job),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.step_in_epoch = state["epoch"], state["step_in_epoch"]
        self.global_step, self.history = state["global_step"], state["history"]
        self.train_time, self.images_seen = state["train_time"], state["images_seen"]
        self.mine.restore(state["ranks"][self.env.rank], state["epoch_steps"])

    def save_checkpoint(self) -> None:
        """Rank 0 writes the checkpoint (with every rank's own state); all ranks leave together."""
        per_rank = self.mine.gather(self.ranks)
        if self.env.is_main:
            checkpoint.save(self.ckpt_dir, self.global_step, self.state_dict(per_rank), self.job.keep_checkpoints)
        self.ranks.barrier()

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
        self.report.log(f"resumed from {path.name}: epoch {self.epoch + 1}, step {self.global_step}"
                        + (f" (skipped unreadable {'; '.join(skipped)})" if skipped else ""))
        self.report.event("resumed", checkpoint=path.name, step=self.global_step, epoch=self.epoch,
                          step_in_epoch=self.step_in_epoch, skipped=skipped)

    # ----- the loop ------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train to the end or to a stop, once: however it leaves, it closes what the Trainer opened."""
        # Used without run(), the Trainer catches the stop signals itself for the length of fit().
        with stopping.installed(self.stops, self.settings.stop_signal) as signals:
            self.stopper = StopProtocol(signals, self.settings.stop_signal, self.on_stop, self.ranks, self.report,
                                        interrupt_steps(self.job))
            try:
                return self._fit()
            finally:
                self.report.close()
                # DDP's reducer holds the process group, which runtime.process_group can only free
                # once nobody does; an exception's traceback would otherwise keep this Trainer alive.
                del self.ddp, self.forward

    def _fit(self) -> dict[str, Any]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.maybe_resume()
        job, env = self.job, self.env
        self.report.log(f"{job.name}: {job.model} on {job.dataset}, {env.world_size} rank(s) via {env.launcher}, "
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
            self.report.epoch(metrics, self.global_step)
            if self.every is not None and not last:
                self.save_checkpoint()  # epoch end
            if job.stop_at_accuracy and metrics.get("test_accuracy", 0) >= job.stop_at_accuracy:
                self.report.log(f"reached test accuracy {metrics['test_accuracy']:.4f} >= {job.stop_at_accuracy}")
                break
        return self.finish()

    def train_epoch(self) -> float:
        job, env = self.job, self.env
        indices = data.epoch_indices(len(self.data.train_y), env.world_size, env.rank, self.epoch, job.seed)
        indices = indices.to(self.device)
        self.model.train()
        if self.step_in_epoch == 0:  # a new epoch (not one resumed in the middle)
            self.mine.new_epoch()
        with self.report.progress(self.epoch, self.steps_per_epoch, self.step_in_epoch) as progress:
            start = time.perf_counter()
            while self.step_in_epoch < self.steps_per_epoch:
                kind = self.stopper.agreed(self.global_step, self.start_step)
                if kind:
                    self._count_train_time(start)  # before the checkpoint, which saves it
                    progress.close()
                    self.stopper.stop(kind, self.save_checkpoint, step=self.global_step, epoch=self.epoch,
                                      step_in_epoch=self.step_in_epoch)
                loss = self.train_step(indices)
                startup.first_step(self.run_dir, env.rank)
                self.mine.add(loss)
                self.step_in_epoch += 1
                self.global_step += 1
                progress.step(self.global_step, lambda: self._step_line(loss))
                if self.every and self.global_step % self.every == 0 and self.step_in_epoch < self.steps_per_epoch:
                    self._count_train_time(start)
                    self.save_checkpoint()
                    start = time.perf_counter()  # checkpoints are not training time
            self._count_train_time(start)
        return float(self.ranks.mean_(self.mine.mean_loss()).item())

    def _count_train_time(self, since: float) -> None:
        self.train_time += time.perf_counter() - since

    def _step_line(self, loss: torch.Tensor) -> str:
        return (f"epoch {self.epoch + 1} step {self.step_in_epoch}/{self.steps_per_epoch} "
                f"loss {loss.item():.4f} lr {self.scheduler.get_last_lr()[0]:.5f}")

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
        loss = step.forward_backward(self.forward, self.ddp, x, y, job.grad_accum_steps, job.label_smoothing, self.bf16)
        self.optimizer.step()
        self.scheduler.step()
        self.images_seen += len(batch_idx)
        return loss.detach()

    def evaluate(self) -> dict[str, float]:
        shard = data.eval_shard(len(self.data.test_y), self.env.world_size, self.env.rank)
        return step.evaluate(self.model, self.data, shard, self.job.channels_last, self.bf16, self.ranks)

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
        self.report.event("finished", step=self.global_step, epochs=last["epoch"])
        return result
