"""Helpers for tests/test_training_semantics.py: what a spawned rank runs, and how a test watches training.

Everything here observes training from the outside, through public names only: `trainer.runners.dispatch.run_job`,
the job and run settings, and torch's global module hooks (the model's inputs and outputs in training
mode are exactly what training consumed and produced). Nothing reads the Trainer's attributes.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

INHERITED_PREFIXES = ("SLURM_", "SUBMITIT_", "TORCHELASTIC_")
INHERITED_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                   "MASTER_ADDR", "MASTER_PORT", "SLURMD_NODENAME")


# ----- watching training ---------------------------------------------------------------------------

class Recorder:
    """Every training-mode forward of the job's model: its input batch and its output logits."""

    def __init__(self) -> None:
        self.inputs: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.model: nn.Module | None = None

    def hook(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if not (is_job_model(module) and module.training):
            return
        self.model = module
        self.inputs.append(args[0].detach().to("cpu", copy=True).contiguous())
        self.outputs.append(output.detach().to("cpu", copy=True).float())


def is_job_model(module: nn.Module) -> bool:
    """The network build_model made (not DDP around it, not its layers)."""
    from trainer.recipes import models

    return isinstance(module, (models.MLP, DropoutMLP))


@contextmanager
def recording() -> Iterator[Recorder]:
    recorder = Recorder()
    handle = torch.nn.modules.module.register_module_forward_hook(recorder.hook)
    try:
        yield recorder
    finally:
        handle.remove()


# ----- a model that draws from the global RNG while it trains --------------------------------------

class DropoutMLP(nn.Module):
    """The digits MLP with dropout: every training step draws masks from torch's global RNG."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.3), nn.Linear(256, 128), nn.ReLU(),
            nn.Dropout(0.3), nn.Linear(128, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build_dropout_model(name: str, num_classes: int = 10) -> nn.Module:
    """build_model's stand-in: the MLP with dropout. It then advances the global RNG by a rank-dependent
    amount, like a job that seeds each rank differently, so each rank's RNG stream is its own."""
    assert name == "mlp", name
    model = DropoutMLP(num_classes)
    torch.rand(1 + 97 * int(os.environ.get("RANK", "0")))
    return model


@contextmanager
def patched_build_model(replacement: Any) -> Iterator[None]:
    """Replace trainer.recipes.models.build_model, and every trainer module's own binding of it
    (`from trainer.recipes.models import build_model`), wherever the training loop's code lives."""
    import trainer.recipes.components  # noqa: F401 - loads the modules that bind build_model
    import trainer.recipes.models

    original = trainer.recipes.models.build_model
    patched = []
    for name, module in list(sys.modules.items()):
        if (name == "trainer" or name.startswith("trainer.")) and getattr(module, "build_model", None) is original:
            patched.append(module)
            module.build_model = replacement
    try:
        yield
    finally:
        for module in patched:
            module.build_model = original


# ----- two ranks on this machine -------------------------------------------------------------------

def free_ports(n: int) -> list[int]:
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def rank_environment(rank: int, world_size: int, port: int, run_id: str) -> dict[str, str]:
    """What torchrun would set for this rank; replaces whatever an enclosing job left in os.environ."""
    for key in list(os.environ):
        if key.startswith(INHERITED_PREFIXES) or key in INHERITED_NAMES:
            del os.environ[key]
    env = {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
           "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "TORCHELASTIC_RUN_ID": run_id}
    os.environ.update(env)  # init_method env:// reads os.environ
    return env


def rank_main(rank: int, world_size: int, tasks: list[dict[str, Any]], out_dir: str) -> None:
    """Run `tasks` one after another on this rank; each writes OUT_DIR/TAG-rankR.pt.

    A task: tag, job (JobConfig fields), run_dir, ports (one per run_job() call: a stop ends a call and
    the next call resumes from the checkpoint), dropout (train DropoutMLP), stop_after_first (return
    after the first stop, as a process that is requeued would).
    """
    from trainer.config.job import JobConfig, RunSettings
    from trainer.rank.stopping import StopRequested
    from trainer.runners.dispatch import run_job

    for task in tasks:
        stops: list[int] = []
        result = None
        replacement = build_dropout_model if task.get("dropout") else None
        with recording() as rec, (patched_build_model(replacement) if replacement else _nothing()):
            for attempt, port in enumerate(task["ports"]):
                env = rank_environment(rank, world_size, port, f"semantics-{task['tag']}-{attempt}")
                settings = RunSettings(run_dir=task["run_dir"], init_timeout_s=60, collective_timeout_s=60)
                try:
                    result = run_job(JobConfig(**task["job"]), settings, environ=env)
                    break
                except StopRequested as stop:
                    stops.append(stop.step)
                    if task.get("stop_after_first"):
                        break
            else:
                raise RuntimeError(f"{task['tag']}: still stopping after {len(task['ports'])} attempts")
        state = {k: v.detach().clone() for k, v in rec.model.state_dict().items()} if rec.model else None
        torch.save({"inputs": rec.inputs, "outputs": rec.outputs, "result": result, "stops": stops,
                    "state": state, "run_dir": task["run_dir"]}, Path(out_dir) / f"{task['tag']}-rank{rank}.pt")


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def spawn_two_ranks(tasks: list[dict[str, Any]], out_dir: Path, timeout_s: float = 150) -> dict[str, list[dict]]:
    """Run `tasks` on 2 spawned ranks (gloo on 127.0.0.1); {tag: [rank 0's record, rank 1's record]}."""
    import torch.multiprocessing as mp

    out_dir.mkdir(parents=True, exist_ok=True)
    context = mp.spawn(rank_main, args=(2, tasks, str(out_dir)), nprocs=2, join=False)
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=2):
        if time.monotonic() > deadline:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
            raise AssertionError(f"2-rank run did not finish within {timeout_s} s")
    return {task["tag"]: [torch.load(out_dir / f"{task['tag']}-rank{r}.pt") for r in range(2)] for task in tasks}
