"""One rank under the node's torchrun in the `launch: torchrun` shape (launcher.node.torchrun_task):

    python -m launcher.node.torchrun_worker SPEC

torchrun starts one per rank, with its RANK and LOCAL_RANK; SPEC is the pickle the node task wrote
(the job, its settings, where to log and leave its note). The worker appends its output to submitit's
log files of its rank, takes the stop signals over, runs the one dispatcher (trainer.runners.dispatch)
and leaves a note for the node task: its result, its stop, or its error. With `probe` in SPEC it
reports where it landed instead (launcher.node.placement.probe_task).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from submitit.core.utils import JobPaths

from launcher import submitit_private
from launcher.node.placement import probe_task
from launcher.node.task import TrainTask, private_and_coreless
from launcher.node.torchrun_task import stop_flag
from trainer.config.job import RunSettings
from trainer.rank.stopping import StopRequested, StopSignals
from trainer.runners import dispatch


def worker(spec_path: str) -> int:
    """One rank under torchrun: its logs, the stop protocol, the job, its note for the node's task."""
    private_and_coreless()
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    rank = int(os.environ["RANK"])
    log = JobPaths(spec["folder"], job_id=spec["job_id"], task_id=rank)
    for fd, path in ((1, log.stdout), (2, log.stderr)):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(out, fd)
        os.close(out)
    if spec.get("probe"):  # `submit.py probe`: report, do not train (TorchrunProbe)
        node_id = os.environ.get("SLURM_NODEID", "0")
        (Path(spec["results"]) / f"probe-{node_id}-{rank}.json").write_text(json.dumps(probe_task()))
        return 0
    settings: RunSettings = spec["settings"]
    stops = StopSignals(settings.stop_signal)
    stops.install()
    if stop_flag(Path(spec["results"]), int(os.environ.get("SLURM_NODEID", "0"))).exists():
        stops.raise_requeue_signal()  # it came while this process still ignored it
    note = Path(spec["results"]) / f"rank-{rank}.json"
    TrainTask(spec["job"], settings).announce(settings)  # the attempt's banner in this rank's log
    where = {"node": int(os.environ.get("SLURM_NODEID", "0")), "local_rank": int(os.environ["LOCAL_RANK"])}

    def wants_requeue(name: str) -> dict[str, Any]:  # rank 0: node task 0 asks submitit (module doc)
        # The reason as node task 0 will decide it (submitit's rule, its clock), for the "stopped" event.
        timed_out = spec["clock"] is not None and submitit_private.has_timed_out(spec["clock"])
        return {"requeued": True, "exit_code": 3, "reason": "timeout" if timed_out else "preemption"}

    try:
        result = dispatch.run_job(spec["job"], settings, on_stop=wants_requeue, stops=stops)
    except StopRequested as stop:
        note.write_text(json.dumps({"stop": "requeue" if stop.requeued else "terminated", "step": stop.step}))
        return 3
    except BaseException as err:
        note.write_text(json.dumps({"error": f"{type(err).__name__}: {err}", "time": time.time(),
                                    "traceback": traceback.format_exc()}))
        raise
    finally:
        stops.restore()
    note.write_text(json.dumps({"result": {**result, "python": sys.executable}, **where}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
