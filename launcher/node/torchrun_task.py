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
  `scontrol requeue`), as `launcher.node.task.SubmititRequeue` does in the tasks shape. A signal that comes
  before the workers catch it (torchrun and torch take seconds, more on a loaded node; SLURM sends
  the time-limit signal once) is caught by this process, which leaves a flag (`stop_flag`); each
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
from pathlib import Path
from typing import Any

from submitit.helpers import Checkpointable

from launcher import submitit_private
from launcher.cluster.failures import is_symptom
from launcher.node import torchrun_command
from launcher.node.task import TERMINATED_EXIT_CODE, SubmititRequeue, drop_stale_result, private_and_coreless
from trainer.config.job import JobConfig, RunSettings
from trainer.runners.envelope import RANK_NODES

RESULTS_DIR = "torchrun"


def _job_id(env: dict[str, str] | os._Environ[str]) -> str:
    if env.get("SLURM_ARRAY_JOB_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env["SLURM_JOB_ID"]


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def stop_flag(results: Path, node_id: int) -> Path:
    """Where a node's task notes that the stop signal came (the workers read it once they catch it)."""
    return results / f"stop-{node_id}"


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

        env, paths = os.environ, JobEnvironment().paths
        return cls(_job_id(env), int(env.get("SLURM_NODEID", "0")), hostlist.expand(env["SLURM_JOB_NODELIST"]),
                   str(paths.folder), str(paths.job_id))

    @property
    def results(self) -> Path:
        found = Path(self.folder) / RESULTS_DIR
        found.mkdir(exist_ok=True)
        return found

    def command(self, nproc: int, spec: dict[str, Any]) -> list[str]:
        """Write the workers' spec (with where they log and note) and return this node's torchrun line."""
        from trainer.distributed import environment

        path = Path(self.folder) / f"torchrun-{self.node_id}.pkl"
        with open(path, "wb") as out:
            pickle.dump({**spec, "results": str(self.results), "folder": self.folder,
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
        mine = sorted(here.results.glob(f"probe-{here.node_id}-*.json"))
        if code != 0 or len(mine) != self.nproc:
            raise RuntimeError(f"torchrun on node {here.nodes[here.node_id]} exited with status {code} and "
                               f"{len(mine)} of {self.nproc} ranks reported (see the job's logs)")
        return [json.loads(p.read_text()) for p in mine]


class RankFailed(RuntimeError):
    """A rank under this node's torchrun failed: "rank R failed: ...", which status and `--wait` read
    as rank R's failure (launcher.rundir.outcomes.failed_rank), not as this node task's."""


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
            for old in results.glob("rank-*.json"):  # an earlier attempt's (a requeue reuses the folder)
                old.unlink(missing_ok=True)
        requeue = SubmititRequeue.current()
        cmd = here.command(self.nproc, {
            "job": self.job, "settings": self.settings,
            "clock": None if requeue is None else submitit_private.timeout_clock(requeue.handler)})
        signum = signal.Signals[f"SIG{self.settings.stop_signal}"]
        flag = stop_flag(results, node_id)
        flag.unlink(missing_ok=True)  # an earlier attempt's
        # This task notes the signal for the workers that have not installed their handlers yet
        # (torchrun and torch take seconds to start; SLURM sends the time-limit signal once).
        previous = signal.signal(signum, lambda *_: flag.write_text(self.settings.stop_signal))
        # The agent and the workers ignore the signal until the workers catch it (module doc).
        code = subprocess.run(cmd, check=False, preexec_fn=lambda: signal.signal(signum, signal.SIG_IGN)).returncode
        signal.signal(signum, previous)
        ranks = {int(p.stem.split("-")[1]): _read(p) or {} for p in results.glob("rank-*.json")}
        first = ranks.get(0, {})
        if code == 0:  # node task 0 returns rank 0's result (the run's); the others their first rank's
            mine = {rank: r for rank, r in ranks.items() if r.get("node") == node_id}
            lowest = mine[min(mine)] if mine else {}
            result = dict((first if node_id == 0 else lowest).get("result") or {})
            # Where this node's ranks ran (their notes are written: its torchrun has exited): the
            # submitter lists every rank's node, as in the tasks shape, not one per node task.
            result[RANK_NODES] = {rank: (r.get("result") or {}).get("node", nodes[node_id]) for rank, r in mine.items()}
            return result
        if first.get("stop") == "requeue" and node_id == 0 and requeue is not None:
            decision = requeue(self.settings.stop_signal)
            print(f"[task] stopped at step {first.get('step')} on SIG{self.settings.stop_signal}: "
                  f"checkpointed; requeue: {decision}", flush=True)
            raise SystemExit(decision.get("exit_code", 1))
        if any(r.get("stop") for r in ranks.values()):
            raise SystemExit(TERMINATED_EXIT_CODE)
        # The cause first: peers of a dead rank fail too, on closed connections, sometimes sooner
        # than the dead rank has written its note (its own teardown closes those connections).
        failed = sorted((r for r in ranks.items() if r[1].get("error")),
                        key=lambda r: (is_symptom(r[1]["error"]), r[1].get("time", 0)))
        if failed:
            rank, info = failed[0]
            raise RankFailed(f"rank {rank} failed: {info['error']}\n{info.get('traceback', '')}")
        raise RuntimeError(f"torchrun on node {nodes[node_id]} exited with status {code} (a rank on another node "
                           f"failed, or one was killed: see `logs --rank`)")
