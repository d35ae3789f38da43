"""Configuration the submitter reads: cluster profiles (`profile`, with `units`: SLURM's time and memory
spellings, `sbatch_options`: what `sbatch_extra` may not set, `destination`: the `login:` key, and `runner_keys`:
how a run uses its allocations),
resolving a profile and a job with `--set` into points (`resolve`), and the checks before anything is
queued (`checks`)."""
