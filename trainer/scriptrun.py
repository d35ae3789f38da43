"""Running a job's `script:` on this rank: a child process in the environment torchrun would give it.

The child gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (this task's
place in the job), TORCHELASTIC_RESTART_COUNT (attempts before this one), TRAINER_RUN_DIR (the run
folder, where trainer.api.init() puts metrics and checkpoints) and the thread variables set to the
profile's cpus_per_task: a script written for torchrun runs unchanged, and forms its own process
group (this process forms none). A stop signal that reaches this process is forwarded to the child.
Its standard output passes through; a last line that is a JSON object joins the run's result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from trainer import distenv, events
from trainer.config import JobConfig, RunSettings
from trainer.runtime import THREAD_VARIABLES
from trainer.stopping import NONE, StopSignals, signal_number


class ScriptFailed(RuntimeError):
    """The script exited with a non-zero status on this rank."""


def child_environment(env: distenv.DistEnv, settings: RunSettings, restarts: int,
                      base: dict[str, str] | None = None) -> dict[str, str]:
    out = dict(os.environ if base is None else base)
    out.update(RANK=str(env.rank), WORLD_SIZE=str(env.world_size), LOCAL_RANK=str(env.local_rank),
               LOCAL_WORLD_SIZE=str(env.local_world_size), MASTER_ADDR=env.master_addr,
               MASTER_PORT=str(env.master_port), TORCHELASTIC_RESTART_COUNT=str(restarts),
               TRAINER_RUN_DIR=settings.run_dir)
    for name in THREAD_VARIABLES:
        out[name] = str(settings.threads)
    return out


def run(job: JobConfig, settings: RunSettings, env: distenv.DistEnv, stops: StopSignals) -> dict[str, Any]:
    started = sum(1 for e in events.read(settings.run_dir) if e.get("event") == "started")
    child_env = child_environment(env, settings, max(started - 1, 0))
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, job.script, *job.args], env=child_env, stdout=subprocess.PIPE,
                             text=True, cwd=os.getcwd(), start_new_session=False)
    last: dict[str, Any] = {}

    def relay() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.startswith("{"):
                try:
                    parsed = json.loads(line)
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    last.clear()
                    last.update(parsed)

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    forwarded = False
    while child.poll() is None:
        if stops.kind != NONE and not forwarded:
            # The script decides what a stop means (trainer.api.init() checkpoints at its next step boundary).
            child.send_signal(signal_number(stops.name) or signal.SIGTERM)
            forwarded = True
        time.sleep(0.1)
    reader.join(timeout=10)
    if child.returncode != 0:
        raise ScriptFailed(f"{job.script} exited with status {child.returncode} on rank {env.rank}"
                           + (f" after SIG{stops.name} was forwarded to it" if forwarded else "")
                           + "; its traceback is in this rank's log")
    return {**{k: v for k, v in last.items() if isinstance(v, (int, float, str, bool))},
            "world_size": env.world_size, "run_dir": settings.run_dir, "node": env.node, "rank": env.rank,
            "master_addr": env.master_addr, "threads": settings.threads, "returncode": child.returncode,
            "wall_time_s": round(time.perf_counter() - start, 3)}
