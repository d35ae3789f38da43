"""One training run on this rank: set up, then call the job's training function.

`run()` is what every launcher calls once per process: submitit's local and SLURM executors (through
the submitter's task), its debug executor (in-process), torchrun (`python -m trainer`) and plain
python. It never imports submitit. What it calls: a `script:` in a child process (trainer.scriptrun),
or a function on the public per-rank API (trainer.userrun): the job's `entrypoint:`, or for a
built-in recipe `trainer.builtin.fit`, which is written on that same API.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from trainer import builtin, distenv, runtime, scriptrun, startup, stopping, userrun
from trainer.config import JobConfig, RunSettings
from trainer.stopping import StopHook, StopSignals


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
            if job.entrypoint:  # the user's own function
                call = userrun.of_entrypoint(job)
            else:  # a built-in recipe: a function on the same public API, called the same way
                call = userrun.Call("trainer.builtin:fit", builtin.fit,
                                    dataclasses.replace(job, data_dir=job.data_dir or settings.data_dir))
            return userrun.run(job, settings, env, device, stops, on_stop, call)
