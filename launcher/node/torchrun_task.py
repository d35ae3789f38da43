"""The `launch: torchrun` shape on the node: one SLURM task per node runs torchrun, whose processes
are the ranks (`python -m launcher.node.torchrun_worker SPEC` each: the same dispatcher as the tasks
shape); this module is that node task (`TorchrunTask`) and the probe in this shape (`TorchrunProbe`).

How the guarantees hold here:
- Ranks and rendezvous: torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT,
  TORCHELASTIC_RUN_ID = the job id) are what `trainer.distributed.environment` reads first.
- Fail-fast: `--max-restarts=0`; a rank that dies makes its agent end the node's other workers and
  exit non-zero; this task then fails naming that rank (its error file), and srun's
  --kill-on-bad-exit ends the other nodes.
- Stops: the stop signal is ignored by the agent (an ignored disposition survives exec, so the agent
  is not killed by USR2) and caught by the workers, which stop together at a step boundary; rank 0
  checkpoints and leaves a note; node task 0 then asks submitit to requeue (its countdown, its
  `scontrol requeue`), as `launcher.node.task.SubmititRequeue` does in the tasks shape, and notes the answer,
  which the other nodes' tasks wait for before they end (their non-zero exit would make srun end node task 0
  before it requeued: the tasks shape's ranks wait in the trainer's broadcast). A signal that comes
  before the workers catch it (torchrun and torch take seconds, more on a loaded node; SLURM sends
  the time-limit signal once) is caught by this process, which leaves a flag (`rank_notes.stop_flag`); each
  worker reads it once its handlers are in and stops as if signalled.
- Per-rank logs: each worker appends its stdout/stderr to submitit's file of its rank
  (`JOB_RANK_log.out/err`), so `logs --rank R` reads rank R (ranks below the node count share
  theirs with that node's agent lines).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from submitit.helpers import Checkpointable

from launcher import submitit_private
from launcher.reports.root_cause import root_cause_first
from launcher.reports.rank_notes import (notes_dir, probe_note, rank_failures, rank_note, rank_notes, requeue_note,
                                         stop_flag)
from launcher.node import torchrun_command
from launcher.node.task import SubmititRequeue, drop_stale_result, exit_after_stop, private_and_coreless
from trainer.config.job import JobConfig, RunSettings
from trainer.distributed import environment
from trainer.rank.stopping import REQUEUE, StopRequested
from trainer.runners.envelope import RANK_NODES

# How long a node task other than 0 waits for node task 0's requeue before it ends anyway (_requeue_answer).
REQUEUE_WAIT_S = 120.0


@dataclasses.dataclass(frozen=True)
class _NodeTask:
    """Where this node's task is (its job, node and submitit folder), and its torchrun command."""

    job_id: str
    node_id: int
    nodes: list[str]
    folder: str
    submitit_job_id: str

    @classmethod
    def here(cls) -> _NodeTask:
        from submitit.core.job_environment import JobEnvironment

        from trainer.distributed import hostlist

        env, paths = environment.resolve(os.environ), JobEnvironment().paths  # this node's SLURM task
        return cls(env.scheduler_job_id, env.node_rank, hostlist.expand(os.environ["SLURM_JOB_NODELIST"]),
                   str(paths.folder), str(paths.job_id))

    @property
    def results(self) -> Path:
        found = notes_dir(self.folder)
        found.mkdir(exist_ok=True)
        return found

    def command(self, nproc: int, spec: dict[str, Any]) -> list[str]:
        """Write the workers' spec (with where they log and note) and return this node's torchrun line."""
        path = Path(self.folder) / f"torchrun-{self.node_id}.pkl"
        with open(path, "wb") as out:
            pickle.dump({**spec, "results": str(self.results), "folder": self.folder, "node": self.node_id,
                         "job_id": self.submitit_job_id}, out)
        cmd = torchrun_command.command(sys.executable, len(self.nodes), nproc, self.nodes[0],
                                       environment.port_for_job(self.job_id), self.job_id, str(path), self.node_id == 0)
        print(f"[torchrun] node {self.node_id} ({self.nodes[self.node_id]}): {' '.join(cmd)}", flush=True)
        return cmd


class TorchrunProbe:
    """`submit.py probe` in this shape: the node's torchrun starts its `nproc` workers as for training
    (the same worker, torchrun's own LOCAL_RANK and the node task's GPUs), and each reports with
    `launcher.node.placement.probe_task`, the tasks shape's probe. Returns this node's ranks' reports."""

    def __init__(self, nproc: int) -> None:
        self.nproc = nproc

    def __call__(self) -> list[dict[str, Any]]:
        private_and_coreless()
        here = _NodeTask.here()
        code = subprocess.run(here.command(self.nproc, {"probe": True}), check=False).returncode
        mine = sorted(here.results.glob(probe_note(here.results, here.node_id, "*").name))
        if code != 0 or len(mine) != self.nproc:
            raise RuntimeError(f"torchrun on node {here.nodes[here.node_id]} exited with status {code} and "
                               f"{len(mine)} of {self.nproc} ranks reported (see the job's logs)")
        return [json.loads(p.read_text()) for p in mine]


