"""The batch script's retry step: the lines around srun that let a failed run heal itself (launcher.heal).

    <setup lines>
    PYTHON -m launcher.heal before POLICY || { [ $? -eq 75 ] && exit 0; }
    srun ... python -u -m submitit.core._submit ...
    srun_status=$?; [ "$srun_status" -eq 0 ] || { PYTHON -m launcher.heal after "$srun_status" POLICY;
        heal=$?; [ "$heal" -ne 76 ] || { export DDP_SUBMIT_RERUN=$((...+1)); exec "$0"; }; exit "$heal"; }

`before` notes where this attempt's part of each log starts, records a node SLURM lost in the previous
attempt (NODE_FAIL), and moves an attempt that landed on a node the run leaves out back to the queue
without it (75: then the script ends here). `after` runs once srun has ended with an error: it decides
where the failure came from, adds a failed node to the run's exclusion list and, within the profile's
`max_failures`, requeues the job without that node, or retries a failure of the code (the nodes are
fine) in this allocation (76: the script runs itself again, `DDP_SUBMIT_RERUN` counting: no requeue, so
no wait for the job credential to expire, 120 s on a stock site, and no turn in the queue); otherwise it
ends with srun's exit status, so the job fails as before. Both run on the batch host with the tasks' interpreter and code (the snapshot is on
PYTHONPATH); a job the scheduler ends itself (scancel, a time limit, `scontrol requeue`) kills the
script before `after` runs. POLICY (one JSON argument) carries what they need: the run folder, the
profile's `max_failures` and `node_error_patterns`, and what a node must offer (to bound the list).
Not in a container: the step calls `scontrol`, which images rarely hold.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from dataclasses import dataclass

from trainer.distributed import hostlist

MODULE = "launcher.heal"
MOVED_EXIT = 75  # `before` requeued the job without a node it must leave out
RERUN_EXIT = 76  # `after`: retry in this allocation; the batch script then runs itself again
# How many times the batch script has run itself again in this allocation (`after` reads it: not a new life).
RERUN_VARIABLE = "DDP_SUBMIT_RERUN"


@dataclass(frozen=True)
class RetryPolicy:
    """What the retry step needs of the request (launcher.cluster.slurm.sbatch.heal_policy makes it): the run
    folder, the profile's `max_failures` and `node_error_patterns`, the stop signal, and what a node must offer
    (one node's share of the request, and the nodes it names), which bounds the run's exclusion list. It travels
    in the batch script as one JSON argument (`dumps`), read back by `loads`, checked field by field."""

    run: str
    max_failures: int
    patterns: tuple[str, ...]
    partition: str
    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    mem_per_node_mb: int
    gpus_per_node: int
    gpu_type: str
    pinned: str  # sbatch_extra.nodelist: never left out
    stop_signal: str

    def dumps(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> RetryPolicy:
        """The policy a batch script carries; ValueError naming the field that is not what `dumps` wrote."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"the retry step's policy is a {type(data).__name__}, not a JSON object")
        kinds = {f.name: (int if f.type == "int" else str) for f in dataclasses.fields(cls) if f.name != "patterns"}
        for name, kind in kinds.items():
            value = data.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"the retry step's policy field {name!r} is {value!r}, not a {kind.__name__}")
        patterns = data.get("patterns")
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise ValueError(f"the retry step's policy field 'patterns' is {patterns!r}, not a list of strings")
        return cls(**{name: data[name] for name in kinds}, patterns=tuple(patterns))

    def pinned_nodes(self) -> tuple[str, ...]:
        """The nodes the job names (sbatch_extra.nodelist): never left out of it."""
        return tuple(hostlist.expand(self.pinned)) if self.pinned else ()


def lines(policy: RetryPolicy | None, python: str | None) -> tuple[list[str], list[str]]:
    """(the line before srun, the line after it) for `policy` (launcher.cluster.slurm.sbatch.heal_policy;
    None: no retry step). `python`: what srun starts (None: this interpreter, as submitit's default)."""
    if policy is None:
        return [], []
    command = f"{python or shlex.quote(sys.executable)} -m {MODULE}"
    arg = shlex.quote(policy.dumps())
    before = f"{command} before {arg} || {{ [ $? -eq {MOVED_EXIT} ] && exit 0; }}"
    # (srun's status first: a run that succeeded starts no Python, and the script ends with srun's status.) A
    # retry in this allocation runs the whole script again, the same file ($0: slurmd's copy of it), counted.
    rerun = f'export {RERUN_VARIABLE}=$(( ${{{RERUN_VARIABLE}:-0}} + 1 )); exec "$0"'
    return [before], [f'srun_status=$?; [ "$srun_status" -eq 0 ] || {{ {command} after "$srun_status" {arg}; '
                      f'heal=$?; [ "$heal" -ne {RERUN_EXIT} ] || {{ {rerun}; }}; exit "$heal"; }}']


def exclude_value(given: str, left_out: list[str]) -> str:
    """sbatch --exclude: the profile's own (sbatch_extra.exclude) and the run's left-out nodes, "" if none."""
    return ",".join(dict.fromkeys([*(hostlist.expand(given) if given else []), *left_out]))
