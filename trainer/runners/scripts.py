"""Running a job's `script:` on this rank: a child process in the environment torchrun would give it.

The child gets the variables torchrun 2.x sets for a worker (child_environment): RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK / GROUP_WORLD_SIZE (node index and count), ROLE_RANK,
ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT (attempts before
this one), TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID (the job id), TORCHELASTIC_ERROR_FILE
(this rank's, for torch's @record) and never TORCHELASTIC_USE_AGENT_STORE (no agent serves a store:
env:// has rank 0 serve it); also TRAINER_RUN_DIR (the run folder, where trainer.api.init() puts
metrics and checkpoints) and the thread variables set to the profile's cpus_per_task, capped as a
function rank's are (trainer.distributed.threads). A script written for torchrun runs unchanged, and
forms its own process group (this process forms none). Its standard output passes through, and a
last line that is a JSON object joins the run's result; its standard error passes through too, and
a failure names its exception (@record's message, else its last exception line). It dies with this
task (trainer.runners.childproc).

A stop signal that reaches this process is forwarded to the child, and the stop ends in a requeue
like a built-in job's (trainer.rank.handoff: the hand-off): a script that calls trainer.api.init()
checkpoints at its next `ctx.step_boundary` and resumes from it; any other script is ended by the
signal and restarts from scratch (the "stopped" and "restarted_from_scratch" events say so).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from trainer.config import project
from trainer.config.job import JobConfig, RunSettings
from trainer.distributed import threads
from trainer.distributed.environment import DistEnv
from trainer.rank import events, handoff, rundir, stopping
from trainer.rank.stopping import (
    KIND_NAMES,
    NONE,
    REQUEUE,
    TERMINATE,
    StopHook,
    StopRequested,
    StopSignals,
    signal_number,
)
from trainer.runners import childproc
from trainer.runners.envelope import envelope


class ScriptFailed(RuntimeError):
    """The script exited with a non-zero status on this rank."""


def child_environment(env: DistEnv, settings: RunSettings, restarts: int, thread_count: int,
                      base: dict[str, str] | None = None, error_file: str = "") -> dict[str, str]:
    """The script's environment: this task's, with the variables torchrun 2.x gives a worker
    (torch.distributed.elastic.agent.server.local_elastic_agent, one role "default") for this rank,
    and the thread variables at this rank's thread count (trainer.distributed.threads)."""
    out = dict(os.environ if base is None else base)
    # The agent's store only under a torchrun agent (launch: torchrun, or the user's torchrun), which
    # serves it on MASTER_PORT; otherwise there is none, and env:// has rank 0 serve the store itself.
    if "TORCHELASTIC_RUN_ID" not in out:
        out.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    out.update(RANK=str(env.rank), WORLD_SIZE=str(env.world_size), LOCAL_RANK=str(env.local_rank),
               LOCAL_WORLD_SIZE=str(env.local_world_size), GROUP_RANK=str(env.node_rank),
               GROUP_WORLD_SIZE=str(env.num_nodes), ROLE_RANK=str(env.rank), ROLE_WORLD_SIZE=str(env.world_size),
               ROLE_NAME="default", MASTER_ADDR=env.master_addr, MASTER_PORT=str(env.master_port),
               TORCHELASTIC_RESTART_COUNT=str(restarts), TORCHELASTIC_MAX_RESTARTS=str(settings.max_restarts),
               TORCHELASTIC_RUN_ID=env.job_id or "none", TORCHELASTIC_ERROR_FILE=error_file,
               TORCH_NCCL_ASYNC_ERROR_HANDLING=out.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
               TRAINER_RUN_DIR=settings.run_dir)
    out.update(threads.variables(thread_count))
    return out


def run_script(job: JobConfig, settings: RunSettings, env: DistEnv, stops: StopSignals,
               on_stop: StopHook | None = None) -> dict[str, Any]:
    """Run the job's script on this rank to its end; its result, or StopRequested / ScriptFailed."""
    number = events.attempt_number(settings.run_dir)
    if env.is_main and number > 1 and not rundir.has_checkpoint(settings.run_dir):
        events.append(settings.run_dir, "restarted_from_scratch", attempt=number, script=job.script)
    with tempfile.TemporaryDirectory(prefix="trainer-script-") as channel:
        return Child(job, settings, env, stops, on_stop, number, channel).run()


