"""sbatch options a profile may not set through `sbatch_extra`: those it models with its own keys,
and those that no profile can use because they break the run (its batch script, or the SLURM
commands that follow the job)."""

from __future__ import annotations

import re

from trainer.config.schema import require
from trainer.distributed import hostlist

# sbatch options the profile models, and the profile key that sets each. An `sbatch_extra` line
# for one of them would make SLURM start another world size, time limit or log path than the
# trainer and the run folder expect. sbatch accepts unique prefixes of long options ("--node=3"),
# so a key that abbreviates one of these is refused too.
MODELLED_SBATCH_OPTIONS = {
    "nodes": "nodes", "ntasks": "nodes x tasks_per_node", "ntasks-per-node": "tasks_per_node",
    "tasks-per-node": "tasks_per_node", "ntasks-per-core": "tasks_per_node", "ntasks-per-socket": "tasks_per_node",
    "ntasks-per-gpu": "tasks_per_node", "cpus-per-task": "cpus_per_task", "cpus-per-gpu": "cpus_per_task",
    "mincpus": "cpus_per_task", "gpus": "gpus_per_node", "gpus-per-node": "gpus_per_node",
    "gpus-per-task": "gpus_per_task", "gpus-per-socket": "gpus_per_node", "gres": "gpus_per_node, gpu_type and gpu_request: gres",
    "mem": "mem_per_task", "mem-per-cpu": "mem_per_task", "mem-per-gpu": "mem_per_task",
    "time": "time", "time-min": "time", "partition": "partition", "account": "account", "qos": "qos",
    "constraint": "constraint", "signal": "signal and signal_delay_s", "array": "the sweep (one array task per point)",
    "output": "the run folder's logs (submitit's layout)", "error": "the run folder's logs (submitit's layout)",
    "input": "the run folder's logs (submitit's layout)", "open-mode": "the run folder's logs (submitit's layout)",
    "job-name": "job.name", "chdir": "the run folder's logs (submitit's layout)",
    "dependency": "--after", "requeue": "max_timeout_requeues (runs are always requeueable)",
    "no-requeue": "max_timeout_requeues (runs are always requeueable)", "wrap": "the job script",
    "distribution": "tasks_per_node (one rank per task)", "export": "env", "get-user-env": "env",
}



# Options that would break the run whatever the profile says. -M/--clusters in sbatch_extra would send the job
# to another cluster behind the toolkit's back: the profile's `clusters:` key does it, for every command.
UNSUPPORTED_SBATCH_OPTIONS = {
    "clusters": "it would send the job to another cluster without this run's other SLURM commands; use the "
                "profile key clusters: NAME, which puts -M on all of them",
    "hetjob": "a heterogeneous job needs '#SBATCH hetjob' separator lines between components, not an option; "
              "the run is one homogeneous allocation (nodes x tasks_per_node)",
    "packjob": "the former name of hetjob: a heterogeneous job is not one homogeneous allocation",
    "parsable": "it changes what sbatch prints, which submitit reads the job id from",
    "test-only": "sbatch would only estimate a start time and queue nothing",
    "wait": "sbatch would block the submitter until the job ends (use --wait or `wait: true`)",
    "help": "sbatch would print its help and queue nothing", "usage": "sbatch would print its usage and queue nothing",
    "version": "sbatch would print its version and queue nothing",
}


# sbatch options whose value is a node list: parsed when the profile is loaded (trainer.distributed.hostlist),
# since the run reads them back (the nodes it may not leave out, the ones it must).
NODE_LISTS = frozenset({"exclude", "nodelist"})


def _lookup(table: dict[str, str], key: str) -> str | None:
    """table's entry for sbatch option --KEY or for the options KEY abbreviates (sbatch accepts
    unique prefixes of long options), None if none."""
    if key in table:
        return table[key]
    longer = [name for name in table if name.startswith(key)]
    return " / ".join(dict.fromkeys(table[n] for n in longer)) if longer else None


def modelled_sbatch_option(key: str) -> str | None:
    """The profile key behind sbatch option --KEY (or an abbreviation of one), None if it has none."""
    return _lookup(MODELLED_SBATCH_OPTIONS, key)


def unsupported_sbatch_option(key: str) -> str | None:
    """Why sbatch option --KEY (or an abbreviation of one) cannot be used by any profile, None if it can."""
    return _lookup(UNSUPPORTED_SBATCH_OPTIONS, key)


def check_sbatch_extra(extra: dict[str, str]) -> None:
    """A profile's `sbatch_extra`: long option names, none that the profile models or that breaks the run, and
    node lists that the one reader parses within its bounds. ConfigError naming `sbatch_extra.KEY`."""
    for key, value in extra.items():
        require(re.fullmatch(r"[a-z][a-z0-9-]*", key) is not None, f"sbatch_extra.{key}", key,
                "an sbatch long option name such as 'mail-type'")
        unsupported = unsupported_sbatch_option(key)
        require(unsupported is None, f"sbatch_extra.{key}", value,
                f"no value here: --{key} is not supported ({unsupported})")
        modelled = modelled_sbatch_option(key)
        require(modelled is None, f"sbatch_extra.{key}", value,
                f"no value here: --{key} would change {modelled}, which the profile sets (the trainer "
                f"expects the world size and paths the profile describes); set {modelled} instead")
        if key in NODE_LISTS:
            try:
                hostlist.expand(value)
            except ValueError as err:
                require(False, f"sbatch_extra.{key}", value, f"a SLURM node list such as 'cpu[1-3],gpu2' ({err})")
