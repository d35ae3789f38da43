"""The submitit executor for a Submission, and the exact sbatch script it would submit (--dry-run).

Creating an executor queues nothing; launcher.request.send queues with it. submitit is imported in
the functions only, so that `submit.py --help`, a local `--dry-run` and the operating commands never
load it.
"""

from __future__ import annotations

from typing import Any

from launcher.request.submission import Submission


def make_executor(sub: Submission, script_only: bool = False) -> Any:
    """The submitit executor for `sub`, with its parameters set; creating it queues nothing.

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
        executor = cls(folder, max_num_timeout=sub.max_num_timeout, python=sub.python)
    executor.update_parameters(**sub.parameters)
    return executor


def _script_only_slurm_executor() -> type:
    import submitit  # see make_executor

    class ScriptOnlySlurmExecutor(submitit.SlurmExecutor):
        """A SlurmExecutor that does not insist on `srun` being installed (it never submits)."""

        @classmethod
        def affinity(cls) -> int:
            return 2

    return ScriptOnlySlurmExecutor


def sbatch_script(sub: Submission, chunk_size: int | None = None) -> str:
    """The exact script `send` would pass to sbatch (for the first array, if it is split), for
    --dry-run and its recorded-file test. submitit builds it from the same executor parameters."""
    from launcher import submitit_private  # imports submitit: see make_executor

    executor = make_executor(sub, script_only=True)
    if sub.is_array:
        # What submitit sets on the array executor it makes for each batch of tasks.
        executor.parameters["map_count"] = min(len(sub.tasks), chunk_size or len(sub.tasks))
    return submitit_private.submission_script(executor)
