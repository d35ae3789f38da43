"""The function submitit runs once per task: it calls the trainer and cooperates with requeueing.

Kept free of torch at import time (the submitter pickles it); the trainer is imported on the node.
"""

from __future__ import annotations

from typing import Any

from submitit.helpers import Checkpointable

from trainer.config import JobConfig, RunSettings


class TrainTask(Checkpointable):
    """Train one job. On requeue, submitit pickles this same object again; the trainer then resumes
    from the newest good checkpoint in the run folder, so no state needs to travel in the pickle."""

    def __init__(self, job: JobConfig, settings: RunSettings) -> None:
        self.job, self.settings = job, settings

    def __call__(self) -> dict[str, Any]:
        from trainer.train import run

        return run(self.job, self.settings)