class Child:
    """The script on this rank, and what its end means (a result, a stop, or a failure)."""

    def __init__(self, job: JobConfig, settings: RunSettings, env: DistEnv, stops: StopSignals,
                 on_stop: StopHook | None, number: int, channel: str) -> None:
        self.job, self.settings, self.env, self.stops, self.on_stop = job, settings, env, stops, on_stop
        self.number, self.channel = number, channel  # number: this attempt, as this rank saw it at its start
        self.decided: dict[str, Any] | None = None
        self.last: dict[str, Any] = {}
        # torchrun's per-worker error file, which torch's @record writes (TORCHELASTIC_ERROR_FILE).
        self.error_file = os.path.join(channel, "error.json")
        self.stderr: childproc.StderrTail | None = None

    def run(self) -> dict[str, Any]:
        thread_count = threads.count(self.settings.threads)
        child_env = child_environment(self.env, self.settings, self.number - 1, thread_count,
                                      error_file=self.error_file)
        child_env.update({handoff.CHANNEL_VARIABLE: self.channel,
                          handoff.STOP_SIGNAL_VARIABLE: self.settings.stop_signal,
                          handoff.INTERRUPT_VARIABLE: str(self.job.interrupt_at)})
        # As torchrun runs it: `python script.py`, the script's folder first on sys.path (the submitter's
        # PYTHONSAFEPATH, there for this task's `python -m`, is taken off again), in the directory the
        # user submitted from (this task's), the script being the run's copy (trainer.config.project).
        if child_env.pop(project.ADDED_SAFEPATH_VAR, None):
            child_env.pop("PYTHONSAFEPATH", None)
        script = str(project.on_snapshot(Path(self.job.script), Path(self.job.project_root),
                                         os.environ.get(project.SNAPSHOT_VAR))) if self.job.project_root \
            else self.job.script
        start = time.perf_counter()
        # The child dies with this task (childproc.die_with_parent), whichever way the task ends.
        child = subprocess.Popen([sys.executable, script, *self.job.args], env=child_env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd(),
                                 start_new_session=False, preexec_fn=childproc.die_with_parent())
        try:
            return self.watch(child, start, thread_count)
        finally:
            childproc.end(child)

    def watch(self, child: subprocess.Popen[str], start: float, thread_count: int) -> dict[str, Any]:
        reader = threading.Thread(target=self.relay, args=(child,), daemon=True)
        reader.start()
        self.stderr = childproc.StderrTail(child.stderr)
        forwarded = NONE
        while child.poll() is None:
            if self.stops.kind > forwarded:
                # The script decides what a stop means (trainer.api.init() checkpoints at its next step
                # boundary; a script without it is ended by the signal). Other tasks learn of it from
                # the run folder (a peer's script may end first, by the broken connections).
                if self.stops.kind == REQUEUE:
                    handoff.note_signal(self.settings.run_dir, self.env.rank, self.attempt(), self.stops.name)
                child.send_signal(signal_number(self.stops.name) or signal.SIGTERM)
                forwarded = self.stops.kind
            if self.env.is_main and self.decided is None:
                asked = handoff.pending_request(self.channel)
                if asked is not None:  # the script's rank 0 checkpointed and asks: requeue?
                    handoff.answer(self.channel, self.decide(asked))
            time.sleep(0.1)
        reader.join(timeout=10)
        self.stderr.join()
        if child.returncode == 0:
            metrics = {k: v for k, v in self.last.items() if isinstance(v, (int, float, str, bool))}
            return envelope(metrics, self.env, self.settings.run_dir, thread_count, start, returncode=0)
        stop = handoff.script_stop(self.channel) if child.returncode == handoff.STOPPED_EXIT_CODE else None
        if stop is not None:  # stopped at a step boundary through trainer.api, which wrote the event
            if self.env.is_main and self.decided is not None:
                handoff.publish_decision(self.settings.run_dir, self.attempt(), self.decided)
            raise StopRequested(int(stop["step"]), str(stop["signal"]), int(stop["kind"]), stop["info"])
        self.stopped_without_the_api(child.returncode, forwarded != NONE)

    def attempt(self) -> int:
        """This attempt's number, read again when needed: at this rank's start, rank 0's task may not
        have recorded the attempt yet (every rank has, once the scripts formed their process group)."""
        return max(events.attempt_number(self.settings.run_dir), self.number)

    def relay(self, child: subprocess.Popen[str]) -> None:
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
                    self.last.clear()
                    self.last.update(parsed)

    def cause(self) -> str:
        """What the script said when it failed: @record's message, else its last exception line."""
        recorded = childproc.recorded_error(self.error_file)
        return recorded or (self.stderr.last_exception() if self.stderr is not None else "")

    def decide(self, signal_name: str) -> dict[str, Any]:
        """Rank 0: the launcher's requeue decision (once per attempt), as the built-in protocol makes it."""
        if self.decided is None:
            self.decided = stopping.decide(REQUEUE, signal_name, self.on_stop)
        return self.decided

    def stopped_without_the_api(self, code: int, signalled_here: bool) -> NoReturn:
        """The script ended non-zero outside trainer.api's stop: on a stop signal of any rank, a stop
        (it restarts from scratch unless it checkpoints itself); otherwise a failure of this rank."""
        run_dir, kind, name = self.settings.run_dir, self.stops.kind, self.stops.name
        failed = ScriptFailed(f"{self.job.script} exited with status {code} on rank {self.env.rank}"
                              + (f" after SIG{name} was forwarded to it" if signalled_here else "")
                              + (f": {self.cause()}" if self.cause() else "")
                              + "; its traceback is in this rank's log")
        if kind == TERMINATE:  # SLURM is ending the job (scancel, scontrol requeue): it decides what follows
            info: dict[str, Any] | None = {"requeued": False, "reason": "terminated"}
        elif self.env.is_main:
            # A peer's signal ends this script too (its connections break): wait a little for its note.
            name = name if kind == REQUEUE else handoff.signalled(run_dir, self.attempt(), timeout=5.0) or ""
            if not name:
                raise failed
            kind, info = REQUEUE, self.decide(name)
            handoff.publish_decision(run_dir, self.attempt(), info)
        else:
            if kind == NONE:
                name = handoff.signalled(run_dir, self.attempt(), timeout=3.0) or ""
                if not name:
                    raise failed
            kind = REQUEUE
            info = handoff.decision(run_dir, self.attempt(), timeout=self.settings.collective_timeout_s + 60.0)
            if info is None:
                info = {"requeued": False, "reason": "rank 0 made no requeue decision"}
        if self.env.is_main:
            scratch = not rundir.has_checkpoint(run_dir)
            print(f"[task] {self.job.script} ended on SIG{name} (status {code}): "
                  + ("requeued" if info.get("requeued") else "not requeued")
                  + ("; it restarts from scratch (it wrote no checkpoint: trainer.api's ctx.step_boundary "
                     "and ctx.resume would resume it)" if scratch else ""), flush=True)
            events.append(run_dir, "stopped", step=None, signal=name, kind=KIND_NAMES[kind], script_status=code,
                          restarts_from_scratch=scratch, **info)
        raise StopRequested(-1, name, kind, info)
