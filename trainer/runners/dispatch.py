"""The one dispatcher: what a rank runs for a job, decided once, here.

`run_job()` is what every launcher calls once per process: the submitter's task on submitit's local
and SLURM executors and its debug executor (launcher.node), torchrun (`python -m trainer`) and plain
python. It never imports submitit. It runs a `script:` in a child process (trainer.runners.scripts),
or a function on the public per-rank API (trainer.runners.functions): the job's `entrypoint:`
(trainer.runners.entrypoints) or the function pickled into its run folder (trainer.runners.pickled), or for a built-in recipe `trainer.recipes.training.fit`, which is
written on that same API.

Importing this module imports no torch: a `script:` rank's task only watches its child, and the
function runner (torch) is loaded when a function runs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainer.config.job import JobConfig, RunSettings, data_folder
from trainer.distributed import environment
from trainer.rank import stopping, timing
from trainer.rank.stopping import StopHook, StopSignals

if TYPE_CHECKING:  # annotations only: the function runner imports torch
    from trainer.distributed.held import HeldGroup
    from trainer.runners.functions import Call

BUILTIN = "trainer.recipes.training:fit"


def run_job(job: JobConfig, settings: RunSettings, environ: Mapping[str, str] | None = None,
            on_stop: StopHook | None = None, stops: StopSignals | None = None) -> dict[str, Any]:
    """Train `job` in this process and return the final metrics (the same on every rank).

    On a stop signal every rank finishes its step, rank 0 checkpoints and calls `on_stop`, and
    StopRequested is raised on every rank (see trainer.rank.stopping). A caller that installed the stop
    handlers itself, earlier (the launcher does, before importing torch), passes them as `stops`.
    """
    timing.begin()
    env = environment.resolve(os.environ if environ is None else environ)
    # Catch stop signals from the start: one that arrives while the process group forms or the data
    # loads is honoured at the first step boundary, instead of acting in the middle of a collective.
    with stopping.installed(stops, settings.stop_signal) as stops:
        if job.script:  # a script forms its own process group, in a child process
            from trainer.runners import scripts

            return scripts.run_script(job, settings, env, stops, on_stop)
        from trainer.runners import functions  # torch (seconds): only for a function

        return functions.run_function(function_of(job, settings), job, settings, env, stops, on_stop)


def run_point(job: JobConfig, settings: RunSettings, held: HeldGroup, stops: StopSignals,
              on_stop: StopHook | None = None, number: int = 0) -> dict[str, Any]:
    """`run_job` for one of the runs a process group is held across (a pool worker's sweep point,
    launcher.node.pool_worker): a function runs in the held group; a script forms its own group, so it
    runs as ever, a fresh set of processes, its rendezvous on a port of its own (`number`: this
    worker's count of runs so far, the same on every rank: the port differs from the held group's and
    from the run before, whose sockets may linger)."""
    timing.begin()
    if job.script:
        from trainer.runners import scripts

        env = dataclasses.replace(held.env, master_port=environment.port_for_job(f"{held.env.job_id}:run-{number}"))
        return scripts.run_script(job, settings, env, stops, on_stop)
    from trainer.runners import functions

    return functions.run_in_held_group(function_of(job, settings), job, settings, held, stops, on_stop)


def function_of(job: JobConfig, settings: RunSettings) -> Call:
    """The function a job runs on every rank: its `entrypoint:`, or the built-in recipe (given the
    job with its data folder filled in: trainer.config.job.data_folder)."""
    from trainer.runners import functions

    if job.entrypoint or job.function:
        return functions.of_entrypoint(job, settings)
    from trainer.recipes import training

    return functions.Call(BUILTIN, training.fit, dataclasses.replace(job, data_dir=data_folder(job, settings.data_dir)))
