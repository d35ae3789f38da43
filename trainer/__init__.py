"""Distributed training that runs the same under submitit (local or SLURM), torchrun, or plain python.

Importing this package must stay cheap: the submitter imports `trainer.config.job` to validate jobs
without paying for `import torch` (a second or more), so torch is only imported by the modules
that train.
"""
