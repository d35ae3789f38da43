"""The submitit executor for a Submission, and the exact sbatch script it would submit (--dry-run).

Creating an executor queues nothing; launcher.request.send queues with it. submitit is imported in
the functions only, so that `submit.py --help`, a local `--dry-run` and the operating commands never
load it.
"""

from __future__ import annotations

from typing import Any

from launcher.cluster.preflights import Answer
from launcher.cluster.slurm import sbatch
from launcher.request.submission import Submission
from trainer.config.schema import ConfigError


def make_executor(sub: Submission, answer: Answer, script_only: bool = False) -> Any:
    """The submitit executor for `sub`, with its parameters set, as the preflight's `answer` decides
    them (the scheduler's release); creating it queues nothing.

    `script_only`: the executor only writes the sbatch script (--dry-run), so it may be made on a
    machine without `srun`; everything else is the same construction as for sending."""
    import submitit  # here, not at the top: --help and the operating commands never load submitit

    from launcher import submitit_private  # (imports submitit)

    folder = sub.log_dir / "%j"
    if sub.executor == "debug":
        executor: Any = submitit.DebugExecutor(folder)
    elif sub.executor == "local":
        executor = submitit.LocalExecutor(folder, max_num_timeout=sub.max_num_timeout, python=sub.python)
    else:
        # The signal name is read by submitit both when writing --signal and on the node.
        submitit_private.set_requeue_signal(sub.profile.signal)
        cls = _script_only_slurm_executor() if script_only else submitit.SlurmExecutor
        if sub.cluster and not script_only:  # (where SLURM sent it: launcher.request.send records it)
            cls = submitit_private.cluster_picking(cls)
        if sub.allocation is not None and not script_only:  # a job step of the allocation held here
            from launcher.request.in_allocation import executor_class

            cls = executor_class()
            cls.held = sub.allocation
        executor = cls(folder, max_num_timeout=sub.max_num_timeout, python=sub.python)
    parameters = sbatch.for_release(sub.parameters, answer.release) if sub.executor == "slurm" else sub.parameters
    executor.update_parameters(**parameters)
    return executor


def _script_only_slurm_executor() -> type:
    import submitit  # see make_executor

    class ScriptOnlySlurmExecutor(submitit.SlurmExecutor):
        """A SlurmExecutor that does not insist on `srun` being installed (it never submits)."""

        @classmethod
        def affinity(cls) -> int:
            return 2

    return ScriptOnlySlurmExecutor


def sbatch_script(sub: Submission, answer: Answer | None = None) -> str:
    """The exact script `send` would pass to sbatch (for the first array, if it is split), for
    --dry-run and its recorded-file test. submitit builds it from the same executor parameters."""
    from launcher import submitit_private  # imports submitit: see make_executor

    answer = answer or Answer()
    executor = make_executor(sub, answer, script_only=True)
    if sub.jobs > 1:
        # What submitit sets on the array executor it makes for each batch of tasks.
        executor.parameters["map_count"] = min(sub.jobs, answer.chunk or sub.jobs)
    text = submitit_private.submission_script(executor)
    check_script(text, executor.parameters)
    return text


# What submitit writes on its own beside the request's parameters (its logs, signal, array and wckey).
_SUBMITIT_OWN = {"output", "error", "open-mode", "signal", "wckey", "job-name", "array"}
# Parameters of submitit's that are not sbatch options (they shape the script's body).
_NOT_OPTIONS = {"setup", "teardown", "srun_args", "use_srun", "array_parallelism", "map_count", "signal_delay_s",
                "stderr_to_stdout", "additional_parameters"}


def check_script(text: str, parameters: dict[str, Any]) -> None:
    """The batch script as a whole, before sbatch reads it: every `#SBATCH` line one the request made
    (an option of `parameters` or submitit's own, each once), all of them in the header. Values are
    checked where they enter (trainer.config.values); this is the last look at what sbatch will
    obey, so that no value can add a directive on its way through submitit's text.
    A violation is a ConfigError: nothing is queued."""
    made = _SUBMITIT_OWN | {k.replace("_", "-") for k in parameters if k not in _NOT_OPTIONS}
    made |= {str(k).replace("_", "-") for k in parameters.get("additional_parameters") or {}}
    seen: set[str] = set()
    in_header = True
    for number, line in enumerate(text.splitlines()[1:], start=2):
        if line.startswith("#SBATCH"):
            option = line[len("#SBATCH"):].strip().partition("=")[0].removeprefix("--")
            if not in_header or option not in made or option in seen or not line.startswith("#SBATCH --"):
                raise ConfigError(f"the batch script's line {number} {line[:80]!r} is an #SBATCH line the request "
                                  f"did not make (the request sets: {', '.join(sorted(made))}); nothing was queued")
            seen.add(option)
        elif line.strip() and not line.startswith("#"):
            in_header = False  # sbatch reads directives only up to the first command
