"""Configuration the submitter reads: cluster profiles (`profile`, with `units`: SLURM's time and memory
spellings, `sbatch_options`: what `sbatch_extra` may not set, `destination`: the `login:` key,
`retry_keys`: `max_failures` and `node_error_patterns`, `runner_keys`: how a run uses its
allocations, and `cluster_keys`: `clusters`, SLURM's -M), resolving a profile and a job with `--set` into points (`resolve`), the checks before
anything is queued (`checks`), a function handed over from Python by value, received and checked
(`by_value`), and `--after RUN[:COND]` (`after`)."""