class RankFailed(RuntimeError):
    """A rank under this node's torchrun failed (the job's log says which; the submitter reads the
    rank from the ranks' own notes, launcher.reports.rank_notes, not from this text)."""


def _stop_of(note: dict[str, Any]) -> StopRequested | None:
    """The stop a rank's note records (launcher.node.torchrun_worker), as the rank raised it; None: it
    did not stop."""
    stop = note.get("stop")
    if not isinstance(stop, dict):
        return None
    return StopRequested(int(stop["step"]), str(stop["signal"]), int(stop["kind"]), dict(stop.get("info") or {}))


def _requeue_answer(results: Path, predicted: dict[str, Any], most_s: float = REQUEUE_WAIT_S) -> dict[str, Any]:
    """What node task 0's requeue request answered, waited for: this node's task must not end first, since its
    non-zero exit would make srun (--kill-on-bad-exit) end node task 0 before it requeues the job (the tasks shape
    keeps its ranks alike in the trainer's broadcast). The requeue usually ends this task itself (SLURM stops the
    job's steps); `predicted` (rank 0's own prediction) if node task 0 says nothing within `most_s`."""
    note, until = requeue_note(results), time.monotonic() + most_s
    while time.monotonic() < until:
        try:
            return dict(json.loads(note.read_text()))
        except (OSError, ValueError, TypeError):  # not yet (or being written)
            time.sleep(0.2)
    return predicted


class TorchrunTask(Checkpointable):
    """One node's task: run torchrun with `nproc` workers and return rank 0's result (node task 0)."""

    def __init__(self, job: JobConfig, settings: RunSettings, nproc: int, run_root: str = "") -> None:
        self.job, self.settings, self.nproc = job, settings, nproc
        self.run_root = run_root or settings.run_dir

    def __call__(self) -> dict[str, Any]:
        private_and_coreless()
        drop_stale_result()
        here = _NodeTask.here()
        node_id, nodes, results = here.node_id, here.nodes, here.results
        if node_id == 0:
            # An earlier attempt's notes (a requeue reuses the folder).
            for old in results.glob(rank_note(results, "*").name):
                old.unlink(missing_ok=True)
            requeue_note(results).unlink(missing_ok=True)
        requeue = SubmititRequeue.current()
        cmd = here.command(self.nproc, {
            "job": self.job, "settings": self.settings,
            "clock": None if requeue is None else submitit_private.timeout_clock(requeue.handler),
            "requeues_left": None if requeue is None else submitit_private.timeout_requeues_left(requeue.handler)})
        signum = signal.Signals[f"SIG{self.settings.stop_signal}"]
        flag = stop_flag(results, node_id)
        flag.unlink(missing_ok=True)  # an earlier attempt's
        # This task notes the signal for the workers that have not installed their handlers yet
        # (torchrun and torch take seconds to start; SLURM sends the time-limit signal once).
        previous = signal.signal(signum, lambda *_: flag.write_text(self.settings.stop_signal))
        # The agent and the workers ignore the signal until the workers catch it (module doc).
        code = subprocess.run(cmd, check=False, preexec_fn=lambda: signal.signal(signum, signal.SIG_IGN)).returncode
        if requeue is None:  # (under submitit the noting handler stays: launcher.node.task.after_the_work)
            signal.signal(signum, previous)
        ranks = rank_notes(here.folder)
        first = ranks.get(0, {})
        if code == 0:  # node task 0 returns rank 0's result (the run's); the others their first rank's
            mine = {rank: r for rank, r in ranks.items() if r.get("node") == node_id}
            lowest = mine[min(mine)] if mine else {}
            result = dict((first if node_id == 0 else lowest).get("result") or {})
            # Where this node's ranks ran (their notes are written: its torchrun has exited): the
            # submitter lists every rank's node, as in the tasks shape, not one per node task.
            result[RANK_NODES] = {rank: (r.get("result") or {}).get("node", nodes[node_id]) for rank, r in mine.items()}
            return result
        # Every rank stopped alike (rank 0's decision, broadcast): rank 0's note, else any rank's.
        stop = _stop_of(first) or next((found for r in ranks.values() if (found := _stop_of(r))), None)
        if stop is not None:
            if node_id == 0:
                if requeue is not None and stop.kind == REQUEUE:
                    # submitit's own decision and action (its countdown, `scontrol requeue`), as in the tasks shape.
                    stop.info = requeue(self.settings.stop_signal)
                requeue_note(results).write_text(json.dumps(stop.info, default=str))  # (what the others wait for)
            elif stop.kind == REQUEUE and stop.requeued:
                stop.info = _requeue_answer(results, stop.info)
            exit_after_stop(stop, self.settings.run_dir, self.run_root)  # ends as the tasks shape does
        # The cause first (launcher.reports.root_cause): peers of a dead rank fail too, on closed connections,
        # sometimes sooner than the dead rank has written its note (its own teardown closes those connections).
        failures, times = rank_failures(ranks)
        if failures:
            rank, short, text = root_cause_first(failures, times=times)[0]
            raise RankFailed(f"rank {rank} failed: {short}\n{text}")
        raise RuntimeError(f"torchrun on node {nodes[node_id]} exited with status {code} (a rank on another node "
                           f"failed, or one was killed: see `logs --rank`)")

