"""The batch script's retry step: the lines around srun that let a failed run heal itself (launcher.heal).

    <setup lines>
    PYTHON -m launcher.heal before POLICY || { [ $? -eq 75 ] && exit 0; }
    srun ... python -u -m submitit.core._submit ...
    srun_status=$?; [ "$srun_status" -eq 0 ] || PYTHON -m launcher.heal after "$srun_status" POLICY

`before` notes where this attempt's part of each log starts, records a node SLURM lost in the previous
attempt (NODE_FAIL), and moves an attempt that landed on a node the run leaves out back to the queue
without it (75: then the script ends here). `after` runs once srun has ended with an error: it decides
where the failure came from, adds a failed node to the run's exclusion list and, within the profile's
`max_failures`, requeues the job without that node; otherwise it ends with srun's exit status, so the job
fails as before. Both run on the batch host with the tasks' interpreter and code (the snapshot is on
PYTHONPATH); a job the scheduler ends itself (scancel, a time limit, `scontrol requeue`) kills the
script before `after` runs. POLICY (one JSON argument) carries what they need: the run folder, the
profile's `max_failures` and `node_error_patterns`, and what a node must offer (to bound the list).
Not in a container: the step calls `scontrol`, which images rarely hold.
"""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

from trainer.distributed import hostlist

MODULE = "launcher.heal"
MOVED_EXIT = 75  # `before` requeued the job without a node it must leave out


def lines(policy: dict[str, Any], python: str | None) -> tuple[list[str], list[str]]:
    """(the line before srun, the line after it) for `policy` (launcher.cluster.slurm.sbatch.heal_policy;
    None: no retry step). `python`: what srun starts (None: this interpreter, as submitit's default)."""
    if not policy:
        return [], []
    command = f"{python or shlex.quote(sys.executable)} -m {MODULE}"
    arg = shlex.quote(json.dumps(policy, separators=(",", ":")))
    before = f"{command} before {arg} || {{ [ $? -eq {MOVED_EXIT} ] && exit 0; }}"
    # (srun's status first: a run that succeeded starts no Python, and the script ends with srun's status)
    return [before], [f'srun_status=$?; [ "$srun_status" -eq 0 ] || {command} after "$srun_status" {arg}']


def exclude_value(given: str, left_out: list[str]) -> str:
    """sbatch --exclude: the profile's own (sbatch_extra.exclude) and the run's left-out nodes, "" if none."""
    return ",".join(dict.fromkeys([*(hostlist.expand(given) if given else []), *left_out]))
