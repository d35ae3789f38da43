"""Configuration the submitter reads: cluster profiles (`profile`, with `units`: SLURM's time and memory
spellings, `sbatch_options`: what `sbatch_extra` may not set, and `destination`: the `login:` key),
resolving a profile and a job with `--set` into points (`resolve`), and the checks before anything is
queued (`checks`)."""
