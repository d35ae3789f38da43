"""Sending a run into the SLURM allocation the submitter holds (`--in-allocation`): the batch script sbatch
would run (submitit's, the same text `--dry-run` shows) run here, in the background, by bash; its srun starts
the ranks as a job step of that allocation (launcher.cluster.slurm.allocation: srun's own options), so no job
is queued and nothing waits in the queue. Everything else is a SLURM run's: the run folder, the logs under
RUN/logs/<allocation id>/, checkpoints, srun's fail-fast and `status`.

Its job id is the allocation's; the bash process stands for the job (`status` and `--wait` ask whether it
still runs, as for a local run's controller), since the allocation itself runs on after the run ends.
An allocation cannot be requeued: a stop checkpoints and ends the run, which `--resume` continues.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from typing import Any

from launcher.cluster.slurm.allocation import Allocation


def executor_class() -> type:
    """submitit's SlurmExecutor, sending with bash inside the allocation instead of sbatch."""
    import submitit  # (only when something is sent)
    from submitit.core.utils import JobPaths
    from submitit.slurm.slurm import SlurmJob

    class InAllocationExecutor(submitit.SlurmExecutor):
        held: Allocation

        def _submit_command(self, command: str) -> Any:
            uid = uuid.uuid4().hex
            script = JobPaths.get_first_id_independent_folder(self.folder) / f".submission_file_{uid}.sh"
            script.write_text(self._make_submission_file_text(command, uid))
            job = SlurmJob(folder=self.folder, job_id=self.held.job_id, tasks=list(range(self._num_tasks())))
            job.paths.move_temporary_file(script, "submission_file", keep_as_symlink=True)
            # Where sbatch would write the batch step's own output: rank 0's files (srun's reports land there).
            outputs = [str(job.paths.stdout).replace("%t", "0"), str(job.paths.stderr).replace("%t", "0")]
            with open(outputs[0], "a") as out, open(outputs[1], "a") as err:
                job.process = subprocess.Popen(["bash", str(job.paths.submission_file)], stdout=out, stderr=err,
                                               stdin=subprocess.DEVNULL, env=_step_environment(self.held.variables),
                                               start_new_session=True)
            return job

    return InAllocationExecutor


def _step_environment(allocation_variables: dict[str, str]) -> dict[str, str]:
    """This shell's environment for the step's batch script, with only the allocation's own SLURM variables
    (launcher.cluster.slurm.allocation.current): inside `srun --pty bash` or after `salloc --mem-per-cpu`
    the shell also has a step's and a request's, which srun would take as its own (and refuse beside --mem)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    return {**kept, **allocation_variables}
