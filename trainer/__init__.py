"""Distributed training that runs the same under submitit (local or SLURM), torchrun, or plain python.

Its wings: `api` (the public per-rank API), `config/` (configuration as users write it, torch-free),
`distributed/` (where this process sits, how it joins the others), `rank/` (per-rank services behind
the API), `runners/` (what runs on a rank), `recipes/` (the built-in recipes), and `__main__`
(`python -m trainer`, the trainer without the submitter).

Importing this package must stay cheap: the submitter imports `trainer.config.job` to validate jobs
without paying for `import torch` (a second or more), so torch is only imported by the modules
that train.
"""
