"""The submission: as pure data (`submission`: what `--dry-run` prints), planned and checked (`plan`;
over SSH `over_ssh`, with `wire`: the submission as JSON and back), its submitit `executor` (and the
sbatch script), `send` (the single place that queues it), `errors` (how sending fails), `waiting` (for
what was sent) and `echo` (rank 0's output live while a local run is waited for)."""
