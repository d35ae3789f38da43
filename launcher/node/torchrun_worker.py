"""One rank under the node's torchrun in the `launch: torchrun` shape (launcher.node.torchrun_task):

    python -m launcher.node.torchrun_worker SPEC

torchrun starts one per rank, with its RANK and LOCAL_RANK; SPEC is the pickle the node task wrote
(the job, its settings, its node's index, where to log and leave its note). The worker appends its output to submitit's
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
from launcher.reports.rank_notes import probe_note, rank_note, stop_flag
from launcher.node.placement import probe_task
from launcher.node.task import announce, private_and_coreless, reason_and_countdown
from trainer.config.job import RunSettings
from trainer.distributed import environment
from trainer.rank.stopping import StopRequested, StopSignals
from trainer.runners import dispatch, envelope


def worker(spec_path: str) -> int:
    """One rank under torchrun: its logs, the stop protocol, the job, its note for the node's task."""
    private_and_coreless()
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    env = environment.resolve(os.environ)  # torchrun's RANK, LOCAL_RANK, ...
    log = JobPaths(spec["folder"], job_id=spec["job_id"], task_id=env.rank)
    for fd, path in ((1, log.stdout), (2, log.stderr)):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(out, fd)
        os.close(out)
    notes, node = Path(spec["results"]), int(spec["node"])  # this node's index among the job's (its task's)
    if spec.get("probe"):  # `submit.py probe`: report, do not train (TorchrunProbe)
        probe_note(notes, node, env.rank).write_text(json.dumps(probe_task()))
        return 0
    settings: RunSettings = spec["settings"]
    stops = StopSignals(settings.stop_signal)
    stops.install()
    if stop_flag(notes, node).exists():
        stops.raise_requeue_signal()  # it came while this process still ignored it
    note = rank_note(notes, env.rank)
    announce(settings)  # the attempt's banner in this rank's log

    def wants_requeue(name: str) -> dict[str, Any]:  # rank 0: node task 0 asks submitit (torchrun_task's doc)
        # The decision as node task 0 will take it (submitit's rule, its clock and countdown), for the
        # "stopped" event and every rank's end: a requeue submitit will refuse is not logged as one.
        timed_out = spec["clock"] is not None and submitit_private.has_timed_out(spec["clock"])
        decision = reason_and_countdown(timed_out, spec.get("requeues_left"))
        if decision["timeout_requeues_left"] is not None and decision["timeout_requeues_left"] < 0:
            return {"requeued": False, "message": "timed-out too many times", **decision}
        return {"requeued": True, "exit_code": 3, **decision}

    try:
        result = dispatch.run_job(spec["job"], settings, on_stop=wants_requeue, stops=stops)
    except StopRequested as stop:
        note.write_text(json.dumps({"stop": {"step": stop.step, "signal": stop.signal_name, "kind": stop.kind,
                                             "info": stop.info}}, default=str))
        return 3
    except BaseException as err:
        note.write_text(json.dumps({"error": f"{type(err).__name__}: {err}", "time": time.time(),
                                    "traceback": traceback.format_exc()}))
        raise
    finally:
        stops.restore()
    note.write_text(json.dumps({"result": envelope.launched(result), "node": node, "local_rank": env.local_rank},
                               default=str))
    return 0


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
